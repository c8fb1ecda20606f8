import { openStore, resolveDataDir, type Store } from '../../store/db.js';
import type { GlobalOptions } from '../output.js';

/** Run `fn` with the store of the data dir, closing it whatever happens. */
export async function withStore<T>(g: GlobalOptions, fn: (s: Store) => T | Promise<T>, opts: { readonly?: boolean } = {}): Promise<T> {
  const store = openStore(resolveDataDir(g.dataDir), opts);
  try {
    return await fn(store);
  } finally {
    store.close();
  }
}
