// The store on PostgreSQL (`--store postgres://…`): several daemons share one database. The SQL the store modules
// write is the common dialect (src/store/sql.ts); here `?` / `@name` become $n, results come back as SQLite gives
// them, each write() is a transaction of its own (no database-wide lock), and invalidations travel by LISTEN/NOTIFY.
import { createHash } from 'node:crypto';
import { readFileSync } from 'node:fs';
import { isIP } from 'node:net';
import pg from 'pg';
import { NodeSvcError, unavailable } from '../domain/errors.js';
import { MIGRATIONS } from './migrations/index.js';
import { INLINE_COUNTS } from './migrations/0230-inline-insert-counts.js';
import { faultAgain, mergeable, type Invalidation, type Mergeable, type Params, type Sql, type Store, type WriteFault } from './sql.js';

export interface PostgresStore extends Store {
  readonly dialect: 'postgres';
  /**
   * Moves when a transaction of this daemon commits or fails (write(), transaction()) and when a lone statement
   * through `q.run` or `autocommit` ends: a read remembered with a mark is not current once it moved. Writes of other
   * daemons do not move it (store/streams.ts headroomRow keeps a read for one millisecond at most for that reason). A
   * writing statement sent with `q.get`/`q.all`/`q.value` (the read connections) would not move it: write with run(),
   * writeOne or write().
   */
  changeMark(): number;
  /** Transactions committed and the jobs in them; batches rolled back and run again one by one (lone statements, or jobs without savepoints: #runBatch). */
  readonly stats: { commits: number; jobs: number; rolledBack: number };
}

export interface PostgresStoreOptions {
  /** The data dir (files such as the dev sandbox state; the data itself is in the database). */
  dataDir: string;
  /** Refuse pending migrations and run every session read-only. */
  readonly?: boolean;
  /**
   * Write transactions at once, each on a connection of the pool (default 10; the daemon's --store-pool), besides the
   * read and LISTEN connections. Writes that find them all running wait and then commit together in one transaction
   * (#runBatch): one COMMIT and one WAL flush for the group.
   */
  poolSize?: number;
  /**
   * Reads in flight on each read connection before another is opened (up to three; default 8): a CLI command's burst
   * of reads goes out on the connection it opened the store on, one login. The daemon passes 1: a read that overlaps
   * another gets a connection of its own, so one slow read (a page of events) holds up no other.
   */
  readsPerConnection?: number;
  /**
   * Milliseconds a statement may take (default 10,000; the daemon's --store-timeout): the sessions' statement_timeout,
   * so the server cancels it (503, nothing of it applied). An answer still missing ANSWER_GRACE_MS later closes the
   * connection (its transaction, if any, ends there) with a 503 that says so: a database cut off by the network
   * without a reset (a partition, a NAT or firewall that forgot the connection, a failover behind the same address)
   * answers nothing and closes nothing, and without this a request waited for TCP's own timers, a quarter of an hour or
   * more. Migrations are not bounded (a long one, or another daemon's, is waited for).
   */
  answerTimeoutMs?: number;
}

/** The default of PostgresStoreOptions.answerTimeoutMs. */
export const DEFAULT_ANSWER_TIMEOUT_MS = 10_000;
/** How much longer than the server's statement_timeout the client waits for an answer before closing the connection. */
const ANSWER_GRACE_MS = 1000;

const LATEST_VERSION = MIGRATIONS[MIGRATIONS.length - 1]!.version;
/** pg_advisory_xact_lock key of migrations ('node-svc' in ASCII, + 1). Writes take no database-wide lock. */
export const MIGRATE_LOCK_KEY = '7957654319744972644';
/** A write that deadlocked (or failed serialization) runs again, up to this many times in all. */
const WRITE_RETRIES = 5;
/** Shared pipelined connections for reads, per store (besides the pool of `poolSize` for writes). */
const READ_CONNECTIONS = 3;
/** The NOTIFY channel of invalidations. */
export const CHANNEL = 'node_svc';

// ---------------------------------------------------------------------------------------------------------------
// Connection settings

interface Target {
  config: pg.ClientConfig;
  /** postgres://user@host:port/db: no password, no query. */
  description: string;
  /** host:port/db, for messages. */
  where: string;
  /** Strings never to show (the password, raw and URL-encoded; the whole URL). */
  secrets: string[];
}

const KNOWN_PARAMS = new Set(['sslmode', 'sslrootcert', 'sslcert', 'sslkey', 'application_name', 'connect_timeout', 'host', 'port', 'user', 'dbname']);
const isLoopback = (host: string) => host === 'localhost' || host.startsWith('/') || host === '::1' || /^127\./.test(host);

/**
 * Parse the store URL ourselves (pg's parser warns, and maps sslmode in a way that differs from libpq) and build
 * pg's settings. The URL is a secret: no message here repeats it, only the parameter names and host.
 */
export function parsePostgresUrl(url: string): Target {
  let u: URL;
  try {
    u = new URL(url);
  } catch {
    throw new NodeSvcError('config', 'the store URL is not a valid postgres:// URL', { hint: 'postgres://user:password@host:5432/database?sslmode=verify-full' });
  }
  if (u.protocol !== 'postgres:' && u.protocol !== 'postgresql:')
    throw new NodeSvcError('config', `the store URL must start with postgres:// (got ${u.protocol}//)`, { hint: 'postgres://user:password@host:5432/database' });
  const q = u.searchParams;
  for (const k of q.keys())
    if (!KNOWN_PARAMS.has(k))
      throw new NodeSvcError('config', `the store URL has an unknown parameter "${k}"`, { hint: `known: ${[...KNOWN_PARAMS].join(', ')}` });
  const decode = (part: string, what: string) => {
    try {
      return decodeURIComponent(part);
    } catch {
      throw new NodeSvcError('config', `the store URL's ${what} is not valid percent-encoding`, { hint: 'encode reserved characters, e.g. @ as %40 and % as %25' });
    }
  };
  const password = decode(u.password, 'password');
  const user = q.get('user') ?? decode(u.username, 'user name');
  // A Unix socket's directory: `?host=/dir`, or (libpq's other spelling) percent-encoded where the host goes,
  // `postgres://%2Fvar%2Frun%2Fpostgresql/db`. Any other host is taken as written.
  const authority = u.hostname.replace(/^\[(.*)\]$/, '$1');
  const host = q.get('host') ?? (/^%2f/i.test(authority) ? decode(authority, 'socket directory') : authority || 'localhost');
  const portText = q.get('port') ?? (u.port || '5432');
  const port = Number(portText);
  if (!Number.isInteger(port) || port < 1 || port > 65535) throw new NodeSvcError('config', `the store URL's port is not a port number (${portText})`);
  const database = q.get('dbname') ?? (decode(u.pathname.replace(/^\//, ''), 'database name') || user);
  const socket = host.startsWith('/');
  const hostText = isIP(host) === 6 ? `[${host}]` : host;
  // A socket is named as libpq names it (its file), and described by a URL that reaches the same database.
  const where = socket ? `${host.replace(/\/$/, '')}/.s.PGSQL.${port} (Unix socket), database ${database}` : `${hostText}:${port}/${database}`;
  const config: pg.ClientConfig = {
    host, port, database, application_name: q.get('application_name') ?? 'node-svc', keepAlive: true,
    ...(user ? { user } : {}), ...(password ? { password } : {}),
  };
  const timeout = q.get('connect_timeout');
  // libpq's connect_timeout is in seconds; pg's in ms. Default 5 s: a request never waits long for a dead database.
  config.connectionTimeoutMillis = timeout !== null && Number(timeout) > 0 ? Math.round(Number(timeout) * 1000) : 5000;
  config.ssl = tlsSettings(q, host);
  const secrets = [password, u.password, url].filter((s) => s.length >= 1);
  const who = user ? `${encodeURIComponent(user)}@` : '';
  const description = socket
    ? `postgres://${who}localhost/${encodeURIComponent(database)}?host=${encodeURIComponent(host)}&port=${port}`
    : `postgres://${who}${hostText}:${port}/${database}`;
  return { config, description, where, secrets };
}

/**
 * sslmode as libpq defines it, written out for Node's TLS (pg 8 on its own treats require and verify-ca like
 * verify-full, and has no fallback to plain text):
 * - disable: no TLS.
 * - require: encrypted, the server's certificate is not checked (anyone on the path can pretend to be the server),
 *   unless sslrootcert is given: then as verify-ca (libpq does the same).
 * - verify-ca: encrypted; the certificate must chain to sslrootcert (required here); the host name is not checked.
 * - verify-full: encrypted; the certificate must chain to sslrootcert (or the system's CAs when none is given) AND
 *   name the host we connect to (Node's checkServerIdentity: DNS or IP subjectAltName). Use this for remote databases.
 * - prefer / allow (libpq may fall back to plain text, unauthenticated): refused, say which one you mean.
 * - not given: plain text to a loopback host or unix socket; refused for any other host (fail closed: say
 *   sslmode=verify-full, or sslmode=disable on a network you trust).
 */
function tlsSettings(q: URLSearchParams, host: string): pg.ClientConfig['ssl'] {
  const mode = q.get('sslmode');
  const read = (param: string): string | undefined => {
    const path = q.get(param);
    if (path === null) return undefined;
    try {
      return readFileSync(path, 'utf8');
    } catch (err) {
      throw new NodeSvcError('config', `cannot read the store URL's ${param} ${path}: ${(err as NodeJS.ErrnoException).code ?? (err as Error).message}`);
    }
  };
  const ca = read('sslrootcert');
  const cert = read('sslcert');
  const key = read('sslkey');
  const client = { ...(cert ? { cert } : {}), ...(key ? { key } : {}) };
  const noHostCheck = () => undefined;
  switch (mode) {
    case null:
      if (isLoopback(host)) return false;
      throw new NodeSvcError('config', `the store URL names the remote host ${host} without sslmode`, {
        hint: 'add ?sslmode=verify-full (with sslrootcert=<ca file> for a private CA), or ?sslmode=disable on a network you trust',
      });
    case 'disable':
      return false;
    case 'require':
      return ca ? { ...client, ca, rejectUnauthorized: true, checkServerIdentity: noHostCheck } : { ...client, rejectUnauthorized: false };
    case 'verify-ca':
      if (!ca) throw new NodeSvcError('config', 'sslmode=verify-ca needs sslrootcert=<file of the CA that signed the server certificate>', { hint: 'or use sslmode=verify-full' });
      return { ...client, ca, rejectUnauthorized: true, checkServerIdentity: noHostCheck };
    case 'verify-full':
      return { ...client, ...(ca ? { ca } : {}), rejectUnauthorized: true };
    case 'prefer':
    case 'allow':
      throw new NodeSvcError('config', `sslmode=${mode} may fall back to an unencrypted connection and is not supported`, { hint: 'use sslmode=verify-full (or require, or disable on a network you trust)' });
    default:
      throw new NodeSvcError('config', `unknown sslmode "${mode}"`, { hint: 'disable, require, verify-ca or verify-full' });
  }
}

// ---------------------------------------------------------------------------------------------------------------
// Statements: placeholders and values

interface Compiled {
  name: string;
  text: string;
  /** Named parameters in $n order, or null for positional `?`. */
  names: string[] | null;
  count: number;
}

const compiled = new Map<string, Compiled>();
const MAX_COMPILED = 5000; // SQL strings are templates; the bound only matters if some caller builds them freely

/** `?` → $1.. in order; `@name` → one $n per distinct name. Quoted literals, identifiers and comments are skipped. */
export function compileSql(sql: string): Compiled {
  const hit = compiled.get(sql);
  if (hit) return hit;
  let out = '';
  let positional = 0;
  const names: string[] = [];
  let i = 0;
  const n = sql.length;
  while (i < n) {
    const c = sql[i]!;
    if (c === "'" || c === '"') {
      let j = i + 1;
      for (;;) {
        if (j >= n) break;
        if (sql[j] === c) {
          if (sql[j + 1] === c) { j += 2; continue; } // '' inside a literal
          break;
        }
        j++;
      }
      out += sql.slice(i, j + 1);
      i = j + 1;
    } else if (c === '-' && sql[i + 1] === '-') {
      const j = sql.indexOf('\n', i);
      const end = j < 0 ? n : j;
      out += sql.slice(i, end);
      i = end;
    } else if (c === '?') {
      // SQLite's ?NNN would become $n followed by digits: a different parameter, silently.
      if (/[0-9]/.test(sql[i + 1] ?? '')) throw new Error('numbered ?NNN parameters are not supported: use ? or @name');
      out += `$${++positional}`;
      i++;
    } else if (c === '@' && /[A-Za-z_]/.test(sql[i + 1] ?? '')) {
      let j = i + 1;
      while (j < n && /[A-Za-z0-9_]/.test(sql[j]!)) j++;
      const name = sql.slice(i + 1, j);
      let k = names.indexOf(name);
      if (k < 0) k = names.push(name) - 1;
      out += `$${k + 1}`;
      i = j;
    } else {
      out += c;
      i++;
    }
  }
  if (positional && names.length) throw new Error('a statement mixes ? and @name parameters');
  const c: Compiled = {
    name: `ns_${createHash('sha1').update(out).digest('hex').slice(0, 24)}`,
    text: out,
    names: names.length ? names : null,
    count: positional || names.length,
  };
  if (compiled.size >= MAX_COMPILED) compiled.clear();
  compiled.set(sql, c);
  return c;
}

const ordinal = (n: number) => `${n}${n % 10 === 1 && n % 100 !== 11 ? 'st' : n % 10 === 2 && n % 100 !== 12 ? 'nd' : n % 10 === 3 && n % 100 !== 13 ? 'rd' : 'th'}`;

const toParam = (v: unknown): unknown => (typeof v === 'bigint' ? v.toString() : v === undefined ? null : v);

function bind(c: Compiled, params: Params | undefined): unknown[] {
  if (c.names) {
    if (!params || Array.isArray(params)) throw new Error(`named parameters expected (@${c.names[0]})`);
    const obj = params as Record<string, unknown>;
    return c.names.map((k) => {
      if (!(k in obj)) throw new Error(`missing named parameter "${k}"`);
      return toParam(obj[k]);
    });
  }
  if (!c.count) return [];
  if (!Array.isArray(params)) throw new Error('positional parameters expected (?)');
  return params.map(toParam);
}

// Type OIDs converted per query (safe: BigInt; else number). int8 and numeric arrive as strings (our parsers), so
// no precision is lost before we choose.
const INT2 = 21, INT4 = 23, INT8 = 20, NUMERIC = 1700, BOOL = 16;
const identity = (s: string) => s;
const bool01 = (s: string) => (s === 't' ? 1 : 0);
/** The pool's own type parsers (not pg's global ones, which other code in the process may rely on). */
const TYPES: pg.CustomTypesConfig = {
  getTypeParser: ((oid: number, format?: string) => {
    if (oid === INT8 || oid === NUMERIC) return identity;
    if (oid === BOOL) return bool01; // SQLite has no booleans: comparisons are 1/0 there
    return pg.types.getTypeParser(oid, format as 'text');
  }) as pg.CustomTypesConfig['getTypeParser'],
};

function convertRows(res: pg.QueryResult, safe: boolean): Record<string, unknown>[] {
  const rows = res.rows as Record<string, unknown>[];
  if (!rows.length) return rows;
  const conv: Array<[string, (v: unknown) => unknown]> = [];
  for (const f of res.fields) {
    const t = f.dataTypeID;
    if (safe) {
      if (t === INT2 || t === INT4) conv.push([f.name, (v) => BigInt(v as number)]);
      else if (t === INT8) conv.push([f.name, (v) => BigInt(v as string)]);
      else if (t === NUMERIC) conv.push([f.name, (v) => (/^-?\d+$/.test(v as string) ? BigInt(v as string) : Number(v))]);
    } else if (t === INT8 || t === NUMERIC) conv.push([f.name, (v) => Number(v)]);
  }
  if (!conv.length) return rows;
  for (const r of rows) for (const [k, fn] of conv) if (r[k] !== null && r[k] !== undefined) r[k] = fn(r[k]);
  return rows;
}

// ---------------------------------------------------------------------------------------------------------------
// Errors

// Connection-level failures: the database cannot be used now (503, retry), as opposed to an error of the statement.
const NET_CODES = new Set(['ECONNREFUSED', 'ECONNRESET', 'ETIMEDOUT', 'EPIPE', 'ENOTFOUND', 'EAI_AGAIN', 'EHOSTUNREACH', 'ENETUNREACH', 'ECONNABORTED']);
const PG_UNAVAILABLE = new Set(['57P01', '57P02', '57P03', '53300', '08000', '08001', '08003', '08004', '08006', '08007']);
/**
 * Close the connection rather than pool it after this error of one of its queries: the connection is lost, or pg
 * refused the query itself (a value it could not send), which leaves its cache of prepared statements unsure.
 */
const closeAfter = (err: unknown): boolean => isConnectionError(err) || !(err instanceof pg.DatabaseError);
const isConnectionError = (err: unknown): boolean => {
  const e = err as { code?: unknown; message?: unknown };
  if (typeof e?.code === 'string' && (NET_CODES.has(e.code) || PG_UNAVAILABLE.has(e.code))) return true;
  if (isReadOnly(err)) return true;
  // The server's own error is known by its code: its message may quote the statement's values, any words included.
  if (err instanceof pg.DatabaseError) return false;
  const m = typeof e?.message === 'string' ? e.message : '';
  return /Connection terminated|timeout exceeded when trying to connect|not queryable|Client was closed|connection error/i.test(m) || isAnswerTimeout(err);
};
/**
 * 25006 read_only_sql_transaction: the server takes no writes. A standby (a failover in progress, or a name that now
 * points at a replica), or a database set read-only. Its connection is closed rather than pooled, so the next write
 * connects again, and reaches the new primary once the failover is done.
 */
const isReadOnly = (err: unknown): boolean => err instanceof pg.DatabaseError && err.code === '25006';
/** pg's error for a statement not answered within query_timeout (PostgresStoreOptions.answerTimeoutMs). */
const isAnswerTimeout = (err: unknown): boolean => !(err instanceof pg.DatabaseError) && (err as Error)?.message === 'Query read timeout';

// ---------------------------------------------------------------------------------------------------------------
// The store

/** A write waiting for a connection: it runs in the next batch. */
interface Waiting {
  fn: (tx: Sql) => Promise<unknown>;
  resolve(v: unknown): void;
  reject(err: unknown): void;
}
/** A lone statement (autocommit: writeOne, q.run) waiting for a connection. */
interface WaitingLone {
  config: pg.QueryConfig;
  resolve(v: pg.QueryResult): void;
  reject(err: unknown): void;
}
/**
 * How long a batch of lone statements waits on a row lock before it gives up (and each runs again alone). A batch
 * holds its rows to its COMMIT, so two of them can hold each other's (two vouchers of one stream in two batches, a
 * counter slot shared by two sessions): PostgreSQL would find that deadlock after deadlock_timeout (1 s by default).
 * A batch runs in one packet, so a lock another holds is released within its run and flush: far below this.
 */
const LONE_LOCK_TIMEOUT_MS = 200;
/**
 * A COMMIT the server refused with one of these rolled the transaction back (nothing of it committed): a deferred
 * key or check (class 23), a serialization failure or deadlock (class 40), a lock or statement timeout, a cancel.
 */
const rolledBackBy = (err: unknown) => {
  const code = err instanceof pg.DatabaseError ? err.code : undefined;
  return typeof code === 'string' && (code.startsWith('23') || code.startsWith('40') || code === '55P03' || code === '57014');
};
/**
 * Jobs in one batch at most. Each job's savepoint that writes is a subtransaction with an id of its own, and
 * PostgreSQL keeps up to 64 of a transaction's in shared memory (past that, every snapshot of every session looks
 * them up on disk): well below that.
 */
const BATCH_JOBS = 32;
/** How long after a job failed in a batch the batches give each job a savepoint (#runBatch). */
export const SAVEPOINTS_HOLD_MS = 10_000;
/** #runBatch: a job failed in a batch without savepoints (every job of it runs again alone). */
const BATCH_ROLLED_BACK = new Error('batch rolled back');
/**
 * The 503s PgStore.wrap() made of what the connection or the server said (lost, no answer, a statement canceled by its
 * timeout, a server that takes no writes): a job's own 503 (a rail that cannot confirm funding) says nothing of the
 * connection, and is not one of them.
 */
const fromConnection = new WeakSet<object>();
/** The database cannot be used on this connection (its error, or the 503 wrap() made of one). */
const lostConnection = (err: unknown) => isConnectionError(err) || (err instanceof NodeSvcError && fromConnection.has(err));
/** A deadlock or a serialization failure: the write runs again in a new transaction. */
const isRetryable = (err: unknown) => {
  const code = (err as { code?: unknown })?.code;
  return code === '40P01' || code === '40001';
};

/** A job's last statement, held by its write batch to go out with the others of its kind (#sendHeld). */
interface Held { m: Mergeable; params: Record<string, unknown>; config: pg.QueryConfig; resolve: (r: pg.QueryResult) => void; reject: (e: unknown) => void }

interface Runner {
  query(config: pg.QueryConfig): Promise<pg.QueryResult>;
}

/** Clients whose write transaction has begun (its BEGIN was sent with its first statement). */
const began = new WeakSet<pg.PoolClient>();

/**
 * A transaction's runner. The pool's clients pipeline, and what is issued in one turn of the event loop goes out in
 * one packet: BEGIN with the transaction's first statement (never a round trip of its own), and statements a write
 * issues together (Promise.all) with one another. A write that ran no statement sends neither BEGIN nor COMMIT.
 */
function beginsWithFirst(client: pg.PoolClient, beginSql: string, early?: EarlyCommit): Runner {
  return {
    query: async (config) => {
      corkUntil(client, process.nextTick);
      const first = began.has(client) ? undefined : client.query(beginSql);
      began.add(client);
      const res = client.query(config);
      // The transaction's last statement (Sql.commitWithNext): its COMMIT in the same packet. Its answer is read by
      // #inTransaction; a rejection is handled there (caught here only so that it is never unhandled meanwhile).
      if (early?.next) {
        early.next = false;
        // Its answer timer starts now, with the statement still to run: the statement's budget and the COMMIT's own.
        early.commit = client.query({ text: 'COMMIT', query_timeout: early.timeoutMs } as pg.QueryConfig);
        early.commit.catch(() => undefined);
      }
      if (!first) return res;
      const [, r] = await Promise.all([first, res]);
      return r;
    },
  };
}

/** A write's COMMIT sent with its last statement (Sql.commitWithNext): asked for, then sent. */
interface EarlyCommit {
  next: boolean;
  /** The COMMIT's answer timeout (pg's query_timeout), counted from when it is sent with the statement. */
  timeoutMs: number;
  commit?: Promise<pg.QueryResult>;
}

/**
 * Reads share a few long-lived pipelined connections: a read is written at once, without a pool checkout and without
 * waiting for the read before it, and the reads of one turn of the event loop go out in one packet (their answers
 * come back together). Reads never wait on a lock (MVCC), so one slow to start cannot hold the others up for long.
 * A connection that fails is dropped (its reads fail as the pool's would: 503) and opened again by the next read.
 */
class Pipelines {
  readonly #slots: Array<Promise<pg.Client> | undefined>;
  /** Reads in flight (or waiting for their connection to open) per slot. */
  readonly #pending: number[];
  /** The read connection borrowed from the write pool (at most one, the first): handed back, not ended. */
  #borrowed: pg.PoolClient | undefined;
  #mayBorrow = true;
  #closed = false;
  /** Each open connection's drop (see #open). */
  readonly #drops = new WeakMap<pg.Client, () => void>();
  constructor(
    private readonly config: pg.ClientConfig,
    n: number,
    private readonly fail: (err: unknown) => never,
    /** An idle connection of the write pool, when it has one (the one the store was opened on): the first read's. */
    private readonly borrow: () => Promise<pg.PoolClient> | undefined,
    private readonly growAt: number,
  ) {
    this.#slots = new Array(n).fill(undefined);
    this.#pending = new Array(n).fill(0);
  }

  query(config: pg.QueryConfig): Promise<pg.QueryResult> {
    if (this.#closed) return Promise.reject(new NodeSvcError('store', 'the store is closed'));
    const i = this.#pick();
    this.#pending[i]!++;
    return this.#run(i, config).finally(() => { this.#pending[i]!--; });
  }

  /**
   * The least busy connection open (or opening); another is opened only once each has `growAt` reads in its pipeline
   * (PostgresStoreOptions.readsPerConnection).
   */
  #pick(): number {
    let best = -1;
    for (let i = 0; i < this.#slots.length; i++) if (this.#slots[i] && (best < 0 || this.#pending[i]! < this.#pending[best]!)) best = i;
    if (best >= 0 && this.#pending[best]! < this.growAt) return best;
    const free = this.#slots.indexOf(undefined);
    return free >= 0 ? free : best;
  }

  async #run(i: number, config: pg.QueryConfig): Promise<pg.QueryResult> {
    let c: pg.Client;
    try {
      c = await (this.#slots[i] ??= this.#open(i));
    } catch (err) {
      this.fail(err);
    }
    corkUntil(c, setImmediate);
    return c.query(config).catch((err: unknown) => {
      // Its connection is lost (or pg closed it: a statement not answered in time). Dropped now, not when its 'end'
      // event comes: a read issued meanwhile would go out on the dead connection and fail too.
      if (isConnectionError(err)) this.#drops.get(c)?.();
      throw err;
    });
  }

  #open(i: number): Promise<pg.Client> {
    // Once per store, the first connection (two opened at once must not both take one of the pool's).
    const lent = this.#mayBorrow ? this.borrow() : undefined;
    this.#mayBorrow = false;
    let c: pg.Client | undefined;
    // The connection died (or never opened): its reads in flight fail; the next read opens another. A borrowed one
    // goes back to the pool destroyed (the pool then counts it free).
    const drop = () => {
      if (this.#slots[i] === opened) this.#slots[i] = undefined;
      if (c && c === this.#borrowed) { this.#borrowed = undefined; (c as pg.PoolClient).release(true); }
    };
    const opened: Promise<pg.Client> = (async () => {
      c = lent ? (this.#borrowed = await lent) : new pg.Client({ ...this.config, pipeline: true } as pg.ClientConfig);
      this.#drops.set(c, drop);
      c.on('error', drop);
      c.on('end', drop);
      if (!lent) await c.connect();
      return c;
    })().catch((err: unknown) => { drop(); throw err; });
    return opened;
  }

  async close(): Promise<void> {
    this.#closed = true;
    await Promise.all(this.#slots.map(async (s) => {
      try {
        const c = await s;
        // A borrowed connection goes back to the pool, whose end() (the store's close, next) closes it and waits.
        if (c && c === this.#borrowed) { this.#borrowed = undefined; (c as pg.PoolClient).release(); } else await c?.end();
      } catch { /* already gone */ }
    }));
  }
}

const corked = new WeakSet<object>();
/**
 * What is written to this connection until `later` runs goes out in one packet: a statement's Parse, Bind, Describe,
 * Execute and Sync (pg writes them one by one), and the statements issued with it. `process.nextTick`: this turn's
 * statements of one write; `setImmediate`: every read of the event loop's turn.
 */
function corkUntil(c: pg.Client, later: (fn: () => void) => void): void {
  const stream = (c as unknown as { connection?: { stream?: { cork?(): void; uncork?(): void } } }).connection?.stream;
  if (!stream?.cork || !stream.uncork || corked.has(stream)) return;
  stream.cork();
  corked.add(stream);
  later(() => {
    corked.delete(stream);
    stream.uncork!();
  });
}

class PgStore implements PostgresStore {
  readonly dialect = 'postgres' as const;
  readonly description: string;
  readonly dataDir: string;
  readonly q: Sql;
  /**
   * Lone writing statements (store/sql.ts writeOne): each committed on its own on a connection free for it, or, when
   * every write connection is busy, together with the others waiting (#runLoneBatch).
   */
  readonly autocommit: Sql;
  #mark = 0;
  changeMark(): number {
    return this.#mark;
  }
  readonly #reads: Pipelines;
  readonly stats = { commits: 0, jobs: 0, rolledBack: 0 };
  readonly #target: Target;
  readonly #pool: pg.Pool;
  readonly #writes = new Set<Promise<void>>();
  /** write() transactions, lone statements and batches of either under way, and the most at once: the pool's size. */
  #running = 0;
  readonly #maxRunning: number;
  /** Until when (ms) batches give each job a savepoint: a job failed in a batch not long ago (#runBatch). */
  #savepointsUntil = 0;
  readonly #waiting: Waiting[] = [];
  /** Lone statements (autocommit) that found every connection busy: they run together (#runLoneBatch). */
  readonly #waitingLone: WaitingLone[] = [];
  /** Lone statements of a batch rolled back: each runs on its own, before anything else waiting. */
  readonly #waitingAlone: WaitingLone[] = [];
  #loneTurn = false;
  #closed = false;
  readonly #readonly: boolean;
  #subscribers = new Set<(inv: Invalidation) => void>();
  #listener: Listener | undefined;
  readonly #answerMs: number;
  /** Writes refused by a read-only server since the last commit (health: the store is down while it lasts). */
  #writeFault: WriteFault | undefined;
  writeFault(): WriteFault | undefined {
    return this.#writeFault;
  }
  /** A transaction committed: counted, and whatever refused writes before is over. */
  #committed(): void {
    this.stats.commits++;
    this.#writeFault = undefined;
  }

  constructor(target: Target, opts: PostgresStoreOptions) {
    this.#target = target;
    this.#answerMs = opts.answerTimeoutMs ?? DEFAULT_ANSWER_TIMEOUT_MS;
    this.description = target.description;
    this.dataDir = opts.dataDir;
    const session = {
      ...target.config,
      types: TYPES,
      // A daemon cut off mid-transaction (a network partition, not a crash: a crash closes the socket) would hold its
      // row and keyed locks, and hold back GET /v1/events for everyone (events are served below the oldest transaction
      // in flight), until the server's TCP keepalive notices, hours by default. Our transactions never wait on anything
      // but their own statements, so one idle for 10 s is dead: the server ends it, and what it held is free.
      idle_in_transaction_session_timeout: 10_000,
      // A statement still running after answerTimeoutMs is canceled by the server itself (its locks and its session
      // are free at once; the connection goes on); one whose answer does not come ANSWER_GRACE_MS later is taken as a
      // network that stopped carrying anything: pg closes that connection (pipelined statements fail with it).
      statement_timeout: this.#answerMs,
      query_timeout: this.#answerMs + ANSWER_GRACE_MS,
      // A read-only store (admin reads) cannot write by mistake: every session refuses writes. Every session counts
      // the deliveries it inserts in the same statement (migration 0230; store/webhooks.ts countInserted).
      // PGOPTIONS, which pg reads only when no options are given, is kept after ours.
      options: [opts.readonly ? '-c default_transaction_read_only=on' : '', `-c ${INLINE_COUNTS}=on`, process.env.PGOPTIONS ?? ''].filter(Boolean).join(' '),
    };
    this.#pool = new pg.Pool({
      ...session,
      // One more than the writes run at once: the first read connection may be one of the pool's (Pipelines.borrow).
      max: (this.#maxRunning = opts.poolSize ?? 10) + 1,
      idleTimeoutMillis: 30_000,
      // Queries are written without waiting for the previous answer: a write's BEGIN travels with its first statement
      // (#runWrite). Each statement of a transaction still waits for its answer (the next one depends on it).
      pipeline: true,
    });
    // An idle client lost its connection (database restart, network): pg removes it from the pool; the next query
    // opens a new one or fails with a named error. Without a listener the event would crash the process.
    this.#pool.on('error', () => {});
    // Every new connection is heard from the moment it is made. pg-pool removes its own 'error' listener as it hands a
    // new client over from the socket's data handler (ReadyForQuery), and an awaiting caller adds one only after that
    // handler returns: a FATAL the server sent in the same read (57P01 at a fast shutdown) would be emitted with no
    // listener and end the process. 'connect' is emitted synchronously, before that removal.
    this.#pool.on('connect', (client) => client.on('error', () => {}));
    this.#readonly = !!opts.readonly;
    // Lone statements that write: one on a connection of its own when one is free; when every connection is busy, they
    // wait and go together (#runLoneBatch).
    this.autocommit = this.#sql({
      query: (config) => {
        let p: Promise<pg.QueryResult>;
        if (this.#running < this.#maxRunning) p = this.#runLone(config);
        else p = new Promise<pg.QueryResult>((resolve, reject) => void this.#waitingLone.push({ config, resolve, reject }));
        this.#track(p);
        return p;
      },
    }, () => true);
    // Reads go through a few shared pipelined connections (Pipelines).
    this.#reads = new Pipelines(session as pg.ClientConfig, READ_CONNECTIONS, (err) => {
      throw this.#connectionFault(`cannot be reached: ${this.redact((err as Error)?.message ?? String(err))}`);
    }, () => (this.#pool.idleCount > 0 ? this.#pool.connect() : undefined), opts.readsPerConnection ?? 8);
    const reads = this.#sql({ query: (config) => this.#reads.query(config) }, () => true);
    this.q = { ...reads, run: this.autocommit.run };
    // A run() outside write() is one statement committed on its own (autocommit: one round trip, durable when it
    // returns). A statement with CTEs can so make a whole guarded write (the hot paths: store/streams.ts).
    if (opts.readonly) {
      const refuse = () => Promise.reject(new NodeSvcError('store', 'this store was opened read-only'));
      this.q = { ...reads, run: refuse };
      this.autocommit = { ...this.autocommit, run: refuse, get: refuse, all: refuse, value: refuse };
    }
  }

  /** A message-safe error: the password and URL never appear; connection failures become 503 `unavailable`. */
  wrap(err: unknown): unknown {
    if (err instanceof NodeSvcError) return err;
    // A store opened read-only refuses writes in its sessions (default_transaction_read_only): its own error, as it is.
    if (isReadOnly(err) && !this.#readonly) {
      const e = this.#connectionFault('takes no writes: it is read-only (a standby, or set so) (SQLSTATE 25006); reads go on');
      this.#writeFault = faultAgain(this.#writeFault, e.message);
      return e;
    }
    if (isAnswerTimeout(err)) return this.#connectionFault(`did not answer within ${(this.#answerMs + ANSWER_GRACE_MS) / 1000} s; its connection is closed`);
    // 57014: canceled, here by the session's statement_timeout (answerTimeoutMs): a statement that ran or waited on a
    // lock that long. The database is there; the request can be sent again.
    if (err instanceof pg.DatabaseError && err.code === '57014')
      return this.#connectionFault(`did not finish a statement within ${this.#answerMs / 1000} s (statement_timeout); nothing of it was applied`);
    if (isConnectionError(err)) return this.#connectionFault(`cannot be reached: ${this.redact((err as Error).message)}`);
    const e = err as Error & { detail?: unknown; where?: unknown };
    if (e && typeof e.message === 'string') {
      const clean = this.redact(e.message);
      if (clean !== e.message) e.message = clean;
      // PostgreSQL's detail can quote a whole row ("Failing row contains (…)"), secrets included: an error is logged,
      // so it never carries row values. code, constraint, table and column stay to tell what failed.
      if (e.detail !== undefined) e.detail = undefined;
      if (e.where !== undefined) e.where = undefined;
      // pg names every server error "error"; logs that show only an error's name (no message: it may quote input)
      // then say nothing. The SQLSTATE says what failed without quoting anything.
      const code = (e as { code?: unknown }).code;
      if (e.name === 'error' && typeof code === 'string') e.name = `PostgresError ${code}`;
    }
    return err;
  }

  /**
   * The 503 for what the connection or the server said (lost, unreachable, no answer, a statement canceled by its
   * timeout, no writes taken), naming the database: lostConnection() knows it, a job's own 503 it does not.
   */
  #connectionFault(what: string): NodeSvcError {
    const e = unavailable(`the database (PostgreSQL at ${this.#target.where}) ${what}`);
    fromConnection.add(e);
    return e;
  }

  redact(s: string): string {
    let out = s;
    for (const secret of this.#target.secrets) out = out.split(secret).join('***');
    return out;
  }

  #sql(runner: Runner, live: () => boolean, after?: Array<() => void>, early?: Pick<EarlyCommit, 'next'>): Sql {
    const exec = async (sql: string, params: Params | undefined): Promise<pg.QueryResult> => {
      if (!live()) throw new Error('this transaction has ended: a write()/transaction() callback used its tx after it returned');
      const c = compileSql(sql);
      const values = bind(c, params);
      try {
        return await runner.query({ name: c.name, text: c.text, values, source: sql, params } as pg.QueryConfig);
      } catch (err) {
        const e = err as { code?: string; message: string };
        const n = e.code === '42P18' ? /\$(\d+)/.exec(e.message)?.[1] : undefined;
        if (n) {
          // Say which placeholder of the portable SQL it is, and the portable fix.
          const name = c.names ? `@${c.names[Number(n) - 1]}` : `the ${ordinal(Number(n))} ?`;
          e.message += ` (${name}): PostgreSQL cannot infer its type there (e.g. "${name} IS NULL"); write CAST(${name} AS TEXT) (or BIGINT) in that place`;
        }
        throw this.wrap(err);
      }
    };
    return {
      dialect: 'postgres',
      ...(after ? { afterCommit: (fn: () => void) => void after.push(fn) } : {}),
      ...(early ? { commitWithNext: () => void (early.next = true) } : {}),
      get: async <T>(sql: string, params?: Params, safe = false) => convertRows(await exec(sql, params), safe)[0] as T | undefined,
      all: async <T>(sql: string, params?: Params, safe = false) => convertRows(await exec(sql, params), safe) as T[],
      value: async <T>(sql: string, params?: Params, safe = false) => {
        const res = await exec(sql, params);
        const row = convertRows(res, safe)[0];
        return (row === undefined ? undefined : row[res.fields[0]!.name]) as T | undefined;
      },
      run: async (sql: string, params?: Params) => (await exec(sql, params)).rowCount ?? 0,
    };
  }

  /** A pooled client; any failure to get one is a 503 naming host:port/db (never the URL). */
  async #connect(): Promise<pg.PoolClient> {
    if (this.#closed) throw new NodeSvcError('store', 'the store is closed');
    try {
      // A checked-out client whose connection dies between two queries emits 'error' with no listener of the pool
      // (uncaught: the process would crash). The next query on it fails and is reported; the listener the pool's
      // 'connect' handler gave it only hears it.
      return await this.#pool.connect();
    } catch (err) {
      throw this.#connectionFault(`cannot be reached: ${this.redact((err as Error).message ?? String(err))}`);
    }
  }

  write<T>(fn: (tx: Sql) => Promise<T>): Promise<T> {
    if (this.#closed) return Promise.reject(new NodeSvcError('store', 'the store is closed'));
    if (this.#readonly) return Promise.reject(new NodeSvcError('store', 'this store was opened read-only'));
    let p: Promise<T>;
    if (this.#running < this.#maxRunning) p = this.#runWrite(fn);
    else p = new Promise<T>((resolve, reject) => void this.#waiting.push({ fn, resolve, reject } as Waiting));
    this.#track(p);
    return p;
  }

  /** A write under way: close() waits for it. */
  #track(p: Promise<unknown>): void {
    const tracked = p.then(() => undefined, () => undefined);
    this.#writes.add(tracked);
    void tracked.then(() => this.#writes.delete(tracked));
  }

  /**
   * A lone statement committed on its own, on a pooled client checked out for it (a failure to connect, a 503, is told
   * apart from an error of the statement).
   */
  async #runLone(config: pg.QueryConfig): Promise<pg.QueryResult> {
    this.#running++;
    try {
      const client = await this.#connect();
      try {
        corkUntil(client, process.nextTick);
        const res = await client.query(config);
        client.release();
        this.#committed(); // autocommit: a transaction of its own
        this.stats.jobs++;
        return res;
      } catch (err) {
        client.release(closeAfter(err));
        throw err;
      } finally {
        this.#mark++;
      }
    } finally {
      this.#running--;
      this.#drain();
    }
  }

  /**
   * Lone statements that waited for a connection, up to BATCH_JOBS, in one transaction sent in one packet (BEGIN, a
   * lock timeout, the statements, COMMIT, pipelined: no round trip between them) with one COMMIT and one WAL flush,
   * where each alone costs a connection's turn, a wake-up of its server process and a flush (bench/postgres: the
   * vouchers' statements wait here at saturation). Each sees the ones before it as if they had committed just before;
   * a row one of them locks is held to the COMMIT. Their answers are given once the COMMIT is in.
   * - COMMIT answered COMMIT: committed; each statement gets its own answer (one the client refused, such as a value
   *   it could not send, its own error).
   * - COMMIT answered ROLLBACK (a statement failed: a key, a deadlock, a lock waited on for longer than
   *   LONE_LOCK_TIMEOUT, as two batches holding each other's rows would): nothing committed; every statement runs again
   *   on its own (#waitingAlone), meeting what it would have met alone.
   * - The server ended the session during statement k (its FATAL error is that statement's answer): nothing committed;
   *   statement k fails (503) and the others run again on their own.
   * - The connection lost otherwise: the server may have run everything, COMMIT included, before the answers were lost;
   *   committed or not, no one can say, and every statement fails (503), as each would alone.
   */
  async #runLoneBatch(jobs: WaitingLone[]): Promise<void> {
    this.#running++;
    let again: WaitingLone[] = [];
    let client: pg.PoolClient | undefined;
    try {
      client = await this.#connect();
      const c = client;
      corkUntil(c, process.nextTick);
      const out = await Promise.allSettled([c.query('BEGIN'), c.query(`SET LOCAL lock_timeout = ${LONE_LOCK_TIMEOUT_MS}`),
        ...jobs.map((j) => c.query(j.config)), c.query('COMMIT')]);
      this.#mark++; // before anything the commit lets go on; a COMMIT cut off may have committed
      const answer = (i: number) => out[i + 2]!; // job i's
      const commit = out[out.length - 1]!;
      const lost = out.findIndex((o) => o.status === 'rejected' && lostConnection(o.reason));
      if (lost >= 0) {
        const reason = (out[lost] as PromiseRejectedResult).reason;
        const k = lost - 2;
        // Only a server's own answer to statement k places the loss there (it came in order); a socket error fails
        // every query still unanswered alike.
        if (!(reason instanceof pg.DatabaseError) || k < 0 || k >= jobs.length) throw reason;
        client.release(true);
        client = undefined;
        jobs[k]!.reject(this.wrap(reason));
        again = jobs.filter((_, i) => i !== k);
        this.stats.rolledBack++;
        return;
      }
      // A COMMIT refused by the server is a rollback only when its SQLSTATE says so; anything else (a PANIC after the
      // commit record, a protocol error) leaves the outcome unknown: every statement fails (503), none runs again.
      if (commit.status === 'rejected' && !rolledBackBy(commit.reason)) {
        const why = this.redact((commit.reason as Error)?.message ?? String(commit.reason));
        throw this.#connectionFault(`did not say whether a COMMIT took effect: ${why}`);
      }
      client.release(out.some((o) => o.status === 'rejected' && closeAfter(o.reason)));
      client = undefined;
      if (commit.status !== 'fulfilled' || commit.value.command !== 'COMMIT') {
        again = jobs;
        this.stats.rolledBack++;
        return;
      }
      this.#committed();
      this.stats.jobs += jobs.length;
      jobs.forEach((j, i) => {
        const a = answer(i);
        if (a.status === 'fulfilled') j.resolve(a.value);
        else j.reject(a.reason);
      });
    } catch (err) {
      client?.release(true); // its state is unknown
      const e = this.wrap(err);
      for (const j of jobs) j.reject(e);
    } finally {
      this.#running--;
      this.#waitingAlone.push(...again);
      this.#drain();
    }
  }

  /**
   * One transaction of its own on a pooled connection, concurrent with every other write of this daemon and of the
   * others (no database-wide lock): PostgreSQL group-commits concurrent COMMITs in one WAL flush by itself. What two
   * writes must not both do is guarded where it lives: row locks (FOR UPDATE on the stream), conditional updates,
   * unique keys, keyed locks (lockKey). A deadlock or serialization failure runs `fn` again in a new transaction (it
   * awaits only `tx`, so it can), a few times at most.
   */
  async #runWrite<T>(fn: (tx: Sql) => Promise<T>): Promise<T> {
    this.#running++;
    try {
      for (let attempt = 1; ; attempt++) {
        try {
          const v = await this.#inTransaction('BEGIN', fn, true);
          this.#committed();
          this.stats.jobs++;
          return v;
        } catch (err) {
          if (isRetryable(err) && attempt < WRITE_RETRIES) {
            await new Promise((r) => setTimeout(r, Math.random() * 5 * attempt));
            continue;
          }
          throw this.wrap(err);
        }
      }
    } finally {
      this.#running--;
      this.#drain();
    }
  }

  /**
   * Writes that found every write connection busy wait here; as one ends, they run together in one transaction
   * (#runBatch), up to BATCH_JOBS of them, as the SQLite store's batches do. Below saturation nothing waits, so a write
   * alone (a voucher of a quiet daemon, every write behind a slow network) is still one transaction of its own.
   */
  #drain(): void {
    while (this.#waitingAlone.length && this.#running < this.#maxRunning) {
      const j = this.#waitingAlone.shift()!;
      this.#runLone(j.config).then(j.resolve, j.reject);
    }
    while ((this.#waiting.length || this.#waitingLone.length) && this.#running < this.#maxRunning) {
      // Both kinds waiting: they take turns.
      if (this.#waitingLone.length && (!this.#waiting.length || (this.#loneTurn = !this.#loneTurn))) {
        const lone = this.#waitingLone.splice(0, BATCH_JOBS);
        if (lone.length === 1) this.#runLone(lone[0]!.config).then(lone[0]!.resolve, lone[0]!.reject);
        else void this.#runLoneBatch(lone);
        continue;
      }
      const jobs = this.#waiting.splice(0, BATCH_JOBS);
      if (jobs.length === 1) this.#runWrite(jobs[0]!.fn).then(jobs[0]!.resolve, jobs[0]!.reject);
      else void this.#runBatch(jobs);
    }
  }

  /**
   * Send a batch's held last statements (mergeable, in sql.ts): one as it was; several as one statement, each job
   * answered with its own row of it (found by the statement's key column), or all failed with its error (the batch
   * then runs its jobs again alone). Sent after every other statement of the batch, before its COMMIT.
   */
  #sendHeld(c: pg.PoolClient, held: Held[], begins: Array<Promise<unknown>>): void {
    corkUntil(c, process.nextTick);
    const m = held[0]!.m;
    const merged = held.length > 1 ? compileSql(m.sql) : undefined;
    const config = merged ? { name: merged.name, text: merged.text, values: bind(merged, m.merge(held.map((h) => h.params))) } : held[0]!.config;
    void Promise.all([c.query(config), ...begins]).then(([res]) => {
      const r = res as pg.QueryResult;
      if (!merged) return held[0]!.resolve(r);
      const by = new Map<string, unknown>();
      for (const row of r.rows as Array<Record<string, unknown>>) by.set(String(row[m.key]), row);
      for (const h of held) {
        const row = by.get(String(h.params[m.key]));
        if (row === undefined) h.reject(new Error('a merged statement did not answer for one of its rows'));
        else h.resolve({ ...r, rows: [row], rowCount: 1 });
      }
    }, (err: unknown) => { for (const h of held) h.reject(err); });
  }

  /**
   * Jobs one after another in one transaction: one COMMIT and one WAL flush for all, where each alone costs a BEGIN, a
   * COMMIT and a flush. Optimistic first: no savepoints. A job that fails (it throws, or one of its statements failed:
   * a deadlock, a unique key, an error it caught and went on from) rolls the whole batch back, and every job of it
   * runs again in a transaction of its own, so each meets exactly what it would have met alone; from then on, for
   * SAVEPOINTS_HOLD_MS after the last such failure, each job gets a savepoint of its own, sent with its first
   * statement (no round trip of its own): a job that throws is rolled back to its savepoint and fails alone, as its
   * own transaction would; a job one of whose statements failed is rolled back to its savepoint and run again alone
   * after the batch. A savepoint that writes is a subtransaction (an id of its own, a lock on it, a SAVEPOINT
   * statement): bench/postgres measured 70 µs of the server's CPU and 30 µs of ours per recorded event, about 15 %,
   * for the protection of a failure that a batch of well-formed requests rarely has; the hold keeps a stream of
   * failing jobs (refused requests) from rolling back batch after batch.
   * Jobs run in order and each sees the writes of those before it, as if they had committed just before: a row or
   * keyed lock one of them takes is held to the batch's COMMIT, which is what the lock asks for anyway. A failure of the
   * batch itself (the connection lost, a COMMIT refused) fails every job that had not failed on its own, as it would
   * have failed each alone. The connection lost under a job fails that job (503) and runs the others again alone.
   */
  async #runBatch(jobs: Waiting[]): Promise<void> {
    this.#running++;
    const guarded = Date.now() < this.#savepointsUntil;
    const again: Waiting[] = [];
    const done: Array<{ job: Waiting; value: unknown; after: Array<() => void> }> = [];
    // Jobs whose last statement is on its way (Sql.commitWithNext; without savepoints only): the batch goes on to the
    // next job without waiting for its answer, so such jobs (a control fact ends with its event; bench/postgres records
    // events so) travel together instead of one round trip each. They run on the server in order, each after the
    // statements before it, as they would one by one; their answers are awaited before the COMMIT.
    const ahead: Array<{ job: Waiting; run: Promise<{ ok: boolean; value?: unknown }>; after: Array<() => void>; failed: () => boolean }> = [];
    const pendingJobs = () => ahead.splice(0).map((a) => a.job);
    const held: Held[] = [];
    const begins: Array<Promise<unknown>> = [];
    let client: pg.PoolClient | undefined;
    try {
      client = await this.#connect();
      const c = client;
      let begun = false;
      for (const job of jobs) {
        let live = true;
        let sent = false;
        let failed = false;
        const after: Array<() => void> = [];
        const last = guarded ? undefined : { next: false }; // commitWithNext asks; the runner below sees it
        let lastSent = false;
        let released!: () => void;
        const onItsWay = new Promise<undefined>((r) => { released = () => r(undefined); });
        const runner: Runner = {
          query: async (config) => {
            // A last statement that several jobs' can share (mergeable: recordEvent's, at the end of a control fact) is
            // held and sent with the others after the batch's other statements (#sendHeld); not with savepoints.
            const m = !guarded && last?.next ? mergeable.get((config as { source?: string }).source ?? '') : undefined;
            corkUntil(c, process.nextTick);
            if (m && last) {
              if (!begun) { begun = true; const b = c.query('BEGIN'); b.catch(() => undefined); begins.push(b); }
              sent = true;
              last.next = false;
              lastSent = true;
              const answer = new Promise<pg.QueryResult>((resolve, reject) => held.push({ m, params: (config as unknown as { params: Record<string, unknown> }).params, config, resolve, reject }));
              released();
              try {
                return await answer;
              } catch (err) {
                failed = true;
                throw err;
              }
            }
            const first: Array<Promise<unknown>> = [];
            if (!begun) { begun = true; first.push(c.query('BEGIN')); }
            if (!sent) { sent = true; if (guarded) first.push(c.query('SAVEPOINT job')); }
            const answer = Promise.all([c.query(config), ...first]);
            if (last?.next) { last.next = false; lastSent = true; released(); }
            try {
              const [res] = await answer;
              return res as pg.QueryResult;
            } catch (err) {
              failed = true;
              throw err;
            }
          },
        };
        let thrown: { err: unknown } | undefined;
        const run = job.fn(this.#sql(runner, () => live && !lastSent, after, last)).then((value) => ({ ok: true, value }), (err: unknown) => ({ ok: false, value: err }));
        const outcome = await Promise.race([run, onItsWay]);
        if (outcome === undefined) { ahead.push({ job, run, after, failed: () => failed }); continue; }
        live = false;
        if (outcome.ok) {
          if (!failed) { done.push({ job, value: outcome.value, after }); continue; }
        } else thrown = { err: outcome.value };
        // A job that threw before any statement of its own has nothing to undo: it fails alone, with its error.
        if (thrown && !sent) { job.reject(this.wrap(thrown.err)); continue; }
        // The job failed: back to its savepoint. It fails alone with its own error when none of its statements
        // failed (it threw); else it runs again alone after the batch. Failures keep the batches after them on
        // savepoints for SAVEPOINTS_HOLD_MS.
        try {
          if (thrown && lostConnection(thrown.err)) throw thrown.err;
          this.#savepointsUntil = Date.now() + SAVEPOINTS_HOLD_MS;
          if (!guarded) {
            // No savepoint to go back to: the batch is rolled back (the catch below) and each of its jobs runs again
            // alone.
            this.stats.rolledBack++;
            again.push(...done.splice(0).map((d) => d.job), ...pendingJobs(), ...jobs.slice(jobs.indexOf(job)));
            throw BATCH_ROLLED_BACK;
          }
          if (sent) await c.query('ROLLBACK TO SAVEPOINT job');
        } catch (err) {
          if (!lostConnection(err)) throw err;
          // The connection is gone and the batch with it, nothing of it committed: this job fails as it would alone
          // (503); the jobs before it and after it run again, each in a transaction of its own.
          job.reject(this.wrap(err));
          again.push(...done.splice(0).map((d) => d.job), ...pendingJobs(), ...jobs.slice(jobs.indexOf(job) + 1));
          throw err;
        }
        if (failed) again.push(job);
        else job.reject(this.wrap(thrown!.err));
      }
      if (held.length) this.#sendHeld(c, held.splice(0), begins);
      // The jobs whose last statement went on without waiting: all answered, or the batch runs again one by one (a
      // failed statement aborted the transaction for every job after it; no savepoints here).
      for (const a of ahead) {
        const r = await a.run;
        if (r.ok && !a.failed()) continue;
        // The connection lost: no COMMIT was sent, nothing kept; every job of the batch fails (503, the catch below).
        if (!r.ok && lostConnection(r.value)) throw r.value;
        this.#savepointsUntil = Date.now() + SAVEPOINTS_HOLD_MS;
        this.stats.rolledBack++;
        // Every job not already failed alone runs again, in the batch's order (finally, below).
        again.push(...done.splice(0).map((d) => d.job), ...pendingJobs());
        throw BATCH_ROLLED_BACK;
      }
      for (const a of ahead.splice(0)) done.push({ job: a.job, value: (await a.run).value, after: a.after });
      done.sort((x, y) => jobs.indexOf(x.job) - jobs.indexOf(y.job)); // answers and after-commit work in the batch's order
      if (begun) {
        const res = await c.query('COMMIT');
        if (res.command !== 'COMMIT') throw new NodeSvcError('store', 'the transaction was rolled back by the database');
        this.#committed();
        this.#mark++; // before anything the commit lets go on (resolved jobs, after-commit callbacks)
      }
      client.release();
      client = undefined;
      this.stats.jobs += done.length;
      for (const d of done) d.job.resolve(d.value);
      for (const d of done) for (const f of d.after) f();
    } catch (err) {
      this.#mark++; // a COMMIT cut off may have committed: what was read before is not trusted
      if (client && lostConnection(err)) client.release(true); // lost, or a server that takes no writes: not pooled
      else if (client) {
        try {
          await client.query('ROLLBACK');
          client.release();
        } catch {
          client.release(true); // its state is unknown
        }
      }
      // A COMMIT that failed (the connection lost in it: committed or not, no one can say) fails every job that
      // was in it, as it would each alone; so does a failure to get a connection.
      const e = this.wrap(err);
      for (const job of jobs) if (!again.includes(job)) job.reject(e);
    } finally {
      // Held statements never sent (the batch ended before them): their jobs run again alone or have failed already.
      for (const h of held.splice(0)) h.reject(BATCH_ROLLED_BACK);
      this.#running--;
      // One after another, in the batch's order (not the order they failed in): each sees the ones before it, as it
      // did in the batch.
      if (again.length) {
        const rerun = jobs.filter((j) => again.includes(j));
        void (async () => { for (const job of rerun) await this.#runWrite(job.fn).then(job.resolve, job.reject); })();
      }
      this.#drain();
    }
  }

  /**
   * `fn` in one transaction on a pooled client, opened by `begin` (sent with the first statement, see beginsWithFirst)
   * and committed after it; rolled back if it throws or the database ends it.
   */
  async #inTransaction<T>(begin: string, fn: (tx: Sql) => Promise<T>, allowEarly = true): Promise<T> {
    const client = await this.#connect();
    let live = true;
    const after: Array<() => void> = [];
    const early: EarlyCommit | undefined = allowEarly ? { next: false, timeoutMs: 2 * (this.#answerMs + ANSWER_GRACE_MS) } : undefined;
    try {
      // Once the COMMIT has gone (commitWithNext), no statement may follow it.
      const v = await fn(this.#sql(beginsWithFirst(client, begin, early), () => live && early?.commit === undefined, after, early));
      live = false;
      if (began.has(client)) {
        began.delete(client);
        const res = await (early?.commit ?? client.query('COMMIT'));
        // COMMIT of a transaction in error (a job that swallowed an error of its own) answers ROLLBACK rather than failing.
        if (res.command !== 'COMMIT') throw new NodeSvcError('store', 'the transaction was rolled back by the database');
        this.#mark++; // before the after-commit callbacks
      }
      client.release();
      for (const f of after) f();
      return v;
    } catch (err) {
      this.#mark++; // a COMMIT cut off may have committed: what was read before is not trusted
      live = false;
      began.delete(client);
      // A COMMIT sent with the last statement is answered first (in the pipeline, before anything sent now). When its
      // statement failed it answered ROLLBACK, and the ROLLBACK below finds no transaction (a warning, no error).
      const commit = early?.commit ? await early.commit.then((r) => ({ ok: r.command === 'COMMIT', err: undefined }), (e: unknown) => ({ ok: false, err: e })) : undefined;
      if (commit?.ok) {
        // It committed: the last statement never reached the server (pg refused it before sending it, such as a value
        // it could not send) or the callback threw after it, which commitWithNext forbids. Not a failure to report as
        // if nothing were kept: what commits is followed by its after-commit work, and the error says it committed.
        client.release();
        for (const f of after) f();
        throw new NodeSvcError('store', `the write committed, but its callback failed after the statement sent with its COMMIT: ${(err as Error)?.message ?? String(err)}`);
      }
      // Lost, or on a server that takes no writes (a standby): closed, not pooled (the next write connects again).
      if (lostConnection(err) || (commit?.err !== undefined && lostConnection(commit.err))) {
        client.release(true);
        throw err;
      }
      try {
        await client.query('ROLLBACK');
        client.release();
      } catch {
        client.release(true); // destroy it: its state is unknown
      }
      throw err;
    }
  }

  async transaction<T>(fn: (tx: Sql) => Promise<T>): Promise<T> {
    if (this.#readonly) throw new NodeSvcError('store', 'this store was opened read-only');
    try {
      // What these transactions hold (claims, leases) may be lost in a crash without harm (at worst a resend), so
      // their commit does not wait for the WAL flush; a later durable commit flushes it anyway.
      // Without commitWithNext (a write with its own COMMIT: there is no round trip to save).
      return await this.#inTransaction('BEGIN; SET LOCAL synchronous_commit TO off', fn, false);
    } catch (err) {
      throw this.wrap(err);
    }
  }

  async invalidate(tx: Sql, inv: Invalidation): Promise<void> {
    // Delivered to every LISTEN session (this daemon's too) when tx commits; never if it rolls back.
    await tx.value('SELECT pg_notify(?, ?)', [CHANNEL, JSON.stringify({ topic: inv.topic, key: inv.key })]);
  }

  onInvalidate(fn: (inv: Invalidation) => void): () => void {
    this.#subscribers.add(fn);
    if (!this.#listener && !this.#closed) this.#listener = new Listener(this.#target.config, (inv) => this.#dispatch(inv));
    return () => void this.#subscribers.delete(fn);
  }

  invalidationsCurrent(): boolean {
    return this.#listener?.current() ?? false;
  }

  #dispatch(inv: Invalidation): void {
    for (const fn of [...this.#subscribers]) {
      try {
        fn(inv);
      } catch {
        // a subscriber's bug must not stop the others from dropping their caches
      }
    }
  }

  async close(): Promise<void> {
    if (this.#closed) return;
    // Writes under way still finish: close() after the last write() loses nothing.
    while (this.#writes.size) await Promise.all([...this.#writes]);
    this.#closed = true;
    await this.#listener?.close();
    await this.#reads.close();
    await this.#pool.end();
  }

  async migrate(readonly: boolean): Promise<void> {
    const client = await this.#connectForOpen();
    // The schema already current (every start but the first of a new version): one statement, no transaction and no
    // lock. A database without the table (42P01: node-svc never used it), or behind, takes the migration lock below.
    let ready: { inline: unknown } | undefined;
    try {
      const { rows } = await client.query(`SELECT version, current_setting('${INLINE_COUNTS}', true) AS inline FROM node_svc_schema`);
      if (Number(rows[0]?.version) === LATEST_VERSION) ready = rows[0];
    } catch (err) {
      if ((err as { code?: string }).code !== '42P01') {
        client.release(true);
        throw this.#openError(err);
      }
    }
    if (ready) {
      client.release();
      if (!readonly) inlineCounted(ready.inline);
      return;
    }
    // Not bounded by answerTimeoutMs: a long migration, or another daemon's, is waited for (2^31 - 1 ms: a timer's most).
    const long = (text: string) => client.query({ text, query_timeout: 2 ** 31 - 1 } as pg.QueryConfig);
    try {
      await long('BEGIN');
      await long('SET LOCAL statement_timeout = 0');
      // Two daemons starting together: the second waits here and then finds nothing to do.
      await long(`SELECT pg_advisory_xact_lock(${MIGRATE_LOCK_KEY})`);
      const first = (await long(`SELECT to_regclass('node_svc_schema') IS NOT NULL AS e, current_setting('${INLINE_COUNTS}', true) AS inline`)).rows[0];
      if (!readonly) inlineCounted(first.inline);
      const exists = first.e === 1;
      const current = exists ? Number((await long('SELECT version FROM node_svc_schema')).rows[0]?.version ?? 0) : 0;
      if (current > LATEST_VERSION)
        throw new NodeSvcError('store', `this database was written by a newer node-svc (schema ${current}; this build knows up to ${LATEST_VERSION})`, {
          hint: 'upgrade node-svc, or restore a backup made by this version',
        });
      const pending = MIGRATIONS.filter((m) => m.version > current);
      if (pending.length && readonly) {
        throw current === 0
          ? new NodeSvcError('store', `no node-svc tables in ${this.description}`, { hint: 'run `node-svc nodes add <id>` first (any write command, or the daemon, creates them), or check --store' })
          : new NodeSvcError('store', `database schema ${current} needs migrating to ${LATEST_VERSION}`, { hint: 'run any node-svc write command (or the daemon) once' });
      }
      if (pending.length) {
        if (!exists) await long('CREATE TABLE node_svc_schema (version INTEGER NOT NULL); INSERT INTO node_svc_schema(version) VALUES (0)');
        for (const m of pending) {
          try {
            await long(m.postgres);
          } catch (err) {
            throw new NodeSvcError('store', `migration ${m.version} (${m.name}) failed on ${this.description}: ${this.redact((err as Error).message)}`);
          }
        }
        await long(`UPDATE node_svc_schema SET version = ${LATEST_VERSION}`);
      }
      await long('COMMIT');
      client.release();
    } catch (err) {
      try {
        await client.query('ROLLBACK');
        client.release();
      } catch {
        client.release(true);
      }
      throw err instanceof NodeSvcError ? err : this.#openError(err);
    }
  }

  async #connectForOpen(): Promise<pg.PoolClient> {
    try {
      return await this.#pool.connect(); // heard from its 'connect' (constructor)
    } catch (err) {
      throw this.#openError(err);
    }
  }

  /** Why the database cannot be used, naming host:port/db and never the password or URL. */
  #openError(err: unknown): NodeSvcError {
    const e = err as { code?: string; message?: string };
    const why =
      e.code === 'ECONNREFUSED' ? 'connection refused'
        : e.code === 'ENOTFOUND' || e.code === 'EAI_AGAIN' ? 'host not found'
        : e.code === '28P01' || e.code === '28000' ? this.redact(e.message ?? 'authentication failed')
        : this.redact(e.message ?? String(err));
    return new NodeSvcError('store', `cannot use PostgreSQL at ${this.#target.where}: ${why}`, {
      hint: 'check the store URL (host, port, database, user, password, sslmode) and that the server is up',
    });
  }
}

/** How often the LISTEN connection is pinged (Listener). */
const LISTEN_PING_MS = 1000;
/** The LISTEN connection is trusted while its last ping was answered less than this ago (Listener.current). */
export const LISTEN_FRESH_MS = 3000;

/**
 * The LISTEN connection: a client of its own (a pooled one would be handed to queries). Every daemon's invalidations
 * (token, key, node and subscription changes) arrive on it. When it is lost it comes back with backoff (250 ms
 * doubling to 5 s) and LISTENs again; every time it starts listening it tells the subscribers `*`, since writes made
 * while nobody listened were not heard (the first time included: the subscriber may have loaded its cache before
 * LISTEN took effect). It is pinged every LISTEN_PING_MS (the ping is the LISTEN again, a no-op for a session already
 * listening, so pg_stat_activity keeps showing what the session is for): a connection the network cut off without a reset (a NAT or firewall that dropped the
 * idle flow, a failover behind the same address) receives nothing and reports nothing, and its daemon went on using
 * what it remembered: a token revoked through another daemon or the CLI stayed accepted for as long as it ran (seen
 * 2026-11-30 with a proxy that drops a connection's bytes). A ping not answered within LISTEN_FRESH_MS ends the
 * connection (another is opened; every cache is dropped once it listens, as at the start), and from then until a ping
 * is answered again `current()` is false. The LISTEN that starts a connection has the same limit.
 */
class Listener {
  #client: pg.Client | undefined;
  #delay = 250;
  #timer: NodeJS.Timeout | undefined;
  #closed = false;
  /** performance.now() of the last answer on the LISTEN connection (its LISTEN, a ping); -Infinity before. */
  #answeredAt = -Infinity;
  #ping: NodeJS.Timeout | undefined;

  current(): boolean {
    return this.#client !== undefined && performance.now() - this.#answeredAt < LISTEN_FRESH_MS;
  }

  constructor(readonly config: pg.ClientConfig, readonly dispatch: (inv: Invalidation) => void) {
    void this.#connect();
  }

  async #connect(): Promise<void> {
    if (this.#closed) return;
    const c = new pg.Client({ ...this.config, types: TYPES });
    let lost = false;
    const onLost = () => {
      if (lost) return;
      lost = true;
      if (this.#client === c) { this.#client = undefined; clearInterval(this.#ping); this.#ping = undefined; }
      // end() waits for the server's answer, which a cut-off connection never gives: the socket goes now.
      (c as unknown as { connection?: { stream?: { destroy?(): void } } }).connection?.stream?.destroy?.();
      c.end().catch(() => {});
      this.#retry();
    };
    c.on('error', onLost);
    c.on('end', onLost);
    c.on('notification', (msg) => {
      if (msg.channel !== CHANNEL || !msg.payload) return;
      let inv: Invalidation;
      try {
        inv = JSON.parse(msg.payload) as Invalidation;
      } catch {
        return;
      }
      if (typeof inv?.topic === 'string' && typeof inv.key === 'string') this.dispatch({ topic: inv.topic, key: inv.key });
    });
    try {
      await c.connect();
      await c.query({ text: `LISTEN ${CHANNEL}`, query_timeout: LISTEN_FRESH_MS } as pg.QueryConfig);
    } catch {
      onLost();
      return;
    }
    if (lost) return;
    if (this.#closed) {
      await c.end().catch(() => {});
      return;
    }
    this.#client = c;
    this.#answeredAt = performance.now();
    this.#delay = 250;
    this.dispatch({ topic: '*', key: '' });
    // One ping at a time; one unanswered for LISTEN_FRESH_MS ends the connection.
    let sentAt: number | undefined;
    this.#ping = setInterval(() => {
      if (sentAt !== undefined) {
        // The verdict after the event loop's I/O: an answer that arrived during a stall of the loop is read first.
        if (performance.now() - sentAt >= LISTEN_FRESH_MS) { const late = sentAt; setImmediate(() => { if (sentAt === late) onLost(); }); }
        return;
      }
      const at = (sentAt = performance.now());
      c.query(`LISTEN ${CHANNEL}`).then(() => { if (sentAt === at) { sentAt = undefined; this.#answeredAt = performance.now(); } }, onLost);
    }, LISTEN_PING_MS);
    this.#ping.unref?.();
  }

  #retry(): void {
    if (this.#closed || this.#timer) return;
    const wait = this.#delay;
    this.#delay = Math.min(this.#delay * 2, 5000);
    this.#timer = setTimeout(() => {
      this.#timer = undefined;
      void this.#connect();
    }, wait);
    this.#timer.unref?.();
  }

  async close(): Promise<void> {
    this.#closed = true;
    if (this.#timer) clearTimeout(this.#timer);
    this.#timer = undefined;
    clearInterval(this.#ping);
    this.#ping = undefined;
    const c = this.#client;
    this.#client = undefined;
    await c?.end().catch(() => {});
  }
}

/**
 * Open the PostgreSQL store: parse the URL (a secret: never echoed), connect, migrate (or, read-only, refuse pending
 * migrations), and return the Store. Errors name host:port/database, never the password.
 */
/**
 * The deliveries a store inserts are counted by its own statements, and skipped by the trigger, only while its sessions
 * say so (migration 0230): a session without the setting (a connection pooler that dropped the startup options) would
 * count each twice. Refused by name instead; read at open, in the statement that reads the schema version.
 */
function inlineCounted(setting: unknown): void {
  if (setting !== 'on')
    throw new NodeSvcError('config', `the database session lost the setting ${INLINE_COUNTS} that node-svc sends when it connects (startup option "-c ${INLINE_COUNTS}=on")`,
      { hint: 'connect to PostgreSQL directly, or let the connection pooler pass the startup parameter "options" through' });
}

export async function openPostgresStore(url: string, opts: PostgresStoreOptions): Promise<PostgresStore> {
  const target = parsePostgresUrl(url);
  const store = new PgStore(target, opts);
  try {
    await store.migrate(!!opts.readonly);
  } catch (err) {
    await store.close().catch(() => {});
    throw err;
  }
  return store;
}
