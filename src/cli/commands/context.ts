import { resolveDataDir } from '../../store/db.js';
import { openStore, resolveStoreUrl } from '../../store/open.js';
import type { Store } from '../../store/sql.js';
import type { GlobalOptions } from '../output.js';

/** Run `fn` with the store (--store, else the data dir's), closing it whatever happens. */
export async function withStore<T>(g: GlobalOptions, fn: (s: Store) => T | Promise<T>, opts: { readonly?: boolean } = {}): Promise<T> {
  const store = await openStore({ dataDir: resolveDataDir(g.dataDir), store: resolveStoreUrl(g.store), readonly: opts.readonly });
  try {
    return await fn(store);
  } finally {
    await store.close();
  }
}
