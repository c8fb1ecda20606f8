// bench/postgres: the daemon on PostgreSQL against the same daemon on SQLite, on this machine, in one run (issues 15
// and 21, DESIGN §14). A real PostgreSQL 15 server is started in a temp dir (bench/lib/postgres.mjs; fsync on, server
// defaults); the daemons are the real one (startDaemon from dist/, forked, --delivery-timeout 1 so the delivery lease
// is 12 s), one on SQLite in a temp data dir, one to four on one PostgreSQL database, on it directly (through its Unix
// socket, as software on the database's own machine reaches it; BENCH_PG_TCP=1: over TCP loopback) or through
// bench/lib/latency-proxy.mjs (a TCP proxy that adds a network delay and counts round trips and statements). The data
// is prepared with the CLI (nodes add, tokens issue, keys add; with NODE_SVC_STORE for PostgreSQL), subscriptions with
// POST /v1/webhooks. Five parts, printed in this order and numbered so (BENCH_PG_PARTS chooses, comma-separated):
//
// 1. compare — PostgreSQL / SQLite, one daemon each, rounds alternating the two (medians of the per-round ratios):
//    - GET /v1/streams/{id}/headroom at saturation: autocannon, BENCH_HEADROOM_CONNECTIONS keep-alive clients;
//    - POST /v1/streams/{id}/vouchers: autocannon, BENCH_VOUCHER_CONNECTIONS clients, each billing its own stream
//      upward (vouchers signed ahead); then each stream's billed truth must lie between the last amount answered
//      200 (a 2xx means on disk) and the last sent;
//    - webhook deliveries/s to a loopback receiver (bench/lib/delivery-receiver.mjs, answers 204): BENCH_N events
//      recorded in the daemon (recordEvent, 100 single-event writes at a time: one transaction on SQLite's group
//      commit, 100 concurrent ones on PostgreSQL, as requests make them), timed from the first
//      record until the receiver has every event and the store shows none pending.
//    Target: each ratio >= 0.5. Also, for the record: two daemons against one on the same database, deliveries/s as
//    above (events recorded in the first daemon; the second finds them by its 1 s poll); the write cost per event on
//    PostgreSQL over one round (record, claim, send, record the attempt): WAL bytes (pg_current_wal_lsn() before and
//    after), write transactions (transaction ids assigned: pg_snapshot_xmax before and after), durable group commits
//    (the store's own count; claims commit without waiting for the WAL flush), rows inserted.
// 2. failover — two daemons, a burst of about 4 s of one daemon's work recorded in the first; once the second has
//    deliveries in flight it is killed with SIGKILL (a burst the first delivers alone before the second's poll finds
//    any of it is recorded again, three bursts at most). Its orphaned claims are the burst's deliveries claimed more often
//    than attempts were recorded for them; the gap is from the kill to the end of the survivor's first recorded
//    delivery of one of them (it takes them over when their lease runs out). Target: < lease + 1 s = 13 s. Also checked:
//    every delivery of the burst delivered, with a delivered attempt recorded; duplicates at the receiver (<= the
//    orphans: at most one resend each).
// 3. control — control facts/s (stream.revoked of a stream never seen, signed ahead), PostgreSQL and SQLite, no proxy,
//    1 and 8 closed-loop clients (autocannon), BENCH_PG_CONTROL_ROUNDS rounds alternating the stores. Targets: at 8
//    clients PostgreSQL / SQLite >= 0.5; PostgreSQL at 8 clients / at 1 >= 1 (more clients must not lower the rate).
//    Also printed: CPU µs per fact of the daemon, PostgreSQL's processes and the load generator (/proc), and, for the
//    record, the same on a daemon run with --store-pool 2 (README "More than one machine": fewer write transactions at
//    once, so more facts per commit), started for its part of each round and stopped after it.
// 4. ops — round trips and statements per operation, counted by the proxy (no delay) in front of daemon A (and B):
//    BENCH_PG_OPS sequential operations of each kind, the counters reset before and read after (and TRAIL_MS more for
//    what the operations set off), divided by the count: an accepted voucher on a stream A billed last, one on a
//    stream daemon B never saw (B's connections opened beforehand on streams of its own), a stream open (POST
//    /v1/allowances/verify of a new credential registers its stream), control facts (stream.revoked of a new stream;
//    budget.halted of a new budget), with no subscription (their events fan out to nothing); then, with one (that does
//    not take stream.revoked), stream.revoked again: the worker's claims on its event show as background; a delivery:
//    BENCH_PG_OPS_BURST events recorded at once past the proxy (a second store in the daemon's process, which wakes
//    its worker as its own writes do) until all are delivered, then BENCH_PG_OPS events one at a time (the worker
//    woken after each commit, as a request does), divided by the deliveries. The background is measured first: both
//    proxies over IDLE_MS of an idle daemon (the worker's 1 s poll; LISTEN is silent), again for A once the
//    subscription exists. A request's round trips leave out what the idle daemon sent too and the keyring's
//    once-a-second key check (printed as "background", less the idle rate pro rata) and connection starts
//    ("connecting"); a delivery's are everything, less the idle rate pro rata. What each round trip carried is listed
//    (BENCH_PG_OPS_DETAIL: from how many per operation). Targets: <= 2 round trips per accepted voucher (either case),
//    per stream open, per delivery (the burst); the rest printed. Also timed, one at a time: an event from its commit
//    to the receiver (the worker woken after the commit), and a control fact's event (budget.halted) from its 200.
// 5. scale — 1, 2 and 4 daemons on one database through the proxy with BENCH_PG_RTT_MS (10) of round trip added (half
//    each way; the hold actually achieved is printed: Node's timers have 1 ms resolution). Vouchers: each daemon driven
//    by BENCH_PG_SCALE_CLIENTS (1) closed-loop clients (autocannon), each billing its own stream upward (signed ahead),
//    for BENCH_PG_SCALE_SECONDS; billed truth checked as in part 1. Deliveries: each daemon's worker with
//    BENCH_PG_SCALE_IN_FLIGHT (4) deliveries in flight at most (its closed-loop clients); BENCH_PG_SCALE_EVENTS recorded in each
//    daemon at once (through its own store, so through the proxy), timed until all are delivered (by whichever
//    worker claims them: the daemons not in the run are stopped). BENCH_PG_SCALE_ROUNDS rounds (the daemons started
//    again and warmed up at each). Targets: total rate 2 daemons / 1 >= 1.8, 4 / 1 >= 3 (medians of per-round
//    ratios); the machine's CPU busy during each run < 70 % (/proc/stat deltas, 1 - idle/total, iowait as idle). Also
//    printed: this run's own processes' share of the machine (the machine is shared: a neighbour's load shows in the
//    first and not here), CPU ms per voucher or delivery, the proxy's own CPU, p50 voucher latency.
// Env: BENCH_ROUNDS (5; 0: deliveries only) of BENCH_SECONDS (2) for headroom and vouchers, BENCH_DELIVERY_ROUNDS (3) of BENCH_N (4000)
//      events, BENCH_HEADROOM_CONNECTIONS (32), BENCH_VOUCHER_CONNECTIONS (64); BENCH_PG_PARTS (all: compare, failover,
//      control, ops, scale); BENCH_PG_CONTROL_ROUNDS (3) of BENCH_PG_CONTROL_SECONDS (BENCH_SECONDS); BENCH_PG_OPS (50),
//      BENCH_PG_OPS_BURST (1000), BENCH_PG_OPS_LATENCY (20), BENCH_PG_OPS_DETAIL (0.05); BENCH_PG_RTT_MS (10),
//      BENCH_PG_SCALE_CLIENTS (1), BENCH_PG_SCALE_IN_FLIGHT (4), BENCH_PG_SCALE_SECONDS (BENCH_SECONDS), BENCH_PG_SCALE_EVENTS (300),
//      BENCH_PG_SCALE_ROUNDS (3), BENCH_PG_SCALE_DETAIL=1 (diagnosis: what each scaling run's round trips carried, on
//      stderr); BENCH_TRACE=1 (phase times on stderr); BENCH_PG_STATEMENTS=1 (diagnosis: load
//      pg_stat_statements and print the statements per request and per event of the last PostgreSQL round of part 1,
//      and what its sessions waited on, sampled from pg_stat_activity; slows PostgreSQL a little);
//      BENCH_DAEMON_EXEC_ARGV (node flags of the daemon processes, e.g. "--cpu-prof --cpu-prof-dir=/tmp/p"); BENCH_PG_TCP=1 (daemons
//      and the CLI without a proxy connect over TCP loopback instead of the Unix socket).
//      Run time here: 4 to 5 minutes (221-293 s in six runs on the shared machine; compare 90-125 s, failover ~14 s,
//      control ~30 s, ops 15-20 s, scale 75-100 s).
import { execFileSync, fork } from 'node:child_process';
import { mkdirSync, readFileSync, readdirSync } from 'node:fs';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import autocannon from 'autocannon';
import pg from 'pg';
import { TX_OF } from './lib/latency-proxy.mjs';
import { LEASE_MS, pgUnavailable, startPostgres } from './lib/postgres.mjs';
import { busyPct, cpuMark } from './lib/cpu.mjs'; // busy: iowait counted idle
import { report, result } from './lib/report.mjs';
import { BIN, ISSUER, NODE, cpuSeconds, fmt, median, prepare } from './lib/setup.mjs';

const ROUNDS = Number(process.env.BENCH_ROUNDS ?? 5); // headroom and vouchers: short rounds, many (neighbours come and go)
const SECONDS = Number(process.env.BENCH_SECONDS ?? 2);
const TCP = process.env.BENCH_PG_TCP === '1'; // daemons without a proxy over TCP loopback, not the Unix socket
const DELIVERY_ROUNDS = Number(process.env.BENCH_DELIVERY_ROUNDS ?? 3);
const N = Number(process.env.BENCH_N ?? 4000);
const BATCH = 100;
const HEADROOM_CONNECTIONS = Number(process.env.BENCH_HEADROOM_CONNECTIONS ?? 32);
const VOUCHER_CONNECTIONS = Number(process.env.BENCH_VOUCHER_CONNECTIONS ?? 64);
const STATEMENTS = process.env.BENCH_PG_STATEMENTS === '1';
const DAEMON_ARGV = (process.env.BENCH_DAEMON_EXEC_ARGV ?? '').split(' ').filter(Boolean); // node flags of the daemons (e.g. --cpu-prof), split on spaces
const ALL_PARTS = ['compare', 'failover', 'control', 'ops', 'scale'];
const PARTS = (process.env.BENCH_PG_PARTS ?? ALL_PARTS.join(',')).split(',').map((x) => x.trim()).filter(Boolean);
const CONTROL_ROUNDS = Number(process.env.BENCH_PG_CONTROL_ROUNDS ?? 3);
const CONTROL_SECONDS = Number(process.env.BENCH_PG_CONTROL_SECONDS ?? SECONDS);
const CONTROL_CLIENTS = [1, 8];
const OPS = Number(process.env.BENCH_PG_OPS ?? 50); // sequential operations of each kind counted by the proxy
const OPS_BURST = Number(process.env.BENCH_PG_OPS_BURST ?? 1000); // events of the delivery burst counted
const OPS_TARGET = 2; // round trips per accepted voucher, stream open, delivery result
const OPS_DETAIL = Number(process.env.BENCH_PG_OPS_DETAIL ?? 0.05); // list what round trips carried, from this many per operation
const OPS_LATENCY = Number(process.env.BENCH_PG_OPS_LATENCY ?? 20); // control facts' events timed to the receiver
const IDLE_MS = 3000; // the background's measuring window
/** Sent on a request at most once a second, whatever the load: the keyring's check of the trusted keys' generation. */
const PERIODIC = /^SELECT value FROM meta WHERE key = 'keys_generation'$/;
const TRAIL_MS = 100; // after a window's last operation: what it set off (the worker woken by an event) ends
const RTT_MS = Number(process.env.BENCH_PG_RTT_MS ?? 10);
const SCALE_CLIENTS = Number(process.env.BENCH_PG_SCALE_CLIENTS ?? 1);
/** Deliveries in flight per daemon in the scaling part (the worker's concurrency): its closed-loop clients. */
const SCALE_IN_FLIGHT = Number(process.env.BENCH_PG_SCALE_IN_FLIGHT ?? 4);
const SCALE_SECONDS = Number(process.env.BENCH_PG_SCALE_SECONDS ?? SECONDS);
const SCALE_EVENTS = Number(process.env.BENCH_PG_SCALE_EVENTS ?? 300);
const SCALE_ROUNDS = Number(process.env.BENCH_PG_SCALE_ROUNDS ?? 3);
const SCALE_DETAIL = process.env.BENCH_PG_SCALE_DETAIL === '1';
const SCALE_TARGET_2 = 1.8;
const SCALE_TARGET_4 = 3;
const CPU_TARGET = 70;
const CLK_TCK = 100; // /proc's clock ticks per second (USER_HZ: 100 on Linux)
const RATIO_TARGET = 0.5;
const GAP_TARGET_S = LEASE_MS / 1000 + 1;
const LIB = fileURLToPath(new URL('./lib/postgres.mjs', import.meta.url));
const RECEIVER = fileURLToPath(new URL('./lib/delivery-receiver.mjs', import.meta.url));
const PROXY = fileURLToPath(new URL('./lib/latency-proxy.mjs', import.meta.url));

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
let proxies; // the latency proxies' process (started by the first part that needs one)
let lastOneDaemonRate; // part 1's deliveries/s of one PostgreSQL daemon: sizes part 2's burst
/** The wait samplers running (cleanup stops them before it closes their client). */
const samplers = new Set();

/** A forked helper with request/response over IPC (as bench/delivery). */
async function spawnChild(file, args, extraEnv = {}) {
  const execArgv = file === LIB && DAEMON_ARGV.length ? { execArgv: [...process.execArgv, ...DAEMON_ARGV] } : {};
  const child = fork(file, args, { env: { ...env, NODE_SVC_LOG_LEVEL: 'warn', ...extraEnv }, stdio: ['ignore', 'inherit', 'inherit', 'ipc'], ...execArgv });
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
  for (const w of [...samplers]) await w.stop().catch(() => undefined);
  await db?.end().catch(() => undefined);
  await su?.end().catch(() => undefined);
  await server?.stop().catch((e) => console.error(`bench/postgres: stopping PostgreSQL: ${e.message}`));
  await p?.cleanup().catch(() => undefined);
  trace('cleaned up');
}
for (const sig of ['SIGINT', 'SIGTERM']) process.once(sig, () => { cleanup().finally(() => process.exit(130)); });

async function main() {
  const why = pgUnavailable();
  if (why) throw new Error(`no PostgreSQL server can be started here: ${why}`);
  const started = performance.now();
  for (const part of PARTS) if (!ALL_PARTS.includes(part)) throw new Error(`BENCH_PG_PARTS: unknown part "${part}" (known: ${ALL_PARTS.join(', ')})`);

  // ---- the stores: SQLite in a data dir (prepare: node, token, issuer key), PostgreSQL with the same CLI ----
  p = prepare('postgres');
  server = await startPostgres({ statements: STATEMENTS });
  // Over TCP (127.0.0.1): what the proxies of parts 4 and 5 forward to. Daemons and the CLI without a proxy reach the
  // database through its Unix socket, as software on the database's own machine does (psql's default; TCP loopback
  // costs each round trip the kernel's TCP path both ways); BENCH_PG_TCP=1: over TCP loopback instead.
  const pgUrl = await server.createDatabase('nsvc_bench');
  const localUrl = TCP ? pgUrl : server.socketUrl('nsvc_bench');
  su = STATEMENTS ? await server.superuser('nsvc_bench') : undefined;
  if (su) await su.query('CREATE EXTENSION pg_stat_statements');
  const pgDirs = Array.from({ length: 9 }, (_, i) => join(p.root, `pg-${i + 1}`));
  for (const d of pgDirs) mkdirSync(d);
  // The URL (a secret) goes by environment, never on a command line.
  const pgCli = (...args) => execFileSync(process.execPath, [BIN, ...args, '--data-dir', pgDirs[0]], { env: { ...env, NODE_SVC_STORE: localUrl }, encoding: 'utf8' });
  pgCli('nodes', 'add', NODE);
  const pgToken = JSON.parse(pgCli('tokens', 'issue', NODE)).token;
  pgCli('keys', 'add', '--issuer', ISSUER, join(p.root, 'jwks.json'));
  db = new pg.Client({ connectionString: localUrl });
  await db.connect();
  const sqlValue = async (sql, params) => Object.values((await db.query(sql, params)).rows[0])[0];
  const pgAuth = { authorization: `Bearer ${pgToken}` };
  const pgPending = async () => Number(await sqlValue("SELECT count(*)::text FROM deliveries WHERE status = 'pending'"));

  // ---- receiver and daemons, each its own process ----
  const receiver = await spawnChild(RECEIVER, []);
  const hookUrl = `http://127.0.0.1:${receiver.info.port}/hook`;
  /** A PostgreSQL daemon on data dir `i`: on the database itself, or through a proxy's port (bursts then past it). */
  const startPg = (i, port, extra = {}) => spawnChild(LIB, ['daemon', pgDirs[i]], { ...(port ? { BENCH_STORE_URL: viaPort(pgUrl, port), BENCH_DIRECT_URL: pgUrl } : { BENCH_STORE_URL: localUrl }), ...extra });
  const sqlite = { name: 'SQLite', d: await spawnChild(LIB, ['daemon', p.dataDir]), auth: p.auth };
  const pgOne = { name: 'PostgreSQL', d: await startPg(0), auth: pgAuth };
  const both = [sqlite, pgOne];
  for (const t of both) await post(t, '/v1/webhooks', { url: hookUrl, events: ['budget.halted'], description: 'bench/postgres' }, 201);

  /** Until the receiver has `unique` events and `pending()` (the store's deliveries not yet delivered) is 0 (bounded). */
  async function drained(pending, unique, limitMs = 60_000) {
    const until = now() + limitMs;
    while (now() < until && (await receiver.call('count')).unique < unique) await sleep(5);
    while (now() < until) {
      if ((await pending()) === 0) return now();
      await sleep(5);
    }
    throw new Error(`not all ${unique} deliveries done within ${limitMs} ms`);
  }
  const ctx = { pgUrl, pgAuth, pgPending, sqlValue, receiver, hookUrl, startPg, sqlite, pgOne, both, drained };
  const lines = [];
  const results = [];
  if (PARTS.includes('compare')) await partCompare(ctx, lines, results);
  if (PARTS.includes('failover')) await partFailover(ctx, lines, results);
  if (PARTS.includes('control')) await partControl(ctx, lines, results);
  // From here on only daemons started by the part run: a daemon left running would claim deliveries too.
  await stopChild(pgOne.d);
  await stopChild(sqlite.d);
  trace('first daemons stopped');
  if (PARTS.includes('ops')) await partOps(ctx, lines, results);
  if (PARTS.includes('scale')) await partScale(ctx, lines, results);

  const seconds = (performance.now() - started) / 1000;
  console.log(`bench/postgres  PostgreSQL 15 (fsync on) and SQLite on this machine (${PARTS.join(', ')}), ${seconds.toFixed(0)} s; daemons reach PostgreSQL ${TCP ? 'over TCP loopback' : 'through its Unix socket'} (parts 4 and 5: over TCP, through the proxy)`);
  for (const l of lines) console.log(l);
  report('postgres', results);
  trace('stopping');
  await proxies?.call('stop', {}, 5000).catch(() => undefined);
  await receiver.call('stop', {}, 5000).catch(() => undefined);
}

const post = async (t, path, body, want = 200) => {
  const r = await fetch(`${t.d.info.url}${path}`, { method: 'POST', headers: { ...t.auth, 'content-type': 'application/json' }, body: JSON.stringify(body) });
  if (r.status !== want) throw new Error(`${t.name}: POST ${path} → ${r.status} ${await r.text()}`);
  return r.json();
};
/** The same URL on another port (a proxy's). */
const viaPort = (url, port) => { const u = new URL(url); u.port = String(port); return u.toString(); };
const ok = (pass) => (pass ? 'PASS' : 'MISS');
const f2 = (x) => (Number.isFinite(x) ? x.toFixed(2) : '-');

/**
 * CPU time (clock ticks, as /proc/stat) of this run's own processes: this one and its descendants (daemons, proxy,
 * receiver) and our PostgreSQL server (its postmaster and backends): the machine is shared, and a neighbour's load
 * shows in cpuMark() but not here. Per process id, so one that ends (a backend, a daemon) takes nothing away.
 */
function ownCpu(postmaster) {
  const procs = [];
  for (const d of readdirSync('/proc')) {
    if (!/^\d+$/.test(d)) continue;
    try {
      const st = readFileSync(`/proc/${d}/stat`, 'utf8');
      const f = st.slice(st.lastIndexOf(')') + 2).split(' '); // fields from the 3rd (state) on
      procs.push({ pid: Number(d), ppid: Number(f[1]), ticks: Number(f[11]) + Number(f[12]) });
    } catch { /* gone meanwhile */ }
  }
  const mine = new Set([process.pid, postmaster]);
  for (let grown = true; grown;) {
    grown = false;
    for (const x of procs) if (!mine.has(x.pid) && mine.has(x.ppid)) { mine.add(x.pid); grown = true; }
  }
  return new Map(procs.filter((x) => mine.has(x.pid)).map((x) => [x.pid, x.ticks]));
}
/** Our PostgreSQL server's postmaster: the parent of the backend serving `sqlValue`'s connection. */
async function postmasterPid(sqlValue) {
  return ppidOf(Number(await sqlValue('SELECT pg_backend_pid()::text')));
}
/** A process's parent (0 when it is gone). */
function ppidOf(pid) {
  try { const st = readFileSync(`/proc/${pid}/stat`, 'utf8'); return Number(st.slice(st.lastIndexOf(')') + 2).split(' ')[1]); } catch { return 0; }
}
/** Ticks used between two ownCpu() marks by the processes alive at the second (one that ended is missed, not negative). */
const ticksBetween = (a, b) => { let t = 0; for (const [pid, n] of b) t += n - (a.get(pid) ?? 0); return t; };

/** The latency proxies: one process (its event loop is not the load generators'), any number of proxies in it. */
async function startProxy(port, rttMs) {
  proxies ??= await spawnChild(PROXY, ['serve']);
  const r = await proxies.call('start', { port, rttMs });
  return {
    port: r.port,
    rttMs: r.rttMs,
    stats: async () => (await proxies.call('stats', { id: r.id })).stats,
    reset: () => proxies.call('reset', { id: r.id }),
    close: () => proxies.call('close', { id: r.id }),
  };
}

/**
 * Vouchers for autocannon: each connection bills its own stream upward, from vouchers signed ahead (outside the timed
 * runs: this process shares the cores with the daemons and the database). `check(url, auth)` then asks the daemon each
 * stream's billed truth: it must lie between the last amount answered 200 (a 2xx means on disk) and the last sent (a
 * request cut off when autocannon stopped may or may not have been billed).
 */
function voucherLoad(name, streams) {
  const L = {
    name, streams,
    amounts: new Map(streams.map((s) => [s, 0])), // the last amount sent (or set up to be sent) per stream
    acked: new Map(streams.map((s) => [s, 0])), // the last amount answered 200
    pool: new Map(streams.map((s) => [s, []])), // vouchers signed ahead, per stream, amounts consecutive
    live: 0, // vouchers the load generator had to sign during a run (its pool ran out)
    rate: 0, // the highest vouchers/s of a run so far (sizes what is signed ahead)
    stale: 0, // answered 200 but not accepted (a lower voucher after a higher one: none expected, one client per stream)
    /** Sign ahead what the next run will likely send: 1.5 x the highest rate so far (at least `floor` in all). */
    topUp(seconds, floor = 8000) {
      const per = Math.ceil(Math.max(floor, L.rate * seconds * 1.5) / streams.length);
      for (const s of streams) {
        const pool = L.pool.get(s);
        while (pool.length && pool[0][0] <= L.amounts.get(s)) pool.shift();
        let a = pool.length ? pool[pool.length - 1][0] : L.amounts.get(s);
        while (pool.length < per) { a += 1000; pool.push([a, p.voucher(s, a)]); }
      }
    },
    /**
     * autocannon options: each connection gets its own stream in setupClient (its own request list). The context of
     * setupRequest cannot say: autocannon resets it after every request when the list has one entry, so streams
     * assigned there went round-robin over the connections and two could bill one stream at once.
     */
    opts(auth) {
      let next = 0;
      const headers = { ...auth, 'content-type': 'application/json' };
      return {
        requests: [{ method: 'GET', path: '/healthz' }], // replaced for every connection before it sends anything
        setupClient: (client) => {
          const stream = streams[next++ % streams.length];
          client.setRequests([{
            method: 'POST', path: `/v1/streams/${stream}/vouchers`, headers,
            setupRequest: (req, c) => {
              const amount = L.amounts.get(stream) + 1000;
              L.amounts.set(stream, amount);
              c.amount = amount;
              const pool = L.pool.get(stream);
              while (pool.length && pool[0][0] < amount) pool.shift();
              const v = pool.length && pool[0][0] === amount ? pool.shift()[1] : (L.live++, p.voucher(stream, amount));
              return { ...req, body: JSON.stringify({ voucher: v }) };
            },
            // One request at a time per connection: the answer is to the request set up last on it.
            onResponse: (status, body, c) => {
              if (status !== 200) return;
              if (String(body).includes('"accepted":false')) L.stale++;
              else if (c.amount > L.acked.get(stream)) L.acked.set(stream, c.amount);
            },
          }]);
        },
      };
    },
    async check(url, auth) {
      for (const s of streams) {
        const f = await (await fetch(`${url}/v1/streams/${s}/finality`, { headers: auth })).json();
        const billed = Number(f.billedTruth.amountMicro);
        if (!(billed >= L.acked.get(s) && billed <= L.amounts.get(s))) throw new Error(`${name} ${s}: billed ${billed}, last answered 200 ${L.acked.get(s)}, last sent ${L.amounts.get(s)}`);
      }
    },
  };
  return L;
}

/**
 * autocannon, closed loop: `connections` clients one request at a time each; any non-2xx, error or timeout throws.
 * `request`: one request, or autocannon options with `requests` (and `setupClient`).
 */
async function cannon(label, url, connections, request, seconds) {
  const r = await autocannon({ url, pipelining: 1, duration: seconds, connections, ...(request.requests ? request : { requests: [request] }) });
  const bad = r.non2xx + r.errors + r.timeouts;
  if (bad) throw new Error(`${label}: ${r.non2xx} non-2xx, ${r.errors} errors, ${r.timeouts} timeouts of ${r.requests.total}`);
  return { n: r.requests.total, rps: r.requests.total / seconds, p50: r.latency.p50, p99: r.latency.p99 };
}

/** BENCH_PG_STATEMENTS=1: the statements run since the last reset, per unit of work, most frequent first. */
async function statements(label, n, unit) {
  if (!su) return;
  const st = (await su.query(`SELECT calls, total_exec_time, query FROM pg_stat_statements
    WHERE userid = (SELECT oid FROM pg_roles WHERE rolname = 'node_svc') AND dbid = (SELECT oid FROM pg_database WHERE datname = 'nsvc_bench') ORDER BY total_exec_time DESC`)).rows;
  const calls = st.reduce((x, r) => x + Number(r.calls), 0);
  const ms = st.reduce((x, r) => x + Number(r.total_exec_time), 0);
  console.error(`  [statements] ${label}: ${(calls / n).toFixed(2)} statements per ${unit}, ${((ms / n) * 1000).toFixed(0)} µs executing in the server per ${unit} (a statement a trigger runs counts in its own line and in its caller's); the costliest:`);
  for (const r of st.slice(0, 16)) console.error(`    ${(Number(r.calls) / n).toFixed(3).padStart(8)}/${unit}  ${((Number(r.total_exec_time) / n) * 1000).toFixed(1).padStart(6)} µs  ${r.query.replace(/\s+/g, ' ').slice(0, 140)}`);
}

/**
 * BENCH_PG_STATEMENTS=1: what the bench database's sessions are doing, sampled every 20 ms until stop() (the issue's
 * "lock waits in pg_stat_activity"): per sample, each session active in a statement counts under its wait event
 * (none: on the CPU or runnable), idle in a transaction under that. Printed as the share of active session-samples.
 */
function waitSampler(label) {
  if (!su) return undefined;
  const counts = new Map();
  let samples = 0;
  let going = true;
  let failed;
  const loop = (async () => {
    while (going) {
      try {
        const rows = (await su.query(`SELECT state, wait_event_type, wait_event FROM pg_stat_activity
          WHERE datname = 'nsvc_bench' AND pid <> pg_backend_pid() AND state IN ('active', 'idle in transaction')`)).rows;
        samples++;
        for (const r of rows) {
          const k = r.state === 'active' ? (r.wait_event_type ? `${r.wait_event_type}:${r.wait_event}` : 'on CPU') : 'idle in transaction';
          counts.set(k, (counts.get(k) ?? 0) + 1);
        }
      } catch (err) {
        failed = err; // (the client closed by cleanup, a query refused): the sampling ends, the bench goes on
        return;
      }
      await sleep(20);
    }
  })();
  const sampler = {
    async stop() {
      going = false;
      await loop;
      samplers.delete(sampler);
      const all = [...counts.values()].reduce((a, b) => a + b, 0);
      console.error(`  [waits] ${label}: ${samples} samples, ${(all / Math.max(1, samples)).toFixed(1)} sessions busy per sample${failed ? ` (sampling stopped: ${failed.message})` : ''}:`);
      for (const [k, n] of [...counts].sort((a, b) => b[1] - a[1]).slice(0, 12)) console.error(`    ${((100 * n) / all).toFixed(1).padStart(5)} %  ${k}`);
    },
  };
  samplers.add(sampler);
  return sampler;
}
// ---------------------------------------------------------------------------------------------------------------
// Part 1 (and two daemons / one, write cost): PostgreSQL against SQLite, one daemon each, no proxy.

async function partCompare({ sqlite, pgOne, both, startPg, sqlValue, receiver, drained }, lines, results) {
  const streams = Array.from({ length: VOUCHER_CONNECTIONS }, (_, i) => `v-${i}`);
  for (const t of both) {
    for (const s of ['h', ...streams]) await post(t, '/v1/allowances/verify', { credential: p.credential(s) });
    await post(t, '/v1/streams/h/vouchers', { voucher: p.voucher('h', 5000) }); // a rate inside the window
    t.load = voucherLoad(t.name, streams);
  }
  trace('prepared');
  // ---- headroom and vouchers, autocannon at saturation ----
  const run = async (t, kind, seconds = SECONDS) => {
    if (kind === 'headroom') return cannon(`${t.name} headroom`, t.d.info.url, HEADROOM_CONNECTIONS, { method: 'GET', path: '/v1/streams/h/headroom', headers: t.auth }, seconds);
    t.load.topUp(seconds);
    const r = await cannon(`${t.name} vouchers`, t.d.info.url, VOUCHER_CONNECTIONS, t.load.opts(t.auth), seconds);
    t.load.rate = Math.max(t.load.rate, r.rps);
    return r;
  };
  const res = { headroom: { SQLite: [], PostgreSQL: [], ratio: [] }, vouchers: { SQLite: [], PostgreSQL: [], ratio: [] } };
  for (const kind of ['headroom', 'vouchers']) {
    for (const t of both) await run(t, kind, 1); // warm-up: JIT, pools, caches
    for (let k = 0; k < ROUNDS; k++) {
      const a = await run(sqlite, kind);
      if (k === ROUNDS - 1) await su?.query('SELECT pg_stat_statements_reset()');
      const waits = k === ROUNDS - 1 ? waitSampler(kind === 'headroom' ? 'GET headroom' : 'POST vouchers') : undefined;
      const b = await run(pgOne, kind).finally(() => waits?.stop());
      if (k === ROUNDS - 1) await statements(kind === 'headroom' ? 'GET headroom' : 'POST vouchers', b.rps * SECONDS, 'request');
      res[kind].SQLite.push(a);
      res[kind].PostgreSQL.push(b);
      res[kind].ratio.push(b.rps / a.rps);
    }
  }
  for (const t of both) await t.load.check(t.d.info.url, t.auth);

  trace('headroom and vouchers done');
  // ---- deliveries, and two daemons vs one; rounds: SQLite, PostgreSQL alone, PostgreSQL x 2 ----
  async function deliveries(d, n) {
    await receiver.call('reset');
    const r = await d.call('burst', { node: NODE, n, batch: BATCH });
    const at = await drained(async () => (await d.call('pending')).n, n);
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
    const waits = before ? waitSampler('deliveries, one daemon') : undefined;
    const b = await deliveries(pgOne.d, N).finally(() => waits?.stop());
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
  lastOneDaemonRate = median(del.one);
  trace('deliveries done');

  const row = (label, runs, ratio) => `  ${label.padEnd(44)}${fmt(median(runs.SQLite.map((x) => x.rps))).padStart(8)}/s${fmt(median(runs.PostgreSQL.map((x) => x.rps))).padStart(10)}/s   ${ratio.toFixed(2).padStart(5)}  (target >= ${RATIO_TARGET}) ${ok(ratio >= RATIO_TARGET)}`;
  const hr = median(res.headroom.ratio);
  const vr = median(res.vouchers.ratio);
  const dr = median(del.ratio);
  const tr = median(del.twoRatio);
  const q = (runs, k) => median(runs.map((x) => x[k]));
  lines.push(`1. PostgreSQL / SQLite, one daemon each, no proxy: medians of ${ROUNDS} rounds (HTTP) and ${DELIVERY_ROUNDS} (deliveries)`);
  lines.push(`  ${''.padEnd(44)}${'SQLite'.padStart(10)}${'PostgreSQL'.padStart(12)}   ratio`);
  // BENCH_ROUNDS=0: deliveries only (a diagnosis run)
  if (ROUNDS) lines.push(row(`GET headroom, ${HEADROOM_CONNECTIONS} keep-alive clients, ${SECONDS} s`, res.headroom, hr));
  if (ROUNDS) lines.push(row(`POST vouchers, ${VOUCHER_CONNECTIONS} clients (own stream each)`, res.vouchers, vr));
  lines.push(row(`deliveries, ${fmt(N)} events, ${BATCH} writes at a time`, { SQLite: del.SQLite.map((rps) => ({ rps })), PostgreSQL: del.one.map((rps) => ({ rps })) }, dr));
  if (ROUNDS) lines.push(`    p50/p99 ms: headroom SQLite ${q(res.headroom.SQLite, 'p50')}/${q(res.headroom.SQLite, 'p99')}, PostgreSQL ${q(res.headroom.PostgreSQL, 'p50')}/${q(res.headroom.PostgreSQL, 'p99')}; vouchers SQLite ${q(res.vouchers.SQLite, 'p50')}/${q(res.vouchers.SQLite, 'p99')}, PostgreSQL ${q(res.vouchers.PostgreSQL, 'p50')}/${q(res.vouchers.PostgreSQL, 'p99')}`);
  lines.push(`    recording the events (while the worker delivers): SQLite ${fmt(median(del.recS))} events/s, PostgreSQL ${fmt(median(del.recP))} events/s`);
  if (sqlite.load.stale + pgOne.load.stale) lines.push(`    (vouchers answered 200 but not accepted: SQLite ${sqlite.load.stale}, PostgreSQL ${pgOne.load.stale}; none expected with one client per stream)`);
  if (sqlite.load.live + pgOne.load.live) lines.push(`    (the load generator signed ${sqlite.load.live} SQLite and ${pgOne.load.live} PostgreSQL vouchers during runs: its pool ran short)`);
  lines.push(`    per round: headroom ${res.headroom.ratio.map(f2).join(', ')}; vouchers ${res.vouchers.ratio.map(f2).join(', ')}; deliveries ${del.ratio.map(f2).join(', ')}`);
  lines.push(`  two daemons / one on one database: deliveries ${fmt(median(del.two))}/s vs ${fmt(median(del.one))}/s   ratio ${tr.toFixed(2)} (informational: 2 cores shared with the database; per round ${del.twoRatio.map(f2).join(', ')})`);
  lines.push(`  write cost per event on PostgreSQL (record + claim + send + attempt, 1 subscription, one daemon, ${fmt(N)} events):`);
  lines.push(`    WAL ${fmt(cost.wal)} B; write transactions ${cost.xacts.toFixed(3)} (durable group commits ${cost.commits.toFixed(3)}, the rest claims committed without waiting for the flush); rows inserted ${cost.rows.toFixed(2)}`);
  if (ROUNDS) results.push(
    result('GET headroom PostgreSQL / SQLite', hr, 'ratio', ['>=', RATIO_TARGET]),
    result('POST vouchers PostgreSQL / SQLite', vr, 'ratio', ['>=', RATIO_TARGET]),
  );
  results.push(
    result('deliveries/s PostgreSQL / SQLite', dr, 'ratio', ['>=', RATIO_TARGET]),
    result('deliveries/s two daemons / one (informational)', tr, 'ratio'),
    result('PostgreSQL WAL per event', cost.wal, 'B'),
    result('PostgreSQL write transactions per event', cost.xacts, 'xact'),
    result('PostgreSQL durable commits per event', cost.commits, 'commit'),
  );
}

// ---------------------------------------------------------------------------------------------------------------
// Part 2: failover, kill -9 one of two daemons while deliveries flow.

async function partFailover({ pgOne, startPg, sqlValue, receiver }, lines, results) {
  const nf = Math.max(2000, Math.min(20_000, Math.round((lastOneDaemonRate ?? 1000) * 4)));
  const victim = await startPg(1);
  // Kill once the victim has delivered some and has some in flight (it joins by its 1 s poll). When the first daemon
  // delivered the whole burst before the victim's poll found any of it (seen once in a full run: 6 delivered by the
  // victim, none in flight, the burst all at the receiver), the burst is recorded again, three times at most.
  let seq0;
  let burst;
  let vs;
  let bursts = 0;
  for (let joined = false; !joined;) {
    bursts++;
    await receiver.call('reset');
    seq0 = Number(await sqlValue('SELECT COALESCE(MAX(seq), 0)::text FROM events'));
    burst = pgOne.d.call('burst', { node: NODE, n: nf, batch: BATCH });
    let recorded = false;
    burst.then(() => { recorded = true; }, () => { recorded = true; });
    const until = now() + 30_000;
    for (;;) {
      vs = await victim.call('stats');
      const c = await receiver.call('count');
      if (vs.stats.delivered > 0 && vs.inFlight > 0 && c.unique >= nf * 0.2) { joined = true; break; }
      const missed = recorded && c.unique >= nf;
      if (missed && bursts < 3) break;
      if (missed || now() > until) throw new Error(`the second daemon took no part in the burst (${bursts} burst(s); ${JSON.stringify(vs)}, receiver ${JSON.stringify(c)})`);
      await sleep(2);
    }
    if (!joined) await burst;
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
  trace('failover done');
  lines.push(`2. failover: ${fmt(nf)} events, kill -9 of the second daemon (${vs.inFlight} in flight, ${fmt(vs.stats.delivered)} delivered by it; ${fmt(beforeKill.unique)} at the receiver), lease ${LEASE_MS / 1000} s${bursts > 1 ? ` (burst ${bursts} of 3: the first daemon delivered ${bursts > 2 ? 'the two before it' : 'the one before it'} alone)` : ''}`);
  lines.push(`    orphaned claims ${orphans}; the first taken over and delivered by the survivor ${Number.isFinite(gap) ? gap.toFixed(2) : '-'} s after the kill (target < ${GAP_TARGET_S} s) ${ok(gap < GAP_TARGET_S)}; the last ${Number.isFinite(lastGap) ? lastGap.toFixed(2) : '-'} s`);
  lines.push(`    every delivery delivered, with its attempt recorded: ${allDelivered ? 'yes' : `NO (${nf - left} of ${nf} delivered, ${withAttempt} with an attempt, ${total} deliveries, unsigned ${beforeKill.unsigned + afterKill.unsigned})`}; duplicates at the receiver ${duplicates} (orphans ${orphans})`);
  results.push(
    result(`failover gap, kill -9 to first orphan delivered by the survivor (lease ${LEASE_MS / 1000} s)`, gap, 's', ['<', GAP_TARGET_S]),
    result('failover: every delivery delivered (1 = yes)', allDelivered ? 1 : 0, 'bool', ['>=', 1]),
    result('failover: duplicates at the receiver', duplicates, 'count'),
  );
}

// ---------------------------------------------------------------------------------------------------------------
// Part 3: control facts on PostgreSQL against SQLite, 1 and 8 concurrent clients, no proxy.

async function partControl({ sqlite, pgOne, both, sqlValue, startPg }, lines, results) {
  let k = 0;
  // A revocation of a stream never seen: a jti claimed, a revocation row, an event (no subscription takes it).
  const make = () => { const id = `cf-${++k}`; return p.control({ jti: `j-${id}`, kind: 'stream.revoked', stream: id }); };
  const last = new Map(); // "store/clients" -> the highest rate of a run so far
  let live = 0;
  const run = async (t, clients, seconds) => {
    const key = `${t.name}/${clients}`;
    const pool = Array.from({ length: Math.max(2000, Math.ceil((last.get(key) ?? 0) * seconds * 2)) }, make); // signed ahead
    const request = {
      method: 'POST', path: '/v1/control', headers: { ...t.auth, 'content-type': 'application/json' },
      setupRequest: (req) => ({ ...req, body: JSON.stringify({ message: pool.pop() ?? (live++, make()) }) }),
    };
    const c0 = cpuOfRun(t);
    const r = await cannon(`${t.name} control facts`, t.d.info.url, clients, request, seconds);
    const c1 = cpuOfRun(t);
    // CPU µs per fact: the daemon, the store (PostgreSQL's server processes; SQLite runs in the daemon) and the load generator (this process).
    const ticks = { daemon: c1.daemon - c0.daemon, postgres: ticksBetween(c0.postgres, c1.postgres), load: c1.load - c0.load };
    r.cpu = Object.fromEntries(Object.entries(ticks).map(([k, n]) => [k, (n * (1e6 / CLK_TCK)) / Math.max(1, r.n)]));
    last.set(key, Math.max(last.get(key) ?? 0, r.rps));
    return r;
  };
  const postmaster = await postmasterPid(sqlValue);
  // PostgreSQL's processes (the postmaster and its children) by pid: one that ends between two marks is missed, never
  // counted negative (ticksBetween).
  const pgTicks = () => new Map([...ownCpu(postmaster)].filter(([pid]) => pid === postmaster || ppidOf(pid) === postmaster));
  const cpuOfRun = (t) => ({ daemon: cpuSeconds(t.d.child.pid) * CLK_TCK, postgres: pgTicks(), load: cpuSeconds(process.pid) * CLK_TCK });
  const res = Object.fromEntries(CONTROL_CLIENTS.map((c) => [c, { SQLite: [], PostgreSQL: [], ratio: [], pool2: [], ratio2: [] }]));
  for (const t of both) for (const c of CONTROL_CLIENTS) await run(t, c, 1); // warm-up (its pools sized blind)
  live = 0;
  for (let r = 0; r < CONTROL_ROUNDS; r++) {
    for (const c of CONTROL_CLIENTS) {
      const a = await run(sqlite, c, CONTROL_SECONDS);
      const b = await run(pgOne, c, CONTROL_SECONDS);
      res[c].SQLite.push(a); res[c].PostgreSQL.push(b); res[c].ratio.push(b.rps / a.rps);
    }
    // For the record (no target: the default is what is judged): the same on a daemon run with --store-pool 2, what the
    // README suggests for a database sharing the daemon's cores, as here; against this round's SQLite figures. It runs
    // only for its own measurement (started each round, warmed up, stopped), so it does no work during the others'.
    const pool2 = { name: 'PostgreSQL --store-pool 2', d: await startPg(8, undefined, { BENCH_STORE_POOL: '2' }), auth: pgOne.auth };
    for (const c of CONTROL_CLIENTS) await run(pool2, c, 1);
    for (const c of CONTROL_CLIENTS) {
      const b2 = await run(pool2, c, CONTROL_SECONDS);
      res[c].pool2.push(b2); res[c].ratio2.push(b2.rps / res[c].SQLite[r].rps);
    }
    await stopChild(pool2.d);
  }
  trace('control facts done');
  const [lo, hi] = [CONTROL_CLIENTS[0], CONTROL_CLIENTS[CONTROL_CLIENTS.length - 1]];
  const pgRate = (c) => median(res[c].PostgreSQL.map((x) => x.rps));
  const perRound = res[hi].PostgreSQL.map((x, i) => x.rps / res[lo].PostgreSQL[i].rps);
  const scaling = median(perRound);
  const ratioHi = median(res[hi].ratio);
  lines.push(`3. control facts (stream.revoked of a new stream each, signed ahead), no proxy: medians of ${CONTROL_ROUNDS} rounds of ${CONTROL_SECONDS} s`);
  lines.push(`  ${'clients'.padEnd(10)}${'SQLite'.padStart(10)}${'PostgreSQL'.padStart(12)}   ratio     p50 ms SQLite/PostgreSQL`);
  for (const c of CONTROL_CLIENTS) {
    const ratio = median(res[c].ratio);
    lines.push(`  ${String(c).padEnd(10)}${fmt(median(res[c].SQLite.map((x) => x.rps))).padStart(8)}/s${fmt(pgRate(c)).padStart(10)}/s   ${ratio.toFixed(2).padStart(5)}${c === hi ? `  (target >= ${RATIO_TARGET}) ${ok(ratioHi >= RATIO_TARGET)}` : '          '}  ${median(res[c].SQLite.map((x) => x.p50))}/${median(res[c].PostgreSQL.map((x) => x.p50))}`);
  }
  const cpuLine = (t, c, label = t) => { const xs = res[c][t]; const m = (k) => fmt(median(xs.map((x) => x.cpu[k]))); return `${label} daemon ${m('daemon')}${t !== 'SQLite' ? `, server ${m('postgres')}` : ''}, load generator ${m('load')}`; };
  lines.push(`    CPU µs per fact at ${hi} clients (medians; /proc of each process): ${cpuLine('SQLite', hi)}; ${cpuLine('PostgreSQL', hi)}; ${cpuLine('pool2', hi, '--store-pool 2')}`);
  lines.push(`    for the record, a daemon with --store-pool 2 (README: a database sharing the daemon's cores): ${CONTROL_CLIENTS.map((c) => `${c} clients ${fmt(median(res[c].pool2.map((x) => x.rps)))}/s, ${median(res[c].ratio2).toFixed(2)} of SQLite`).join('; ')}; per round at ${hi} ${res[hi].ratio2.map(f2).join(', ')}`);
  lines.push(`    PostgreSQL ${hi} clients / ${lo}: ${scaling.toFixed(2)} (target >= 1: more clients must not lower the rate) ${ok(scaling >= 1)}; per round ${perRound.map(f2).join(', ')}; ratios at ${hi} per round ${res[hi].ratio.map(f2).join(', ')}${live ? `; ${live} signed during runs (pool short)` : ''}`);
  results.push(
    result(`control facts/s PostgreSQL / SQLite, ${hi} clients`, ratioHi, 'ratio', ['>=', RATIO_TARGET]),
    result(`control facts/s PostgreSQL, ${hi} clients / ${lo}`, scaling, 'ratio', ['>=', 1]),
    result(`control facts/s PostgreSQL --store-pool 2 / SQLite, ${hi} clients (informational)`, median(res[hi].ratio2), 'ratio'),
  );
}

// ---------------------------------------------------------------------------------------------------------------
// Part 4: round trips and statements per operation, counted by the proxy (no delay added).

async function partOps({ pgUrl, pgAuth, pgPending, startPg, receiver, hookUrl, drained }, lines, results) {
  const pgPort = Number(new URL(pgUrl).port);
  const pxA = await startProxy(pgPort, 0);
  const pxB = await startProxy(pgPort, 0);
  const A = { name: 'daemon A', d: await startPg(2, pxA.port), auth: pgAuth };
  const get = async (t, path) => (await fetch(`${t.d.info.url}${path}`, { headers: t.auth })).json();
  // No subscription until the deliveries are measured: the events the operations record fan out to nothing.
  for (const w of (await get(A, '/v1/webhooks')).data) {
    const r = await fetch(`${A.d.info.url}/v1/webhooks/${w.id}`, { method: 'DELETE', headers: pgAuth });
    if (r.status !== 204) throw new Error(`DELETE /v1/webhooks/${w.id} → ${r.status}`);
  }
  const n = OPS;
  const ids = (prefix) => Array.from({ length: n }, (_, i) => `${prefix}-${i}`);
  const here = ids('oh');
  const fresh = ids('of');
  for (const s of [...here, ...fresh]) {
    await post(A, '/v1/allowances/verify', { credential: p.credential(s) });
    await post(A, `/v1/streams/${s}/vouchers`, { voucher: p.voucher(s, 1000) });
  }
  const B = { name: 'daemon B', d: await startPg(3, pxB.port), auth: pgAuth };
  // Its connections opened (the pool's, the pipelined reads') on streams of its own: fresh for `fresh` still.
  for (const s of ids('ow')) {
    await post(B, '/v1/allowances/verify', { credential: p.credential(s) });
    await post(B, `/v1/streams/${s}/vouchers`, { voucher: p.voucher(s, 1000) });
  }
  await sleep(1500); // both past their start (first polls, caches)
  trace('ops: prepared');

  // Background: both proxies over IDLE_MS with nothing asked of the daemons (again once a subscription exists: the
  // poll then claims for it). What each round trip carried there (the worker's poll: its claim transaction, the next
  // due time) is the background's: in a request's window it is counted apart ("background"), less the idle rate pro
  // rata; connection starts apart too.
  const idle = new Map(); // proxy -> { s: its stats over the idle window, ms, set: what the round trips carried }
  const measureIdle = async (pxs) => {
    await Promise.all(pxs.map((px) => px.reset()));
    const i0 = now();
    await sleep(IDLE_MS);
    const ss = await Promise.all(pxs.map((px) => px.stats({ top: 1000 })));
    const ms = now() - i0;
    pxs.forEach((px, i) => idle.set(px, { s: ss[i], ms, set: new Set(ss[i].roundTripsByStatements.flatMap((r) => r.parts)) }));
  };
  await measureIdle([pxA, pxB]);
  const [idleA, idleB] = [idle.get(pxA), idle.get(pxB)];

  /**
   * A statement the idle daemon sends too (or the periodic key check): the background's. A COMMIT is named with its
   * transaction's first statement (the proxy's "COMMIT ⟵ …"): the background's when that statement is.
   */
  const isBackground = (text, set) => {
    if (set.has(text) || PERIODIC.test(text)) return true;
    const i = text.indexOf(` ${TX_OF} `);
    if (i < 0 || !/^(COMMIT|ROLLBACK)\b/.test(text)) return false;
    const first = text.slice(i + TX_OF.length + 2).replace(/…$/, '');
    for (const t of set) if (t.startsWith(first)) return true;
    return false;
  };
  /** Round trips and statements per unit over `fn` (then TRAIL_MS for what it set off). */
  const measure = async (px, label, units, fn, { all = false } = {}) => {
    await px.reset();
    const t0 = now();
    await fn();
    await sleep(TRAIL_MS);
    const ms = now() - t0;
    const s = await px.stats({ top: 1000 });
    const { s: bg, ms: idleMs, set: background } = idle.get(px);
    const share = ms / idleMs;
    const sum = { req: 0, reqSt: 0, worker: 0, workerSt: 0, connect: 0 };
    for (const r of s.roundTripsByStatements) {
      if (r.text.startsWith('(')) sum.connect += r.count;
      else if (!all && r.parts.every((t) => isBackground(t, background))) { sum.worker += r.count; sum.workerSt += r.statements; } else { sum.req += r.count; sum.reqSt += r.statements; }
    }
    // all: every round trip is the operation's (deliveries: the worker's own work), less the idle rate pro rata.
    if (all) { sum.req -= bg.roundTrips * share; sum.reqSt -= bg.statements * share; } else { sum.worker -= bg.roundTrips * share; sum.workerSt -= bg.statements * share; }
    return { label, units, ms, s, rt: sum.req / units, st: sum.reqSt / units, worker: Math.max(0, sum.worker) / units, connect: sum.connect / units };
  };
  const seq = async (items, fn) => { for (const x of items) await fn(x); };
  /** The answer says the operation did what is counted (a 200 can also be a stale voucher or a duplicate fact). */
  const must = (what, cond) => (r) => { if (!cond(r)) throw new Error(`ops: ${what} answered ${JSON.stringify(r).slice(0, 300)}`); };
  const accepted = must('voucher', (r) => r.accepted === true);
  const applied = must('control fact', (r) => r.applied === true);
  const valid = must('verify', (r) => r.valid === true);
  const controls = (kind) => ids(kind === 'stream.revoked' ? 'or' : 'ob').map((id) => p.control({ jti: `j-${id}`, ...(kind === 'stream.revoked' ? { kind, stream: id } : { kind, budget: id, reason: 'anomaly' }) }));
  const m = [];
  m.push(await measure(pxA, 'accepted voucher, billed here last', n, () => seq(here, async (s) => accepted(await post(A, `/v1/streams/${s}/vouchers`, { voucher: p.voucher(s, 2000) })))));
  const fv = fresh.map((s) => [s, p.voucher(s, 2000)]);
  m.push(await measure(pxB, 'accepted voucher, on a fresh daemon', n, () => seq(fv, async ([s, v]) => accepted(await post(B, `/v1/streams/${s}/vouchers`, { voucher: v })))));
  const creds = ids('oo').map((s) => p.credential(s));
  m.push(await measure(pxA, 'stream open (verify of a new credential)', n, () => seq(creds, async (credential) => valid(await post(A, '/v1/allowances/verify', { credential })))));
  const rv = controls('stream.revoked');
  m.push(await measure(pxA, 'control fact: stream.revoked', n, () => seq(rv, async (message) => applied(await post(A, '/v1/control', { message })))));
  const bh = controls('budget.halted');
  m.push(await measure(pxA, 'control fact: budget.halted', n, () => seq(bh, async (message) => applied(await post(A, '/v1/control', { message })))));
  await stopChild(B.d); // its worker would claim deliveries too
  trace('ops: requests done');

  await post(A, '/v1/webhooks', { url: hookUrl, events: ['budget.halted'], description: 'bench/postgres ops' }, 201);
  await sleep(300);
  await measureIdle([pxA]); // the worker's poll now claims for the subscription: other statements
  // The same control fact with a subscription present that does not take its kind: what the worker does on its event.
  const rs = ids('os').map((id) => p.control({ jti: `j-${id}`, kind: 'stream.revoked', stream: id }));
  m.push(await measure(pxA, 'control fact: stream.revoked, + subscription', n, () => seq(rs, async (message) => applied(await post(A, '/v1/control', { message })))));
  // Events recorded past the proxy (the daemon's own store would count the recording): what is counted is the worker.
  await receiver.call('reset');
  const nb = OPS_BURST;
  m.push(await measure(pxA, `delivery, a burst of ${nb} events`, nb, async () => {
    await A.d.call('burst', { node: NODE, n: nb, batch: BATCH, direct: true });
    await drained(pgPending, nb);
  }, { all: true }));
  let got = nb;
  const woken = []; // from the event's commit to its arrival at the receiver
  m.push(await measure(pxA, 'delivery, one event at a time', n, () => seq(ids('od'), async () => {
    const { t1 } = await A.d.call('burst', { node: NODE, n: 1, batch: 1, direct: true, wake: true });
    got++;
    while ((await receiver.call('count')).unique < got && now() < t1 + 5000) await sleep(1);
    woken.push(now() - t1);
    await drained(pgPending, got);
  }), { all: true }));
  // Latency of one event from a request (a control fact: budget.halted, which the subscription takes): from its 200
  // to its arrival at the receiver, one at a time; the daemon otherwise idle.
  const late = [];
  for (const message of ids('ol').map((id) => p.control({ jti: `j-${id}`, kind: 'budget.halted', budget: id, reason: 'anomaly' }))) {
    const { eventId } = await post(A, '/v1/control', { message });
    const answered = now();
    const until = answered + 5000;
    let at = null;
    while (at === null && now() < until) { [at] = (await receiver.call('times', { ids: [eventId] })).times; if (at === null) await sleep(1); }
    late.push(at === null ? Infinity : at - answered);
    if (late.length >= OPS_LATENCY) break;
  }
  await stopChild(A.d);
  await Promise.all([pxA.close(), pxB.close()]);
  trace('ops: deliveries done');

  const target = new Set([0, 1, 2, 6]); // vouchers, stream open, delivery (burst): <= 2 round trips
  const perSec = (x) => fmt(x.s.roundTrips / (x.ms / 1000), 1);
  const idleMs = idleA.ms;
  lines.push(`4. round trips and statements per operation, counted by a proxy between daemon and PostgreSQL (no delay), ${n} sequential operations each`);
  lines.push(`   (deliveries: ${nb} events recorded at once past the proxy, then ${n} one at a time, each delivered before the next). Background measured`);
  lines.push(`   idle over ${(idleMs / 1000).toFixed(1)} s (A ${perSec(idleA)}, B ${perSec(idleB)}; A with a subscription ${perSec(idle.get(pxA))} round trips/s: the worker's 1 s poll); a request's round trips exclude what the idle`);
  lines.push('   daemon also sends and the keyring\'s once-a-second key check (column "background", less the idle rate pro rata); a delivery');
  lines.push('   counts all the worker sends, less the idle rate');
  lines.push(`  ${'operation'.padEnd(44)} round trips  statements  background  connecting`);
  m.forEach((x, i) => {
    lines.push(`  ${x.label.padEnd(44)}${x.rt.toFixed(2).padStart(8)}${x.st.toFixed(2).padStart(12)}${x.worker.toFixed(2).padStart(12)}${x.connect.toFixed(2).padStart(11)}${target.has(i) ? `   target <= ${OPS_TARGET} ${ok(x.rt <= OPS_TARGET)}` : ''}`);
    // What the round trips carried, per operation (the background's included: it is small).
    for (const r of x.s.roundTripsByStatements) {
      if (r.count / x.units < OPS_DETAIL) continue;
      lines.push(`      ${(r.count / x.units).toFixed(2).padStart(5)} × ${r.text.length > 160 ? `${r.text.slice(0, 159)}…` : r.text}`);
    }
  });
  const lat = (xs) => `median ${median(xs).toFixed(1)} ms, max ${Math.max(...xs).toFixed(1)} ms over ${xs.length} (${xs.filter((x) => x > 500).length} over 500 ms)`;
  lines.push(`  event → delivered, one at a time (rtt 0): woken after the event's commit (as above), from the commit to the receiver ${lat(woken)};`);
  lines.push(`    a control fact's event (budget.halted; the worker woken by recordEvent, inside the transaction), from the 200 to the receiver ${lat(late)}`);
  results.push(result(`control fact's event: 200 → delivered, one at a time, median (rtt 0)`, median(late), 'ms'));
  const names = ['round trips per accepted voucher, billed here last', 'round trips per accepted voucher, fresh daemon', 'round trips per stream open', 'round trips per control fact, stream.revoked', 'round trips per control fact, budget.halted', 'round trips per control fact, stream.revoked, a subscription present', 'round trips per delivery (burst)', 'round trips per delivery (one event at a time)'];
  m.forEach((x, i) => results.push(result(names[i], x.rt, 'rt', target.has(i) ? ['<=', OPS_TARGET] : undefined)));
  m.forEach((x, i) => results.push(result(names[i].replace('round trips', 'statements'), x.st, 'stmt')));
  results.push(result('round trips of the worker per control fact (stream.revoked), a subscription present that does not take it', m[5].worker, 'rt'));
}

// ---------------------------------------------------------------------------------------------------------------
// Part 5: 1, 2 and 4 daemons on one database through the proxy, with a network round trip added.

async function partScale({ pgUrl, pgAuth, pgPending, startPg, receiver, hookUrl, drained, sqlValue }, lines, results) {
  const pgPort = Number(new URL(pgUrl).port);
  const px = await startProxy(pgPort, RTT_MS);
  const ds = Array.from({ length: 4 }, (_, i) => ({ name: `daemon ${i + 1}`, i, d: undefined, auth: pgAuth, load: undefined }));
  const up = async (t) => { if (!t.d || t.d.exited) t.d = await startPg(4 + t.i, px.port, { BENCH_DELIVERY_CONCURRENCY: String(SCALE_IN_FLIGHT) }); };
  const down = async (t) => { await stopChild(t.d); t.d = undefined; };
  await Promise.all(ds.map(up));
  const first = ds[0];
  const subs = (await (await fetch(`${first.d.info.url}/v1/webhooks`, { headers: pgAuth })).json()).data;
  if (!subs.some((w) => w.url === hookUrl)) await post(first, '/v1/webhooks', { url: hookUrl, events: ['budget.halted'], description: 'bench/postgres scale' }, 201);
  for (const t of ds) {
    t.load = voucherLoad(t.name, Array.from({ length: SCALE_CLIENTS }, (_, k) => `sc-${t.i}-${k}`));
    for (const s of t.load.streams) await post(t, '/v1/allowances/verify', { credential: p.credential(s) });
  }
  trace('scale: prepared');
  const cpuOfProxy = async () => { const c = (await proxies.call('cpu')).cpu; return (c.user + c.system) / 1000; };
  const postmaster = await postmasterPid(sqlValue);
  /** From a mark to now: the machine's busy % and this run's own share of the machine, %. */
  const cpuFrom = () => {
    const m0 = cpuMark();
    const o0 = ownCpu(postmaster);
    return () => {
      const m1 = cpuMark();
      const ticks = ticksBetween(o0, ownCpu(postmaster));
      return { busy: busyPct(m0, m1), own: (100 * ticks) / (m1.total - m0.total), ownS: ticks / CLK_TCK };
    };
  };

  /** Vouchers from every daemon of `set` at once, SCALE_CLIENTS closed-loop clients each. */
  const vouchers = async (set, seconds) => {
    for (const t of set) t.load.topUp(seconds, 1000);
    await px.reset();
    const p0 = await cpuOfProxy();
    const cpu = cpuFrom();
    const t0 = now();
    const rs = await Promise.all(set.map((t) => cannon(`${t.name} vouchers`, t.d.info.url, SCALE_CLIENTS, t.load.opts(t.auth), seconds)));
    const ms = now() - t0;
    const { busy, own, ownS } = cpu();
    const proxyPct = (100 * ((await cpuOfProxy()) - p0)) / ms;
    rs.forEach((r, i) => { set[i].load.rate = Math.max(set[i].load.rate, r.rps); });
    const n = rs.reduce((a, r) => a + r.n, 0);
    const st = await px.stats();
    detail(`vouchers, ${set.length} daemon(s)`, st, n, 'voucher');
    return { rate: n / seconds, busy, own, perOpMs: (1000 * ownS) / n, proxyPct, p50: median(rs.map((r) => r.p50)), rt: st.roundTrips / n, st: st.statements / n, hold: st.holdMs };
  };
  /** SCALE_EVENTS recorded in every daemon of `set` at once; until all are delivered (by whichever worker). */
  const deliveries = async (set, per = SCALE_EVENTS) => {
    await receiver.call('reset');
    const total = per * set.length;
    await px.reset();
    const p0 = await cpuOfProxy();
    const cpu = cpuFrom();
    const t0 = now();
    const rs = await Promise.all(set.map((t) => t.d.call('burst', { node: NODE, n: per, batch: BATCH })));
    const at = await drained(pgPending, total);
    const { busy, own, ownS } = cpu();
    const proxyPct = (100 * ((await cpuOfProxy()) - p0)) / (now() - t0);
    const c = await receiver.call('count');
    if (c.unsigned) throw new Error(`${c.unsigned} deliveries arrived without a signature`);
    const st = await px.stats();
    detail(`deliveries, ${set.length} daemon(s)`, st, total, 'delivery');
    return { rate: total / ((at - Math.min(...rs.map((r) => r.t0))) / 1000), busy, own, perOpMs: (1000 * ownS) / total, proxyPct, rt: st.roundTrips / total, st: st.statements / total, hold: st.holdMs };
  };
  /** BENCH_PG_SCALE_DETAIL=1 (diagnosis): what the round trips of each run carried, per operation, on stderr. */
  const detail = (label, st, n, unit) => {
    if (!SCALE_DETAIL) return;
    console.error(`  [scale] ${label}: ${(st.roundTrips / n).toFixed(2)} round trips, ${(st.statements / n).toFixed(2)} statements per ${unit}; what they carried:`);
    for (const r of st.roundTripsByStatements.slice(0, 12)) console.error(`    ${(r.count / n).toFixed(3).padStart(7)}  ${r.text.slice(0, 170)}`);
  };
  const sizes = [1, 2, 4];
  const runs = { vouchers: Object.fromEntries(sizes.map((k) => [k, []])), deliveries: Object.fromEntries(sizes.map((k) => [k, []])) };
  for (let r = 0; r < SCALE_ROUNDS; r++) {
    await Promise.all(ds.map(up));
    // Warm-up of daemons just (re)started: JIT, pools, caches; then vouchers by 1, 2, 4 daemons (the idle ones only
    // poll), then deliveries by 4, 2, 1 (the others stopped: any running worker claims deliveries too).
    await vouchers(ds, 1);
    await deliveries(ds, Math.ceil(SCALE_EVENTS / 4));
    for (const k of sizes) runs.vouchers[k].push(await vouchers(ds.slice(0, k), SCALE_SECONDS));
    for (const t of ds) await t.load.check(first.d.info.url, pgAuth);
    for (const k of [4, 2, 1]) {
      await Promise.all(ds.slice(k).map(down));
      runs.deliveries[k].push(await deliveries(ds.slice(0, k)));
    }
    trace(`scale round ${r + 1}: vouchers/s ${sizes.map((k) => fmt(runs.vouchers[k][r].rate)).join(' / ')}, deliveries/s ${sizes.map((k) => fmt(runs.deliveries[k][r].rate)).join(' / ')}`);
  }
  await Promise.all(ds.map(down));
  await px.close();

  lines.push(`5. 1, 2 and 4 daemons on one database through the proxy: round trip ${RTT_MS} ms added (${fmt(RTT_MS / 2, 1)} ms each way; held on average ${median(sizes.flatMap((k) => [...runs.vouchers[k], ...runs.deliveries[k]].map((x) => x.hold))).toFixed(2)} ms), medians of ${SCALE_ROUNDS} rounds`);
  lines.push(`   vouchers: ${SCALE_CLIENTS} closed-loop clients per daemon, each billing its own stream (signed ahead), ${SCALE_SECONDS} s; deliveries: ${fmt(SCALE_EVENTS)} events recorded in each daemon at once, until all delivered`);
  lines.push('   CPU: the machine busy (/proc/stat, 1 - idle/total, iowait as idle; neighbours included), and this run\'s own processes\' share of the machine (bench, daemons, proxy, our PostgreSQL)');
  for (const kind of ['vouchers', 'deliveries']) {
    const rate = (k) => median(runs[kind][k].map((x) => x.rate));
    const ratio = (k) => median(runs[kind][k].map((x, i) => x.rate / runs[kind][1][i].rate));
    const busy = (k) => median(runs[kind][k].map((x) => x.busy));
    const own = (k) => median(runs[kind][k].map((x) => x.own));
    const per = (k, key) => median(runs[kind][k].map((x) => x[key]));
    for (const k of sizes) {
      lines.push(`  ${(k === 1 ? kind : '').padEnd(11)}${k} daemon${k > 1 ? 's' : ' '} ${fmt(rate(k)).padStart(6)}/s   CPU ${busy(k).toFixed(0).padStart(3)} % (target < ${CPU_TARGET} %) ${ok(busy(k) < CPU_TARGET)}, this run's ${own(k).toFixed(0).padStart(2)} %: ${per(k, 'perOpMs').toFixed(2)} ms of CPU per ${kind === 'vouchers' ? 'voucher' : 'delivery'}, the proxy ${per(k, 'proxyPct').toFixed(0)} % of a core; ${per(k, 'rt').toFixed(2)} round trips, ${per(k, 'st').toFixed(2)} statements each${kind === 'vouchers' ? `; p50 ${per(k, 'p50')} ms` : ' (recording included)'}; held ${per(k, 'hold').toFixed(1)} ms each way`);
    }
    lines.push(`  ${''.padEnd(11)}2×/1× ${ratio(2).toFixed(2)} (target >= ${SCALE_TARGET_2}) ${ok(ratio(2) >= SCALE_TARGET_2)}; 4×/1× ${ratio(4).toFixed(2)} (target >= ${SCALE_TARGET_4}) ${ok(ratio(4) >= SCALE_TARGET_4)}; per round 2×: ${runs[kind][2].map((x, i) => f2(x.rate / runs[kind][1][i].rate)).join(', ')}, 4×: ${runs[kind][4].map((x, i) => f2(x.rate / runs[kind][1][i].rate)).join(', ')}`);
    results.push(
      result(`${kind}/s, 2 daemons / 1, rtt ${RTT_MS} ms`, ratio(2), 'ratio', ['>=', SCALE_TARGET_2]),
      result(`${kind}/s, 4 daemons / 1, rtt ${RTT_MS} ms`, ratio(4), 'ratio', ['>=', SCALE_TARGET_4]),
      ...sizes.map((k) => result(`${kind}, ${k} daemon${k > 1 ? 's' : ''}: machine CPU busy`, busy(k), '%', ['<', CPU_TARGET])),
      ...sizes.map((k) => result(`${kind}/s, ${k} daemon${k > 1 ? 's' : ''}, rtt ${RTT_MS} ms`, rate(k), '/s')),
    );
  }
  const live = ds.reduce((a, t) => a + t.load.live, 0);
  if (live) lines.push(`    (the load generator signed ${live} vouchers during runs: its pool ran short)`);
  const stale = ds.reduce((a, t) => a + t.load.stale, 0);
  if (stale) lines.push(`    (${stale} vouchers answered 200 but not accepted; none expected with one client per stream)`);
}

// Last: the helpers above are constants (initialised only once the module body has run this far).
try {
  await main();
} catch (err) {
  console.error(`bench/postgres failed: ${err?.stack ?? err}`);
  process.exitCode = 1;
} finally {
  await cleanup();
}
