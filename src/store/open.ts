// Which store a command or the daemon uses: --store (env NODE_SVC_STORE, config `store`) names a PostgreSQL
// database shared by several daemons; without it, SQLite in the data dir (the default, one machine).
import { configError } from '../domain/errors.js';
import { ensureDataDir, openSqliteStore } from './db.js';
import type { Store } from './sql.js';

export interface StoreOptions {
  dataDir: string;
  /** A postgres:// (or postgresql://) URL; undefined or "sqlite": the data dir's SQLite file. */
  store?: string;
  readonly?: boolean;
  /** PostgreSQL: write transactions at once (--store-pool; default 10). */
  poolSize?: number;
  /** PostgreSQL: reads in flight per read connection before another opens (PostgresStoreOptions; the daemon: 1). */
  readsPerConnection?: number;
  /** PostgreSQL: milliseconds a statement may go without an answer (the daemon's --store-timeout); default: NODE_SVC_STORE_TIMEOUT (seconds), else 10 s. */
  answerTimeoutMs?: number;
}

/** NODE_SVC_STORE_TIMEOUT (whole seconds, 1 to 3600) in ms, for every command that opens a PostgreSQL store; undefined when unset. */
export function storeTimeoutFromEnv(): number | undefined {
  const v = process.env.NODE_SVC_STORE_TIMEOUT;
  if (v === undefined || v === '') return undefined;
  if (!/^\d+$/.test(v) || Number(v) < 1 || Number(v) > 3600) throw configError(`NODE_SVC_STORE_TIMEOUT must be a whole number of seconds from 1 to 3600, got "${v}"`);
  return Number(v) * 1000;
}

/** --store, else NODE_SVC_STORE (flag > environment; the daemon also reads config `store` between them and the default). */
export const resolveStoreUrl = (flag?: string): string | undefined => flag || process.env.NODE_SVC_STORE || undefined;

export const isPostgresUrl = (url: string) => /^postgres(ql)?:\/\//i.test(url);

/** The URL is a secret (it can carry the password): an error about it never repeats it. */
export function checkStoreUrl(url: string | undefined): string | undefined {
  if (url === undefined || url === 'sqlite' || isPostgresUrl(url)) return undefined;
  return '--store must be a postgres:// or postgresql:// URL (or "sqlite" for the data dir\'s database); the value given is not repeated here, since a URL can carry a password';
}

export async function openStore(o: StoreOptions): Promise<Store> {
  const url = o.store;
  const bad = checkStoreUrl(url);
  if (bad) throw configError(bad, 'pass --store postgres://user@host:5432/db (password in PGPASSWORD or ~/.pgpass, or in the URL)');
  if (!url || url === 'sqlite') return openSqliteStore(o.dataDir, { readonly: o.readonly });
  // The data dir still holds the daemon's config.json (and the dev sandbox's files): there when the store is.
  if (!o.readonly) ensureDataDir(o.dataDir);
  const { openPostgresStore } = await import('./postgres.js');
  return openPostgresStore(url, { dataDir: o.dataDir, readonly: o.readonly, ...(o.poolSize ? { poolSize: o.poolSize } : {}), ...(o.readsPerConnection ? { readsPerConnection: o.readsPerConnection } : {}), answerTimeoutMs: o.answerTimeoutMs ?? storeTimeoutFromEnv() });
}
