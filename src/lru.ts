/**
 * A bounded map that evicts the least recently used entry, one at a time (a Map keeps insertion order: a hit
 * moves its key to the end, the first key is the eldest). Caches never drop everything at once when full.
 */
export class Lru<K, V> {
  readonly #m = new Map<K, V>();
  constructor(readonly max: number) {
    if (!Number.isInteger(max) || max < 1) throw new RangeError('Lru max must be a positive integer');
  }
  get size(): number {
    return this.#m.size;
  }
  get(k: K): V | undefined {
    const v = this.#m.get(k);
    if (v !== undefined) {
      this.#m.delete(k);
      this.#m.set(k, v);
    }
    return v;
  }
  set(k: K, v: V): void {
    this.#m.delete(k);
    this.#m.set(k, v);
    if (this.#m.size > this.max) this.#m.delete(this.#m.keys().next().value as K);
  }
  delete(k: K): boolean {
    return this.#m.delete(k);
  }
  clear(): void {
    this.#m.clear();
  }
  has(k: K): boolean {
    return this.#m.has(k);
  }
}
