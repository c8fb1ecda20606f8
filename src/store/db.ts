import type BetterSqlite3 from 'better-sqlite3';
import { createRequire } from 'node:module';
import { chmodSync, closeSync, existsSync, mkdirSync, openSync } from 'node:fs';
import { join, resolve } from 'node:path';
import { NodeSvcError, unavailable } from '../domain/errors.js';
import { MIGRATIONS } from './migrations/index.js';
import { faultAgain, type Invalidation, type Params, type Sql, type Store, type WriteFault } from './sql.js';

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

/** The SQLite store: the data dir's database file, with its connection for direct (SQLite-only) use. */
export interface SqliteStore extends Store {
  readonly dialect: 'sqlite';
  /** The writer connection (migrations, backup, tests); statements of the store run through `q` and `write`. */
  readonly db: Db;
  /** Both connections (the writer, and the reader once opened): tests read every prepared statement's plan. */
  connections(): Db[];
  readonly path: string;
  /**
   * Moves whenever anything may have changed: a commit of this store, or one of another process (`PRAGMA
   * data_version` of the writer connection, read at most once a millisecond). A read remembered with a mark is
   * current while the mark is the same (the headroom read, store/streams.ts headroomReader).
   */
  changeMark(): number;
  /** `PRAGMA data_version` of the writer connection: moves when another process commits. Read at most once a ms. */
  externalVersion(): number;
}

interface WriteJob {
  fn: (tx: Sql) => Promise<unknown>;
  /** false: losing it in a power cut only means doing it again (delivery claims): no fsync of its own. */
  durable: boolean;
  resolve(v: unknown): void;
  reject(e: unknown): void;
}

/**
 * SQLite's answers that say the store's file or disk cannot do the work, not that a statement is wrong: a 503
 * `unavailable` that names it (the daemon goes on, and what was refused can be sent again once it is fixed), never
 * an internal error. Anything else is returned as it is. SQLITE_FULL was seen with the data dir on a full file
 * system: every write answered 500 `internal error` and /healthz said the store was ok (test/e2e/disk-full.test.ts).
 */
export function storageFault(err: unknown, path: string): unknown {
  const code = (err as { code?: unknown })?.code;
  if ((err as Error)?.name !== 'SqliteError' || typeof code !== 'string') return err;
  const why = code === 'SQLITE_FULL' ? 'its disk is full'
    : code.startsWith('SQLITE_IOERR') ? 'a read or write of its file failed'
      : code.startsWith('SQLITE_READONLY') ? 'its file cannot be written'
        : code.startsWith('SQLITE_BUSY') || code.startsWith('SQLITE_LOCKED') ? 'another process holds its lock'
          : code.startsWith('SQLITE_CORRUPT') || code === 'SQLITE_NOTADB' ? 'its file is damaged'
            : code.startsWith('SQLITE_CANTOPEN') ? 'its file cannot be opened'
              : undefined;
  if (!why) return err;
  return unavailable(`the store (SQLite at ${path}) cannot do this: ${why} (${code})`);
}


type Method = 'get' | 'all' | 'run';
function call(s: BetterSqlite3.Statement, m: Method, p: Params | undefined): unknown {
  if (p === undefined) return s[m]();
  return Array.isArray(p) ? s[m](...(p as unknown[])) : s[m](p);
}

/** A statement on `db`; a storage fault comes out as the 503 that names it (storageFault). */
function callOn(db: Db, sql: string, m: Method, p: Params | undefined, safe = false, pluck = false): unknown {
  try {
    return call(stmt(db, sql, safe, pluck), m, p);
  } catch (err) {
    throw storageFault(err, db.name);
  }
}

/** Statements on one better-sqlite3 connection, as the store interface's promises. */
export class SqliteSql implements Sql {
  readonly dialect = 'sqlite' as const;
  /** `writes`: where a run() goes (the store's group commit) instead of this connection. */
  constructor(private readonly conn: () => Db, private readonly writes?: (sql: string, p?: Params) => Promise<number>) {}
  async get<T>(sql: string, p?: Params, safe = false): Promise<T | undefined> { return callOn(this.conn(), sql, 'get', p, safe) as T | undefined; }
  async all<T>(sql: string, p?: Params, safe = false): Promise<T[]> { return callOn(this.conn(), sql, 'all', p, safe) as T[]; }
  async value<T>(sql: string, p?: Params, safe = false): Promise<T | undefined> { return callOn(this.conn(), sql, 'get', p, safe, true) as T | undefined; }
  async run(sql: string, p?: Params): Promise<number> {
    if (this.writes) return this.writes(sql, p);
    return (callOn(this.conn(), sql, 'run', p) as BetterSqlite3.RunResult).changes;
  }
}

/**
 * Concurrent writes (requests whose bodies arrived in the same turn of the event loop) share one transaction and
 * one fsync. The batch runs on setImmediate: after the I/O that queued it, with no timer added to any request.
 * Jobs run one after another inside it, each in its own savepoint; one batch at a time. A job awaits only its
 * `tx` (statements on this connection, which answer at once), so a batch holds the writer for its CPU time only.
 */
export class WriteQueue {
  #jobs: WriteJob[] = [];
  #scheduled = false;
  #running = false;
  readonly #tx: SqliteSql;
  /** Run after each commit (SQLite's invalidations are this process's own). */
  afterCommit: Array<() => void> = [];
  /** Transactions committed and jobs run through them (bench/commit reads these). */
  readonly stats = { commits: 0, jobs: 0 };
  /** Set when a batch fails for its file or disk (storageFault), cleared by the next commit. */
  fault: WriteFault | undefined;
  constructor(readonly db: Db) {
    this.#tx = new SqliteSql(() => db);
  }

  write<T>(fn: (tx: Sql) => Promise<T>, durable = true): Promise<T> {
    return new Promise<T>((resolve, reject) => {
      this.#jobs.push({ fn, durable, resolve: resolve as (v: unknown) => void, reject });
      this.#kick();
    });
  }

  #kick(): void {
    if (this.#scheduled || this.#running) return;
    this.#scheduled = true;
    setImmediate(() => void this.flush());
  }

  /** Run every queued job in one IMMEDIATE transaction, then settle each promise. */
  async flush(): Promise<void> {
    this.#scheduled = false;
    if (this.#running) return;
    const jobs = this.#jobs;
    this.#jobs = [];
    if (!jobs.length) return;
    this.#running = true;
    const out: Array<{ ok: boolean; v: unknown }> = new Array(jobs.length);
    const db = this.db;
    // A batch of non-durable jobs only commits without its fsync (the next durable commit syncs the WAL with it).
    const relaxed = jobs.every((j) => !j.durable);
    try {
      try {
        if (relaxed) db.pragma('synchronous = NORMAL');
        db.exec('BEGIN IMMEDIATE');
        for (let i = 0; i < jobs.length; i++) {
          db.exec('SAVEPOINT job');
          try {
            out[i] = { ok: true, v: await jobs[i]!.fn(this.#tx) };
            db.exec('RELEASE job');
          } catch (err) {
            const e = storageFault(err, db.name);
            // The batch goes on without this job; if the file or disk failed it, the commit will tell.
            out[i] = { ok: false, v: e };
            db.exec('ROLLBACK TO job');
            db.exec('RELEASE job');
          }
        }
        db.exec('COMMIT');
      } catch (err) {
        if (db.inTransaction) db.exec('ROLLBACK');
        const e = storageFault(err, db.name);
        if (e !== err) this.fault = faultAgain(this.fault, (e as Error).message);
        for (const j of jobs) j.reject(e); // nothing of the batch is on disk
        return;
      }
      this.fault = undefined;
      this.stats.commits++;
      this.stats.jobs += jobs.length;
      const after = this.afterCommit;
      this.afterCommit = [];
      for (const f of after) f();
      for (let i = 0; i < jobs.length; i++) (out[i]!.ok ? jobs[i]!.resolve : jobs[i]!.reject)(out[i]!.v);
    } finally {
      if (relaxed) db.pragma('synchronous = FULL');
      this.#running = false;
      if (this.#jobs.length) this.#kick();
    }
  }
}

export const DB_FILE = 'node-svc.db';

/** Create the data dir (0700) and run `then` in it; what stops that is named (a store error), never an internal one. */
export function ensureDataDir(dataDir: string, then: () => void = () => undefined): void {
  try {
    mkdirSync(dataDir, { recursive: true, mode: 0o700 });
    then();
  } catch (err) {
    // An expected condition (a data dir we may not write, a file where a dir should be): named, not an internal error.
    const code = (err as NodeJS.ErrnoException).code;
    const why = code === 'EACCES' || code === 'EPERM' ? 'permission denied' : code === 'ENOTDIR' || code === 'EEXIST' ? 'a file is in the way' : code === 'EROFS' ? 'read-only file system' : (err as Error).message;
    throw new NodeSvcError('store', `cannot use the data dir ${dataDir}: ${why}`, { hint: 'pass --data-dir (or NODE_SVC_DATA_DIR) pointing at a directory this user can write' });
  }
}

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
export function openSqliteStore(dataDir: string, opts: { readonly?: boolean } = {}): SqliteStore {
  const path = join(dataDir, DB_FILE);
  if (opts.readonly && !existsSync(path))
    throw new NodeSvcError('store', `no node-svc database in ${dataDir}`, { hint: 'run `node-svc nodes add <id>` first, or pass --data-dir' });
  // Read-only (verify, backup, receipts jwks): nothing is created, and no file's mode is touched (a data dir another user owns,
  // readable to this one, is read as it is).
  if (!opts.readonly) ensureDataDir(dataDir, () => { if (!existsSync(path)) closeSync(openSync(path, 'a', 0o600)); });
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
    // Savepoint and statement journals in memory, not in a temporary file. Each job of a write batch runs in its own
    // savepoint, and a statement that fires a trigger (the delivery counters, migration 0090) keeps a statement
    // journal: past 64 KiB SQLite spilled them to a temp file, and every page a statement touched first was written
    // there (a fan-out insert: ~20 us of its ~28 per delivery row). They live for one statement or one job, and hold
    // the pages it changed: kilobytes, a few MB for a large batch. bench/delivery's store cost per delivery (record,
    // claim, attempt in one process): 104-110 us -> 66-67 us.
    db.pragma('temp_store = MEMORY');
    migrate(db, !!opts.readonly);
    if (!opts.readonly) for (const f of [path, `${path}-wal`, `${path}-shm`]) if (existsSync(f)) chmodSync(f, 0o600);
  } catch (err) {
    db.close();
    throw err;
  }
  return sqliteStore(db, dataDir, path, !!opts.readonly);
}

function sqliteStore(db: Db, dataDir: string, path: string, readonly: boolean): SqliteStore {
  const queue = new WriteQueue(db);
  const listeners = new Set<(inv: Invalidation) => void>();
  // Reads outside write() go to a second connection: they see committed data only, never a batch in progress.
  let reader: Db | undefined;
  const readerDb = () => {
    if (readonly) return db;
    if (!reader) {
      const addon = addonPath();
      reader = new Database(path, { readonly: true, timeout: 5000, ...(addon ? { nativeBinding: addon } : {}) });
      reader.pragma('cache_size = -2000'); // 2 MB (the writer has 4): daemon RSS (bench/memory); the OS caches the file too
    }
    return reader;
  };
  const write = <T>(fn: (tx: Sql) => Promise<T>): Promise<T> => {
    if (readonly) return Promise.reject(new NodeSvcError('store', 'this store was opened read-only'));
    return queue.write(fn);
  };
  const q = new SqliteSql(readerDb, (sql, p) => write((tx) => tx.run(sql, p)));
  // Another process's commit (the CLI revoking a token, a backup restore) shows in the writer connection's
  // data_version; asking costs a call into SQLite, so once a millisecond at most (every hot read asks).
  const dataVersion = db.prepare('PRAGMA data_version').pluck();
  let checkedAt = -1;
  let external = 0;
  const externalVersion = () => {
    const now = Date.now();
    if (now !== checkedAt) {
      checkedAt = now;
      external = Number(dataVersion.get());
    }
    return external;
  };
  let seen = { commits: -1, external: -1 };
  let mark = 0;
  const changeMark = () => {
    const e = externalVersion();
    if (queue.stats.commits !== seen.commits || e !== seen.external) {
      seen = { commits: queue.stats.commits, external: e };
      mark++;
    }
    return mark;
  };
  return {
    dialect: 'sqlite',
    description: path,
    db,
    dataDir,
    path,
    q,
    connections: () => (reader ? [db, reader] : [db]),
    write,
    transaction: (fn) => (readonly ? write(fn) : queue.write(fn, false)),
    stats: queue.stats,
    writeFault: () => queue.fault,
    changeMark,
    externalVersion,
    async invalidate(_tx, inv) {
      queue.afterCommit.push(() => { for (const f of listeners) f(inv); });
    },
    onInvalidate(fn) {
      listeners.add(fn);
      return () => listeners.delete(fn);
    },
    async close() {
      reader?.close();
      db.close();
    },
  };
}

// Statements prepared once per connection: preparing is a measurable share of a hot request (bench/http).
const statements = new WeakMap<Db, Map<string, BetterSqlite3.Statement>>();
/** The prepared statement for `sql` on `db`; `safe` reads INTEGER columns as BigInt (money). */
export function stmt(db: Db, sql: string, safe = false, pluck = false): BetterSqlite3.Statement {
  let m = statements.get(db);
  if (!m) statements.set(db, (m = new Map()));
  const key = `${safe ? 'safe:' : ''}${pluck ? 'pluck:' : ''}${sql}`;
  let s = m.get(key);
  if (!s) {
    s = db.prepare(sql);
    if (safe) s.safeIntegers(true);
    if (pluck) s.pluck(true);
    m.set(key, s);
  }
  return s;
}

/** The SQL of every statement prepared on the store's connections so far (a test checks each one's query plan). */
export const preparedSql = (store: SqliteStore): string[] =>
  [...new Set(store.connections().flatMap((db) => [...(statements.get(db)?.keys() ?? [])]).map((k) => k.replace(/^(safe:)?(pluck:)?/, '')))];

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
