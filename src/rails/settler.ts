// The settlement engine, the same for every rail: policy (threshold, age, closing), one settlement in flight
// per stream, never the same amount twice, never lower; checkpointed and final recorded with their events
// in the transaction that moves the stream's frontier.
import { FundingUnavailable, type FundingSubject } from '../domain/funding.js';
import { log } from '../log.js';
import { metrics } from '../ops/metrics.js';
import { hostname } from 'node:os';
import { randomBytes } from 'node:crypto';
import { onCommit, type Sql, type Store } from '../store/sql.js';
import { leases } from '../store/leases.js';
import { recordEvent } from '../store/events.js';
import { iso } from '../domain/time.js';
import { redactUrls } from '../domain/text.js';
import { raiseAlert, recoverAlert } from '../ops/alerts.js';
import { frontier, settlements, unsettledStreams, type SettlementRow } from '../store/settlements.js';
import { streams, type StreamRow } from '../store/streams.js';
import { issueReceipt } from '../service/receipts.js';
import type { Rail, SettlementState } from './rail.js';
import { causes, errorType, tracer, type Span } from '../ops/tracing.js';

type RecordEvent = typeof recordEvent;

export interface SettlementPolicy {
  /** Settle when the unsettled amount reaches this many micro units. */
  thresholdMicro: bigint;
  /** …or when the oldest unsettled voucher is this old (ms). */
  maxAgeMs: number;
  /** …or at once when the stream closes (exhausted, revoked, expired, budget halted/released) or its channel close is requested. */
  onClose: boolean;
  /** A settlement sent but not mined (captured) for this long is stuck: rebroadcast / replaced, warned, counted. */
  stuckAfterMs: number;
  /**
   * How often the settler looks at the rail and the store when nothing woke it (ms, --settle-poll): sent transactions,
   * confirmations, captures, funding reads, what the policy asks for. x402's tracker polls as often.
   */
  pollMs: number;
}

const MAX_SUBMITS_PER_TICK = 16;
/** A failed settlement is retried after this × 2^failures at the soonest (and the poll interval, when slower). */
const RETRY_BASE_MS = 1000;
/** Funding reads per tick (each is one rail request): open streams are re-read round-robin, oldest reading first. */
const MAX_FUNDING_READS_PER_TICK = 32;
/** How long the rail may be unreadable before funding answers are refused with 503 instead of served from the last reading. */
const FUNDING_GRACE_MS = 30_000;

/**
 * The settlement lease: one daemon settles a rail account at a time, renewing every tick; when it dies another takes
 * over once the lease has run out (within this long), and anything the old holder still tries to record is refused
 * by the fence. NODE_SVC_SETTLER_LEASE_MS overrides it (tests).
 */
const SETTLER_LEASE_MS = Number(process.env.NODE_SVC_SETTLER_LEASE_MS) > 0 ? Number(process.env.NODE_SVC_SETTLER_LEASE_MS) : 10_000;

/** This process among the daemons sharing a store. */
export const DAEMON_ID = `${hostname()}:${process.pid}:${randomBytes(4).toString('hex')}`;

/** Another daemon took the settlement lease: this one records nothing more. */
/** A fenced write refused: another daemon holds the settlement lease of this wallet. */
export class LeaseLost extends Error {}

export const DEFAULT_POLICY: SettlementPolicy = { thresholdMicro: 1_000_000n, maxAgeMs: 60_000, onClose: true, stuckAfterMs: 60_000, pollMs: 1000 };

/** The stream as a rail judges its funding. */
export const fundingSubject = (row: StreamRow): FundingSubject => ({
  nodeId: row.node_id, stream: row.id, payer: row.payer, asset: row.asset, mode: row.mode, claims: JSON.parse(row.claims) as Record<string, unknown>,
});

/** A stream's settlement alert condition (stuck or failed until a settlement of it is checkpointed). */
const settlementKey = (node: string, stream: string) => `settlement:${JSON.stringify([node, stream])}`;
/** What a settlement alert says of its settlement (never the voucher). */
const settlementSubject = (s: SettlementRow, asset: string, rail: string) =>
  ({ node: s.node_id, stream: s.stream, settlement: s.id, rail, asset, amountMicro: s.amount_micro.toString() });

export class Settler {
  #timer: NodeJS.Timeout | undefined;
  #running: Promise<void> | undefined;
  #stopped = false;
  /** Streams whose settlement failed: retried with exponential backoff (a refused one must not spin every tick). */
  readonly #backoff = new Map<string, { failures: number; nextAt: number }>();
  /** Since when every funding read failed (the rail unreadable), and why. */
  #unreadable: { since: number; error: string } | undefined;
  /** Settlements already warned about as stuck (one warning each, not one per tick). */
  readonly #warnedStuck = new Set<string>();
  /** The fence this daemon holds the settlement lease under (undefined: another daemon settles). */
  #fence: number | undefined;
  /** When this daemon last took or renewed the lease (its expiry is that + SETTLER_LEASE_MS). */
  #renewedAt = 0;
  readonly #leaseName: string;
  constructor(
    private readonly store: Store,
    private readonly rail: Rail,
    private readonly policy: SettlementPolicy = DEFAULT_POLICY,
    private readonly tickMs = policy.pollMs,
    private readonly now: () => number = Date.now,
  ) {
    rail.attach?.({ store, wake: () => this.wake(), settlementWrite: (fn) => this.#fenced(fn) }); // before any route of the rail can be called
    this.#leaseName = `settler:${rail.mode}:${rail.account ?? 'default'}`;
  }

  /**
   * Take or renew the settlement lease; false when another daemon holds it. The holder renews once a third of the
   * lease has passed, not on every tick: an idle daemon does not commit (and fsync) a renewal every second.
   */
  async #lease(): Promise<boolean> {
    const before = this.#fence;
    const now = this.now();
    if (before !== undefined && now - this.#renewedAt < SETTLER_LEASE_MS / 3) return true;
    const fence = await this.store.write((tx) => leases.acquire(tx, this.#leaseName, DAEMON_ID, now, SETTLER_LEASE_MS));
    this.#fence = fence;
    if (fence !== undefined) this.#renewedAt = now;
    if (fence !== undefined && fence !== before) {
      this.rail.takeover?.();
      this.#backoff.clear();
      log.info('settling: this daemon holds the settlement lease', { lease: this.#leaseName, fence, daemon: DAEMON_ID });
    } else if (fence === undefined && before !== undefined) log.warn('settlement lease lost to another daemon', { lease: this.#leaseName });
    return fence !== undefined;
  }

  /** A settlement write, fenced: refused (LeaseLost) unless this daemon still holds the lease it settled under. */
  #fenced<T>(fn: (tx: Sql) => Promise<T>): Promise<T> {
    const fence = this.#fence;
    return this.store.write(async (tx) => {
      if (fence === undefined || !(await leases.holds(tx, this.#leaseName, DAEMON_ID, fence, this.now()))) throw new LeaseLost('the settlement lease is held by another daemon');
      return fn(tx);
    });
  }

  /** Run a tick soon instead of after the interval (a processor webhook said something changed). */
  wake(): void {
    if (this.#stopped || this.#running) return;
    if (this.#timer) clearTimeout(this.#timer);
    this.#timer = setTimeout(() => this.#loop(), 0);
  }

  #loop = (): void => {
    if (this.#stopped) return;
    let more = false;
    this.#running = this.tick().then((m) => { more = m; }, (err) => {
      if (err instanceof LeaseLost) { this.#fence = undefined; log.warn('settlement lease lost to another daemon', { lease: this.#leaseName }); return; }
      if (!this.#stopped) log.error('settlement tick failed', { error: (err as Error).message });
    }).finally(() => {
      this.#running = undefined;
      if (!this.#stopped) this.#timer = setTimeout(this.#loop, more ? 0 : this.tickMs);
    });
  };

  start(): void {
    this.#loop();
  }

  /**
   * Stop: no new step starts, and the one in flight gets `graceMs` to finish. Past that it is abandoned like a crash,
   * which loses nothing (every settlement is recorded before anything leaves the process, and the next start
   * resumes it): one Ctrl-C must not wait out a slow RPC.
   */
  async stop(graceMs = 2000): Promise<void> {
    this.#stopped = true;
    if (this.#timer) clearTimeout(this.#timer);
    let timer: NodeJS.Timeout | undefined;
    await Promise.race([this.#running, new Promise<void>((r) => { timer = setTimeout(r, graceMs); })]);
    clearTimeout(timer);
    // A clean stop hands the lease on at once (a crash leaves it to run out).
    if (this.#fence !== undefined) await this.store.write((tx) => leases.release(tx, this.#leaseName, DAEMON_ID)).catch(() => undefined);
    this.#fence = undefined;
  }

  /** One pass: advance what was sent, re-read funding, release closed streams, then start what the policy asks for. True when more is due at once. */
  async tick(): Promise<boolean> {
    if (!(await this.#lease())) return false; // another daemon settles; this one stands by
    await this.rail.poll?.();
    for (const s of await settlements.open(this.store.q, this.rail.mode)) {
      if (this.#stopped) return false; // what is in flight is recorded; the next start resumes it
      await this.#advance(s);
    }
    await this.#refreshFunding();
    await this.#release();
    return this.#startDue();
  }

  /** Read the rail's word on a stream's funding now (registration). Throws FundingUnavailable. */
  async fund(subject: FundingSubject) {
    if (subject.mode !== this.rail.mode) return { funded: false as const, reason: `this daemon settles on the ${this.rail.mode} rail, not ${subject.mode}` };
    if (!this.rail.fund) return { funded: false as const, reason: `the ${this.rail.mode} rail cannot read funding sources` };
    try {
      const check = await this.rail.fund(subject);
      this.#unreadable = undefined;
      return check;
    } catch (err) {
      if (err instanceof FundingUnavailable) this.#unreadable ??= { since: this.now(), error: err.message };
      throw err;
    }
  }

  /** Why funding readings cannot be trusted now: the rail has been unreadable for longer than the grace. */
  fundingUnavailable(): string | undefined {
    const u = this.#unreadable;
    return u && this.now() - u.since > FUNDING_GRACE_MS ? `the ${this.rail.mode} rail has been unreadable for ${Math.round((this.now() - u.since) / 1000)} s (${u.error})` : undefined;
  }

  /** Re-read the funding of open streams (top-ups raise the effective cap; a closed channel stops payment). */
  async #refreshFunding(): Promise<void> {
    if (!this.rail.fund) return;
    // Sources the rail saw change are read first; with that news, the age-based re-read of every open stream is a
    // slow safety net (a missed log, a rail restart), not the way a top-up is noticed.
    let changed: string[] | undefined;
    try {
      changed = await this.rail.changedSources?.();
    } catch (err) {
      log.warn('funding changes unreadable; re-reading by age', { error: (err as Error).message });
    }
    if (changed?.length) await this.store.write((tx) => streams.fundingStale(tx, changed));
    const every = changed === undefined ? Math.min(this.policy.maxAgeMs, 10_000) : 300_000;
    for (const row of await streams.fundingDue(this.store.q, this.rail.mode, this.now() - every, MAX_FUNDING_READS_PER_TICK)) {
      if (this.#stopped) return;
      let check;
      try {
        check = await this.fund(fundingSubject(row));
      } catch (err) {
        log.warn('funding source unreadable; the last reading stands until the grace ends', { stream: row.id, error: (err as Error).message });
        return;
      }
      const now = this.now();
      if (row.funding_status === 'funded' && !check.funded) log.warn('stream no longer funded', { node: row.node_id, stream: row.id, reason: check.reason });
      await this.store.write((tx) => streams.setFunding(tx, row.node_id, row.id, check.funded
        ? { status: 'funded', reason: null, limitMicro: check.limitMicro, now }
        // A source that paid this node before keeps its last reading: what was billed within it is still settled (a
        // channel whose close grace ended can be settled until the payer withdraws).
        : { status: 'unfunded', reason: check.reason, limitMicro: row.funding_limit_micro, now }));
    }
  }

  /** Closed streams with nothing left to settle: the rail releases what their source still holds (card authorizations). */
  async #release(): Promise<void> {
    if (!this.rail.release) return;
    for (const row of await streams.toRelease(this.store.q, this.rail.mode, this.now(), MAX_SUBMITS_PER_TICK)) {
      if (this.#stopped) return;
      const target = this.rail.settleable ? this.rail.settleable(row) : row.billed_micro;
      if (target > (await settlements.frontier(this.store.q, row.node_id, row.id)) && this.rail.accepts?.(row) !== false && row.funding_limit_micro !== null) continue; // settle first
      try {
        const note = await this.rail.release(row);
        await this.#fenced((tx) => streams.released(tx, row.node_id, row.id, this.now()));
        if (note) log.info('funding released', { node: row.node_id, stream: row.id, note });
      } catch (err) {
        if (err instanceof LeaseLost) throw err;
        log.warn('funding release failed; will retry', { node: row.node_id, stream: row.id, error: (err as Error).message });
      }
    }
  }

  async #advance(s: SettlementRow): Promise<void> {
    if (s.status === 'pending') {
      // Crashed between recording the intent and sending: nothing left the process, so fail it; it is retried.
      if (!s.reference) return void (await this.#fenced((tx) => settlements.failed(tx, s.id, 'interrupted before it was sent')));
    }
    let st;
    const asked = Date.now(); // a settlement.confirm span, when this call moves the settlement, starts here
    try {
      st = await this.rail.status(s);
    } catch (err) {
      log.warn('settlement status unavailable', { settlement: s.id, error: (err as Error).message });
      return;
    }
    const now = this.now();
    const row = await streams.get(this.store.q, s.node_id, s.stream);
    if (!row) return;
    const data = (reference: string) => ({ stream: row.id, budget: row.budget, asset: row.asset, amountMicro: s.amount_micro.toString(), reference });
    // Traced: a status read that moved the settlement (not every poll of one still waiting), linked to its submit.
    const moved = st.state === 'final' || st.state === 'failed' ? st.state
      : st.state === 'checkpointed' ? (s.status === 'checkpointed' ? undefined : 'checkpointed')
      : st.rebroadcast ? 'rebroadcast' : s.status === 'checkpointed' ? 'reorged' : undefined;
    const span = tracer && moved ? tracer.start('settlement.confirm', {
      kind: 'client', startTime: asked, links: causes.forSettlement(s.id),
      attributes: { ...this.rail.peer, ...this.#spanAttrs(s.node_id, s.stream, s.id, s.amount_micro), 'node_svc.settlement.state': moved },
    }) : undefined;
    // Its events' deliveries link to it: remembered as each is recorded (a delivery may start as soon as they commit).
    const record: RecordEvent = !span ? recordEvent : async (...a) => {
      const e = await recordEvent(...a);
      causes.event(e.id, [span.ref, ...causes.forSettlement(s.id)]);
      return e;
    };
    try {
      await this.#confirm(s, st, row, now, data, record);
      if (st.state === 'failed') span?.fail('settlement failed'); // the rail's error text stays in the log and the finality view
    } catch (err) {
      span?.set({ 'error.type': errorType(err) });
      span?.fail(errorType(err));
      throw err;
    } finally {
      span?.end();
    }
  }

  #spanAttrs(node: string, stream: string, id: string, amount: bigint) {
    return { 'node_svc.rail': this.rail.mode, 'node_svc.node': node, 'node_svc.stream': stream, 'node_svc.settlement.id': id, 'node_svc.amount_micro': amount.toString() };
  }

  /** Record what the rail said of a sent settlement, with its events, in one fenced write. */
  async #confirm(s: SettlementRow, st: SettlementState, row: StreamRow, now: number, data: (reference: string) => Record<string, unknown>, recordEvent: RecordEvent): Promise<void> {
    await this.#fenced(async (db) => {
      // What this process remembers, counts and logs of the write happens once it has committed: a write that is
      // rolled back and run again (a deadlock; on PostgreSQL, a batch another job failed) must not count twice, nor
      // remember a stuck warning whose alert was rolled back.
      const ref = s.reference!;
      if (st.state === 'failed') {
        await settlements.failed(db, s.id, st.error);
        await this.#alertFailed(db, s, row.asset, st.error, now);
        onCommit(db, () => {
          this.#failed(s.node_id, s.stream);
          metrics.settlements.inc({ rail: this.rail.mode, state: 'failed' });
          log.warn('settlement failed; will retry', { settlement: s.id, error: st.error });
        });
      } else if (st.state === 'submitted') {
        if (s.status === 'checkpointed') await settlements.backToSubmitted(db, s.id, st.note ?? 'reorged out; resent');
        if (st.rebroadcast) {
          await settlements.rebroadcast(db, s.id, st.rebroadcast.reference, st.rebroadcast.detail, st.rebroadcast.note, now);
          const again = st.rebroadcast;
          onCommit(db, () => {
            metrics.settlements.inc({ rail: this.rail.mode, state: 'rebroadcast' });
            log.info('settlement rebroadcast', { settlement: s.id, stream: s.stream, reference: again.reference, note: again.note });
          });
        } else if (st.note && st.note !== s.error) await settlements.note(db, s.id, st.note);
        const sentAt = Number(s.submitted_at ?? s.created_at);
        if (now - sentAt > this.policy.stuckAfterMs && !this.#warnedStuck.has(s.id)) {
          onCommit(db, () => this.#warnedStuck.add(s.id));
          await raiseAlert(db, { key: settlementKey(s.node_id, s.stream), kind: 'settlement.stuck', node: s.node_id, ref: `stream:${s.stream}`, now, data: {
            ...settlementSubject(s, row.asset, this.rail.mode), reference: st.rebroadcast?.reference ?? s.reference, sentAt: iso(sentAt),
            stuckAfterSeconds: Math.round(this.policy.stuckAfterMs / 1000), broadcasts: Number(s.attempts) + (st.rebroadcast ? 1 : 0),
          } });
          const stuck = {
            settlement: s.id, stream: s.stream, amountMicro: s.amount_micro.toString(), reference: st.rebroadcast?.reference ?? s.reference,
            sentSecondsAgo: Math.round((now - sentAt) / 1000), attempts: Number(s.attempts) + (st.rebroadcast ? 1 : 0),
          };
          onCommit(db, () => log.warn('settlement stuck: sent but not mined', stuck));
        }
      } else if (st.state === 'checkpointed' || st.state === 'final') {
        if (s.status === 'pending' || s.status === 'submitted') {
          onCommit(db, () => {
            this.#backoff.delete(`${s.node_id}\0${s.stream}`);
            this.#warnedStuck.delete(s.id);
            metrics.settlements.inc({ rail: this.rail.mode, state: 'checkpointed' });
          });
          await settlements.checkpointed(db, s.id, st.state === 'checkpointed' ? (st.block ?? null) : s.block_number, now);
          for (const extra of this.rail.onCheckpoint?.(s) ?? []) await recordEvent(db, s.node_id, extra.type, `stream:${row.id}`, data(extra.reference), now);
          await frontier.checkpointed(db, s.node_id, s.stream, s.amount_micro, ref, now);
          await recoverAlert(db, { key: settlementKey(s.node_id, s.stream), from: ['settlement.stuck', 'settlement.failed'], kind: 'settlement.recovered', ref: `stream:${s.stream}`, now,
            data: (was) => ({ ...settlementSubject(s, row.asset, this.rail.mode), reference: ref, recovered: was.kind, since: iso(was.since), checkpointedAt: iso(now) }) });
          await recordEvent(db, s.node_id, 'settlement.checkpointed', `stream:${row.id}`, data(ref), now);
        }
        if (st.state === 'final') {
          // Escrow: the transaction that was mined is the reference (a rebroadcast may have replaced the last one sent).
          const finalRef = st.proof?.rail === 'escrow' ? st.proof.txHash : ref;
          await settlements.final(db, s.id, now);
          await frontier.final(db, s.node_id, s.stream, s.amount_micro, finalRef, now);
          onCommit(db, () => metrics.settlements.inc({ rail: this.rail.mode, state: 'final' }));
          // The signed receipt travels in the event (an additive field) and stays readable at GET /v1/streams/{id}/receipt.
          const receipt = st.proof
            ? await issueReceipt(db, { jti: s.id, node: s.node_id, stream: row.id, asset: row.asset, amountMicro: s.amount_micro, finalAt: now, reference: st.proof }, now)
            : undefined;
          await recordEvent(db, s.node_id, 'settlement.final', `stream:${row.id}`, receipt ? { ...data(finalRef), receipt } : data(finalRef), now);
        }
      }
    });
  }

  async #startDue(): Promise<boolean> {
    const now = this.now();
    let started = 0;
    for (const c of await unsettledStreams(this.store.q, this.rail.mode)) {
      if (this.#stopped) return false;
      // A bounded number per tick, so what was sent is advanced (checkpointed, final) between batches.
      if (started >= MAX_SUBMITS_PER_TICK) return true;
      if (c.in_flight || c.billed_micro <= c.settled) continue;
      const wait = this.#backoff.get(`${c.node_id}\0${c.id}`);
      if (wait && now < wait.nextAt) continue;
      const closing = c.status !== 'open' || !!c.rev_ahead || (c.budget_status !== null && c.budget_status !== 'active') || now >= Number(c.exp) * 1000;
      const old = c.oldest_unsettled_at !== null && now - Number(c.oldest_unsettled_at) >= this.policy.maxAgeMs;
      const row = await streams.get(this.store.q, c.node_id, c.id);
      if (!row || (this.rail.accepts && !this.rail.accepts(row))) continue;
      // Only a source the rail once confirmed pays this node is settled (an unconfirmed channel would pay someone else, or nothing).
      if (row.funding_source !== null && row.funding_limit_micro === null) continue;
      const target = this.rail.settleable ? this.rail.settleable(row) : row.billed_micro;
      if (target <= c.settled) continue; // e.g. only a remainder below the rail's smallest unit
      let due = target - c.settled >= this.policy.thresholdMicro || old || (this.policy.onClose && closing);
      if (!due && this.policy.onClose && this.rail.closeRequested) due = await this.rail.closeRequested(row).catch(() => false);
      if (!due) continue;
      started++;
      await this.#submit(row, target); // from the row read last: its billed truth and voucher belong together
    }
    return false;
  }

  /** settlement.failed, once per stream until it recovers (its next settlement checkpointed). */
  #alertFailed(tx: Sql, s: SettlementRow, asset: string, error: string, now: number): Promise<boolean> {
    return raiseAlert(tx, { key: settlementKey(s.node_id, s.stream), kind: 'settlement.failed', node: s.node_id, ref: `stream:${s.stream}`, now,
      data: { ...settlementSubject(s, asset, this.rail.mode), error: redactUrls(error), failedAt: iso(now) } }); // an RPC URL may carry a key
  }

  #failed(nodeId: string, stream: string): void {
    const k = `${nodeId}\0${stream}`;
    const failures = (this.#backoff.get(k)?.failures ?? 0) + 1;
    // From 2 s, doubling, whatever --settle-poll is: a faster poll sees the rail sooner, it does not retry a refusal sooner.
    this.#backoff.set(k, { failures, nextAt: this.now() + Math.min(Math.max(this.tickMs, RETRY_BASE_MS) * 2 ** failures, 300_000) });
  }

  async #submit(row: StreamRow, amount: bigint): Promise<void> {
    const id = await this.#fenced(async (db) => {
      // Re-check inside the write lock: never the same amount twice, never lower than what is on its way.
      if ((await settlements.inFlight(db, row.node_id, row.id)) || (await settlements.frontier(db, row.node_id, row.id)) >= amount) return undefined;
      return settlements.insert(db, { nodeId: row.node_id, stream: row.id, rail: this.rail.mode, amount, now: this.now() });
    });
    if (!id) return;
    // Traced: a CLIENT span to the chain RPC or the processor, linked to the vouchers it settles (accepted earlier, in
    // their requests' traces); its confirmations and their deliveries link back to it.
    let span: Span | undefined;
    if (tracer) {
      const vouchers = causes.takeVouchers(row.node_id, row.id);
      span = tracer.start('settlement.submit', { kind: 'client', links: vouchers, attributes: { ...this.rail.peer, ...this.#spanAttrs(row.node_id, row.id, id, amount) } });
      causes.settlement(id, [span.ref, ...vouchers]);
    }
    try {
      // Durable (and fenced) before the rail sends anything: a daemon that lost the lease sends nothing.
      await this.rail.submit(row, amount, async (reference, detail) => {
        span?.set({ 'node_svc.settlement.reference': reference });
        await this.#fenced((tx) => settlements.submitted(tx, id, reference, detail, this.now()));
      });
      metrics.settlements.inc({ rail: this.rail.mode, state: 'submitted' });
      log.info('settlement submitted', { settlement: id, stream: row.id, amountMicro: amount.toString() });
    } catch (err) {
      span?.set({ 'error.type': errorType(err) });
      span?.fail(errorType(err));
      if (err instanceof LeaseLost) throw err;
      const e = err as { shortMessage?: string; message?: string };
      const message = (e.shortMessage ?? e.message ?? 'error').split('\n')[0]!.slice(0, 300);
      const row2 = (await settlements.forStream(this.store.q, row.node_id, row.id)).find((s) => s.id === id);
      // Sent but the answer was lost: keep it 'submitted' and let status() find out; otherwise it failed.
      if (row2?.status === 'pending') {
        await this.#fenced(async (tx) => {
          await settlements.failed(tx, id, message);
          await this.#alertFailed(tx, row2, row.asset, message, this.now());
        });
        this.#failed(row.node_id, row.id);
      }
      log.warn('settlement submit failed', { settlement: id, error: message });
    } finally {
      span?.end();
    }
  }
}
