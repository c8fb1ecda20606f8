import { KeySet } from '../sdk/keys.js';
import { Verifier } from '../sdk/verifier.js';
import type { Store } from '../store/sql.js';
import { keysGeneration, trustedKeys } from './admin.js';

/** PostgreSQL: the generation is read again at least this often even without a notification (a missed one). */
const PG_RECHECK_MS = 1000;

/**
 * The daemon's trusted keys, reloaded whenever `keys add|rm` (another process, another daemon) changes them; the
 * verifier's cache drops with the key set. SQLite: one cheap read of a counter per use. PostgreSQL: a key change
 * notifies every daemon, which reads the counter again then (and at least every second), not per request.
 */
export class Keyring {
  readonly keys = new KeySet();
  readonly verifier: Verifier;
  #generation = -1;
  #checkedAt = 0;
  #stale = true;
  constructor(private readonly store: Store, opts: { clockTolerance?: number; cacheSize?: number } = {}) {
    this.verifier = new Verifier({ keys: this.keys, ...opts });
    store.onInvalidate((inv) => { if (inv.topic === 'keys' || inv.topic === '*') this.#stale = true; });
  }
  /** Refresh if the stored keys changed; returns this for chaining. */
  async current(): Promise<this> {
    const now = Date.now();
    if (this.store.dialect === 'postgres' && !this.#stale && now - this.#checkedAt < PG_RECHECK_MS) return this;
    this.#stale = false;
    this.#checkedAt = now;
    const g = await keysGeneration(this.store);
    if (g !== this.#generation) {
      const keys = await trustedKeys(this.store);
      this.keys.replace(keys);
      this.#generation = g;
    }
    return this;
  }
}
