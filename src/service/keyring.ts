import { KeySet } from '../sdk/keys.js';
import { Verifier } from '../sdk/verifier.js';
import type { Store } from '../store/db.js';
import { keysGeneration, trustedKeys } from './admin.js';

/**
 * The daemon's trusted keys, reloaded whenever `keys add|rm` (another process) changes them:
 * one cheap read of a counter per use; the verifier's cache drops with the key set.
 */
export class Keyring {
  readonly keys = new KeySet();
  readonly verifier: Verifier;
  #generation = -1;
  constructor(private readonly store: Store, opts: { clockTolerance?: number; cacheSize?: number } = {}) {
    this.verifier = new Verifier({ keys: this.keys, ...opts });
  }
  /** Refresh if the stored keys changed; returns this for chaining. */
  current(): this {
    const g = keysGeneration(this.store);
    if (g !== this.#generation) {
      this.keys.replace(trustedKeys(this.store));
      this.#generation = g;
    }
    return this;
  }
}
