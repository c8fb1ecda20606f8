import type BetterSqlite3 from 'better-sqlite3';
import { createRequire } from 'node:module';
import { chmodSync, closeSync, existsSync, mkdirSync, openSync } from 'node:fs';
import { join, resolve } from 'node:path';
import { NodeSvcError } from '../domain/errors.js';
import { MIGRATIONS } from './migrations/index.js';

export type Db = BetterSqlite3.Database;

// Loaded with require (no ESM-to-CJS export scan) and given its addon path (no `bindings` path search):
// together about 8 ms of every CLI start (bench/cli-start).
const require = createRequire(import.meta.url);
const Database = require('better-sqlite3') as typeof BetterSqlite3;
let nativeBinding: string | undefined = process.env.NODE_SVC_SQLITE_ADDON;
function addonPath(): string | undefined {
  if (nativeBinding) return nativeBinding;
  try {
    return (nativeBinding = require.resolve('better-sqlite3/build/Release/better_sqlite3.node'));
  } catch {
    return undefined; // fall back to better-sqlite3's own search
  }
}

export interface Store {
  db: Db;
  dataDir: string;
  path: string;
  /**
   * Group commit: run `fn` in the next shared write transaction and resolve after that transaction is durably
   * committed (synchronous=FULL), so an answer sent after it still means "on disk". `fn` runs in its own savepoint:
   * if it throws, only its changes are undone and only its promise rejects.
   */
  write<T>(fn: () => T): Promise<T>;
  close(): void;
}

interface WriteJob {
  fn: () => unknown;
  resolve(v: unknown): void;
  reject(e: unknown): void;
}

/**
 * Concurrent writes (requests whose bodies arrived in the same turn of the event loop) share one transaction and
 * one fsync. The batch runs on setImmediate: after the I/O that queued it, with no timer added to any request.
 */
export class WriteQueue {
  #jobs: WriteJob[] = [];
  #scheduled = false;
  /** Transactions committed and jobs run through them (bench/commit reads these). */
  readonly stats = { commits: 0, jobs: 0 };
  constructor(readonly db: Db) {}

  write<T>(fn: () => T): Promise<T> {
    return new Promise<T>((resolve, reject) => {
      this.#jobs.push({ fn, resolve: resolve as (v: unknown) => void, reject });
      if (!this.#scheduled) {
        this.#scheduled = true;
        setImmediate(() => this.flush());
      }
    });
  }

  /** Run every queued job in one IMMEDIATE transaction, then settle each promise. */
  flush(): void {
    this.#scheduled = false;
    const jobs = this.#jobs;
    this.#jobs = [];
    if (!jobs.length) return;
    const out: Array<{ ok: boolean; v: unknown }> = new Array(jobs.length);
    try {
      this.db.transaction(() => {
        for (let i = 0; i < jobs.length; i++) {
          try {
            out[i] = { ok: true, v: this.db.transaction(jobs[i]!.fn)() }; // nested: a savepoint
          } catch (err) {
            out[i] = { ok: false, v: err };
          }
        }
      }).immediate();
    } catch (err) {
      for (const j of jobs) j.reject(err); // nothing of the batch is on disk
      return;
    }
    this.stats.commits++;
    this.stats.jobs += jobs.length;
    for (let i = 0; i < jobs.length; i++) (out[i]!.ok ? jobs[i]!.resolve : jobs[i]!.reject)(out[i]!.v);
  }
}

export const DB_FILE = 'node-svc.db';

/** Data dir: --data-dir, else NODE_SVC_DATA_DIR, else ./data (flag > environment > default, as every setting). */
export function resolveDataDir(flag?: string): string {
  return resolve(flag || process.env.NODE_SVC_DATA_DIR || 'data');
}

/** SQLite's online backup of any database file into `dest` (reads the source's WAL too, whatever its schema). */
export async function copyDatabase(source: string, dest: string): Promise<void> {
  const addon = addonPath();
  const db = new Database(source, { readonly: true, fileMustExist: true, ...(addon ? { nativeBinding: addon } : {}) });
  try {
    await db.backup(dest);
  } finally {
    db.close();
  }
}

/** Is `file` a node-svc database this build can open? Checked before a restore touches anything. */
export function validateBackup(file: string): { schema: number } {
  let db: Db;
  try {
    const addon = addonPath();
    db = new Database(file, { readonly: true, fileMustExist: true, ...(addon ? { nativeBinding: addon } : {}) });
  } catch (err) {
    throw new NodeSvcError('store', `cannot open ${file} as a database (${(err as Error).message})`, { hint: 'give a file written by node-svc backup' });
  }
  try {
    let schema: number;
    let ok: string;
    let tables: number;
    try {
      schema = db.pragma('user_version', { simple: true }) as number;
      ok = db.pragma('quick_check', { simple: true }) as string;
      tables = (db.prepare("SELECT COUNT(*) AS n FROM sqlite_master WHERE type = 'table' AND name IN ('nodes', 'streams', 'events')").get() as { n: number }).n;
    } catch (err) {
      throw new NodeSvcError('store', `${file} is not a node-svc backup (${(err as Error).message})`);
    }
    if (tables !== 3 || schema < 10) throw new NodeSvcError('store', `${file} is not a node-svc backup (no node-svc tables)`);
    if (schema > LATEST_VERSION) throw new NodeSvcError('store', `${file} was written by a newer node-svc (schema ${schema}; this build knows up to ${LATEST_VERSION})`, { hint: 'upgrade node-svc first' });
    if (ok !== 'ok') throw new NodeSvcError('store', `${file} is damaged (integrity check: ${ok})`);
    return { schema };
  } finally {
    db.close();
  }
}

/**
 * Open (creating if needed) the store: dir 0700, database 0600, WAL, foreign keys, busy timeout,
 * then migrate. A database written by a newer node-svc is refused before anything touches it.
 */
export function openStore(dataDir: string, opts: { readonly?: boolean } = {}): Store {
  const path = join(dataDir, DB_FILE);
  if (opts.readonly && !existsSync(path))
    throw new NodeSvcError('store', `no node-svc database in ${dataDir}`, { hint: 'run `node-svc nodes add <id>` first, or pass --data-dir' });
  try {
    mkdirSync(dataDir, { recursive: true, mode: 0o700 });
    if (!existsSync(path)) closeSync(openSync(path, 'a', 0o600));
  } catch (err) {
    // An expected condition (a data dir we may not write, a file where a dir should be): named, not an internal error.
    const code = (err as NodeJS.ErrnoException).code;
    const why = code === 'EACCES' || code === 'EPERM' ? 'permission denied' : code === 'ENOTDIR' || code === 'EEXIST' ? 'a file is in the way' : code === 'EROFS' ? 'read-only file system' : (err as Error).message;
    throw new NodeSvcError('store', `cannot use the data dir ${dataDir}: ${why}`, { hint: 'pass --data-dir (or NODE_SVC_DATA_DIR) pointing at a directory this user can write' });
  }
  let db: Db;
  try {
    const addon = addonPath();
    db = new Database(path, { readonly: !!opts.readonly, timeout: 5000, ...(addon ? { nativeBinding: addon } : {}) });
  } catch (err) {
    throw new NodeSvcError('store', `cannot open ${path}: ${(err as Error).message}`);
  }
  try {
    if (!opts.readonly) {
      db.pragma('journal_mode = WAL');
      db.pragma('synchronous = FULL');
    }
    db.pragma('foreign_keys = ON');
    db.pragma('cache_size = -4000'); // 4 MB page cache (better-sqlite3 builds with 16 MB): daemon RSS; the OS caches the file too
    migrate(db, !!opts.readonly);
    for (const f of [path, `${path}-wal`, `${path}-shm`]) if (existsSync(f)) chmodSync(f, 0o600);
  } catch (err) {
    db.close();
    throw err;
  }
  let queue: WriteQueue | undefined;
  return { db, dataDir, path, write: (fn) => (queue ??= new WriteQueue(db)).write(fn), close: () => db.close() };
}

// Statements prepared once per connection: preparing is a measurable share of a hot request (bench/http).
const statements = new WeakMap<Db, Map<string, BetterSqlite3.Statement>>();
/** The prepared statement for `sql` on `db`; `safe` reads INTEGER columns as BigInt (money). */
export function stmt(db: Db, sql: string, safe = false): BetterSqlite3.Statement {
  let m = statements.get(db);
  if (!m) statements.set(db, (m = new Map()));
  const key = safe ? `safe:${sql}` : sql;
  let s = m.get(key);
  if (!s) {
    s = db.prepare(sql);
    if (safe) s.safeIntegers(true);
    m.set(key, s);
  }
  return s;
}

/** The SQL of every statement prepared through stmt() on `db` so far (a test checks each one's query plan). */
export const preparedSql = (db: Db): string[] => [...new Set([...(statements.get(db)?.keys() ?? [])].map((k) => k.replace(/^safe:/, '')))];

export const LATEST_VERSION = MIGRATIONS[MIGRATIONS.length - 1]!.version;

/** Apply pending migrations in one transaction; PRAGMA user_version records where we are. */
export function migrate(db: Db, readonly = false): void {
  const current = db.pragma('user_version', { simple: true }) as number;
  if (current > LATEST_VERSION)
    throw new NodeSvcError('store', `this database was written by a newer node-svc (schema ${current}; this build knows up to ${LATEST_VERSION})`, {
      hint: 'upgrade node-svc, or restore a backup made by this version',
    });
  const pending = MIGRATIONS.filter((m) => m.version > current);
  if (!pending.length) return;
  if (readonly) throw new NodeSvcError('store', `database schema ${current} needs migrating to ${LATEST_VERSION}`, { hint: 'run any node-svc write command (or the daemon) once' });
  db.transaction(() => {
    for (const m of pending) m.up(db);
    db.pragma(`user_version = ${LATEST_VERSION}`);
  }).immediate();
}
