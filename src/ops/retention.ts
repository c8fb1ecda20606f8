// The daemon's pruner: deletes delivered history older than the retention period in small batches, each its own
// short transaction, yielding to the event loop between batches so the paid path never waits long behind it.
import { log } from '../log.js';
import type { Store } from '../store/sql.js';
import { pruneDeliveries, pruneEvents, type PruneCount } from '../store/retention.js';

export const DEFAULT_RETENTION_MS = 30 * 86_400_000;
/** A batch should hold the store for about this long at most; the batch size adapts to it. */
const TARGET_BATCH_MS = 4;
const MIN_BATCH = 16;
const MAX_BATCH = 256;

export interface PrunerOptions {
  store: Store;
  /** Keep this long (ms); 0 keeps everything. */
  retentionMs: number;
  /** Between runs (ms, default 60 s). */
  everyMs?: number;
  now?: () => number;
}

export class Pruner {
  readonly #o: Required<PrunerOptions>;
  #timer: NodeJS.Timeout | undefined;
  #running: Promise<PruneCount> | undefined;
  #stopped = false;
  /** Rows per batch, per phase (their rows cost differently): adapted to TARGET_BATCH_MS. */
  readonly #size = { deliveries: 64, events: 64 };
  /**
   * Where the walks resume: rows before them were old but kept (pending, retrying, dead, or an event a delivery
   * still points at). Walked again from the start once a day, when some of those have become prunable.
   */
  #from = { deliveries: 0, events: 0, reset: 0 };
  readonly total: PruneCount = { deliveries: 0, attempts: 0, events: 0 };
  /** Batches run, how many held the store over twice the target, and the longest (ms). */
  readonly batches = { count: 0, over: 0, maxMs: 0 };

  constructor(o: PrunerOptions) {
    this.#o = { everyMs: 60_000, now: Date.now, ...o };
  }

  start(): void {
    if (this.#o.retentionMs <= 0) return;
    this.#schedule(1000); // not in the way of startup
  }

  #schedule(ms: number): void {
    if (this.#stopped) return;
    this.#timer = setTimeout(() => {
      this.#timer = undefined;
      void this.runOnce().finally(() => this.#schedule(this.#o.everyMs));
    }, ms);
    this.#timer.unref();
  }

  /** One full pass: every prunable row older than the horizon, batch after batch. Resolves with what it deleted. */
  runOnce(): Promise<PruneCount> {
    this.#running ??= this.#pass().finally(() => { this.#running = undefined; });
    return this.#running;
  }

  async #pass(): Promise<PruneCount> {
    const got: PruneCount = { deliveries: 0, attempts: 0, events: 0 };
    if (this.#o.retentionMs <= 0) return got;
    const horizon = this.#o.now() - this.#o.retentionMs;
    try {
      if (this.#o.now() - this.#from.reset >= 86_400_000) this.#from = { deliveries: 0, events: 0, reset: this.#o.now() };
      // Deliveries first: an event goes only once no delivery points at it.
      for (const phase of ['deliveries', 'events'] as const) {
        for (;;) {
          if (this.#stopped) return got;
          const after = this.#from[phase];
          const r = await this.#timed(phase, (n) => this.#o.store.write((tx) => (phase === 'deliveries' ? pruneDeliveries : pruneEvents)(tx, horizon, after, n)), (x) => (x.done ? 0 : Infinity));
          got.deliveries += r.deliveries;
          got.attempts += r.attempts;
          got.events += r.events;
          this.#from[phase] = r.last;
          if (r.done) break;
          await yieldToLoop();
        }
      }
    } catch (err) {
      log.warn('retention pass stopped; it runs again later', { error: (err as Error).message });
    }
    this.total.deliveries += got.deliveries;
    this.total.attempts += got.attempts;
    this.total.events += got.events;
    if (got.deliveries || got.events) log.info('pruned history older than the retention period', { horizon: new Date(horizon).toISOString(), ...got });
    return got;
  }

  /**
   * Run one batch and size the next one so a batch takes about TARGET_BATCH_MS: scaled by the time this one took,
   * growing (by a quarter at most) only after a batch that had a full batch of work.
   */
  async #timed<T>(phase: 'deliveries' | 'events', fn: (rows: number) => Promise<T>, work: (r: T) => number): Promise<T> {
    const size = this.#size[phase];
    const t0 = performance.now();
    const out = await fn(size);
    const ms = performance.now() - t0;
    const fit = Math.floor((size * TARGET_BATCH_MS) / Math.max(ms, 0.05));
    if (fit < size) this.#size[phase] = Math.max(MIN_BATCH, fit);
    else if (work(out) >= size) this.#size[phase] = Math.min(MAX_BATCH, fit, Math.ceil(size * 1.25));
    this.batches.count++;
    if (ms > 2 * TARGET_BATCH_MS) this.batches.over++;
    if (ms > this.batches.maxMs) this.batches.maxMs = ms;
    return out;
  }

  async stop(): Promise<void> {
    this.#stopped = true;
    if (this.#timer) clearTimeout(this.#timer);
    await this.#running?.catch(() => undefined);
  }
}

/** Let I/O (requests) run between batches: a timer, not setImmediate, so a whole poll phase gets its turn. */
const yieldToLoop = () => new Promise<void>((resolve) => setTimeout(resolve, 1));
