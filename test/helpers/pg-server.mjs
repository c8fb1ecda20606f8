// A real PostgreSQL 15 server in a temporary directory, for the tests (test/helpers/postgres.ts) and bench/postgres
// alike (plain JS, so the bench can load it): the machine's Debian server binaries, a free loopback port, fsync on.
// The server refuses to run as root, so as root it runs as the `postgres` user (runuser). Clients log in as the role
// `node_svc` (CREATEDB, not a superuser) with a random password over TCP, like a real URL; the bootstrap superuser
// only through the socket in the 0700 directory. A watchdog stops the server and removes the directory if this
// process dies without stop().
import { execFileSync, spawn, spawnSync } from 'node:child_process';
import { randomBytes } from 'node:crypto';
import { chmodSync, chownSync, existsSync, mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { createServer } from 'node:net';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import pg from 'pg';

export const PG_BIN = '/usr/lib/postgresql/15/bin';
export const ROLE = 'node_svc';
const isRoot = () => typeof process.getuid === 'function' && process.getuid() === 0;

/** Can a server be started here? `reason` says why not. */
export function pgAvailable() {
  for (const b of ['initdb', 'pg_ctl', 'postgres'])
    if (!existsSync(join(PG_BIN, b))) return { ok: false, reason: `${join(PG_BIN, b)} is missing (install the Debian postgresql package)` };
  if (isRoot()) {
    if (spawnSync('id', ['-u', 'postgres']).status !== 0) return { ok: false, reason: 'running as root and there is no `postgres` user to run the server as' };
    if (spawnSync('runuser', ['--help'], { stdio: 'ignore' }).status !== 0) return { ok: false, reason: 'running as root and `runuser` is missing' };
  }
  return { ok: true };
}

function freePort() {
  return new Promise((res, rej) => {
    const s = createServer();
    s.once('error', rej);
    s.listen(0, '127.0.0.1', () => {
      const { port } = s.address();
      s.close(() => res(port));
    });
  });
}

/** A command as the server's user: `runuser -u postgres -- cmd` when we are root. */
const asServerUser = (cmd, args) => (isRoot() ? ['runuser', ['-u', 'postgres', '--', cmd, ...args]] : [cmd, args]);

function run(cmd, args) {
  const [c, a] = asServerUser(cmd, args);
  const r = spawnSync(c, a, { encoding: 'utf8', timeout: 120_000 });
  if (r.status !== 0) throw new Error(`${cmd} ${args[0] ?? ''} failed (${r.status ?? r.signal}): ${r.stderr || r.stdout}`);
}

/**
 * initdb + pg_ctl start. `settings`: more `-c name=value` server settings; `tls`: a certificate and key (PEM) the
 * server offers (clients choose by sslmode). Resolves with { port, password, logFile, url(db), superuser(db),
 * restart(), stop() }.
 */
export async function startPostgresServer({ prefix = 'node-svc-pg-', settings = [], tls } = {}) {
  const avail = pgAvailable();
  if (!avail.ok) throw new Error(`cannot start PostgreSQL: ${avail.reason}`);
  const dir = mkdtempSync(join(tmpdir(), prefix));
  const data = join(dir, 'data');
  const password = randomBytes(18).toString('base64url');
  let watchdog;
  let running = false;
  const pgCtl = (...args) => run(join(PG_BIN, 'pg_ctl'), ['-D', data, ...args]);
  const cleanupSync = () => {
    if (running) {
      try {
        pgCtl('stop', '-m', 'immediate', '-w');
      } catch { /* already gone */ }
      running = false;
    }
    rmSync(dir, { recursive: true, force: true });
  };
  const onExit = () => cleanupSync();
  try {
    chmodSync(dir, 0o700);
    const owner = isRoot()
      ? { uid: Number(execFileSync('id', ['-u', 'postgres'], { encoding: 'utf8' }).trim()), gid: Number(execFileSync('id', ['-g', 'postgres'], { encoding: 'utf8' }).trim()) }
      : undefined;
    if (owner) chownSync(dir, owner.uid, owner.gid);
    // initdb wants a superuser password when TCP logins need one; ours is random and never used: the bootstrap
    // superuser logs in through the socket in our 0700 dir (trust), everyone else by password over TCP.
    const pwfile = join(dir, 'pw');
    writeFileSync(pwfile, `${randomBytes(18).toString('base64url')}\n`, { mode: 0o600 });
    if (owner) chownSync(pwfile, owner.uid, owner.gid);
    run(join(PG_BIN, 'initdb'), ['-D', data, '-U', 'postgres', `--pwfile=${pwfile}`, '--auth-local=trust', '--auth-host=scram-sha-256', '-E', 'UTF8', '--locale=C', '--no-instructions']);
    rmSync(pwfile, { force: true });
    const port = await freePort();
    const all = [`-c listen_addresses=127.0.0.1`, `-c port=${port}`, `-c unix_socket_directories=${dir}`, '-c fsync=on', '-c logging_collector=off', ...settings];
    if (tls) {
      // The key must be the server user's and 0600.
      for (const [file, pem] of [['server.crt', tls.cert], ['server.key', tls.key]]) {
        writeFileSync(join(dir, file), pem, { mode: 0o600 });
        if (owner) chownSync(join(dir, file), owner.uid, owner.gid);
      }
      all.push('-c ssl=on', `-c ssl_cert_file=${join(dir, 'server.crt')}`, `-c ssl_key_file=${join(dir, 'server.key')}`);
    }
    const start = () => {
      pgCtl('start', '-w', '-t', '60', '-l', join(dir, 'log'), '-o', all.join(' '));
      running = true;
    };
    start();
    process.on('exit', onExit);
    // If this process is killed (no 'exit'), the watchdog stops the server and removes the dir.
    const stopCmd = `${isRoot() ? 'runuser -u postgres -- ' : ''}${PG_BIN}/pg_ctl -D '${data}' stop -m immediate`;
    const w = spawn('sh', ['-c', `while kill -0 ${process.pid} 2>/dev/null; do sleep 1; done; ${stopCmd} >/dev/null 2>&1; rm -rf '${dir}'`], { detached: true, stdio: 'ignore' });
    w.unref();
    watchdog = w.pid;

    /** A connected superuser client on database `db` (through the socket in our 0700 dir). */
    const superuser = async (db) => {
      const c = new pg.Client({ host: dir, port, user: 'postgres', database: db });
      await c.connect();
      return c;
    };
    const admin = await superuser('postgres');
    try {
      await admin.query(`CREATE ROLE ${ROLE} LOGIN CREATEDB PASSWORD '${password}'`);
    } finally {
      await admin.end();
    }
    return {
      port,
      password,
      logFile: join(dir, 'log'),
      url: (db) => `postgres://${ROLE}:${encodeURIComponent(password)}@127.0.0.1:${port}/${db}`,
      /** The same database through the server's Unix socket (in our 0700 dir), as libpq's `host=/dir` names it. */
      socketUrl: (db) => `postgres://${ROLE}:${encodeURIComponent(password)}@localhost/${db}?host=${encodeURIComponent(dir)}&port=${port}`,
      superuser,
      /** Stop (fast) and start again on the same directory and port, for fault tests. */
      async restart() {
        pgCtl('stop', '-m', 'fast', '-w');
        running = false;
        start();
      },
      async stop() {
        process.off('exit', onExit);
        if (watchdog) {
          try {
            process.kill(watchdog);
          } catch { /* gone */ }
          watchdog = undefined;
        }
        if (running) {
          try {
            pgCtl('stop', '-m', 'fast', '-w');
          } catch {
            pgCtl('stop', '-m', 'immediate', '-w');
          }
          running = false;
        }
        rmSync(dir, { recursive: true, force: true });
      },
    };
  } catch (err) {
    process.off('exit', onExit);
    if (watchdog) try { process.kill(watchdog); } catch { /* gone */ }
    cleanupSync();
    throw err;
  }
}
