// The delivery worker: wakes on new events, claims due deliveries with a lease (fairly: round-robin over nodes and
// their subscriptions, each within its own socket budget), sends them signed with bounded concurrency, records
// every attempt durably (batched: one transaction per tick),
// and reschedules per the retry schedule. At-least-once: a crash between send and record resends after the lease.
import { isIP } from 'node:net';
import { urlToHttpOptions } from 'node:url';
import { Agent as HttpAgent, request as httpRequest, type IncomingMessage } from 'node:http';
import { Agent as HttpsAgent, request as httpsRequest } from 'node:https';
import { redactUrls } from '../domain/text.js';
import { DEFAULT_FAILING_AFTER, OPERATOR } from '../domain/alerts.js';
import { iso } from '../domain/time.js';
import { emitAlert, raiseAlert, recoverAlert } from '../ops/alerts.js';
import { alertStates } from '../store/alerts.js';
import { log } from '../log.js';
import { metrics } from '../ops/metrics.js';
import { causes, endClient, tracer } from '../ops/tracing.js';
import type { Sql, Store } from '../store/sql.js';
import { onEventRecorded } from '../store/events.js';
import { claimDue, nextDueWithRoom, recordAttempts, releaseStaleLeases, subscriptions, subscriptionsChanged, type AttemptRecord, type ClaimedDelivery } from '../store/webhooks.js';
import { DEFAULT_RETRY_SCHEDULE_S, DISABLE_AFTER_FAILING_MS, parseRetryAfter, retryDelayMs } from './schedule.js';
import { serviceSignature, standardSignature } from './sign.js';
import { targetPolicy, type TargetPolicy } from './target.js';

export interface WorkerOptions {
  store: Store;
  retrySchedule?: readonly number[];
  /** Per attempt, ms (default 15 s). */
  timeoutMs?: number;
  /** In flight in all (default 256). */
  concurrency?: number;
  /** In flight per node at most (default: the concurrency); with several nodes each gets at most concurrency ÷ nodes. */
  perNode?: number;
  /** Sockets per subscription at most (default 64); with several subscriptions each gets at most its node's share ÷ them. */
  perSubscription?: number;
  policy?: TargetPolicy;
  userAgent: string;
  now?: () => number;
  random?: () => number;
  /** Consecutive failed attempts to one subscription before endpoint.failing (--alert-failing-after, default 3). */
  alertFailingAfter?: number;
}

interface Result extends AttemptRecord {
  disable?: string;
  /** What an operational alert about this result names (never the secret). */
  nodeId: string;
  url: string;
  eventId: string;
  eventType?: string;
}

const MAX_IDLE_WAIT_MS = 60_000;
/** A kept-alive socket idle this long is closed by the agent (a receiver's own idle timeout is usually shorter). */
const FREE_SOCKET_IDLE_MS = 30_000;
/** With a shared store (PostgreSQL): the longest an idle worker waits before looking for due deliveries again. */
const SHARED_IDLE_WAIT_MS = 1000;
/**
 * Attempt results are written in groups: at this many, or FLUSH_DELAY_MS after the first, whichever is sooner. Larger
 * groups share one durable commit; the delay is not on the delivery's path (the receiver has it already), only on its
 * record. bench/delivery, same run alternated: 64 / 2 ms 0.267-0.277, 128 / 5 ms 0.296-0.301, 256 / 10 ms 0.279-0.288.
 */
const FLUSH_BATCH = 128;
const FLUSH_DELAY_MS = 5;
/**
 * After a pump that claimed something, the next due time (a retry of a subscription not in the claim; on PostgreSQL,
 * what other daemons recorded) is looked up within this long, not at once: each look reads one MIN per subscription
 * with room, and on every pump of a backlog that was 2-3 ms of a 12 ms cycle (bench/delivery). A timer sees to it
 * when no pump comes: the claimed attempts may all hang while a retry falls due.
 */
const LOOK_AFTER_CLAIM_MS = 50;
/** A receiver URL as #post sends to it: the parsed URL and its request options (no headers; hostname without brackets). */
interface Target { url: URL; options: Pick<ReturnType<typeof urlToHttpOptions>, 'protocol' | 'hostname' | 'port' | 'path'> }

/** A subscription with an attempt in flight this long borrows no spare sockets (claimDue): only its own budget. */
const STALLED_AFTER_MS = 1000;

export class DeliveryWorker {
  readonly #o: Required<Omit<WorkerOptions, 'policy'>> & { policy: TargetPolicy };
  // node:http (native llhttp), not undici: undici's WebAssembly parser and modules cost ~20-32 MB of RSS, which the
  // daemon's 120 MB bound has no room for (README, "Webhooks are sent with node:http, not undici").
  readonly #http: HttpAgent;
  readonly #https: HttpsAgent;
  readonly #perSub: Record<string, number> = {};
  readonly #perNode: Record<string, number> = {};
  /** Attempts in flight: when each started and for which subscription (a stalled one borrows no sockets). */
  readonly #started = new Map<string, { sub: string; at: number }>();
  #turn = 0;
  #inFlight = 0;
  #results: Result[] = [];
  #scheduled = false;
  #timer: NodeJS.Timeout | undefined;
  /** Armed after a pump that claimed and did not look for the next due time; sets #look. */
  #lookTimer: NodeJS.Timeout | undefined;
  #look = false;
  #stopping = false;
  #idle: Array<() => void> = [];
  #unsubscribe: (() => void) | undefined;
  #flushTimer: NodeJS.Timeout | undefined;
  #closed = false;
  /** Each receiver URL parsed once, with its request options (#post). */
  readonly #urls = new Map<string, Target>();
  /** stale: results refused by the fence (the lease was taken over meanwhile). */
  readonly stats = { delivered: 0, failed: 0, dead: 0, gone: 0, stale: 0 };
  /** The pump in progress: one at a time (its claim and its counts go together); stop() waits for it. */
  #pumping: Promise<void> | undefined;
  #again = false;

  constructor(opts: WorkerOptions) {
    this.#o = {
      retrySchedule: DEFAULT_RETRY_SCHEDULE_S,
      timeoutMs: 15_000,
      concurrency: 256,
      perSubscription: 64,
      alertFailingAfter: DEFAULT_FAILING_AFTER,
      now: Date.now,
      random: Math.random,
      ...opts,
      perNode: opts.perNode ?? opts.concurrency ?? 256,
      policy: opts.policy ?? targetPolicy(),
    };
    // No per-host socket cap in the agent: the budget is per subscription (claimDue), so two subscriptions on one
    // host never queue behind each other's sockets (a hanging one would otherwise hold the host's whole pool).
    // Idle sockets kept per host: as many as can be in use at once (the concurrency). The agent keys its free sockets
    // by host, not by subscription: with perSubscription (64) here, ten subscriptions on one receiver returned up to
    // 256 sockets to a pool of 64 and the rest were closed and opened again on the next claim (bench/delivery's
    // profile: ~12 % of the daemon in connect and close). Idle ones still close when the receiver closes them, and
    // after FREE_SOCKET_IDLE_MS here.
    const agentOpts = { keepAlive: true, maxSockets: Infinity, maxFreeSockets: this.#o.concurrency, timeout: FREE_SOCKET_IDLE_MS, scheduling: 'lifo' as const, lookup: this.#o.policy.lookup };
    this.#http = new HttpAgent(agentOpts);
    this.#https = new HttpsAgent(agentOpts);
  }

  async start(): Promise<void> {
    // SQLite: the data dir is this process's alone, so every unrecorded claim was the previous run's. PostgreSQL:
    // another daemon may be sending right now; its leases simply run out if it died.
    if (this.#o.store.dialect === 'sqlite') {
      const released = await releaseStaleLeases(this.#o.store.q, this.#o.now());
      if (released) log.info('resending deliveries interrupted by the previous run', { count: released });
    }
    const offEvents = onEventRecorded(() => this.wake());
    // Subscriptions changed through another daemon: the claim reads them again (and looks for work now).
    const offInvalidate = this.#o.store.onInvalidate((inv) => {
      if (inv.topic === 'subscriptions' || inv.topic === '*') { subscriptionsChanged(); this.wake(); }
    });
    this.#unsubscribe = () => { offEvents(); offInvalidate(); };
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
    if (this.#closed) return;
    if (this.#pumping) { this.#again = true; return; }
    this.#pumping = this.#pumpOnce().finally(() => {
      this.#pumping = undefined;
      if (this.#again) { this.#again = false; this.#pumpSoon(); }
    });
  }

  async #pumpOnce(): Promise<void> {
    const now = this.#o.now();
    const room = this.#stopping ? 0 : this.#o.concurrency - this.#inFlight;
    const flush = this.#results.length >= FLUSH_BATCH || (this.#stopping && this.#results.length > 0);
    let claimed: ClaimedDelivery[] = [];
    try {
      if (flush) {
        // Attempt records are durable: one commit for the whole group, claims ride along.
        claimed = await this.#recordResults(async (tx) => (room > 0 ? this.#claim(tx, now, room) : []));
      } else if (room > 0) {
        // A lease lost in a crash only means a resend, which at-least-once allows: no fsync on the send path.
        claimed = await this.#o.store.transaction((tx) => this.#claim(tx, now, room));
      }
    } catch (err) {
      log.error('delivery pump failed; retrying in 1 s', { error: (err as Error).message });
      this.#arm(() => this.#pumpSoon(), 1000); // also while stopping: the drain must finish
      return;
    }
    if (this.#results.length && !this.#flushTimer) this.#flushTimer = setTimeout(() => this.#flushNow(), FLUSH_DELAY_MS);
    for (const d of claimed) this.#send(d);
    if (this.#stopping) {
      if (this.#inFlight === 0 && this.#results.length === 0) for (const f of this.#idle.splice(0)) f();
      else if (this.#inFlight === 0) this.#pumpSoon();
      return;
    }
    // Something was claimed: each of its completions pumps again; the next due time is looked up within
    // LOOK_AFTER_CLAIM_MS (the timer armed by the last look stays meanwhile).
    if (claimed.length && !this.#look) {
      this.#lookTimer ??= setTimeout(() => { this.#lookTimer = undefined; this.#look = true; this.wake(); }, LOOK_AFTER_CLAIM_MS);
      return;
    }
    this.#look = false;
    if (this.#lookTimer) { clearTimeout(this.#lookTimer); this.#lookTimer = undefined; }
    // Subscriptions at their budget are left out: a completion pumps for them.
    let next: number | null;
    try {
      next = await nextDueWithRoom(this.#o.store.q, this.#limits(), { bySubscription: this.#perSub, byNode: this.#perNode }, this.#o.store);
    } catch (err) {
      log.error('delivery pump failed; retrying in 1 s', { error: (err as Error).message });
      next = this.#o.now() + 1000;
    }
    // PostgreSQL: other daemons record events this one is not told of, and a dead daemon's leases run out: look at
    // least every second.
    const idle = this.#o.store.dialect === 'postgres' ? SHARED_IDLE_WAIT_MS : MAX_IDLE_WAIT_MS;
    const wait = next === null ? idle : Math.min(idle, Math.max(0, next - this.#o.now()));
    if (next !== null || this.#o.store.dialect === 'postgres') this.#arm(() => this.wake(), wait === 0 ? 10 : wait);
    else this.#arm(undefined, 0);
  }

  /** The one pump timer (a due time, the PostgreSQL poll, a retry after a failed pump), replacing the one armed before. */
  #arm(fn: (() => void) | undefined, ms: number): void {
    if (this.#timer) clearTimeout(this.#timer);
    this.#timer = fn ? setTimeout(fn, ms) : undefined;
  }

  #limits() {
    return { concurrency: this.#o.concurrency, perNode: this.#o.perNode, perSubscription: this.#o.perSubscription };
  }

  #claim(tx: Sql, now: number, room: number): Promise<ClaimedDelivery[]> {
    return claimDue(tx, now, this.#leaseMs(), room, this.#limits(), { bySubscription: this.#perSub, byNode: this.#perNode, stalled: this.#stalled(now) }, this.#turn++, this.#o.store);
  }

  /** Subscriptions with an attempt in flight for STALLED_AFTER_MS or more. */
  #stalled(now: number): Set<string> {
    const out = new Set<string>();
    for (const { sub, at } of this.#started.values()) if (now - at >= STALLED_AFTER_MS) out.add(sub);
    return out;
  }

  /**
   * How long a claim holds a delivery: the attempt's timeout, then time to record it. When it runs out (its daemon
   * died) any daemon claims it again; the dead claim's result, should it ever arrive, is refused by the fence.
   */
  #leaseMs(): number {
    return this.#o.timeoutMs * 2 + 10_000;
  }

  #flushNow(): void {
    this.#flushTimer = undefined;
    if (this.#closed || !this.#results.length) return;
    this.#recordResults(async () => undefined).then(
      () => this.#pumpSoon(), // retries just got their next time: re-arm the timer for the earliest due row
      (err: unknown) => {
        log.error('could not record delivery attempts; retrying', { error: (err as Error).message });
        this.#flushTimer = setTimeout(() => this.#flushNow(), 100);
      },
    );
  }

  /** One write transaction: the buffered attempt results, then `fn`. On failure the results stay buffered. */
  async #recordResults<T>(fn: (tx: Sql) => Promise<T>): Promise<T> {
    const batch = this.#results;
    this.#results = [];
    try {
      return await this.#o.store.write(async (tx) => {
        await this.#write(tx, batch);
        return fn(tx);
      });
    } catch (err) {
      this.#results = batch.concat(this.#results);
      throw err;
    }
  }

  async #write(tx: Sql, batch: Result[]): Promise<void> {
    // Every result's fenced update and attempt row, issued together (PostgreSQL: one packet, one round trip for the
    // whole batch); then each subscription's success/failure marks, folded over the group in order: one write per
    // subscription, not one per result (the last success, and the first failure after it: what the writes one by
    // one would leave), also issued together.
    const recorded = await recordAttempts(tx, batch);
    const marks = new Map<string, { success: number | null; failingSince: number | null; failures: number; last: Result }>();
    const disable: Array<{ r: Result; done: Promise<number> }> = [];
    const dead: Result[] = [];
    batch.forEach((r, i) => {
      // Fenced: a claim taken over by another daemon (its lease ran out) records nothing.
      if (!recorded[i]) {
        this.stats.stale++;
        log.warn('delivery result not recorded: its lease was taken over', { delivery: r.deliveryId, attempt: r.attempt });
        return;
      }
      const m = marks.get(r.subscriptionId) ?? { success: null, failingSince: null, failures: 0, last: r };
      if (r.outcome === 'delivered') { m.success = r.at; m.failingSince = null; m.failures = 0; } else { m.failingSince ??= r.at; m.failures++; m.last = r; }
      marks.set(r.subscriptionId, m);
      if (r.outcome === 'failed' && r.nextAttemptAt === null) dead.push(r);
      if (r.disable) {
        disable.push({ r, done: subscriptions.disableIfActive(tx, r.subscriptionId, r.disable, r.at) });
        log.warn('webhook subscription disabled', { subscription: r.subscriptionId, reason: r.disable });
      }
    });
    // In id order: two daemons marking the same subscriptions lock their rows in one order (PostgreSQL: no deadlock).
    // A success also clears the subscription's endpoint.failing, issued with the marks (no round trip of its own).
    const sorted = [...marks].sort(([a], [b]) => (a < b ? -1 : a > b ? 1 : 0));
    const [changed, counts, cleared] = await Promise.all([
      Promise.all(disable.map((x) => x.done)),
      Promise.all(sorted.map(([id, m]) => m.success !== null ? subscriptions.succeededCounting(tx, id, m.success, m.failingSince, m.failures) : subscriptions.failedCounting(tx, id, m.failingSince!, m.failures))),
      Promise.all(sorted.map(([id, m]) => m.success !== null && m.last.nodeId !== OPERATOR ? alertStates.clear(tx, `endpoint:${id}`, ['endpoint.failing']) : undefined)),
    ]);
    await this.#alerts(tx, sorted, counts, cleared, disable.filter((_, i) => changed[i]! > 0).map((x) => x.r), dead);
  }

  /**
   * Operational alerts from a group of results, each once per transition: the subscription's failures reaching
   * --alert-failing-after (endpoint.failing, a conditional insert keyed by the subscription), its recovery (the
   * clear issued with the marks), its disabling (the conditional update above), a delivery out of retries (its fenced
   * record is the transition). Alert endpoints' own troubles raise none (they would be sent to themselves): they show
   * in status and /healthz.
   */
  async #alerts(tx: Sql, sorted: Array<[string, { success: number | null; failures: number; last: Result }]>, counts: number[], cleared: Array<{ kind: string; since: number } | undefined>, disabled: Result[], dead: Result[]): Promise<void> {
    const after = this.#o.alertFailingAfter;
    for (let i = 0; i < sorted.length; i++) {
      const [id, m] = sorted[i]!;
      const r = m.last;
      const subject = { node: r.nodeId, subscription: id, url: redactUrls(r.url) };
      if (r.nodeId === OPERATOR) {
        if (m.success === null && counts[i]! >= after && counts[i]! - m.failures < after) log.warn('alert endpoint failing', { endpoint: id, url: subject.url, consecutiveFailures: counts[i], lastError: r.error });
        continue;
      }
      const was = cleared[i];
      if (was) await emitAlert(tx, 'endpoint.recovered', `webhook:${id}`, { ...subject, failingSince: iso(Number(was.since)), recoveredAt: iso(m.success!) }, m.success!);
      const failures = m.success === null ? counts[i]! : m.failures;
      if (failures >= after)
        await raiseAlert(tx, { key: `endpoint:${id}`, kind: 'endpoint.failing', node: r.nodeId, ref: `webhook:${id}`, now: r.at,
          data: { ...subject, consecutiveFailures: failures, lastStatus: r.statusCode, lastError: r.error, lastAttemptAt: iso(r.at) } });
    }
    for (const r of disabled) {
      if (r.nodeId === OPERATOR) continue;
      // Nothing more is attempted: its failing condition closes with it (no recovery event for a disabled endpoint).
      await alertStates.clear(tx, `endpoint:${r.subscriptionId}`, ['endpoint.failing']);
      await emitAlert(tx, 'endpoint.disabled', `webhook:${r.subscriptionId}`, { node: r.nodeId, subscription: r.subscriptionId, url: redactUrls(r.url), reason: r.disable, disabledAt: iso(r.at) }, r.at);
    }
    for (const r of dead) {
      if (r.nodeId === OPERATOR) continue;
      await emitAlert(tx, 'delivery.exhausted', `webhook:${r.subscriptionId}`, {
        node: r.nodeId, subscription: r.subscriptionId, delivery: r.deliveryId, event: r.eventId, eventType: r.eventType ?? null,
        attempts: r.attempt, lastStatus: r.statusCode, lastError: r.error, lastAttemptAt: iso(r.at),
      }, r.at);
    }
  }

  #send(d: ClaimedDelivery): void {
    this.#inFlight++;
    this.#perSub[d.subscription_id] = (this.#perSub[d.subscription_id] ?? 0) + 1;
    this.#perNode[d.node_id] = (this.#perNode[d.node_id] ?? 0) + 1;
    const started = this.#o.now();
    this.#started.set(d.id, { sub: d.subscription_id, at: started });
    this.#attempt(d)
      .then(
        (r) => r,
        (err: unknown) => ({ status: null, error: errorText(err), retryAfter: undefined }),
      )
      .then(({ status, error, retryAfter }) => {
        const at = started;
        const durationMs = Math.max(0, this.#o.now() - started);
        const base = { deliveryId: d.id, subscriptionId: d.subscription_id, eventSeq: d.event_seq, attempt: d.attempts, at, durationMs, statusCode: status, nodeId: d.node_id, url: d.url, eventId: d.event_id };
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
          if (delay === undefined) { this.stats.dead++; r.eventType = eventType(d.body); }
          else this.stats.failed++;
        }
        const outcome = r.outcome === 'failed' && r.nextAttemptAt === null ? 'dead' : r.outcome;
        metrics.deliveries.inc({ outcome });
        metrics.attemptDuration.observe(durationMs / 1000, { outcome });
        if (r.outcome === 'delivered') metrics.deliveryLatency.observe(Math.max(0, at + durationMs - d.created_at) / 1000);
        else log.warn(r.nextAttemptAt === null ? 'webhook delivery failed; no retry left' : 'webhook delivery failed', { subscription: d.subscription_id, event: d.event_id, attempt: d.attempts, status: r.statusCode, error: r.error, nextAttemptAt: r.nextAttemptAt === null ? null : new Date(r.nextAttemptAt).toISOString() });
        this.#results.push(r);
        this.#inFlight--;
        this.#started.delete(d.id);
        if (--this.#perSub[d.subscription_id]! === 0) delete this.#perSub[d.subscription_id];
        if (--this.#perNode[d.node_id]! === 0) delete this.#perNode[d.node_id];
        this.#pumpSoon(); // a completion always pumps, even when stopping: it claims, and flushes a full group
      });
  }

  #pumpSoon(): void {
    if (this.#scheduled) return;
    this.#scheduled = true;
    setImmediate(() => this.#pump());
  }

  async #attempt(d: ClaimedDelivery): Promise<{ status: number | null; error: string | null; retryAfter: number | undefined }> {
    let target: Target | undefined = this.#urls.get(d.url);
    if (target === undefined) {
      if (this.#urls.size > 10_000) this.#urls.clear();
      const u = new URL(d.url);
      // userinfo is refused when a subscription is made (service/webhooks.ts): no Authorization to derive from it.
      const { protocol, hostname, port, path } = urlToHttpOptions(u);
      this.#urls.set(d.url, (target = { url: u, options: { protocol, hostname, port, path } }));
    }
    const url = target.url;
    const host = target.options.hostname!; // an IPv6 address without its brackets, as urlToHttpOptions gives it
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
    // Traced: an HTTP CLIENT span per attempt, whose traceparent the receiver's trace continues; linked to the spans
    // the event came from (a settlement's confirmation). Not the URL's path or query: they can hold a receiver's secret.
    const span = tracer?.start('POST', {
      kind: 'client', links: causes.forEvent(d.event_id),
      attributes: {
        'http.request.method': 'POST', 'url.scheme': url.protocol.slice(0, -1), 'server.address': host, 'server.port': Number(url.port || (url.protocol === 'https:' ? 443 : 80)),
        'http.request.resend_count': d.attempts > 1 ? d.attempts - 1 : undefined,
        'node_svc.node': d.node_id, 'node_svc.subscription.id': d.subscription_id, 'node_svc.delivery.id': d.id, 'node_svc.event.id': d.event_id,
      },
    });
    if (span) headers.traceparent = span.traceparent;
    const res = await (span ? endClient(span, this.#post(target, headers, d.body)) : this.#post(target, headers, d.body));
    const ra = res.headers['retry-after'];
    return { status: res.statusCode ?? null, error: null, retryAfter: parseRetryAfter(Array.isArray(ra) ? ra[0] : ra, this.#o.now()) };
  }

  /**
   * One POST: the whole attempt (connect, send, status and body) bounded by the timeout; redirects never followed.
   * A kept-alive connection that the receiver closed as this request went out on it (ECONNRESET or EPIPE on a reused
   * socket, nothing of an answer read) is not the receiver's failure: the request is sent once more, on a new
   * connection, within the same timeout (node's request.reusedSocket guidance; Go's Transport does the same for a
   * request it may replay). A receiver whose idle timeout is shorter than FREE_SOCKET_IDLE_MS and that does not say
   * so in a Keep-Alive header would otherwise fail an attempt now and then and wait the schedule's first retry. A
   * delivery is at least once: the receiver dedupes by webhook-id, should it have read the first one.
   */
  #post(target: Target, headers: Record<string, string>, body: string, deadline = performance.now() + this.#o.timeoutMs, resent = false): Promise<IncomingMessage> {
    const { url } = target;
    const https = url.protocol === 'https:';
    return new Promise((resolve, reject) => {
      // The resend on a connection of its own (the pool's next idle one may be just as stale), resolved through the
      // same address policy as the pool's.
      const via = resent ? { agent: false as const, lookup: this.#o.policy.lookup } : { agent: https ? this.#https : this.#http };
      // The head as a list of name/value pairs, Host first, its value as node would make it (the URL's host: brackets
      // around an IPv6 address, the port unless it is the scheme's default): node writes the list as it is, each name
      // and value still checked, where an object of headers goes through setHeader one by one (with the URL's options
      // parsed per request: ~20 µs of CPU per delivery of node's HTTP client here, 2026-11-29). So the request has no
      // headers to read or set afterwards (getHeaders() is empty): HTTP instrumentation that injects headers into
      // node's requests does not reach these; the worker's own traceparent is in the list.
      const head = ['host', url.host];
      for (const k in headers) head.push(k, headers[k]!);
      head.push('content-length', String(Buffer.byteLength(body)));
      const req = (https ? httpsRequest : httpRequest)({ ...target.options, method: 'POST', headers: head, ...via });
      // What the attempt was waiting for when its time ran out, named in the recorded error: a receiver whose DNS
      // never answers, one that never accepts the connection, a TLS handshake that stalls and an answer that never
      // comes are different faults for the operator to fix. Only a new connection is followed (a reused one is
      // past all three; its listeners cost nothing per request).
      let reached: 'socket' | 'address' | 'connected' | 'secured' | undefined;
      req.once('socket', (s) => {
        if (req.reusedSocket || !s.connecting) return void (reached = 'secured');
        reached = 'socket';
        const looked = (err: Error | null) => { if (!err) reached = 'address'; };
        s.once('lookup', looked);
        // An IP address is never looked up: its listener goes with the connect (a kept-alive socket must not hold
        // this request's closure).
        s.once('connect', () => { s.removeListener('lookup', looked); reached = https ? 'connected' : 'secured'; });
        if (https) s.once('secureConnect', () => { reached = 'secured'; });
      });
      let answered = false;
      const timer = setTimeout(() => {
        const within = `within ${this.#o.timeoutMs / 1000} s${resent ? ' (sent again on a new connection after a reset)' : ''}`;
        const what = answered ? `answer not finished ${within}`
          : reached === 'socket' && !isIP(target.options.hostname ?? '') ? `no DNS answer for ${target.options.hostname} ${within}`
            : reached !== 'connected' && reached !== 'secured' ? `no connection to ${url.host} ${within}`
              : reached === 'connected' ? `TLS handshake with ${url.host} not finished ${within}`
                : `no answer ${within}`;
        req.destroy(Object.assign(new Error(what), { name: 'TimeoutError' }));
      }, Math.max(0, deadline - performance.now()));
      req.once('error', (err: NodeJS.ErrnoException) => {
        clearTimeout(timer);
        if (!resent && !answered && req.reusedSocket && (err.code === 'ECONNRESET' || err.code === 'EPIPE') && deadline > performance.now()) {
          // Counted and logged (debug: a receiver with a short idle timeout does this routinely), so that an operator
          // can tell a resend from a first send; the host only (a URL's path or query can hold a receiver's secret).
          metrics.resends.inc({ code: err.code });
          log.debug('webhook request sent again on a new connection: the receiver closed the kept-alive one as it went out', { code: err.code, host: url.host, webhookId: headers['webhook-id'] });
          return resolve(this.#post(target, headers, body, deadline, true));
        }
        reject(err);
      });
      req.once('response', (res) => {
        answered = true;
        let read = 0;
        res.on('data', (c: Buffer) => { read += c.length; if (read > 64 * 1024) res.destroy(); }); // drain, bounded
        res.once('end', () => { clearTimeout(timer); resolve(res); });
        res.once('close', () => { clearTimeout(timer); resolve(res); });
        res.once('error', () => { clearTimeout(timer); resolve(res); });
      });
      req.end(body);
    });
  }

  /** Stop claiming, let in-flight deliveries finish (each bounded by the timeout), record them, close sockets. */
  async stop(): Promise<void> {
    this.#stopping = true;
    this.#unsubscribe?.();
    if (this.#timer) clearTimeout(this.#timer);
    if (this.#lookTimer) clearTimeout(this.#lookTimer);
    if (this.#inFlight > 0) await new Promise<void>((resolve) => this.#idle.push(resolve));
    if (this.#flushTimer) { clearTimeout(this.#flushTimer); this.#flushTimer = undefined; }
    await this.#pumping;
    try {
      await this.#recordResults(async () => undefined);
    } catch (err) {
      log.error('could not record the last delivery attempts; they will be resent', { error: (err as Error).message });
    }
    this.#closed = true;
    if (this.#timer) clearTimeout(this.#timer);
    this.#http.destroy();
    this.#https.destroy();
  }
}

/** The kind of the event a delivery carries (read only for a delivery out of retries). */
function eventType(body: string): string | undefined {
  try {
    return String((JSON.parse(body) as { type?: unknown }).type);
  } catch {
    return undefined;
  }
}

function errorText(err: unknown): string {
  const e = err as { code?: string; name?: string; message?: string; cause?: { code?: string; message?: string } };
  // A timeout names what it was waiting for (#post): `timed out: no DNS answer for hook.example within 15 s`.
  if (e?.name === 'TimeoutError') return redactUrls(`timed out: ${e.message ?? 'no answer'}`);
  if (e?.name === 'AbortError') return 'timed out';
  const code = e?.code ?? e?.cause?.code;
  const msg = (e?.cause?.message ?? e?.message ?? 'error').slice(0, 300);
  return redactUrls(code ? `${code}: ${msg}` : msg); // stored and shown: never a target's query or userinfo
}
