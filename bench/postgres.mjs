// bench/postgres: the daemon on PostgreSQL against the same daemon on SQLite, on this machine, in one run (issue 15,
// DESIGN §14). A real PostgreSQL 15 server is started in a temp dir (bench/lib/postgres.mjs; fsync on, server
// defaults); the daemons are the real one (startDaemon from dist/, forked, --delivery-timeout 1 so the delivery lease
// is 12 s), one on SQLite in a temp data dir, one or two on one PostgreSQL database. The data is prepared with the
// CLI (nodes add, tokens issue, keys add; with NODE_SVC_STORE for PostgreSQL), subscriptions with POST /v1/webhooks.
//
// 1. PostgreSQL / SQLite, one daemon each, rounds alternating the two (medians of the per-round ratios):
//    - GET /v1/streams/{id}/headroom at saturation: autocannon, BENCH_HEADROOM_CONNECTIONS keep-alive clients;
//    - POST /v1/streams/{id}/vouchers: autocannon, BENCH_VOUCHER_CONNECTIONS clients, each billing its own stream
//      upward (vouchers signed ahead); then each stream's billed truth must lie between the last amount answered
//      200 (a 2xx means on disk) and the last sent;
//    - webhook deliveries/s to a loopback receiver (bench/lib/delivery-receiver.mjs, answers 204): BENCH_N events
//      recorded in the daemon (recordEvent, 100 single-event writes at a time: one transaction on SQLite's group
//      commit, 100 concurrent ones on PostgreSQL, as requests make them), timed from the first
//      record until the receiver has every event and the store shows none pending.
//    Target: each ratio >= 0.5.
// 2. Two daemons against one on the same database: deliveries/s as above (events recorded in the first daemon; the
//    second finds them by its 1 s poll), ratio printed for the record (the two share 2 cores with the database).
//    Failover: two daemons, a burst of about 4 s of one daemon's work recorded in the first; once the second has
//    deliveries in flight it is killed with SIGKILL. Its orphaned claims are the burst's deliveries claimed more often
//    than attempts were recorded for them; the gap is from the kill to the end of the survivor's first recorded
//    delivery of one of them (it takes them over when their lease runs out). Target: < lease + 1 s = 13 s. Also checked:
//    every delivery of the burst delivered, with a delivered attempt recorded; duplicates at the receiver (<= the
//    orphans: at most one resend each).
// 3. The write cost per event on PostgreSQL, over one round of part 1 (one daemon; record, claim, send, record the
//    attempt): WAL bytes (pg_current_wal_lsn() before and after), write transactions (transaction ids assigned:
//    pg_snapshot_xmax of the current snapshot before and after), durable group commits (the store's own count; claims
//    commit without waiting for the WAL flush), rows inserted. For the record, no target (the README quotes it).
// Env: BENCH_ROUNDS (5) of BENCH_SECONDS (2) for headroom and vouchers, BENCH_DELIVERY_ROUNDS (3) of BENCH_N (4000)
//      events, BENCH_HEADROOM_CONNECTIONS (32), BENCH_VOUCHER_CONNECTIONS (64); BENCH_TRACE=1 (phase times on stderr);
//      BENCH_PG_STATEMENTS=1 (diagnosis: load pg_stat_statements and print the statements per request and per event
//      of the last PostgreSQL round of each part; slows PostgreSQL a little).
//      Run time here: about 2 minutes.
import { execFileSync, fork } from 'node:child_process';
import { mkdirSync } from 'node:fs';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import autocannon from 'autocannon';
import pg from 'pg';
import { LEASE_MS, pgUnavailable, startPostgres } from './lib/postgres.mjs';
import { report, result } from './lib/report.mjs';
import { BIN, ISSUER, NODE, fmt, median, prepare } from './lib/setup.mjs';

const ROUNDS = Number(process.env.BENCH_ROUNDS ?? 5); // headroom and vouchers: short rounds, many (neighbours come and go)
const SECONDS = Number(process.env.BENCH_SECONDS ?? 2);
const DELIVERY_ROUNDS = Number(process.env.BENCH_DELIVERY_ROUNDS ?? 3);
const N = Number(process.env.BENCH_N ?? 4000);
const BATCH = 100;
const HEADROOM_CONNECTIONS = Number(process.env.BENCH_HEADROOM_CONNECTIONS ?? 32);
const VOUCHER_CONNECTIONS = Number(process.env.BENCH_VOUCHER_CONNECTIONS ?? 64);
const STATEMENTS = process.env.BENCH_PG_STATEMENTS === '1';
const RATIO_TARGET = 0.5;
const GAP_TARGET_S = LEASE_MS / 1000 + 1;
const LIB = fileURLToPath(new URL('./lib/postgres.mjs', import.meta.url));
const RECEIVER = fileURLToPath(new URL('./lib/delivery-receiver.mjs', import.meta.url));

const now = () => performance.timeOrigin + performance.now();
const T0 = performance.now();
const trace = process.env.BENCH_TRACE ? (label) => console.error(`  [trace ${((performance.now() - T0) / 1000).toFixed(1)} s] ${label}`) : () => {};
const sleep = (ms) => new Promise((r) => setTimeout(r, ms));
/** `promise`, or `fallback` after `ms` (the timer cleared either way: a pending one would keep the process alive). */
const within = (promise, ms, fallback) => {
  let t;
  return Promise.race([promise, new Promise((r) => { t = setTimeout(() => r(fallback), ms); })]).finally(() => clearTimeout(t));
};
const env = Object.fromEntries(Object.entries(process.env).filter(([k]) => !k.startsWith('NODE_SVC_')));
const children = [];
let server;
let p;
let db;
let su;

/** A forked helper with request/response over IPC (as bench/delivery). */
async function spawnChild(file, args, extraEnv = {}) {
  const child = fork(file, args, { env: { ...env, NODE_SVC_LOG_LEVEL: 'warn', ...extraEnv }, stdio: ['ignore', 'inherit', 'inherit', 'ipc'] });
  children.push(child);
  let seq = 0;
  let exited = false;
  const waiting = new Map();
  const exit = new Promise((r) => child.once('exit', () => r(true)));
  const ready = new Promise((resolve, reject) => {
    child.once('exit', (code, sig) => {
      exited = true;
      const err = new Error(`${file} ${args[0] ?? ''} exited (${code ?? sig})`);
      reject(err);
      for (const w of waiting.values()) w.reject(err);
      waiting.clear();
    });
    child.on('message', (m) => {
      if (m.ready) return resolve(m);
      const w = waiting.get(m.re);
      if (!w) return;
      waiting.delete(m.re);
      if (m.error) w.reject(new Error(m.error));
      else w.resolve(m);
    });
  });
  ready.catch(() => undefined);
  let startTimer;
  const info = await Promise.race([ready, new Promise((_, reject) => { startTimer = setTimeout(() => reject(new Error(`${file} did not start in 30 s`)), 30_000); })])
    .finally(() => clearTimeout(startTimer));
  const call = (cmd, a = {}, timeoutMs = 120_000) => {
    if (exited) return Promise.reject(new Error(`${file} is not running`));
    const re = ++seq;
    return new Promise((resolve, reject) => {
      const t = setTimeout(() => { waiting.delete(re); reject(new Error(`${cmd} took over ${timeoutMs} ms`)); }, timeoutMs);
      waiting.set(re, { resolve: (v) => { clearTimeout(t); resolve(v); }, reject: (e) => { clearTimeout(t); reject(e); } });
      child.send({ cmd, re, ...a });
    });
  };
  const waitExit = (ms) => within(exit, ms, false);
  return { child, info, call, waitExit, get exited() { return exited; } };
}

async function stopChild(c) {
  if (!c || c.exited) return;
  await c.call('stop', {}, 30_000).catch(() => undefined);
  if (!(await c.waitExit(5000))) c.child.kill('SIGKILL');
}

async function cleanup() {
  trace('cleanup');
  for (const c of children.splice(0)) {
    if (c.exitCode !== null || c.signalCode !== null) continue;
    c.kill('SIGTERM');
    const gone = await within(new Promise((r) => c.once('exit', () => r(true))), 5000, false);
    if (!gone) c.kill('SIGKILL');
  }
  await db?.end().catch(() => undefined);
  await su?.end().catch(() => undefined);
  await server?.stop().catch((e) => console.error(`bench/postgres: stopping PostgreSQL: ${e.message}`));
  await p?.cleanup().catch(() => undefined);
  trace('cleaned up');
}
for (const sig of ['SIGINT', 'SIGTERM']) process.once(sig, () => { cleanup().finally(() => process.exit(130)); });

try {
  await main();
} catch (err) {
  console.error(`bench/postgres failed: ${err?.stack ?? err}`);
  process.exitCode = 1;
} finally {
  await cleanup();
}

async function main() {
  const why = pgUnavailable();
  if (why) throw new Error(`no PostgreSQL server can be started here: ${why}`);
  const started = performance.now();

  // ---- the stores: SQLite in a data dir (prepare: node, token, issuer key), PostgreSQL with the same CLI ----
  p = prepare('postgres');
  server = await startPostgres({ statements: STATEMENTS });
  const pgUrl = await server.createDatabase('nsvc_bench');
  su = STATEMENTS ? await server.superuser('nsvc_bench') : undefined;
  if (su) await su.query('CREATE EXTENSION pg_stat_statements');
  const pgDirs = [join(p.root, 'pg-1'), join(p.root, 'pg-2')];
  for (const d of pgDirs) mkdirSync(d);
  // The URL (a secret) goes by environment, never on a command line.
  const pgCli = (...args) => execFileSync(process.execPath, [BIN, ...args, '--data-dir', pgDirs[0]], { env: { ...env, NODE_SVC_STORE: pgUrl }, encoding: 'utf8' });
  pgCli('nodes', 'add', NODE);
  const pgToken = JSON.parse(pgCli('tokens', 'issue', NODE)).token;
  pgCli('keys', 'add', '--issuer', ISSUER, join(p.root, 'jwks.json'));
  db = new pg.Client({ connectionString: pgUrl });
  await db.connect();
  const sqlValue = async (sql, params) => Object.values((await db.query(sql, params)).rows[0])[0];

  // ---- receiver and daemons, each its own process ----
  const receiver = await spawnChild(RECEIVER, []);
  const hookUrl = `http://127.0.0.1:${receiver.info.port}/hook`;
  const startPg = (i) => spawnChild(LIB, ['daemon', pgDirs[i]], { BENCH_STORE_URL: pgUrl });
  const sqlite = { name: 'SQLite', d: await spawnChild(LIB, ['daemon', p.dataDir]), auth: p.auth };
  const pgOne = { name: 'PostgreSQL', d: await startPg(0), auth: { authorization: `Bearer ${pgToken}` } };
  const both = [sqlite, pgOne];

  const post = async (t, path, body, want = 200) => {
    const r = await fetch(`${t.d.info.url}${path}`, { method: 'POST', headers: { ...t.auth, 'content-type': 'application/json' }, body: JSON.stringify(body) });
    if (r.status !== want) throw new Error(`${t.name}: POST ${path} → ${r.status} ${await r.text()}`);
    return r.json();
  };
  const streams = Array.from({ length: VOUCHER_CONNECTIONS }, (_, i) => `v-${i}`);
  for (const t of both) {
    await post(t, '/v1/webhooks', { url: hookUrl, events: ['budget.halted'], description: 'bench/postgres' }, 201);
    for (const s of ['h', ...streams]) await post(t, '/v1/allowances/verify', { credential: p.credential(s) });
    await post(t, '/v1/streams/h/vouchers', { voucher: p.voucher('h', 5000) }); // a rate inside the window
    t.amounts = new Map(streams.map((s) => [s, 0])); // the last amount sent (or set up to be sent) per stream
    t.acked = new Map(streams.map((s) => [s, 0])); // the last amount answered 200
    t.pool = new Map(streams.map((s) => [s, []])); // vouchers signed ahead, per stream, amounts consecutive
    t.live = 0; // vouchers the load generator had to sign during a run (its pool ran out)
    t.rate = 0; // the last run's vouchers/s
  }
  /**
   * Sign ahead (outside the timed runs) what the next run will likely send, 1.5 x the last run's rate: this process
   * shares the cores with the daemon and the database, and signing during a run would slow the load generator.
   */
  const topUp = (t, seconds) => {
    const per = Math.ceil(Math.max(8000, t.rate * seconds * 1.5) / streams.length);
    for (const s of streams) {
      const pool = t.pool.get(s);
      while (pool.length && pool[0][0] <= t.amounts.get(s)) pool.shift();
      let a = pool.length ? pool[pool.length - 1][0] : t.amounts.get(s);
      while (pool.length < per) { a += 1000; pool.push([a, p.voucher(s, a)]); }
    }
  };

  trace('prepared');
  // ---- part 1: headroom and vouchers, autocannon at saturation ----
  const cannon = async (t, kind, seconds = SECONDS) => {
    let next = 0;
    if (kind === 'vouchers') topUp(t, seconds);
    const opts = kind === 'headroom'
      ? { connections: HEADROOM_CONNECTIONS, requests: [{ method: 'GET', path: '/v1/streams/h/headroom', headers: t.auth }] }
      : {
        connections: VOUCHER_CONNECTIONS,
        requests: [{
          method: 'POST', headers: { ...t.auth, 'content-type': 'application/json' },
          setupRequest: (req, ctx) => {
            ctx.stream ??= streams[next++ % streams.length];
            const amount = t.amounts.get(ctx.stream) + 1000;
            t.amounts.set(ctx.stream, amount);
            ctx.amount = amount;
            const pool = t.pool.get(ctx.stream);
            while (pool.length && pool[0][0] < amount) pool.shift();
            const v = pool.length && pool[0][0] === amount ? pool.shift()[1] : (t.live++, p.voucher(ctx.stream, amount));
            return { ...req, path: `/v1/streams/${ctx.stream}/vouchers`, body: JSON.stringify({ voucher: v }) };
          },
          // One request at a time per connection: the answer is to the request set up last on it.
          onResponse: (status, _body, ctx) => { if (status === 200 && ctx.amount > t.acked.get(ctx.stream)) t.acked.set(ctx.stream, ctx.amount); },
        }],
      };
    const r = await autocannon({ url: t.d.info.url, pipelining: 1, duration: seconds, ...opts });
    const bad = r.non2xx + r.errors + r.timeouts;
    if (bad) throw new Error(`${t.name} ${kind}: ${r.non2xx} non-2xx, ${r.errors} errors, ${r.timeouts} timeouts of ${r.requests.total}`);
    if (kind === 'vouchers') t.rate = r.requests.total / seconds;
    return { rps: r.requests.total / seconds, p50: r.latency.p50, p99: r.latency.p99 };
  };
  /** BENCH_PG_STATEMENTS=1: the statements run since the last reset, per unit of work, most frequent first. */
  async function statements(label, n, unit) {
    if (!su) return;
    const st = (await su.query(`SELECT calls, total_exec_time, query FROM pg_stat_statements
      WHERE userid = (SELECT oid FROM pg_roles WHERE rolname = 'node_svc') AND dbid = (SELECT oid FROM pg_database WHERE datname = 'nsvc_bench') ORDER BY calls DESC`)).rows;
    const calls = st.reduce((x, r) => x + Number(r.calls), 0);
    const ms = st.reduce((x, r) => x + Number(r.total_exec_time), 0);
    console.error(`  [statements] ${label}: ${(calls / n).toFixed(2)} statements per ${unit}, ${((ms / n) * 1000).toFixed(0)} µs executing in the server per ${unit}; the most frequent:`);
    for (const r of st.slice(0, 16)) console.error(`    ${(Number(r.calls) / n).toFixed(3).padStart(8)}/${unit}  ${((Number(r.total_exec_time) / n) * 1000).toFixed(1).padStart(6)} µs  ${r.query.replace(/\s+/g, ' ').slice(0, 140)}`);
  }
  const res = { headroom: { SQLite: [], PostgreSQL: [], ratio: [] }, vouchers: { SQLite: [], PostgreSQL: [], ratio: [] } };
  for (const kind of ['headroom', 'vouchers']) {
    for (const t of both) await cannon(t, kind, 1); // warm-up: JIT, pools, caches
    for (let k = 0; k < ROUNDS; k++) {
      const a = await cannon(sqlite, kind);
      if (k === ROUNDS - 1) await su?.query('SELECT pg_stat_statements_reset()');
      const b = await cannon(pgOne, kind);
      if (k === ROUNDS - 1) await statements(kind === 'headroom' ? 'GET headroom' : 'POST vouchers', b.rps * SECONDS, 'request');
      res[kind].SQLite.push(a);
      res[kind].PostgreSQL.push(b);
      res[kind].ratio.push(b.rps / a.rps);
    }
  }
  // A 200 means on disk: each stream's billed truth is at least the last amount answered 200 and at most the last
  // sent (a request cut off when autocannon stopped may or may not have been billed).
  for (const t of both) {
    for (const s of streams) {
      const f = await (await fetch(`${t.d.info.url}/v1/streams/${s}/finality`, { headers: t.auth })).json();
      const billed = Number(f.billedTruth.amountMicro);
      if (!(billed >= t.acked.get(s) && billed <= t.amounts.get(s))) throw new Error(`${t.name} ${s}: billed ${billed}, last answered 200 ${t.acked.get(s)}, last sent ${t.amounts.get(s)}`);
    }
  }

  trace('headroom and vouchers done');
  // ---- part 1 (deliveries) and part 2 (two daemons vs one), rounds: SQLite, PostgreSQL alone, PostgreSQL x 2 ----
  /** Until the receiver has `unique` events and the recording daemon's store shows none pending (bounded). */
  async function drained(d, unique, limitMs = 60_000) {
    const until = now() + limitMs;
    while (now() < until && (await receiver.call('count')).unique < unique) await sleep(5);
    while (now() < until) {
      if ((await d.call('pending')).n === 0) return now();
      await sleep(5);
    }
    throw new Error(`not all ${unique} deliveries done within ${limitMs} ms`);
  }
  async function deliveries(d, n) {
    await receiver.call('reset');
    const r = await d.call('burst', { node: NODE, n, batch: BATCH });
    const at = await drained(d, n);
    const c = await receiver.call('count');
    if (c.unsigned) throw new Error(`${c.unsigned} deliveries arrived without a signature`);
    return { rate: n / ((at - r.t0) / 1000), record: n / ((r.t1 - r.t0) / 1000), dup: c.duplicates };
  }
  const walMark = async () => ({
    lsn: await sqlValue('SELECT pg_current_wal_lsn()::text'),
    xmax: BigInt(await sqlValue('SELECT pg_snapshot_xmax(pg_current_snapshot())::text')),
    rows: (await db.query('SELECT (SELECT count(*) FROM events) + (SELECT count(*) FROM deliveries) + (SELECT count(*) FROM delivery_attempts) AS n')).rows[0].n,
    commits: (await pgOne.d.call('stats')).commits,
  });
  const del = { SQLite: [], one: [], two: [], ratio: [], twoRatio: [], recS: [], recP: [] };
  let cost;
  for (const t of both) await deliveries(t.d, Math.min(N, 1000)); // warm-up
  for (let k = 0; k < DELIVERY_ROUNDS; k++) {
    const a = await deliveries(sqlite.d, N);
    const before = k === DELIVERY_ROUNDS - 1 ? await walMark() : undefined;
    if (before && su) await su.query('SELECT pg_stat_statements_reset()');
    const b = await deliveries(pgOne.d, N);
    if (before) {
      const after = await walMark();
      const wal = Number(await sqlValue('SELECT pg_wal_lsn_diff($1::pg_lsn, $2::pg_lsn)::bigint::text', [after.lsn, before.lsn]));
      await statements(`deliveries, one daemon, ${fmt(N)} events`, N, 'event');
      cost = { wal: wal / N, xacts: Number(after.xmax - before.xmax) / N, commits: (after.commits - before.commits) / N, rows: (Number(after.rows) - Number(before.rows)) / N };
    }
    const second = await startPg(1);
    const c = await deliveries(pgOne.d, N);
    await stopChild(second);
    trace(`round ${k + 1}: deliveries/s SQLite ${fmt(a.rate)}, PostgreSQL ${fmt(b.rate)}, two daemons ${fmt(c.rate)}`);
    del.SQLite.push(a.rate); del.one.push(b.rate); del.two.push(c.rate); del.recS.push(a.record); del.recP.push(b.record);
    del.ratio.push(b.rate / a.rate); del.twoRatio.push(c.rate / b.rate);
  }

  trace('deliveries done');
  // ---- part 2: failover, kill -9 one of two daemons while deliveries flow ----
  const nf = Math.max(2000, Math.min(20_000, Math.round(median(del.one) * 4)));
  const victim = await startPg(1);
  await receiver.call('reset');
  const seq0 = Number(await sqlValue('SELECT COALESCE(MAX(seq), 0)::text FROM events'));
  const burst = pgOne.d.call('burst', { node: NODE, n: nf, batch: BATCH });
  // Kill once the victim has delivered some and has some in flight (it joins by its 1 s poll).
  const until = now() + 30_000;
  let vs;
  for (;;) {
    vs = await victim.call('stats');
    const c = await receiver.call('count');
    if (vs.stats.delivered > 0 && vs.inFlight > 0 && c.unique >= nf * 0.2) break;
    if (now() > until) throw new Error(`the second daemon took no part in the burst within 30 s (${JSON.stringify(vs)}, receiver ${JSON.stringify(c)})`);
    await sleep(2);
  }
  const beforeKill = await receiver.call('count');
  await receiver.call('reset'); // from here on the receiver keeps the first arrival after the kill
  const killAt = Date.now(); // the daemons' clock (attempted_at)
  victim.child.kill('SIGKILL');
  await victim.waitExit(5000);
  const r = await burst;
  if (r.firstSeq <= seq0) throw new Error('the burst recorded no new events');
  const inBurst = 'FROM deliveries d WHERE d.event_seq > $1';
  const doneBy = now() + LEASE_MS + 30_000;
  let left = nf;
  while (now() < doneBy) {
    left = Number(await sqlValue(`SELECT count(*)::text ${inBurst} AND d.status <> 'delivered'`, [seq0]));
    if (left === 0) break;
    await sleep(20);
  }
  const afterKill = await receiver.call('count');
  const total = Number(await sqlValue(`SELECT count(*)::text ${inBurst}`, [seq0]));
  const withAttempt = Number(await sqlValue(`SELECT count(*)::text ${inBurst} AND EXISTS (SELECT 1 FROM delivery_attempts a WHERE a.delivery_id = d.id AND a.outcome = 'delivered')`, [seq0]));
  // Orphans: claimed (attempts is the claim count, the fencing token) more often than attempts were recorded for them:
  // the killed daemon's claims. The survivor's recorded attempt of each says when the receiver answered it
  // (attempted_at + duration_ms, the daemon's wall clock); the receiver cannot tell, since the killed daemon's last
  // requests may still arrive just after the kill.
  const o = (await db.query(`
    WITH o AS (
      SELECT d.id FROM deliveries d
      LEFT JOIN (SELECT delivery_id, count(*) AS n FROM delivery_attempts WHERE event_seq > $1 GROUP BY delivery_id) a ON a.delivery_id = d.id
      WHERE d.event_seq > $1 AND d.attempts > COALESCE(a.n, 0))
    SELECT (SELECT count(*) FROM o)::text AS orphans, MIN(x.attempted_at + x.duration_ms)::text AS first, MAX(x.attempted_at + x.duration_ms)::text AS last
    FROM o JOIN delivery_attempts x ON x.delivery_id = o.id AND x.outcome = 'delivered'`, [seq0])).rows[0];
  const orphans = Number(o.orphans);
  const gap = o.first === null ? NaN : (Number(o.first) - killAt) / 1000;
  const lastGap = o.last === null ? NaN : (Number(o.last) - killAt) / 1000;
  const allDelivered = left === 0 && total === nf && withAttempt === nf && !beforeKill.unsigned && !afterKill.unsigned;
  const duplicates = beforeKill.requests + afterKill.requests - nf;

  // ---- figures ----
  const seconds = (performance.now() - started) / 1000;
  const row = (label, runs, ratio) => `  ${label.padEnd(44)}${fmt(median(runs.SQLite.map((x) => x.rps))).padStart(8)}/s${fmt(median(runs.PostgreSQL.map((x) => x.rps))).padStart(10)}/s   ${ratio.toFixed(2).padStart(5)}  (target >= ${RATIO_TARGET}) ${ratio >= RATIO_TARGET ? 'ok' : 'MISSED'}`;
  const hr = median(res.headroom.ratio);
  const vr = median(res.vouchers.ratio);
  const dr = median(del.ratio);
  const tr = median(del.twoRatio);
  console.log(`bench/postgres  PostgreSQL 15 (fsync on) and SQLite on this machine, medians of ${ROUNDS} rounds (HTTP) and ${DELIVERY_ROUNDS} (deliveries), ${seconds.toFixed(0)} s`);
  console.log(`  ${''.padEnd(44)}${'SQLite'.padStart(10)}${'PostgreSQL'.padStart(12)}   ratio`);
  console.log(row(`GET headroom, ${HEADROOM_CONNECTIONS} keep-alive clients, ${SECONDS} s`, res.headroom, hr));
  console.log(row(`POST vouchers, ${VOUCHER_CONNECTIONS} clients (own stream each)`, res.vouchers, vr));
  console.log(row(`deliveries, ${fmt(N)} events, ${BATCH} writes at a time`, { SQLite: del.SQLite.map((rps) => ({ rps })), PostgreSQL: del.one.map((rps) => ({ rps })) }, dr));
  console.log(`    p50/p99 ms: headroom SQLite ${median(res.headroom.SQLite.map((x) => x.p50))}/${median(res.headroom.SQLite.map((x) => x.p99))}, PostgreSQL ${median(res.headroom.PostgreSQL.map((x) => x.p50))}/${median(res.headroom.PostgreSQL.map((x) => x.p99))}; vouchers SQLite ${median(res.vouchers.SQLite.map((x) => x.p50))}/${median(res.vouchers.SQLite.map((x) => x.p99))}, PostgreSQL ${median(res.vouchers.PostgreSQL.map((x) => x.p50))}/${median(res.vouchers.PostgreSQL.map((x) => x.p99))}`);
  console.log(`    recording the events (while the worker delivers): SQLite ${fmt(median(del.recS))} events/s, PostgreSQL ${fmt(median(del.recP))} events/s`);
  if (sqlite.live + pgOne.live) console.log(`    (the load generator signed ${sqlite.live} SQLite and ${pgOne.live} PostgreSQL vouchers during runs: its pool ran short)`);
  console.log(`    per round: headroom ${res.headroom.ratio.map((x) => x.toFixed(2)).join(', ')}; vouchers ${res.vouchers.ratio.map((x) => x.toFixed(2)).join(', ')}; deliveries ${del.ratio.map((x) => x.toFixed(2)).join(', ')}`);
  console.log(`  two daemons / one on one database: deliveries ${fmt(median(del.two))}/s vs ${fmt(median(del.one))}/s   ratio ${tr.toFixed(2)} (informational: 2 cores shared with the database; per round ${del.twoRatio.map((x) => x.toFixed(2)).join(', ')})`);
  console.log(`  failover: ${fmt(nf)} events, kill -9 of the second daemon (${vs.inFlight} in flight, ${fmt(vs.stats.delivered)} delivered by it; ${fmt(beforeKill.unique)} at the receiver), lease ${LEASE_MS / 1000} s`);
  console.log(`    orphaned claims ${orphans}; the first taken over and delivered by the survivor ${Number.isFinite(gap) ? gap.toFixed(2) : '-'} s after the kill (target < ${GAP_TARGET_S} s) ${gap < GAP_TARGET_S ? 'ok' : 'MISSED'}; the last ${Number.isFinite(lastGap) ? lastGap.toFixed(2) : '-'} s`);
  console.log(`    every delivery delivered, with its attempt recorded: ${allDelivered ? 'yes' : `NO (${nf - left} of ${nf} delivered, ${withAttempt} with an attempt, ${total} deliveries, unsigned ${beforeKill.unsigned + afterKill.unsigned})`}; duplicates at the receiver ${duplicates} (orphans ${orphans})`);
  console.log(`  write cost per event on PostgreSQL (record + claim + send + attempt, 1 subscription, one daemon, ${fmt(N)} events):`);
  console.log(`    WAL ${fmt(cost.wal)} B; write transactions ${cost.xacts.toFixed(3)} (durable group commits ${cost.commits.toFixed(3)}, the rest claims committed without waiting for the flush); rows inserted ${cost.rows.toFixed(2)}`);
  report('postgres', [
    result('GET headroom PostgreSQL / SQLite', hr, 'ratio', ['>=', RATIO_TARGET]),
    result('POST vouchers PostgreSQL / SQLite', vr, 'ratio', ['>=', RATIO_TARGET]),
    result('deliveries/s PostgreSQL / SQLite', dr, 'ratio', ['>=', RATIO_TARGET]),
    result('deliveries/s two daemons / one (informational)', tr, 'ratio'),
    result(`failover gap, kill -9 to first orphan delivered by the survivor (lease ${LEASE_MS / 1000} s)`, gap, 's', ['<', GAP_TARGET_S]),
    result('failover: every delivery delivered (1 = yes)', allDelivered ? 1 : 0, 'bool', ['>=', 1]),
    result('failover: duplicates at the receiver', duplicates, 'count'),
    result('PostgreSQL WAL per event', cost.wal, 'B'),
    result('PostgreSQL write transactions per event', cost.xacts, 'xact'),
    result('PostgreSQL durable commits per event', cost.commits, 'commit'),
  ]);
  trace('stopping');
  await stopChild(pgOne.d);
  trace('PostgreSQL daemon stopped');
  await stopChild(sqlite.d);
  trace('SQLite daemon stopped');
  await receiver.call('stop', {}, 5000).catch(() => undefined);
}
