import { startPostgresServer } from '../test/helpers/pg-server.mjs';
import { openPostgresStore } from '../dist/store/postgres.js';
import { recordEvent } from '../dist/store/events.js';
import { subscriptions } from '../dist/store/webhooks.js';
const server = await startPostgresServer({ settings: ['-c max_connections=50'] });
try {
  const su = await server.superuser('postgres');
  await su.query('CREATE DATABASE ex OWNER node_svc');
  await su.end();
  const url = server.url('ex');
  const s = await openPostgresStore(url, {});
  await s.q.run("INSERT INTO nodes(id, created_at) VALUES ('n1', 0)");
  await s.write((tx) => subscriptions.insert(tx, { id: 'whk_1', node_id: 'n1', url: 'https://r.example/h', events: '*', schema_version: '1.1.0', description: null, status: 'active', secret: 'whsec_x', created_at: 0 }));
  const N = Number(process.env.N ?? 20000);
  for (let i = 0; i < N; i += 100) await Promise.all(Array.from({ length: 100 }, (_, k) => s.write((tx) => recordEvent(tx, 'n1', 'budget.halted', `r${i + k}`, { budget: 'b', reason: 'anomaly' }))));
  for (let rep = 0; rep < 3; rep++) {
    await s.write(async (tx) => {
      const spy = { ...tx, dialect: 'postgres', commitWithNext: undefined, get: async (sql, params) => {
        const rows = await tx.all(`EXPLAIN (ANALYZE, BUFFERS, VERBOSE) ${sql}`, params);
        if (rep === 2) console.log(rows.map((r) => r['QUERY PLAN']).join('\n'));
        else console.log(rows.filter((r) => /Execution Time|Planning Time|Trigger/.test(r['QUERY PLAN'])).map((r) => r['QUERY PLAN']).join('\n'));
        return { seq: 1, made: 0 };
      } };
      await recordEvent(spy, 'n1', 'budget.halted', `x${rep}`, { budget: 'b', reason: 'anomaly' });
    });
  }
  await s.close();
} finally { await server.stop(); }
