// The store interface: what the service, rails, delivery and ops layers see of the database, whichever it is
// (SQLite in the data dir, or PostgreSQL shared by several daemons). Only store/ modules write SQL against it.
//
// The SQL every store module writes is the common dialect of SQLite 3.45 and PostgreSQL 15: `?` or `@name`
// placeholders (PostgreSQL's executor rewrites them to $n), ON CONFLICT, RETURNING, CASE instead of the scalar
// MAX()/MIN() and boolean sums. Where the two truly differ a module asks `dialect`.

export type Dialect = 'sqlite' | 'postgres';
/** Positional (`?`) or named (`@name`, keys without the @) parameters. */
export type Params = readonly unknown[] | Readonly<Record<string, unknown>>;

/**
 * One way to run statements: the store's own (reads of committed data; each run() its own committed write) or a
 * transaction's. Integers come back as JS numbers unless `safe`, where every integer column is a BigInt (money:
 * SQLite INTEGER and PostgreSQL BIGINT hold int64, a JS number does not). Booleans come back as 1/0 on both.
 */
export interface Sql {
  readonly dialect: Dialect;
  get<T = Record<string, unknown>>(sql: string, params?: Params, safe?: boolean): Promise<T | undefined>;
  all<T = Record<string, unknown>>(sql: string, params?: Params, safe?: boolean): Promise<T[]>;
  /** The first column of the first row (undefined: no row). */
  value<T = unknown>(sql: string, params?: Params, safe?: boolean): Promise<T | undefined>;
  /** Rows changed. */
  run(sql: string, params?: Params): Promise<number>;
}

/** A message from a write made anywhere (this daemon, another daemon, the CLI) that caches must drop `key`. */
export interface Invalidation {
  /** `*`: drop every cache (PostgreSQL: the LISTEN connection was lost and reconnected, messages may be missed). */
  topic: 'tokens' | 'keys' | 'nodes' | 'subscriptions' | '*';
  key: string;
}

export interface Store {
  readonly dialect: Dialect;
  /** What to call the store in messages: the data dir's database path, or the PostgreSQL URL without its password. */
  readonly description: string;
  /** The data dir (SQLite's home; with PostgreSQL, only for files such as the dev sandbox state). */
  readonly dataDir: string;
  /** Reads see committed data only. A run() outside write() is one statement committed on its own. */
  readonly q: Sql;
  /**
   * Group commit: run `fn` in the next shared write transaction and resolve after that transaction is durably
   * committed. `fn` runs in its own savepoint: if it throws, only its changes are undone and only its promise
   * rejects. Writes are serialised database-wide (SQLite's writer lock; PostgreSQL: one advisory lock taken by
   * each batch), so a read-modify-write in `fn` sees every write committed before it, from any daemon, and
   * event sequence numbers commit in order. `fn` must await only `tx`, never the network.
   */
  write<T>(fn: (tx: Sql) => Promise<T>): Promise<T>;
  /**
   * A transaction outside the serialised writes, for work that takes row locks and must not wait for the write
   * batches (claiming due deliveries with FOR UPDATE SKIP LOCKED), and that may be lost in a crash without harm (a
   * lease: at worst a resend). SQLite: a write() batch that commits without its own fsync.
   */
  transaction<T>(fn: (tx: Sql) => Promise<T>): Promise<T>;
  /** Tell every daemon on this store (this one included, after the commit) that `inv.key` changed. Call inside write(). */
  invalidate(tx: Sql, inv: Invalidation): Promise<void>;
  /** Receive invalidations (PostgreSQL: LISTEN, from any daemon; SQLite: this process's own). Returns unsubscribe. */
  onInvalidate(fn: (inv: Invalidation) => void): () => void;
  /** Stats of the group commit (bench/commit reads these). */
  readonly stats: { commits: number; jobs: number };
  close(): Promise<void>;
}
