import { KeySet } from '../sdk/keys.js';
import { Verifier } from '../sdk/verifier.js';
import type { SqliteStore } from '../store/db.js';
import type { Store } from '../store/sql.js';
import { keysGeneration, trustedKeys } from './admin.js';

/** PostgreSQL: the generation is read again at least this often even without a notification (a missed one). */
const PG_RECHECK_MS = 1000;

/**
 * The daemon's trusted keys, reloaded whenever `keys add|rm` (another process, another daemon) changes them; the
 * verifier's cache drops with the key set. SQLite: the counter is read again only when a key change of this process
 * was committed (its invalidation) or another process committed anything (`PRAGMA data_version`, looked at most once
 * a millisecond, as for tokens and headroom): a stream open no longer reads it (~9 µs of ~250, bench/commit's
 * profile). PostgreSQL: a key change notifies every daemon, which reads the counter again then (and at least every
 * second), not per request.
 */
export class Keyring {
  readonly keys = new KeySet();
  readonly verifier: Verifier;
  #generation = -1;
  #checkedAt = 0;
  #stale = true;
  /** SQLite: the store's external version when the counter was last read (-1: never). */
  #external = -1;
  constructor(private readonly store: Store, opts: { clockTolerance?: number; cacheSize?: number } = {}) {
    this.verifier = new Verifier({ keys: this.keys, ...opts });
    store.onInvalidate((inv) => { if (inv.topic === 'keys' || inv.topic === '*') this.#stale = true; });
  }
  /** The reload in progress (PostgreSQL): requests arriving meanwhile wait for it instead of using the old keys. */
  #loading: Promise<void> | undefined;
  /** Refresh if the stored keys changed; returns this for chaining. */
  async current(): Promise<this> {
    const now = Date.now();
    if (this.store.dialect === 'postgres' && !this.#stale && now - this.#checkedAt < PG_RECHECK_MS) {
      // Without this wait, a request concurrent with the first load saw an empty key set (a valid credential
      // refused as unknown_key right after start), and one concurrent with a reload after `keys rm` the removed key.
      if (this.#loading) await this.#loading;
      return this;
    }
    if (this.store.dialect === 'sqlite') {
      // Read before the counter: a commit of another process after this look moves it again for the next request.
      const external = (this.store as SqliteStore).externalVersion();
      if (!this.#stale && external === this.#external) {
        if (this.#loading) await this.#loading; // the load this look started is still on its way
        return this;
      }
      this.#external = external;
    }
    this.#stale = false;
    this.#checkedAt = now;
    const load = (async () => {
      const g = await keysGeneration(this.store);
      if (g !== this.#generation) {
        const keys = await trustedKeys(this.store);
        this.keys.replace(keys);
        this.#generation = g;
      }
    })();
    this.#loading = load;
    try {
      await load;
    } catch (err) {
      this.#stale = true; // the store could not be read: the next request tries again, not after a second
      throw err;
    } finally {
      if (this.#loading === load) this.#loading = undefined;
    }
    return this;
  }
}
