/**
 * A bounded map that evicts its least recently used entry, one at a time, never everything at once (a Map keeps
 * insertion order: the first key is the eldest). A hit moves its entry to the back only once it has aged past
 * half the capacity, as sdk/verifier's cache does: a Map delete+set on every hit made hot paths measurably slower.
 */
export class Lru<K, V> {
  readonly #m = new Map<K, { v: V; seq: number }>();
  #seq = 0;
  constructor(readonly max: number) {
    if (!Number.isInteger(max) || max < 1) throw new RangeError('Lru max must be a positive integer');
  }
  get size(): number {
    return this.#m.size;
  }
  get(k: K): V | undefined {
    const e = this.#m.get(k);
    if (e === undefined) return undefined;
    if (this.#seq - e.seq > this.max >> 1) {
      this.#m.delete(k);
      e.seq = ++this.#seq;
      this.#m.set(k, e);
    }
    return e.v;
  }
  set(k: K, v: V): void {
    this.#m.delete(k);
    this.#m.set(k, { v, seq: ++this.#seq });
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
