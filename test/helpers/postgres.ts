// A real PostgreSQL 15 server for tests: the machine's Debian server binaries, a temporary directory, a free loopback
// port. The server refuses to run as root, so as root it runs as the `postgres` user (runuser); as anyone else, as
// that user. Clients log in as the role `node_svc` (CREATEDB, not a superuser) with a password, like a real URL.
import { createHash } from 'node:crypto';
import { resolve } from 'node:path';
import pg from 'pg';
import { PG_BIN, pgAvailable, startPostgresServer } from './pg-server.mjs';

export { PG_BIN, pgAvailable };
/** The env var through which the global setup hands the run's server (its base URL) to test files and helpers. */
export const PG_URL_ENV = 'NODE_SVC_TEST_PG_URL';

export interface PostgresServer {
  /** `postgres://node_svc:<password>@127.0.0.1:<port>/postgres` (the maintenance database). */
  baseUrl: string;
  port: number;
  password: string;
  /** The server's log file (errors with their statements), for debugging a failure. */
  logFile: string;
  /** CREATE DATABASE `name` (owned by node_svc) unless it exists; resolves with its URL. */
  createDatabase(name: string): Promise<string>;
  /** Database `name`'s URL through the server's Unix socket (`?host=<its dir>&port=`); the database must exist. */
  socketUrl(name: string): string;
  /** Stop (fast) and start again on the same directory and port, for fault tests. */
  restart(): Promise<void>;
  stop(): Promise<void>;
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
 * initdb + pg_ctl start in a new temp dir: listen on 127.0.0.1 only, the unix socket in the temp dir, fsync on,
 * password (SCRAM) logins over TCP. A watchdog process stops the server and removes the dir if this process dies
 * without calling stop().
 */
export async function startPostgres(opts: { tls?: { cert: string; key: string } } = {}): Promise<PostgresServer> {
  const server = await startPostgresServer({ prefix: 'node-svc-pg-', settings: ['-c max_connections=400', '-c shared_buffers=32MB'], tls: opts.tls });
  const baseUrl = server.url('postgres');
  return {
    baseUrl,
    port: server.port,
    password: server.password,
    logFile: server.logFile,
    createDatabase: (name) => ensureDatabase(baseUrl, name),
    socketUrl: (name) => server.socketUrl(name),
    restart: () => server.restart(),
    stop: () => server.stop(),
  };
}
