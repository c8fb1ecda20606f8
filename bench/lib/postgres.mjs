// bench/lib/postgres: what bench/postgres needs besides bench/lib/setup.mjs, in two roles.
//
// Imported: startPostgres() — a real PostgreSQL 15 server (the machine's Debian binaries) in a temp dir on a free
// loopback port, started as the `postgres` user when we are root (the server refuses root), fsync on, like
// test/helpers/postgres.ts (the few lines it needs, copied: the bench loads only plain JS). Clients log in as the
// role node_svc (CREATEDB, not a superuser) with a random password over TCP. A watchdog stops the server and removes
// the dir if the bench dies without stop().
//
// Run as a forked child (`fork(this file, ['daemon', dataDir])`, store URL in env BENCH_STORE_URL, none: SQLite in
// the data dir): the real daemon (startDaemon from dist/daemon.js: API + delivery worker) with --delivery-timeout 1
// (lease = 2 × 1 s + 10 s = 12 s), that records events the way the service layer does (recordEvent inside a write
// transaction) on the parent's command over IPC — as bench/lib/delivery-daemon.mjs, which has no store option.
import { execFileSync, spawn, spawnSync } from 'node:child_process';
import { randomBytes } from 'node:crypto';
import { chmodSync, chownSync, existsSync, mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { createServer } from 'node:net';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';

export const PG_BIN = '/usr/lib/postgresql/15/bin';
export const DELIVERY_TIMEOUT_S = 1;
/** The worker's lease on a claimed delivery (src/delivery/worker.ts #leaseMs): timeout × 2 + 10 s. */
export const LEASE_MS = DELIVERY_TIMEOUT_S * 1000 * 2 + 10_000;
const ROLE = 'node_svc';
const isRoot = () => typeof process.getuid === 'function' && process.getuid() === 0;

/** Why no server can be started here, or undefined. */
export function pgUnavailable() {
  for (const b of ['initdb', 'pg_ctl', 'postgres']) if (!existsSync(join(PG_BIN, b))) return `${join(PG_BIN, b)} is missing (install the Debian postgresql package)`;
  if (isRoot() && spawnSync('id', ['-u', 'postgres']).status !== 0) return 'running as root and there is no `postgres` user to run the server as';
  return undefined;
}

const asServerUser = (cmd, args) => (isRoot() ? ['runuser', ['-u', 'postgres', '--', cmd, ...args]] : [cmd, args]);
function run(cmd, args) {
  const [c, a] = asServerUser(cmd, args);
  const r = spawnSync(c, a, { encoding: 'utf8', timeout: 120_000 });
  if (r.status !== 0) throw new Error(`${cmd} ${args[0] ?? ''} failed (${r.status ?? r.signal}): ${r.stderr || r.stdout}`);
}
const freePort = () => new Promise((res, rej) => {
  const s = createServer();
  s.once('error', rej);
  s.listen(0, '127.0.0.1', () => { const { port } = s.address(); s.close(() => res(port)); });
});

/**
 * initdb + pg_ctl start; resolves with { url(db), createDatabase(name), superuser(db), stop() }. `statements`: load
 * pg_stat_statements (a diagnosis aid: it costs every statement a little, so the measured runs go without it).
 */
export async function startPostgres({ statements = false } = {}) {
  const why = pgUnavailable();
  if (why) throw new Error(`cannot start PostgreSQL: ${why}`);
  const pg = (await import('pg')).default;
  const dir = mkdtempSync(join(tmpdir(), 'node-svc-bench-pg-'));
  const data = join(dir, 'data');
  const password = randomBytes(18).toString('base64url');
  let running = false;
  const pgCtl = (...args) => run(join(PG_BIN, 'pg_ctl'), ['-D', data, ...args]);
  const cleanupSync = () => {
    if (running) { try { pgCtl('stop', '-m', 'immediate', '-w'); } catch { /* already gone */ } running = false; }
    rmSync(dir, { recursive: true, force: true });
  };
  process.on('exit', cleanupSync);
  let watchdog;
  try {
    chmodSync(dir, 0o700);
    const owner = isRoot() ? { uid: Number(execFileSync('id', ['-u', 'postgres'], { encoding: 'utf8' })), gid: Number(execFileSync('id', ['-g', 'postgres'], { encoding: 'utf8' })) } : undefined;
    if (owner) chownSync(dir, owner.uid, owner.gid);
    // The bootstrap superuser logs in through the socket in our 0700 dir (trust); node_svc by password over TCP.
    const pwfile = join(dir, 'pw');
    writeFileSync(pwfile, `${randomBytes(18).toString('base64url')}\n`, { mode: 0o600 });
    if (owner) chownSync(pwfile, owner.uid, owner.gid);
    run(join(PG_BIN, 'initdb'), ['-D', data, '-U', 'postgres', `--pwfile=${pwfile}`, '--auth-local=trust', '--auth-host=scram-sha-256', '-E', 'UTF8', '--locale=C', '--no-instructions']);
    rmSync(pwfile, { force: true });
    const port = await freePort();
    // Server defaults otherwise (synchronous_commit on, fsync on): what an operator's database does.
    const options = [`-c listen_addresses=127.0.0.1`, `-c port=${port}`, `-c unix_socket_directories=${dir}`, '-c fsync=on', '-c max_connections=200', '-c logging_collector=off',
      ...(statements ? ['-c shared_preload_libraries=pg_stat_statements'] : [])].join(' ');
    pgCtl('start', '-w', '-t', '60', '-l', join(dir, 'log'), '-o', options);
    running = true;
    const stopCmd = `${isRoot() ? 'runuser -u postgres -- ' : ''}${PG_BIN}/pg_ctl -D '${data}' stop -m immediate`;
    const w = spawn('sh', ['-c', `while kill -0 ${process.pid} 2>/dev/null; do sleep 1; done; ${stopCmd} >/dev/null 2>&1; rm -rf '${dir}'`], { detached: true, stdio: 'ignore' });
    w.unref();
    watchdog = w.pid;
    const admin = new pg.Client({ host: dir, port, user: 'postgres', database: 'postgres' });
    await admin.connect();
    try { await admin.query(`CREATE ROLE ${ROLE} LOGIN CREATEDB PASSWORD '${password}'`); } finally { await admin.end(); }
    const url = (db) => `postgres://${ROLE}:${encodeURIComponent(password)}@127.0.0.1:${port}/${db}`;
    return {
      port,
      url,
      async createDatabase(name) {
        const c = new pg.Client({ connectionString: url('postgres') });
        await c.connect();
        try { await c.query(`CREATE DATABASE ${name}`); } finally { await c.end(); }
        return url(name);
      },
      /** A connected superuser client on database `db` (through the socket in our 0700 dir). */
      async superuser(db) {
        const c = new pg.Client({ host: dir, port, user: 'postgres', database: db });
        await c.connect();
        return c;
      },
      async stop() {
        process.off('exit', cleanupSync);
        try { if (watchdog) process.kill(watchdog); } catch { /* gone */ }
        if (running) { try { pgCtl('stop', '-m', 'fast', '-w'); } catch { pgCtl('stop', '-m', 'immediate', '-w'); } running = false; }
        rmSync(dir, { recursive: true, force: true });
      },
    };
  } catch (err) {
    process.off('exit', cleanupSync);
    try { if (watchdog) process.kill(watchdog); } catch { /* gone */ }
    cleanupSync();
    throw err;
  }
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
    retrySchedule: [1, 1, 1, 1, 1], // a failed attempt (none expected: the receiver answers 204) must not stall a round
  });
  const store = d.deps.store;
  const now = () => performance.timeOrigin + performance.now();
  const tick = () => new Promise((r) => setImmediate(r));
  let k = 0;
  let stopping = false;
  const record = (tx, node) => { const b = `b${++k}`; return recordEvent(tx, node, 'budget.halted', `budget:${b}`, { budget: b, reason: 'anomaly' }); };
  /** n events in write transactions of `batch`, back to back; resolves with the times and the first event's seq. */
  async function burst({ node, n, batch }) {
    const t0 = now();
    let firstSeq;
    for (let i = 0; i < n && !stopping; i += batch) {
      const m = Math.min(batch, n - i);
      const seqs = await store.write(async (tx) => { const out = []; for (let j = 0; j < m; j++) out.push((await record(tx, node)).seq); return out; });
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
