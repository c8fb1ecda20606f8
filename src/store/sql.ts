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
  /**
   * PostgreSQL write transactions: run `fn` once this transaction has committed (never if it rolls back), for news
   * that other connections must be able to see (the delivery worker's wake). Absent: what this connection does next
   * already comes after the commit (SQLite's one writer), so call it at once.
   */
  afterCommit?(fn: () => void): void;
  /**
   * PostgreSQL, a write() transaction of its own: the next statement is the transaction's last, and its COMMIT goes in
   * the same packet (one round trip fewer: the server runs the COMMIT as soon as the statement is done, and nothing
   * waits for the statement's answer to send it; the write resolves once the COMMIT's answer is in). After it, the
   * callback only returns: any further statement is refused, and nothing it does may fail (the COMMIT has gone; a
   * throw then would report a failure of a write that committed). In a batch of writes (store/postgres.ts
   * #runBatch, without savepoints) it means the same promise: the batch sends the next write's statements without
   * waiting for this one's answer, and commits them all together. Absent where there is nothing to gain (SQLite; a
   * batch with savepoints; transaction()): the statement runs as any other.
   */
  commitWithNext?(): void;
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
  /** Reads see committed data only. A run() (or a get() of a writing statement) outside write() is one statement committed on its own. */
  readonly q: Sql;
  /** PostgreSQL: lone writing statements (writeOne), each committed on its own, or together with others when every write connection is busy. SQLite: none (one writer). */
  readonly autocommit?: Sql;
  /**
   * Run `fn` in a write transaction and resolve after it is durably committed; if `fn` throws, none of its changes
   * are kept and only its promise rejects. `fn` must await only `tx`, never the network (it may run again: below).
   * - SQLite: group commit. Jobs share one transaction (each in its own savepoint) and one fsync; the single writer
   *   serialises everything, so a read-modify-write sees every earlier write.
   * - PostgreSQL: a transaction of its own, concurrent with every other write of every daemon (no database-wide
   *   lock; the server group-commits concurrent COMMITs itself). Reads see what was committed when each statement
   *   began: a read-modify-write guards what it depends on with a row lock (`forUpdate`), a keyed lock (`lockKey`),
   *   a conditional update or a unique key. A deadlock runs `fn` again in a new transaction.
   */
  write<T>(fn: (tx: Sql) => Promise<T>): Promise<T>;
  /**
   * A transaction outside the serialised writes, for work that takes row locks and must not wait for the write
   * batches (claiming due deliveries with FOR UPDATE SKIP LOCKED), and that may be lost in a crash without harm (a
   * lease: at worst a resend). SQLite: a write() batch that commits without its own fsync.
   */
  transaction<T>(fn: (tx: Sql) => Promise<T>): Promise<T>;
  /**
   * SQLite: the storage faults (a full disk, an I/O error, a read-only file) that failed write batches since the
   * last commit; /healthz reports the store down while the latest is under a minute old. PostgreSQL: none (a failed write there
   * fails the connection or the statement, and the ping sees the server).
   */
  writeFault?(): WriteFault | undefined;
  /** Tell every daemon on this store (this one included, after the commit) that `inv.key` changed. Call inside write(). */
  invalidate(tx: Sql, inv: Invalidation): Promise<void>;
  /** Receive invalidations (PostgreSQL: LISTEN, from any daemon; SQLite: this process's own). Returns unsubscribe. */
  onInvalidate(fn: (inv: Invalidation) => void): () => void;
  /**
   * Whether every invalidation committed until about now has reached this process: false while it cannot be sure, and
   * what it remembers by them (tokens) must then be read again. PostgreSQL: the LISTEN connection answered a ping
   * within the last LISTEN_FRESH_MS (a connection cut off without a reset hears no NOTIFY and says nothing). SQLite:
   * absent (its invalidations are this process's own, and other processes' commits show in data_version).
   */
  invalidationsCurrent?(): boolean;
  /** Stats of the group commit (bench/commit reads these). */
  readonly stats: { commits: number; jobs: number };
  close(): Promise<void>;
}

/**
 * Serialise the writes of one thing (a stream not yet registered, a node's subscriptions) among daemons: PostgreSQL
 * holds a keyed advisory lock until the transaction ends; SQLite's single writer already serialises. Inside write().
 */
export async function lockKey(tx: Sql, ...keys: string[]): Promise<void> {
  // Several keys: taken in the order given, in one round trip (callers name the narrower one first, always the same way).
  if (tx.dialect === 'postgres')
    await tx.value(`SELECT ${keys.map(() => 'pg_advisory_xact_lock(hashtextextended(CAST(? AS TEXT), 0))').join(', ')}`, keys);
}

/** PostgreSQL: lock the rows read (of `alias` only, in a join) until the transaction ends. SQLite: nothing (one writer). */
export const forUpdate = (q: Sql, alias?: string) => (q.dialect === 'postgres' ? ` FOR UPDATE${alias ? ` OF ${alias}` : ''}` : '');

/**
 * A write that PostgreSQL makes in one statement (a CTE where it takes several rows): run there on its own, one round
 * trip, durable when it returns, no BEGIN/COMMIT; when every write connection is busy, with the others waiting in one
 * transaction, as if each had committed alone (store/postgres.ts #runLoneBatch). SQLite runs `fn` as a job of the
 * group commit (it may take several).
 */
export const writeOne = <T>(store: Store, fn: (q: Sql) => Promise<T>): Promise<T> => (store.autocommit ? fn(store.autocommit) : store.write(fn));

/** `fn` once `tx`'s transaction has committed (never if it rolls back); at once where tx has no afterCommit (SQLite). */
export const onCommit = (tx: Sql, fn: () => void): void => (tx.afterCommit ? tx.afterCommit(fn) : fn());

/** Writes failing since the last commit for a reason of the store's, not the statement's: the first failure's time, the latest one's, its message. */
export interface WriteFault { since: number; last: number; message: string }

/** `prev` with one more failure (its start kept): what both stores record when a write fails so. */
export const faultAgain = (prev: WriteFault | undefined, message: string, now = Date.now()): WriteFault => ({ since: prev?.since ?? now, last: now, message });

/**
 * Statements a PostgreSQL write batch may send as one. A job's last statement (commitWithNext) whose SQL is a key
 * here is held until the batch's other statements are sent; then the held statements go out as one statement, `sql`
 * with `merge`'s parameters, and each job gets the row whose column `key` holds its own parameter `key`. The
 * statement must do for each row exactly what the keyed SQL does for one, in the rows' order.
 */
export interface Mergeable {
  sql: string;
  merge: (params: Array<Record<string, unknown>>) => Record<string, unknown>;
  key: string;
}
export const mergeable = new Map<string, Mergeable>();
