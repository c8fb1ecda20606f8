// bench/memory: the daemon's resident memory with many streams and many tokens (issue 14: <= 120 MB with 10k+
// streams and 20k tokens; caches evict one entry at a time). Opens STREAMS streams through POST
// /v1/allowances/verify and bills each once (every stream's voucher key is cached), then reads headroom with
// TOKENS different nodes' tokens (the token cache is full and evicting), and prints the daemon's RSS (VmRSS) and
// peak (VmHWM) from /proc. Env: BENCH_STREAMS (10000), BENCH_TOKENS (20000), BENCH_CONCURRENCY (32).
import Database from 'better-sqlite3';
import { createHash, randomBytes } from 'node:crypto';
import { readFileSync } from 'node:fs';
import { join } from 'node:path';
import { report, result } from './lib/report.mjs';
import { fmt, prepare } from './lib/setup.mjs';

const STREAMS = Number(process.env.BENCH_STREAMS ?? 10_000);
const TOKENS = Number(process.env.BENCH_TOKENS ?? 20_000);
const CONCURRENCY = Number(process.env.BENCH_CONCURRENCY ?? 32);
const TARGET_MB = 120;

const p = prepare('memory');
try {
  // TOKENS more nodes, each with its own token, written directly (the CLI would take minutes).
  const tokens = [];
  const db = new Database(join(p.dataDir, 'node-svc.db'));
  db.transaction(() => {
    const node = db.prepare('INSERT INTO nodes(id, created_at) VALUES (?, 0)');
    const tok = db.prepare("INSERT INTO tokens(id, node_id, hash, status, created_at) VALUES (?, ?, ?, 'active', 0)");
    for (let i = 0; i < TOKENS; i++) {
      const t = `nsv_${randomBytes(32).toString('base64url')}`;
      node.run(`m-${i}`);
      tok.run(`tok_m${i}`, `m-${i}`, createHash('sha256').update(t, 'utf8').digest('hex'));
      tokens.push(t);
    }
  })();
  db.close();

  const d = await p.daemon();
  const rss = () => {
    const s = readFileSync(`/proc/${d.child.pid}/status`, 'utf8');
    const kb = (k) => Number(new RegExp(`^${k}:\\s+(\\d+)`, 'm').exec(s)[1]);
    return { rss: kb('VmRSS') / 1024, hwm: kb('VmHWM') / 1024 };
  };
  const idle = rss();
  const pool = async (n, fn) => {
    let next = 0;
    await Promise.all(Array.from({ length: CONCURRENCY }, async () => { while (next < n) await fn(next++); }));
  };
  const call = async (method, path, token, body) => {
    const r = await fetch(`${d.url}${path}`, { method, headers: { authorization: `Bearer ${token}`, ...(body ? { 'content-type': 'application/json' } : {}) }, ...(body ? { body: JSON.stringify(body) } : {}) });
    const text = await r.text();
    if (r.status !== 200) throw new Error(`${method} ${path} → ${r.status} ${text.slice(0, 200)}`);
  };
  await pool(STREAMS, async (i) => {
    await call('POST', '/v1/allowances/verify', p.token, { credential: p.credential(`m-${i}`) });
    await call('POST', `/v1/streams/m-${i}/vouchers`, p.token, { voucher: p.voucher(`m-${i}`, 1000) });
  });
  const afterStreams = rss();
  // Every other node's token once (unknown streams answer 404: only the token lookup matters here).
  await pool(TOKENS, async (i) => {
    const r = await fetch(`${d.url}/v1/webhooks`, { headers: { authorization: `Bearer ${tokens[i]}` } });
    await r.text();
    if (r.status !== 200) throw new Error(`token ${i} → ${r.status}`);
  });
  await pool(STREAMS, async (i) => call('GET', `/v1/streams/m-${i}/headroom`, p.token));
  const end = rss();
  const ok = end.hwm <= TARGET_MB;
  console.log(`bench/memory  ${fmt(STREAMS)} streams (each billed once), ${fmt(TOKENS)} tokens, concurrency ${CONCURRENCY}`);
  console.log(`  idle after start                 RSS ${idle.rss.toFixed(0).padStart(4)} MB`);
  console.log(`  after opening and billing streams RSS ${afterStreams.rss.toFixed(0).padStart(4)} MB`);
  console.log(`  after every token and headroom   RSS ${end.rss.toFixed(0).padStart(4)} MB   peak ${end.hwm.toFixed(0)} MB (target <= ${TARGET_MB} MB) ${ok ? 'ok' : 'MISSED'}`);
  // The result line (last stdout line; bench/README.md): same target as above; report() sets exit code 1 on a miss.
  report('memory', [result(`daemon peak RSS (VmHWM), ${fmt(STREAMS)} streams + ${fmt(TOKENS)} tokens`, end.hwm, 'MB', ['<=', TARGET_MB])]);
} finally {
  await p.cleanup();
}
