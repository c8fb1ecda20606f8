// bench/history: does the daemon's cost grow with history? (issue 14, DESIGN §14: flat within 2x from 1k to 1M)
// For each history size, a store is built by direct SQL (events, one subscription's delivered deliveries and their
// attempts, plus 20k deliveries waiting to retry and 100 claims a crashed run never recorded), then the real daemon
// is started on it and timed: startup (spawn → listening, stale leases released), GET /v1/webhooks/{id}/deliveries,
// GET /v1/events?type= (a rare type and an absent one), GET /v1/events?since=now (what `webhooks replay --since now`
// asks), GET /metrics. Ratios are against the smallest history in the same run. Then retention: a simulated 45 days
// (scaled rate) with the default 30-day retention, printing the store's size per day: it must stop growing.
// Env: BENCH_SIZES (default 1000,1000000), BENCH_REQUESTS (default 200).
import Database from 'better-sqlite3';
import { mkdtempSync, rmSync, statSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { report, result } from './lib/report.mjs';
import { fmt, median, NODE, pct, prepare } from './lib/setup.mjs';

const SIZES = (process.env.BENCH_SIZES ?? '1000,1000000').split(',').map(Number);
const REQUESTS = Number(process.env.BENCH_REQUESTS ?? 200);
const RETRYING = 20_000;
const SUB = 'whk_bench';
const TARGET = 2;

/** Fill the store: `n` delivered events (1 % stream.revoked, the rest budget.halted) over the last 29 days, + RETRYING. */
function build(dbPath, n) {
  const db = new Database(dbPath);
  db.pragma('journal_mode = WAL');
  db.pragma('synchronous = OFF'); // building, not measuring
  const now = Date.now();
  const t0 = now - 29 * 86_400_000;
  const step = Math.max(1, Math.floor((29 * 86_400_000) / (n + RETRYING)));
  db.transaction(() => {
    db.prepare(`INSERT INTO webhook_subscriptions(id, node_id, url, events, schema_version, status, secret, created_at, updated_at)
      VALUES (?, ?, 'http://127.0.0.1:9/hook', '*', '1.1.0', 'active', 'whsec_bench', ?, ?)`).run(SUB, NODE, t0, t0);
    db.prepare(`WITH RECURSIVE c(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM c WHERE i < @count)
      INSERT INTO events(id, node_id, type, external_ref, occurred_at, body)
      SELECT printf('evt_%022d', i), @node, t, printf('budget:b%d', i), @t0 + i * @step,
        printf('{"id":"evt_%022d","type":"%s","schemaVersion":"1.1.0","occurredAt":"%s","externalRef":"budget:b%d","data":{"budget":"b%d","reason":"sla","amountMicro":"%d"}}',
          i, t, strftime('%Y-%m-%dT%H:%M:%fZ', (@t0 + i * @step) / 1000.0, 'unixepoch'), i, i, i * 1000)
      FROM (SELECT i, CASE WHEN i % 100 = 0 THEN 'stream.revoked' ELSE 'budget.halted' END AS t FROM c)`)
      .run({ count: n + RETRYING, node: NODE, t0, step });
    // The first n events were delivered (one attempt each); the last RETRYING failed once and wait an hour to retry.
    db.prepare(`INSERT INTO deliveries(id, event_seq, subscription_id, status, attempts, recorded_attempts, next_attempt_at, created_at, delivered_at, last_status)
      SELECT printf('dlv_%022d', seq), seq, ?, 'delivered', 1, 1, occurred_at, occurred_at, occurred_at + 5, 200 FROM events WHERE seq <= ?`).run(SUB, n);
    db.prepare(`INSERT INTO deliveries(id, event_seq, subscription_id, status, attempts, recorded_attempts, next_attempt_at, created_at, last_status, last_error)
      SELECT printf('dlv_%022d', seq), seq, ?, 'pending', 1, 1, ?, occurred_at, 500, 'receiver answered HTTP 500' FROM events WHERE seq > ?`).run(SUB, now + 3_600_000, n);
    // 100 of them were claimed again by a run that crashed before recording the attempt: released at startup.
    db.prepare(`UPDATE deliveries SET attempts = 2 WHERE id IN (SELECT id FROM deliveries WHERE status = 'pending' LIMIT 100)`).run();
    db.prepare(`INSERT INTO delivery_attempts(id, delivery_id, subscription_id, event_seq, attempt, attempted_at, duration_ms, status_code, error, outcome, next_attempt_at)
      SELECT printf('atm_%022d', event_seq), id, subscription_id, event_seq, 1, created_at, 5, last_status, last_error,
        CASE WHEN status = 'delivered' THEN 'delivered' ELSE 'failed' END, CASE WHEN status = 'pending' THEN next_attempt_at END FROM deliveries`).run();
  })();
  db.pragma('wal_checkpoint(TRUNCATE)');
  const bytes = statSync(dbPath).size;
  db.close();
  return { bytes };
}

async function timeRequests(url, headers, n) {
  const ms = [];
  for (let i = 0; i < n; i++) {
    const t = performance.now();
    const r = await fetch(url, { headers });
    const body = await r.text();
    ms.push(performance.now() - t);
    if (r.status !== 200) throw new Error(`GET ${url} → ${r.status} ${body.slice(0, 300)}`);
  }
  return { p50: median(ms), p95: pct(ms, 95) };
}

async function measure(n) {
  const p = prepare(`history-${n}`);
  try {
    const tb = performance.now();
    const { bytes } = build(join(p.dataDir, 'node-svc.db'), n);
    const buildS = (performance.now() - tb) / 1000;
    const d = await p.daemon();
    const startupMs = d.startedMs;
    const h = p.auth;
    const get = (path) => timeRequests(`${d.url}${path}`, h, REQUESTS);
    // Warm up (JIT, prepared statements) so the first history size is not measured cold.
    for (const path of [`/v1/webhooks/${SUB}/deliveries?limit=100`, '/v1/events?type=stream.revoked&limit=100', '/v1/events?limit=100']) await timeRequests(`${d.url}${path}`, h, 50);
    // Check the store is what we think before timing it.
    const health = await (await fetch(`${d.url}/v1/webhooks/${SUB}/deliveries?limit=1`, { headers: h })).json();
    if (health.health.delivered !== n || health.health.retrying !== RETRYING) throw new Error(`unexpected health ${JSON.stringify(health.health)}`);
    const since = encodeURIComponent(new Date().toISOString());
    const out = {
      n, buildS, bytes, startupMs,
      deliveries: await get(`/v1/webhooks/${SUB}/deliveries?limit=100`),
      rare: await get('/v1/events?type=stream.revoked&limit=100'),
      absent: await get('/v1/events?type=refund.final&limit=100'),
      sinceNow: await get(`/v1/events?since=${since}&limit=500`),
      metrics: await timeRequests(`${d.url}/metrics`, {}, REQUESTS),
    };
    await p.stop(d.child);
    // Startup again, three times (the first start, which also released the crashed run's 100 claims, is the
    // coldest): every start walks the 20k retrying deliveries for stale leases. The median is printed.
    const starts = [];
    for (let i = 0; i < 3; i++) { const again = await p.daemon(); starts.push(again.startedMs); await p.stop(again.child); }
    out.startupMs = median(starts);
    return out;
  } finally {
    await p.cleanup();
  }
}

/** Retention: 45 simulated days at EVENTS_PER_DAY with one subscription, pruned each day (default 30 days). */
async function retention() {
  process.env.NODE_SVC_LOG_LEVEL ??= 'warn'; // the pruner logs each pass
  const { openSqliteStore: openStore } = await import('../dist/store/db.js');
  const { Pruner } = await import('../dist/ops/retention.js');
  const { addNode } = await import('../dist/service/admin.js');
  const EVENTS_PER_DAY = Number(process.env.BENCH_EVENTS_PER_DAY ?? 5_000);
  const DAYS = 45;
  const dir = mkdtempSync(join(tmpdir(), 'node-svc-bench-retention-'));
  try {
    const store = openStore(dir);
    await addNode(store, NODE);
    const db = store.db;
    db.prepare(`INSERT INTO webhook_subscriptions(id, node_id, url, events, schema_version, status, secret, created_at, updated_at)
      VALUES (?, ?, 'http://127.0.0.1:9/hook', '*', '1.1.0', 'active', 'whsec_bench', 0, 0)`).run(SUB, NODE);
    const day0 = Date.UTC(2026, 0, 1);
    let seq0 = 0;
    const sizes = [];
    let simNow = 0;
    const pruner = new Pruner({ store, retentionMs: 30 * 86_400_000, now: () => simNow });
    for (let day = 1; day <= DAYS; day++) {
      const start = day0 + (day - 1) * 86_400_000;
      const step = Math.floor(86_400_000 / EVENTS_PER_DAY);
      db.transaction(() => {
        db.prepare(`WITH RECURSIVE c(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM c WHERE i < ?)
          INSERT INTO events(id, node_id, type, external_ref, occurred_at, body) SELECT printf('evt_%022d', ? + i), ?, 'budget.halted', 'budget:b', ? + i * ?,
          printf('{"id":"evt_%022d","type":"budget.halted","schemaVersion":"1.1.0","occurredAt":"2026-01-01T00:00:00.000Z","externalRef":"budget:b%d","data":{"budget":"b%d","reason":"sla"}}', ? + i, i, i) FROM c`)
          .run(EVENTS_PER_DAY, seq0, NODE, start, step, seq0);
        db.prepare(`INSERT INTO deliveries(id, event_seq, subscription_id, status, attempts, recorded_attempts, next_attempt_at, created_at, delivered_at, last_status)
          SELECT printf('dlv_%022d', seq), seq, ?, 'delivered', 1, 1, occurred_at, occurred_at, occurred_at + 5, 200 FROM events WHERE seq > ?`).run(SUB, seq0);
        db.prepare(`INSERT INTO delivery_attempts(id, delivery_id, subscription_id, event_seq, attempt, attempted_at, duration_ms, status_code, outcome)
          SELECT printf('atm_%022d', event_seq), id, subscription_id, event_seq, 1, created_at, 5, 200, 'delivered' FROM deliveries WHERE event_seq > ?`).run(seq0);
      })();
      seq0 += EVENTS_PER_DAY;
      simNow = start + 86_400_000;
      await pruner.runOnce();
      const pages = db.pragma('page_count', { simple: true });
      const free = db.pragma('freelist_count', { simple: true });
      const pageSize = db.pragma('page_size', { simple: true });
      const kept = db.prepare('SELECT COUNT(*) AS n FROM events').get().n;
      sizes.push({ day, fileBytes: pages * pageSize, usedBytes: (pages - free) * pageSize, kept });
    }
    await store.close();
    return { EVENTS_PER_DAY, sizes, batches: pruner.batches };
  } finally {
    rmSync(dir, { recursive: true, force: true });
  }
}

const results = [];
for (const n of SIZES) results.push(await measure(n));
const base = results[0];
const reported = []; // the result line's entries (bench/README.md), one per row and the retention check
const row = (label, key, stat = 'p50', target = true) => {
  const cells = results.map((r) => `${(stat ? r[key][stat] : r[key]).toFixed(2).padStart(9)} ms`);
  const ratio = (stat ? results.at(-1)[key][stat] : results.at(-1)[key]) / (stat ? base[key][stat] : base[key]);
  const ok = ratio <= TARGET;
  reported.push(result(`${label}, ${fmt(results.at(-1).n)} / ${fmt(base.n)} events`, ratio, 'ratio', target ? ['<=', TARGET] : undefined));
  console.log(`  ${label.padEnd(44)}${cells.join('')}   ratio ${ratio.toFixed(2)} ${target ? `(target <= ${TARGET}) ${ok ? 'ok' : 'MISSED'}` : '(no target: a tail of 200 requests on a shared machine)'}`);
};
console.log(`bench/history  one subscription, ${fmt(RETRYING)} retrying deliveries besides the history; ${REQUESTS} sequential requests each (medians)`);
console.log(`  ${'history (delivered events)'.padEnd(44)}${results.map((r) => fmt(r.n).padStart(12)).join('')}`);
console.log(`  ${'store size (MB)'.padEnd(44)}${results.map((r) => (r.bytes / 1e6).toFixed(1).padStart(12)).join('')}`);
row('daemon startup (spawn → listening)', 'startupMs', null);
row('GET /v1/webhooks/{id}/deliveries p50', 'deliveries');
row('GET /v1/events?type=stream.revoked (1 %) p50', 'rare');
row('GET /v1/events?type=refund.final (none) p50', 'absent');
row('GET /v1/events?since=now (replay --since now)', 'sinceNow');
row('GET /metrics p50', 'metrics');
row('GET /metrics p95', 'metrics', 'p95', false);

const r = await retention();
console.log(`bench/history retention: ${DAYS_LABEL(r)} simulated days at ${fmt(r.EVENTS_PER_DAY)} events/day, one subscription, default retention 30 days`);
for (const s of r.sizes.filter((s) => [1, 10, 20, 30, 31, 35, 40, 45].includes(s.day)))
  console.log(`  day ${String(s.day).padStart(2)}: events kept ${fmt(s.kept).padStart(9)}   file ${(s.fileBytes / 1e6).toFixed(1).padStart(6)} MB   used ${(s.usedBytes / 1e6).toFixed(1).padStart(6)} MB`);
const at = (d) => r.sizes.find((s) => s.day === d);
const perEvent = at(30).usedBytes / at(30).kept;
const growth = at(45).fileBytes / at(31).fileBytes;
console.log(`  pruning: ${fmt(r.batches.count)} batches of about 4 ms each; ${fmt(r.batches.over)} took over 8 ms; the longest held the store ${r.batches.maxMs.toFixed(1)} ms`);
console.log(`  storage per event with one subscription (event + delivery + attempt + indexes): ${fmt(perEvent)} B`);
console.log(`  => at 100 events/s with the default 30-day retention: about ${((perEvent * 100 * 86_400 * 30) / 1e9).toFixed(0)} GB, then flat`);
const flat = growth <= 1.1;
console.log(`  file size day 45 / day 31: ${growth.toFixed(2)} (target <= 1.10: stops growing) ${flat ? 'ok' : 'MISSED'}`);
reported.push(result('retention: store file size day 45 / day 31', growth, 'ratio', ['<=', 1.1]));
// The result line (last stdout line): report() sets exit code 1 when any target above is missed.
report('history', reported);

function DAYS_LABEL(x) { return x.sizes.length; }
