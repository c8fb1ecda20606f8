import { startPostgresServer } from '../test/helpers/pg-server.mjs';
import { openPostgresStore } from '../dist/store/postgres.js';
const server = await startPostgresServer({ settings: ['-c max_connections=50'] });
try {
  const su = await server.superuser('postgres');
  await su.query('CREATE DATABASE ex OWNER node_svc');
  await su.end();
  const s = await openPostgresStore(server.url('ex'), {});
  await s.close();
  const c = await server.superuser('ex');
  for (const t of ['events', 'deliveries', 'delivery_counts', 'delivery_attempts']) {
    console.log(`== ${t}`);
    for (const r of (await c.query(`SELECT indexdef FROM pg_indexes WHERE tablename = $1`, [t])).rows) console.log('  ', r.indexdef);
    for (const r of (await c.query(`SELECT tgname, pg_get_triggerdef(t.oid) AS d FROM pg_trigger t JOIN pg_class c ON c.oid = t.tgrelid WHERE c.relname = $1 AND NOT tgisinternal`, [t])).rows) console.log('  T', r.d);
    for (const r of (await c.query(`SELECT conname, pg_get_constraintdef(oid) AS d FROM pg_constraint WHERE conrelid = $1::regclass`, [t])).rows) console.log('  C', r.conname, r.d);
  }
  await c.end();
} finally { await server.stop(); }
