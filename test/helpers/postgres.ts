// A real PostgreSQL 15 server for tests: the machine's Debian server binaries, a temporary directory, a free loopback
// port. The server refuses to run as root, so as root it runs as the `postgres` user (runuser); as anyone else, as
// that user. Clients log in as the role `node_svc` (CREATEDB, not a superuser) with a password, like a real URL.
import { execFileSync, spawn, spawnSync } from 'node:child_process';
import { createHash, randomBytes } from 'node:crypto';
import { chmodSync, chownSync, existsSync, mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { createServer } from 'node:net';
import { tmpdir } from 'node:os';
import { join, resolve } from 'node:path';
import pg from 'pg';

export const PG_BIN = '/usr/lib/postgresql/15/bin';
/** The env var through which the global setup hands the run's server (its base URL) to test files and helpers. */
export const PG_URL_ENV = 'NODE_SVC_TEST_PG_URL';
const ROLE = 'node_svc';

export interface PostgresServer {
  /** `postgres://node_svc:<password>@127.0.0.1:<port>/postgres` (the maintenance database). */
  baseUrl: string;
  port: number;
  password: string;
  /** The server's log file (errors with their statements), for debugging a failure. */
  logFile: string;
  /** CREATE DATABASE `name` (owned by node_svc) unless it exists; resolves with its URL. */
  createDatabase(name: string): Promise<string>;
  /** Stop (fast) and start again on the same directory and port, for fault tests. */
  restart(): Promise<void>;
  stop(): Promise<void>;
}

const isRoot = () => typeof process.getuid === 'function' && process.getuid() === 0;

/** Can a server be started here? `reason` says why not. */
export function pgAvailable(): { ok: boolean; reason?: string } {
  for (const b of ['initdb', 'pg_ctl', 'postgres'])
    if (!existsSync(join(PG_BIN, b))) return { ok: false, reason: `${join(PG_BIN, b)} is missing (install the Debian postgresql package)` };
  if (isRoot()) {
    if (spawnSync('id', ['-u', 'postgres']).status !== 0) return { ok: false, reason: 'running as root and there is no `postgres` user to run the server as' };
    if (spawnSync('runuser', ['--help'], { stdio: 'ignore' }).status !== 0) return { ok: false, reason: 'running as root and `runuser` is missing' };
  }
  return { ok: true };
}

function freePort(): Promise<number> {
  return new Promise((res, rej) => {
    const s = createServer();
    s.once('error', rej);
    s.listen(0, '127.0.0.1', () => {
      const port = (s.address() as { port: number }).port;
      s.close(() => res(port));
    });
  });
}

/** A command as the server's user: `runuser -u postgres -- cmd` when we are root. */
const asServerUser = (cmd: string, args: string[]): [string, string[]] => (isRoot() ? ['runuser', ['-u', 'postgres', '--', cmd, ...args]] : [cmd, args]);

function run(cmd: string, args: string[]): void {
  const [c, a] = asServerUser(cmd, args);
  const r = spawnSync(c, a, { encoding: 'utf8', timeout: 120_000 });
  if (r.status !== 0) throw new Error(`${cmd} ${args[0] ?? ''} failed (${r.status ?? r.signal}): ${r.stderr || r.stdout}`);
}

/** The URL of database `name` on the server of `baseUrl` (same role, password, host and port). */
export function databaseUrl(baseUrl: string, name: string): string {
  const u = new URL(baseUrl);
  u.pathname = `/${name}`;
  return u.toString();
}

const created = new Map<string, Promise<string>>();
/** CREATE DATABASE `name` on the server of `baseUrl` unless it exists (once per process and name). */
export function ensureDatabase(baseUrl: string, name: string): Promise<string> {
  if (!/^[a-z_][a-z0-9_]{0,62}$/.test(name)) throw new Error(`bad database name ${name}`);
  const key = `${baseUrl}|${name}`;
  let p = created.get(key);
  if (!p) {
    p = (async () => {
      const c = new pg.Client({ connectionString: baseUrl });
      await c.connect();
      try {
        const exists = await c.query('SELECT 1 FROM pg_database WHERE datname = $1', [name]);
        if (!exists.rowCount) {
          try {
            await c.query(`CREATE DATABASE ${name}`);
          } catch (err) {
            if ((err as { code?: string }).code !== '42P04') throw err; // created meanwhile by another process
          }
        }
      } finally {
        await c.end();
      }
      return databaseUrl(baseUrl, name);
    })();
    created.set(key, p);
    p.catch(() => created.delete(key));
  }
  return p;
}

/** DROP DATABASE `name` (closing its sessions) if it exists. */
export async function dropDatabase(baseUrl: string, name: string): Promise<void> {
  created.delete(`${baseUrl}|${name}`);
  const c = new pg.Client({ connectionString: baseUrl });
  await c.connect();
  try {
    await c.query(`DROP DATABASE IF EXISTS ${name} WITH (FORCE)`);
  } finally {
    await c.end();
  }
}

/** One database per data dir, named from a hash of its absolute path. */
export const databaseNameFor = (dataDir: string) => `nsvc_${createHash('sha256').update(resolve(dataDir)).digest('hex').slice(0, 24)}`;

/** The run's server (set by test/global-setup.ts when NODE_SVC_TEST_STORE=postgres), else undefined. */
export const testServerUrl = (): string | undefined => process.env[PG_URL_ENV] || undefined;

/** The store URL for `dataDir` on the run's server (created on first use), or undefined without one. */
export async function storeUrlFor(dataDir: string): Promise<string | undefined> {
  const base = testServerUrl();
  return base ? ensureDatabase(base, databaseNameFor(dataDir)) : undefined;
}

/**
 * `{ NODE_SVC_STORE: <url> }` for a child process on `dataDir` when the run has a server, else `{}`: for tests that
 * spawn the CLI or daemon themselves instead of through helpers/cli.ts or helpers/daemon.ts.
 */
export async function storeEnvFor(dataDir: string): Promise<Record<string, string>> {
  const url = await storeUrlFor(dataDir);
  return url ? { NODE_SVC_STORE: url } : {};
}

/**
 * initdb + pg_ctl start in a new temp dir: listen on 127.0.0.1 only, the unix socket in the temp dir, fsync on,
 * password (SCRAM) logins over TCP. A watchdog process stops the server and removes the dir if this process dies
 * without calling stop().
 */
export async function startPostgres(opts: { tls?: { cert: string; key: string } } = {}): Promise<PostgresServer> {
  const avail = pgAvailable();
  if (!avail.ok) throw new Error(`cannot start PostgreSQL: ${avail.reason}`);
  const dir = mkdtempSync(join(tmpdir(), 'node-svc-pg-'));
  const data = join(dir, 'data');
  const password = randomBytes(18).toString('base64url');
  let watchdog: number | undefined;
  let running = false;
  const pgCtl = (...args: string[]) => run(join(PG_BIN, 'pg_ctl'), ['-D', data, ...args]);
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
    const settings = [
      `-c listen_addresses=127.0.0.1`, `-c port=${port}`, `-c unix_socket_directories=${dir}`, `-c fsync=on`,
      `-c max_connections=400`, `-c shared_buffers=32MB`, `-c logging_collector=off`,
    ];
    if (opts.tls) {
      // TLS offered (clients choose by sslmode); the key must be the server user's and 0600.
      for (const [file, pem] of [['server.crt', opts.tls.cert], ['server.key', opts.tls.key]] as const) {
        writeFileSync(join(dir, file), pem, { mode: 0o600 });
        if (owner) chownSync(join(dir, file), owner.uid, owner.gid);
      }
      settings.push('-c ssl=on', `-c ssl_cert_file=${join(dir, 'server.crt')}`, `-c ssl_key_file=${join(dir, 'server.key')}`);
    }
    const options = settings.join(' ');
    const start = () => {
      pgCtl('start', '-w', '-t', '60', '-l', join(dir, 'log'), '-o', options);
      running = true;
    };
    start();
    process.on('exit', onExit);
    // If this process is killed (no 'exit'), the watchdog stops the server and removes the dir.
    const stopCmd = isRoot() ? `runuser -u postgres -- ${PG_BIN}/pg_ctl -D '${data}' stop -m immediate` : `${PG_BIN}/pg_ctl -D '${data}' stop -m immediate`;
    const w = spawn('sh', ['-c', `while kill -0 ${process.pid} 2>/dev/null; do sleep 1; done; ${stopCmd} >/dev/null 2>&1; rm -rf '${dir}'`], { detached: true, stdio: 'ignore' });
    w.unref();
    watchdog = w.pid;

    const admin = new pg.Client({ host: dir, port, user: 'postgres', database: 'postgres' });
    await admin.connect();
    try {
      await admin.query(`CREATE ROLE ${ROLE} LOGIN CREATEDB PASSWORD '${password}'`);
    } finally {
      await admin.end();
    }
    const baseUrl = `postgres://${ROLE}:${encodeURIComponent(password)}@127.0.0.1:${port}/postgres`;
    return {
      baseUrl,
      port,
      password,
      logFile: join(dir, 'log'),
      createDatabase: (name) => ensureDatabase(baseUrl, name),
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
          pgCtl('stop', '-m', 'fast', '-w');
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
