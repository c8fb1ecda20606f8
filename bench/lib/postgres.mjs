// bench/lib/postgres: what bench/postgres needs besides bench/lib/setup.mjs, in two roles.
//
// Imported: startPostgres() — a real PostgreSQL 15 server in a temp dir (test/helpers/pg-server.mjs, the one the
// tests start: the machine's Debian binaries, as the `postgres` user when we are root, fsync on, the role node_svc
// with a random password over TCP, a watchdog that cleans up if the bench dies without stop()).
//
// Run as a forked child (`fork(this file, ['daemon', dataDir])`, store URL in env BENCH_STORE_URL, none: SQLite in
// the data dir): the real daemon (startDaemon from dist/daemon.js: API + delivery worker) with --delivery-timeout 1
// (lease = 2 × 1 s + 10 s = 12 s), that records events the way the service layer does (recordEvent inside a write
// transaction of its own, `batch` at once) on the parent's command over IPC — as bench/lib/delivery-daemon.mjs, which has no store option.
// With BENCH_DIRECT_URL as well (the daemon's store URL then points at bench/lib/latency-proxy.mjs), a burst sent with
// `direct: true` is recorded through a second store on that URL, so the proxy sees only what the daemon itself (its
// delivery worker) asks of the database; the worker is woken as by its own writes (the same module's wakers).
import { fileURLToPath } from 'node:url';
import { pgAvailable, startPostgresServer } from '../../test/helpers/pg-server.mjs';

export const DELIVERY_TIMEOUT_S = 1;
/** The worker's lease on a claimed delivery (src/delivery/worker.ts #leaseMs): timeout × 2 + 10 s. */
export const LEASE_MS = DELIVERY_TIMEOUT_S * 1000 * 2 + 10_000;
/** Why no server can be started here, or undefined. */
export const pgUnavailable = () => pgAvailable().reason;

/**
 * initdb + pg_ctl start; resolves with { url(db), createDatabase(name), socketUrl(db), superuser(db), stop() }. `statements`: load
 * pg_stat_statements (a diagnosis aid: it costs every statement a little, so the measured runs go without it).
 */
export async function startPostgres({ statements = false } = {}) {
  // Server defaults otherwise (synchronous_commit on, fsync on): what an operator's database does.
  const server = await startPostgresServer({
    prefix: 'node-svc-bench-pg-',
    settings: ['-c max_connections=200', ...(statements ? ['-c shared_preload_libraries=pg_stat_statements', '-c pg_stat_statements.track=all'] : [])],
  });
  return {
    port: server.port,
    url: server.url,
    async createDatabase(name) {
      const pg = (await import('pg')).default;
      const c = new pg.Client({ connectionString: server.url('postgres') });
      await c.connect();
      try { await c.query(`CREATE DATABASE ${name}`); } finally { await c.end(); }
      return server.url(name);
    },
    /** A database's URL through the server's Unix socket: how a daemon on the database's own machine reaches it. */
    socketUrl: server.socketUrl,
    superuser: server.superuser,
    stop: server.stop,
  };
}

// ---------------------------------------------------------------------------------------------------------------
// The daemon child

async function daemonChild(dataDir) {
  const dist = new URL('../../dist/', import.meta.url);
  const { startDaemon } = await import(new URL('daemon.js', dist).href);
  const { recordEvent } = await import(new URL('store/events.js', dist).href);
  const d = await startDaemon({
    dataDir, store: process.env.BENCH_STORE_URL || undefined, host: '127.0.0.1', port: 0, rateLimit: 0,
    deliveryTimeoutMs: DELIVERY_TIMEOUT_S * 1000,
    ...(process.env.BENCH_DELIVERY_CONCURRENCY ? { deliveryConcurrency: Number(process.env.BENCH_DELIVERY_CONCURRENCY) } : {}),
    ...(process.env.BENCH_STORE_POOL ? { storePool: Number(process.env.BENCH_STORE_POOL) } : {}), // the daemon's --store-pool
    retrySchedule: [1, 1, 1, 1, 1], // a failed attempt (none expected: the receiver answers 204) must not stall a round
  });
  const store = d.deps.store;
  const { openStore } = await import(new URL('store/open.js', dist).href);
  const direct = process.env.BENCH_DIRECT_URL ? await openStore({ dataDir, store: process.env.BENCH_DIRECT_URL }) : undefined;
  const now = () => performance.timeOrigin + performance.now();
  const tick = () => new Promise((r) => setImmediate(r));
  let k = 0;
  let stopping = false;
  // As a control fact's write ends (service/control.ts): the event is its last statement (PostgreSQL: its COMMIT goes with it).
  const record = (tx, node) => { const b = `b${++k}`; return recordEvent(tx, node, 'budget.halted', `budget:${b}`, { budget: b, reason: 'anomaly' }, undefined, undefined, { last: true }); };
  /**
   * n events, `batch` writes of one event each at a time (as the service records them: one per request, many
   * requests at once; SQLite group-commits each batch into one transaction, PostgreSQL runs them as concurrent
   * transactions), back to back; resolves with the times and the first event's seq.
   */
  async function burst({ node, n, batch, direct: viaDirect = false, wake = false }) {
    const t0 = now();
    let firstSeq;
    const into = viaDirect ? direct : store;
    if (!into) throw new Error('a direct burst needs BENCH_DIRECT_URL');
    for (let i = 0; i < n && !stopping; i += batch) {
      const m = Math.min(batch, n - i);
      const seqs = await Promise.all(Array.from({ length: m }, () => into.write(async (tx) => (await record(tx, node)).seq)));
      // wake: as a request does after its commit (recordEvent wakes the worker before it; PostgreSQL may not show the
      // event to the worker's claim until the commit has landed).
      if (wake) d.worker.wake();
      seqs.sort((a, b) => a - b);
      firstSeq ??= seqs[0];
      await tick();
    }
    return { t0, t1: now(), firstSeq };
  }
  process.on('message', async (m) => {
    try {
      switch (m.cmd) {
        case 'burst': return process.send({ re: m.re, ...(await burst(m)) });
        case 'pending': // deliveries not yet delivered (the store's own read path, either dialect)
          return process.send({ re: m.re, n: Number(await store.q.value("SELECT COUNT(*) AS n FROM deliveries WHERE status = 'pending'")) });
        case 'stats': return process.send({ re: m.re, stats: d.worker.stats, inFlight: d.worker.inFlight, commits: store.stats?.commits ?? null, jobs: store.stats?.jobs ?? null });
        case 'stop':
          stopping = true;
          await d.stop();
          await direct?.close();
          return process.send({ re: m.re }, () => process.exit(0));
      }
    } catch (err) {
      process.send({ re: m.re, error: String(err?.stack ?? err) });
    }
  });
  process.on('disconnect', () => { stopping = true; d.stop().finally(() => process.exit(0)); }); // the bench went away
  process.send({ ready: true, url: d.url, pid: process.pid });
}

if (process.argv[1] === fileURLToPath(import.meta.url) && process.argv[2] === 'daemon') {
  await daemonChild(process.argv[3]).catch((err) => { console.error(`bench/lib/postgres daemon: ${err?.stack ?? err}`); process.exit(1); });
}
