// A test's own look into the store a daemon or CLI run uses: the data dir's SQLite file, or (when the run has a
// PostgreSQL server) that data dir's database, read and written with psql. The shape is the part of better-sqlite3
// the tests use (prepare → get/all/run, pluck), synchronous on both, so one assertion serves both stores.
// Only for tests: the SQL is the common dialect (no pragma, no rowid); `?` parameters are inlined as literals.
import Database from 'better-sqlite3';
import { spawnSync } from 'node:child_process';
import { join } from 'node:path';
import { databaseNameFor, databaseUrl, PG_BIN, testServerUrl } from './postgres.js';

export interface InspectStatement {
  get(...params: unknown[]): unknown;
  all(...params: unknown[]): unknown[];
  run(...params: unknown[]): { changes: number };
  pluck(): InspectStatement;
}

export interface Inspector {
  readonly dialect: 'sqlite' | 'postgres';
  prepare(sql: string): InspectStatement;
  close(): void;
}

/** The PostgreSQL URL of this data dir's database in this run, or undefined (SQLite). */
export const pgUrlOf = (dataDir: string): string | undefined => {
  const base = testServerUrl();
  return base ? databaseUrl(base, databaseNameFor(dataDir)) : undefined;
};

const literal = (v: unknown): string => {
  if (v === null || v === undefined) return 'NULL';
  if (typeof v === 'number' || typeof v === 'bigint') return String(v);
  if (typeof v === 'boolean') return v ? 'TRUE' : 'FALSE';
  return `'${String(v).replace(/'/g, "''")}'`;
};
const inline = (sql: string, params: unknown[]) => {
  let i = 0;
  return sql.replace(/\?/g, () => literal(params[i++]));
};
/** JSON of PostgreSQL rows as SQLite gives them: booleans as 1/0. */
const sqliteShaped = (row: Record<string, unknown>) => {
  for (const [k, v] of Object.entries(row)) if (typeof v === 'boolean') row[k] = v ? 1 : 0;
  return row;
};

function psql(url: string, sql: string): string {
  const r = spawnSync(join(PG_BIN, 'psql'), [url, '-X', '-A', '-t', '-q', '-v', 'ON_ERROR_STOP=1', '-c', sql], { encoding: 'utf8', maxBuffer: 64 * 1024 * 1024 });
  if (r.status !== 0) throw new Error(`psql: ${r.stderr.trim() || r.error?.message}`);
  return r.stdout.trim();
}

function pgInspector(url: string): Inspector {
  const statement = (sql: string, pluck: boolean): InspectStatement => {
    const rows = (params: unknown[]) => {
      const out = psql(url, `SELECT COALESCE(json_agg(t), '[]'::json) FROM (${inline(sql, params)}) t`);
      return (JSON.parse(out) as Array<Record<string, unknown>>).map(sqliteShaped).map((r) => (pluck ? Object.values(r)[0] : r));
    };
    return {
      get: (...p) => rows(p)[0],
      all: (...p) => rows(p),
      run: (...p) => ({ changes: Number(psql(url, `WITH x AS (${inline(sql, p)} RETURNING 1) SELECT COUNT(*) FROM x`)) }),
      pluck: () => statement(sql, true),
    };
  };
  return { dialect: 'postgres', prepare: (sql) => statement(sql, false), close: () => undefined };
}

/** Open the store of `dataDir` for a test's own reads (and writes, unless readonly). */
export function inspectStore(dataDir: string, opts: { readonly?: boolean } = {}): Inspector {
  const url = pgUrlOf(dataDir);
  if (url) return pgInspector(url);
  const db = new Database(join(dataDir, 'node-svc.db'), { readonly: !!opts.readonly, fileMustExist: true });
  return { dialect: 'sqlite', prepare: (sql) => db.prepare(sql) as unknown as InspectStatement, close: () => db.close() };
}

/**
 * Rows of one read, without blocking this process: on PostgreSQL through a client connection, not psql. For polling
 * loops in tests whose process also serves something the daemon waits on (the sandbox chain runs in the test
 * process: a psql run every few ms, synchronous, stalled the chain's RPC answers and so the daemon's settlement).
 */
export async function readRows<T = Record<string, unknown>>(dataDir: string, sql: string, params: unknown[] = []): Promise<T[]> {
  const url = pgUrlOf(dataDir);
  if (!url) {
    const db = new Database(join(dataDir, 'node-svc.db'), { readonly: true, fileMustExist: true });
    try {
      return db.prepare(sql).all(...params) as T[];
    } finally {
      db.close();
    }
  }
  const pg = (await import('pg')).default;
  const client = new pg.Client({ connectionString: url });
  await client.connect();
  try {
    let i = 0;
    const res = await client.query(sql.replace(/\?/g, () => `$${++i}`), params);
    return res.rows.map((r) => sqliteShaped(r as Record<string, unknown>)) as T[];
  } finally {
    await client.end();
  }
}
