// The delivery worker: wakes on new events, claims due deliveries with a lease, sends them signed with bounded
// global and per-subscription concurrency, records every attempt durably (batched: one transaction per tick),
// and reschedules per the retry schedule. At-least-once: a crash between send and record resends after the lease.
import { isIP } from 'node:net';
import { Agent, request } from 'undici';
import { log } from '../log.js';
import type { Store } from '../store/db.js';
import { onEventRecorded } from '../store/events.js';
import { claimDue, deliveries, recordAttempt, subscriptions, type AttemptRecord, type ClaimedDelivery } from '../store/webhooks.js';
import { DEFAULT_RETRY_SCHEDULE_S, DISABLE_AFTER_FAILING_MS, parseRetryAfter, retryDelayMs } from './schedule.js';
import { serviceSignature, standardSignature } from './sign.js';
import { targetPolicy, type TargetPolicy } from './target.js';

export interface WorkerOptions {
  store: Store;
  retrySchedule?: readonly number[];
  /** Per attempt, ms (default 15 s). */
  timeoutMs?: number;
  concurrency?: number;
  perSubscription?: number;
  policy?: TargetPolicy;
  userAgent: string;
  now?: () => number;
  random?: () => number;
}

interface Result extends AttemptRecord {
  disable?: string;
}

const MAX_IDLE_WAIT_MS = 60_000;

export class DeliveryWorker {
  readonly #o: Required<Omit<WorkerOptions, 'policy'>> & { policy: TargetPolicy };
  readonly #agent: Agent;
  readonly #perSub: Record<string, number> = {};
  #inFlight = 0;
  #results: Result[] = [];
  #scheduled = false;
  #timer: NodeJS.Timeout | undefined;
  #stopping = false;
  #idle: Array<() => void> = [];
  #unsubscribe: (() => void) | undefined;
  readonly stats = { delivered: 0, failed: 0, dead: 0, gone: 0 };

  constructor(opts: WorkerOptions) {
    this.#o = {
      retrySchedule: DEFAULT_RETRY_SCHEDULE_S,
      timeoutMs: 15_000,
      concurrency: 128,
      perSubscription: 64,
      now: Date.now,
      random: Math.random,
      ...opts,
      policy: opts.policy ?? targetPolicy(),
    };
    this.#agent = new Agent({
      connect: { lookup: this.#o.policy.lookup, timeout: this.#o.timeoutMs },
      connections: this.#o.perSubscription,
      keepAliveTimeout: 30_000,
      headersTimeout: this.#o.timeoutMs,
      bodyTimeout: this.#o.timeoutMs,
    });
  }

  start(): void {
    this.#unsubscribe = onEventRecorded(() => this.wake());
    this.wake(); // deliveries left by a previous run (expired leases included) are due now
  }

  /** Schedule a pump on the next tick: after the recording transaction has committed. */
  wake(): void {
    if (this.#scheduled || this.#stopping) return;
    this.#scheduled = true;
    setImmediate(() => this.#pump());
  }

  get inFlight(): number {
    return this.#inFlight;
  }

  #pump(): void {
    this.#scheduled = false;
    if (this.#timer) { clearTimeout(this.#timer); this.#timer = undefined; }
    const db = this.#o.store.db;
    const now = this.#o.now();
    const room = this.#stopping ? 0 : this.#o.concurrency - this.#inFlight;
    let claimed: ClaimedDelivery[] = [];
    try {
      claimed = db.transaction(() => {
        this.#flush();
        return room > 0 ? claimDue(db, now, this.#o.timeoutMs + 60_000, room, this.#o.perSubscription, this.#perSub) : [];
      }).immediate();
    } catch (err) {
      log.error('delivery pump failed; retrying in 1 s', { error: (err as Error).message });
      this.#timer = setTimeout(() => this.wake(), 1000);
      return;
    }
    for (const d of claimed) this.#send(d);
    if (this.#stopping) {
      if (this.#inFlight === 0) for (const f of this.#idle.splice(0)) f();
      return;
    }
    if (claimed.length && claimed.length === room) return; // more may be due: the completions pump again
    if (this.#inFlight === 0 || claimed.length < room) {
      const next = deliveries.nextDue(db);
      if (next !== null) {
        const wait = Math.min(MAX_IDLE_WAIT_MS, Math.max(0, next - this.#o.now()));
        if (wait === 0 && claimed.length === 0 && this.#inFlight === 0) this.#timer = setTimeout(() => this.wake(), 10);
        else this.#timer = setTimeout(() => this.wake(), wait);
      }
    }
  }

  /** Write buffered attempt results; call inside a transaction. */
  #flush(): void {
    if (!this.#results.length) return;
    const db = this.#o.store.db;
    for (const r of this.#results.splice(0)) {
      recordAttempt(db, r);
      if (r.outcome === 'delivered') subscriptions.succeeded(db, r.subscriptionId, r.at);
      else subscriptions.failed(db, r.subscriptionId, r.at);
      if (r.disable) {
        subscriptions.setStatus(db, r.subscriptionId, 'disabled', r.disable, r.at);
        log.warn('webhook subscription disabled', { subscription: r.subscriptionId, reason: r.disable });
      }
    }
  }

  #send(d: ClaimedDelivery): void {
    this.#inFlight++;
    this.#perSub[d.subscription_id] = (this.#perSub[d.subscription_id] ?? 0) + 1;
    const started = this.#o.now();
    this.#attempt(d)
      .then(
        (r) => r,
        (err: unknown) => ({ status: null, error: errorText(err), retryAfter: undefined }),
      )
      .then(({ status, error, retryAfter }) => {
        const at = started;
        const durationMs = Math.max(0, this.#o.now() - started);
        const base = { deliveryId: d.id, subscriptionId: d.subscription_id, eventSeq: d.event_seq, attempt: d.attempts, at, durationMs, statusCode: status };
        let r: Result;
        if (status !== null && status >= 200 && status < 300) {
          r = { ...base, error: null, outcome: 'delivered', nextAttemptAt: null };
          this.stats.delivered++;
        } else if (status === 410) {
          r = { ...base, error: 'receiver answered 410 Gone', outcome: 'gone', nextAttemptAt: null, disable: 'receiver answered 410 Gone' };
          this.stats.gone++;
        } else {
          const delay = retryDelayMs(d.attempts, this.#o.retrySchedule, retryAfter, this.#o.random);
          const failingSince = d.failing_since ?? at;
          r = {
            ...base,
            error: error ?? `receiver answered HTTP ${status}`,
            outcome: 'failed',
            nextAttemptAt: delay === undefined ? null : at + durationMs + delay,
            ...(at - failingSince >= DISABLE_AFTER_FAILING_MS ? { disable: 'no successful delivery for 5 days' } : {}),
          };
          if (delay === undefined) this.stats.dead++;
          else this.stats.failed++;
        }
        this.#results.push(r);
        this.#inFlight--;
        if (--this.#perSub[d.subscription_id]! === 0) delete this.#perSub[d.subscription_id];
        this.#pumpSoon(); // a completion always pumps, even when stopping: it flushes and claims in one go
      });
  }

  #pumpSoon(): void {
    if (this.#scheduled) return;
    this.#scheduled = true;
    setImmediate(() => this.#pump());
  }

  async #attempt(d: ClaimedDelivery): Promise<{ status: number | null; error: string | null; retryAfter: number | undefined }> {
    const url = new URL(d.url);
    const host = url.hostname.replace(/^\[|\]$/g, '');
    if (isIP(host)) {
      const ok = this.#o.policy.allowed(host);
      if (!ok.ok) return { status: null, error: ok.reason, retryAfter: undefined };
    }
    const now = this.#o.now();
    const ts = Math.floor(now / 1000);
    const overlap = d.previous_secret && d.previous_secret_expires_at !== null && d.previous_secret_expires_at > now ? d.previous_secret : null;
    const headers: Record<string, string> = {
      'content-type': 'application/json',
      'user-agent': this.#o.userAgent,
      'x-service-event-id': d.event_id,
      'x-service-signature': serviceSignature(d.secret, d.body),
      'webhook-id': d.event_id,
      'webhook-timestamp': String(ts),
      'webhook-signature': [standardSignature(d.secret, d.event_id, ts, d.body), ...(overlap ? [standardSignature(overlap, d.event_id, ts, d.body)] : [])].join(' '),
    };
    if (overlap) headers['x-service-signature-previous'] = serviceSignature(overlap, d.body);
    const res = await request(url, {
      method: 'POST',
      headers,
      body: d.body,
      dispatcher: this.#agent,
      signal: AbortSignal.timeout(this.#o.timeoutMs),
    });
    await res.body.dump({ limit: 64 * 1024 }).catch(() => undefined);
    const ra = res.headers['retry-after'];
    return { status: res.statusCode, error: null, retryAfter: parseRetryAfter(Array.isArray(ra) ? ra[0] : ra, this.#o.now()) };
  }

  /** Stop claiming, let in-flight deliveries finish (each bounded by the timeout), record them, close sockets. */
  async stop(): Promise<void> {
    this.#stopping = true;
    this.#unsubscribe?.();
    if (this.#timer) clearTimeout(this.#timer);
    if (this.#inFlight > 0) await new Promise<void>((resolve) => this.#idle.push(resolve));
    try {
      this.#o.store.db.transaction(() => this.#flush()).immediate();
    } catch (err) {
      log.error('could not record the last delivery attempts; they will be resent', { error: (err as Error).message });
    }
    await this.#agent.close().catch(() => undefined);
  }
}

function errorText(err: unknown): string {
  const e = err as { code?: string; name?: string; message?: string; cause?: { code?: string; message?: string } };
  if (e?.name === 'TimeoutError' || e?.name === 'AbortError') return 'timed out';
  const code = e?.code ?? e?.cause?.code;
  const msg = (e?.cause?.message ?? e?.message ?? 'error').slice(0, 300);
  return code ? `${code}: ${msg}` : msg;
}
