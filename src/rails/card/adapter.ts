// The card rail on the official `stripe` SDK. Decisions (for README / CHANGELOG):
//
// - Authorization. A card-mode credential (`mode: "card"`) carries the claim `paymentIntent` (`pi_…`): the payer's
//   PaymentIntent with `capture_method: manual`, `payment_method_options.card.request_multicapture: if_available`,
//   authorized (status `requires_capture`) for at least the credential's cap, in the currency of the credential's
//   `asset` (`USD` ↔ `usd`; an asset that is not an ISO 4217 code, e.g. `USDC`, has no card currency), with
//   `transfer_data.destination` = the node's connected account (--card-account): a destination charge.
//   Checked before every capture: status, `livemode` (false on the sandbox rail, true in production), currency,
//   destination, manual capture, multicapture available. Any mismatch fails the settlement with an error that
//   says which; nothing is captured.
// - Amounts. Micro units convert exactly (BigInt) to the currency's minor units: 2-decimal currencies 1 minor unit =
//   10,000 micro, 0-decimal (JPY…) 1,000,000, 3-decimal (KWD…) 1,000. Only whole minor units are captured: a
//   settlement settles the billed truth floored to a minor-unit boundary (billed 1,234,567 micro USD → 123 cents
//   captured → 1,230,000 micro settled); the remainder stays unsettled (`unsettledMicro`) until later vouchers
//   lift the floor, and is never captured if the stream ends below the next boundary.
// - Capture. Each settlement captures the DELTA between the floored billed truth and what the PaymentIntent already
//   has (`amount_received`), with `final_capture: false` while the stream is open and `final_capture: true` when it
//   closes (exhausted, revoked, expired, budget halted/released) or the capture deadline is near, which releases
//   the rest of the authorization. The idempotency key is derived from (node, stream, PaymentIntent, cumulative
//   minor amount), so a retry after a crash can never capture twice; the SDK retries network failures with it.
// - Reference. A partial capture is identified by its balance transaction (`txn_…`, one per capture of the charge,
//   the object whose funds become available): settlement.checkpointed, settlement.final and capture.created carry
//   it as `reference`. The row records the PaymentIntent id before the capture is sent; when the answer is lost,
//   status() finds the capture among the charge's balance transactions (running sum = the cumulative target) or
//   resends it with the same idempotency key.
// - Finality. checkpointed when the capture exists (its balance transaction exists, the charge is `captured`);
//   final when that balance transaction's status is `available`. A destination charge's transfer to the connected
//   account is funded from the charge, so the connected account's funds become available with it.
// - Funding (DESIGN §14). fund() reads the PaymentIntent the credential names (expanded with its charge) when the
//   stream is registered and on every funding refresh: funded only when it is a `requires_capture` authorization in
//   the rail's mode, in the stream's currency, for this node's connected account, with manual capture, not within the
//   deadline margin, and (at registration) with nothing captured outside node-svc. What it can pay in all is
//   amount_received + amount_capturable (exact micro units): headroom never promises more than the authorization can
//   still capture. Anything else is unfunded with a reason naming what differs; a processor that cannot be read
//   (network, 5xx, 429, 401/403) throws FundingUnavailable (503), never a yes.
//   A funded reading is reused by refreshes for `fundingRefreshMs` (default 60 s; the processor rate-limits reads),
//   read fresh after a verified processor webhook naming the intent, a capture, or inside the deadline margin.
// - Release. Every close path (exhausted, revoked, expired, budget halted or released) ends with the authorization
//   released: the engine's final capture takes what is billed with `final_capture: true`; when nothing is left to
//   capture, release() cancels the PaymentIntent (`cancellation_reason: abandoned`), which releases the remaining
//   amount_capturable whether or not something was captured before (multicapture). Only the stream that holds the
//   source, and only an authorization for this node's account in the rail's mode, is ever cancelled.
// - Deadline. A card authorization lapses 7 days after it was made: the deadline is the charge's
//   `payment_method_details.card.capture_before` when present, else the PaymentIntent's `created` + 7 d. A warning is
//   logged once `deadlineWarnMs` (default 24 h) before it. Within `deadlineMarginMs` (default 1 h) of it, the stream
//   stops taking vouchers (unfunded, reason naming the deadline), closeRequested() answers true so the engine captures
//   what is billed now, as final, whatever the policy, and poll() releases the rest (cancel) once nothing is left to
//   capture.
// - Refunds. poll() sums the PaymentIntent's `succeeded` refunds and records refund.final with the CUMULATIVE
//   refunded amount (micro) when it grew, once per amount (table card_refunds, migration 0050). A full scan of
//   captured streams runs every `refundScanMs` (default 30 s); a verified processor webhook naming a PaymentIntent
//   (or a charge/refund of one) makes the next tick scan that one at once.
// - Processor webhooks. `POST /processor/webhook`, outside /v1 auth, mounted only with --card-webhook-secret-file:
//   the `Stripe-Signature` header is verified with the endpoint secret (300 s tolerance) before anything else;
//   a bad signature answers 400 problem+json and changes nothing; an event whose `livemode` does not match the rail
//   answers 400 too. A good one wakes the settler (settlements and refunds are polled now) and answers
//   200 `{received: true}`. Webhooks only make things faster: polling on every settler tick is the fallback.
// - Rounding with the engine: settleable() tells the settler the billed truth floored to whole minor units, so it
//   settles exactly that and starts nothing while only a remainder below one minor unit is unsettled.
import { createHash } from 'node:crypto';
import type { Hono } from 'hono';
import Stripe from 'stripe';
import { problem } from '../../api/problem.js';
import { configError } from '../../domain/errors.js';
import { FundingUnavailable, type FundingCheck, type FundingSubject } from '../../domain/funding.js';
import { iso } from '../../domain/time.js';
import { log } from '../../log.js';
import { raiseAlert } from '../../ops/alerts.js';
import type { Sql, Store } from '../../store/sql.js';
import { recordEvent } from '../../store/events.js';
import { settlements, type SettlementRow } from '../../store/settlements.js';
import { fundingSources, streams, type StreamRow } from '../../store/streams.js';
import { VERSION } from '../../version.js';
import type { Rail, RailContext, RailEnv, RailProbe, SettlementState } from '../rail.js';
import { currencyOfAsset, microPerMinor, floorToMinor } from './currency.js';
import { capturedCardStreams, cardRefunds, cardSettlements } from './store.js';

export interface CardConfig {
  env: RailEnv;
  /** Processor secret or restricted key (never logged, never echoed). */
  key: string;
  /** The node's connected account (acct_…): the destination of every PaymentIntent it captures. */
  account: string;
  /** The processor webhook endpoint's signing secret (whsec_…); without it the webhook route is not mounted. */
  webhookSecret?: string;
  /** Sandbox only: the processor API base URL (a local processor). */
  api?: string;
  deadlineMarginMs?: number;
  /** How long before an authorization's capture deadline a warning is logged (default 24 h). */
  deadlineWarnMs?: number;
  /**
   * How long a funded reading of an open stream's authorization is reused by funding refreshes (default 60 s): the
   * processor rate-limits reads, and only the platform can change a manual-capture authorization (a verified processor
   * webhook naming it, a capture or a cancel by this rail makes the next read fresh). Registration always reads.
   */
  fundingRefreshMs?: number;
  refundScanMs?: number;
  maxNetworkRetries?: number;
  now?: () => number;
}

const CARD_AUTH_WINDOW_S = 7 * 86_400;
/** Funding reads answer a request (registration): fail fast to a 503 rather than hold the caller. */
const FUND_READ = { timeout: 5_000, maxNetworkRetries: 1 };
const PI_RE = /^pi_[A-Za-z0-9]+$/;
const MAX_WEBHOOK_BYTES = 1024 * 1024;

interface CaptureDetail {
  kind: 'capture';
  paymentIntent: string;
  charge: string;
  currency: string;
  /** Cumulative minor units captured on the PaymentIntent once this capture is done. */
  targetMinor: string;
  captureMinor: string;
  final: boolean;
  idempotencyKey: string;
  balanceTransaction?: string;
}

const piOfClaims = (claims: string): string | undefined => {
  try {
    const pi = (JSON.parse(claims) as { paymentIntent?: unknown }).paymentIntent;
    return typeof pi === 'string' && PI_RE.test(pi) ? pi : undefined;
  } catch {
    return undefined;
  }
};

/** The connected account a destination charge pays (transfer_data.destination, expanded or not). */
const destinationOf = (pi: Stripe.PaymentIntent): string | undefined => {
  const dest = pi.transfer_data?.destination;
  return typeof dest === 'string' ? dest : dest?.id;
};

/** A processor error without anything secret: its type, code, HTTP status and (except for auth errors) message. */
function describe(err: unknown): string {
  const e = err as { type?: string; code?: string; statusCode?: number; message?: string };
  if (e?.type === 'StripeAuthenticationError' || e?.statusCode === 401) return 'the processor refused the card key (401)';
  if (e?.type === 'StripePermissionError' || e?.statusCode === 403) return 'the card key lacks permission for this request (403)';
  const parts = [e?.type, e?.code, e?.statusCode ? `HTTP ${e.statusCode}` : undefined].filter(Boolean).join(' ');
  return `${parts ? `${parts}: ` : ''}${(e?.message ?? String(err)).slice(0, 300)}`;
}
/** A definitive refusal (4xx, not a conflict or rate limit): retrying the same request cannot succeed. */
const definitive = (err: unknown) => {
  const s = (err as { statusCode?: number }).statusCode;
  return typeof s === 'number' && s >= 400 && s < 500 && s !== 409 && s !== 429;
};

export class CardRail implements Rail {
  readonly mode = 'card' as const;
  readonly env: RailEnv;
  readonly #c: CardConfig;
  readonly #stripe: Stripe;
  readonly #now: () => number;
  /** Capture deadlines of the authorizations read so far (PaymentIntent → ms since the epoch). */
  readonly #deadlines = new Map<string, number>();
  /** Authorizations already warned about as nearing their deadline (one warning each). */
  readonly #warnedDeadline = new Set<string>();
  #store: Store | undefined;
  #wake: (() => void) | undefined;
  #settlementWrite: RailContext['settlementWrite'] | undefined;
  #lastScan = 0;
  #dirty = new Set<string>();
  /** The last funding read of the processor failed (unreachable, 5xx, 429, 401/403). */
  #readFailing = false;
  /** Funded readings reused by refreshes (PaymentIntent → when read, the answer, its deadline). */
  readonly #funded = new Map<string, { at: number; check: FundingCheck; deadline: number }>();

  /** The processor's API, as settlement spans name it (host and port only). */
  readonly peer: Readonly<Record<string, string | number>>;

  constructor(c: CardConfig) {
    if (c.api && c.env !== 'sandbox') throw configError('a processor API URL (--card-api) is only accepted on the sandbox rail');
    this.#c = c;
    this.env = c.env;
    this.#now = c.now ?? Date.now;
    let endpoint = {};
    if (c.api) {
      const u = new URL(c.api);
      const protocol = u.protocol === 'https:' ? 'https' : 'http';
      endpoint = { host: u.hostname, port: Number(u.port || (protocol === 'https' ? 443 : 80)), protocol };
    }
    const e = endpoint as { host?: string; port?: number };
    this.peer = { 'server.address': e.host ?? 'api.stripe.com', 'server.port': e.port ?? 443 }; // the client's own default
    this.#stripe = new Stripe(c.key, {
      maxNetworkRetries: c.maxNetworkRetries ?? 2,
      timeout: 15_000,
      telemetry: false,
      appInfo: { name: 'node-svc', version: VERSION },
      ...endpoint,
    });
  }

  get #live(): boolean {
    return this.env === 'production';
  }

  async preflight(): Promise<void> {
    try {
      const acct = await this.#stripe.accounts.retrieve(this.#c.account);
      if (acct.id !== this.#c.account) throw new Error('account id differs');
    } catch (err) {
      const s = (err as { statusCode?: number }).statusCode;
      if (s === 404 || s === 400 || s === 403)
        throw configError(`the connected account ${this.#c.account} is not known to the processor under this key (${describe(err)})`, 'check --card-account and --card-key-file');
      throw configError(`cannot reach the card processor API: ${describe(err)}`, this.#c.api ? 'check --card-api' : 'check the network and --card-key-file');
    }
    let live: boolean;
    try {
      live = (await this.#stripe.balance.retrieve()).livemode;
    } catch (err) {
      throw configError(`cannot read the platform balance: ${describe(err)}`);
    }
    if (live !== this.#live) throw configError(`the processor answers in ${live ? 'live' : 'test'} mode, but this is the ${this.env} rail`, 'use test keys with --rail sandbox, live keys with --rail production');
    if (!this.#c.webhookSecret) log.info('card rail: no --card-webhook-secret-file, so no processor webhook route; polling only');
  }

  /** One settler per connected account (and mode), whichever daemons share the store. */
  get account(): string {
    return `${this.env}:${this.#c.account}`;
  }

  async probe(): Promise<RailProbe> {
    const network = this.#c.account;
    try {
      await this.#stripe.accounts.retrieve(this.#c.account);
      return { network, reachable: true };
    } catch (err) {
      return { network, reachable: false, error: `card processor: ${describe(err)}` };
    }
  }

  attach(ctx: RailContext): void {
    this.#store = ctx.store;
    this.#wake = ctx.wake;
    this.#settlementWrite = ctx.settlementWrite;
  }

  #st(): Store {
    if (!this.#store) throw new Error('card rail used before attach()');
    return this.#store;
  }

  #db() {
    return this.#st().q;
  }

  /** The rail's own writes happen in the settler's tick: fenced by its lease (a daemon that lost it records nothing). */
  #fencedWrite<T>(fn: (tx: Sql) => Promise<T>): Promise<T> {
    return this.#settlementWrite ? this.#settlementWrite(fn) : this.#st().write(fn);
  }

  #piOf(stream: StreamRow): string {
    const pi = piOfClaims(stream.claims);
    if (!pi) throw new Error(`stream ${stream.id}: the credential has no paymentIntent claim (pi_…) naming the payer's authorization`);
    return pi;
  }

  async #retrieve(pi: string): Promise<Stripe.PaymentIntent & { latest_charge: Stripe.Charge }> {
    const p = await this.#stripe.paymentIntents.retrieve(pi, { expand: ['latest_charge'] });
    if (!p.latest_charge || typeof p.latest_charge === 'string') throw new Error(`payment intent ${pi} has no authorized charge`);
    return p as Stripe.PaymentIntent & { latest_charge: Stripe.Charge };
  }

  /**
   * Why an authorization is not this node's to capture (mode, currency, connected account, manual capture), or
   * undefined when it is: the one judgement behind funding (a reason) and every capture (a refusal).
   */
  #mismatch(pi: Stripe.PaymentIntent, asset: string): string | undefined {
    if (pi.livemode !== this.#live) return `payment intent ${pi.id} is a ${pi.livemode ? 'live' : 'test'}-mode object, but this is the ${this.env} rail`;
    if (pi.currency !== currencyOfAsset(asset)) return `payment intent ${pi.id} is in ${pi.currency.toUpperCase()}, but the stream's asset is ${asset}`;
    const destId = destinationOf(pi);
    if (destId !== this.#c.account) return `payment intent ${pi.id} pays ${destId ?? 'no connected account'}, not this node's connected account ${this.#c.account}`;
    if (pi.capture_method !== 'manual') return `payment intent ${pi.id} has capture_method ${pi.capture_method}, not manual`;
    return undefined;
  }

  /** Everything that must hold before a capture; throws naming what does not. */
  #check(stream: StreamRow, pi: Stripe.PaymentIntent & { latest_charge: Stripe.Charge }): { currency: string; mpm: bigint } {
    const want = currencyOfAsset(stream.asset);
    if (!want) throw new Error(`stream ${stream.id} is in ${stream.asset}, which is not a card currency; nothing captured`);
    const why = this.#mismatch(pi, stream.asset);
    if (why) throw new Error(`${why}; nothing captured`);
    return { currency: want, mpm: microPerMinor(want) };
  }

  /** The capture deadline of an authorization (ms since the epoch). */
  #deadlineOf(pi: Stripe.PaymentIntent & { latest_charge: Stripe.Charge }): number {
    const before = pi.latest_charge.payment_method_details?.card?.capture_before;
    const d = (typeof before === 'number' ? before : pi.created + CARD_AUTH_WINDOW_S) * 1000;
    this.#deadlines.set(pi.id, d);
    return d;
  }

  #nearDeadline(deadline: number): boolean {
    return this.#now() >= deadline - (this.#c.deadlineMarginMs ?? 3_600_000);
  }

  /** The balance transaction of the capture that brought the charge's captured total to `targetMinor`. */
  async #findCapture(charge: string, targetMinor: bigint): Promise<Stripe.BalanceTransaction | undefined> {
    const all: Stripe.BalanceTransaction[] = [];
    for await (const bt of this.#stripe.balanceTransactions.list({ source: charge, limit: 100 })) all.push(bt);
    let sum = 0n;
    for (const bt of all.reverse()) { // the list is newest first
      if (bt.type !== 'charge' && bt.type !== 'payment') continue;
      sum += BigInt(bt.amount);
      if (sum === targetMinor) return bt;
      if (sum > targetMinor) return undefined;
    }
    return undefined;
  }

  /**
   * The stream's funding source: its authorization at the processor (DESIGN §14). Funded with what it can pay in all
   * (captured + capturable), or unfunded naming what differs. Throws FundingUnavailable when the processor cannot be read.
   */
  async fund(subject: FundingSubject): Promise<FundingCheck> {
    const no = (reason: string): FundingCheck => ({ funded: false, reason });
    const piId = subject.claims.paymentIntent;
    if (typeof piId !== 'string' || !PI_RE.test(piId)) return no("the credential's paymentIntent claim is not a PaymentIntent id (pi_…)");
    const want = currencyOfAsset(subject.asset);
    if (!want) return no(`asset ${subject.asset} is not a card currency (an ISO 4217 code such as USD)`);
    const known = this.#funded.get(piId);
    // Not while reads fail: the engine's grace for an unreadable processor must see every failure, not a cached yes.
    if (known && !this.#readFailing && this.#now() - known.at < (this.#c.fundingRefreshMs ?? 60_000) && !this.#nearDeadline(known.deadline)
      && (await streams.get(this.#db(), subject.nodeId, subject.stream))) return known.check;
    this.#funded.delete(piId);
    let pi: Stripe.PaymentIntent;
    try {
      pi = await this.#stripe.paymentIntents.retrieve(piId, { expand: ['latest_charge'] }, FUND_READ);
    } catch (err) {
      const s = (err as { statusCode?: number }).statusCode;
      this.#readFailing = s !== 404 && s !== 400;
      // A live object is invisible to a test key and vice versa: the processor answers 404 for both.
      if (s === 404) return no(`payment intent ${piId} is not known to the processor in ${this.#live ? 'live' : 'test'} mode (unknown, or a ${this.#live ? 'test' : 'live'}-mode object)`);
      if (s === 400) return no(`the processor refused to read payment intent ${piId}: ${describe(err)}`);
      throw new FundingUnavailable(`the card processor cannot be read: ${describe(err)}`);
    }
    this.#readFailing = false;
    const why = this.#mismatch(pi, subject.asset);
    if (why) return no(why);
    if (pi.status !== 'requires_capture') {
      const why = pi.status === 'canceled' ? `canceled${pi.cancellation_reason ? ` (${pi.cancellation_reason})` : ''}: its authorization was released`
        : pi.status === 'succeeded' ? 'succeeded: captured in full or released, nothing is left to capture'
        : `${pi.status}, not an authorization that can capture (requires_capture)`;
      return no(`payment intent ${piId} is ${why}`);
    }
    const charge = pi.latest_charge;
    if (!charge || typeof charge === 'string') return no(`payment intent ${piId} has no authorized charge`);
    const capturable = BigInt(pi.amount_capturable);
    const received = BigInt(pi.amount_received);
    if (capturable <= 0n) return no(`payment intent ${piId} has nothing left to capture`);
    // At registration this stream has captured nothing: captures already on the intent were made by someone else.
    if (received > 0n && !(await streams.get(this.#db(), subject.nodeId, subject.stream)))
      return no(`payment intent ${piId} already has ${received} ${want} minor units captured outside node-svc`);
    // Only an authorization this node may use is watched for its deadline (and released at it).
    const deadline = this.#deadlineOf(pi as Stripe.PaymentIntent & { latest_charge: Stripe.Charge });
    if (this.#nearDeadline(deadline))
      return no(`the authorization of payment intent ${piId} reaches its capture deadline at ${iso(deadline)}: what is billed is captured now and the rest released`);
    const mpm = microPerMinor(want);
    const multi = charge.payment_method_details?.card?.multicapture?.status === 'available';
    const check: FundingCheck = {
      funded: true,
      limitMicro: (received + capturable) * mpm,
      detail: `payment intent ${piId}: ${capturable} ${want} minor units capturable, ${received} captured, capture deadline ${iso(deadline)}${multi ? '' : ', single capture'}`,
    };
    this.#funded.set(piId, { at: this.#now(), check, deadline });
    return check;
  }

  /**
   * A stream closed with nothing left to capture (or its authorization at its deadline margin): release what the
   * authorization still holds by cancelling the PaymentIntent. Never touches an authorization this stream does not
   * hold, nor one for another account or mode. Returns a note when something was released; throws to be retried.
   */
  async release(stream: StreamRow): Promise<string | undefined> {
    const db = this.#db();
    const piId = piOfClaims(stream.claims);
    if (!piId) return undefined;
    const holder = stream.funding_source ? await fundingSources.holder(db, stream.funding_source) : undefined;
    if (!holder || holder.node_id !== stream.node_id || holder.stream !== stream.id) return undefined; // another stream's authorization
    let pi: Stripe.PaymentIntent;
    try {
      pi = await this.#stripe.paymentIntents.retrieve(piId);
    } catch (err) {
      if ((err as { statusCode?: number }).statusCode === 404) return undefined; // unknown to this key: nothing this node holds
      throw new Error(`cannot read payment intent ${piId}: ${describe(err)}`);
    }
    if (pi.livemode !== this.#live || destinationOf(pi) !== this.#c.account) {
      log.info("card authorization not released: it is not for this node's connected account", { stream: stream.id, paymentIntent: piId });
      return undefined;
    }
    if (pi.status !== 'requires_capture' || pi.amount_capturable === 0) {
      this.#forget(piId);
      return undefined; // nothing held (final capture, cancel, lapse)
    }
    const held = `${pi.amount_capturable} ${pi.currency} minor units`;
    const key = `node-svc-release-${createHash('sha256').update(`${stream.node_id}\0${stream.id}\0${piId}`).digest('hex').slice(0, 48)}`;
    try {
      await this.#stripe.paymentIntents.cancel(piId, { cancellation_reason: 'abandoned' }, { idempotencyKey: key });
    } catch (err) {
      if (!definitive(err)) throw new Error(`cancel of payment intent ${piId} failed: ${describe(err)}`);
      const again = await this.#stripe.paymentIntents.retrieve(piId); // changed meanwhile (captured, lapsed)?
      if (again.status === 'requires_capture' && again.amount_capturable > 0) throw new Error(`cancel of payment intent ${piId} refused: ${describe(err)}`);
      this.#forget(piId);
      return undefined;
    }
    this.#forget(piId);
    return pi.amount_received > 0
      ? `released the remaining ${held} of payment intent ${piId} (${pi.amount_received} captured)`
      : `cancelled payment intent ${piId}: nothing captured, ${held} released`;
  }

  #forget(piId: string): void {
    this.#funded.delete(piId);
    this.#deadlines.delete(piId);
    this.#warnedDeadline.delete(piId);
  }

  /**
   * Authorizations of open streams near their capture deadline: warn once ahead of it; within the margin stop new
   * vouchers (unfunded), leave what is billed to the engine's final capture, then release the rest.
   */
  async #deadlineWatch(): Promise<void> {
    const db = this.#db();
    const now = this.#now();
    const warnMs = this.#c.deadlineWarnMs ?? 86_400_000;
    for (const [piId, deadline] of [...this.#deadlines]) {
      if (now < deadline - warnMs) continue;
      const holder = await fundingSources.holder(db, `card:${piId}`);
      const row = holder && (await streams.get(db, holder.node_id, holder.stream));
      if (!row || row.status !== 'open' || row.funding_released_at !== null) {
        this.#forget(piId); // closed streams are released by the engine
        continue;
      }
      const f = { node: row.node_id, stream: row.id, paymentIntent: piId, deadline: iso(deadline) };
      if (!this.#warnedDeadline.has(piId)) {
        this.#warnedDeadline.add(piId);
        log.warn('card authorization nears its capture deadline: it is captured or released before then', { ...f, minutesLeft: Math.max(0, Math.floor((deadline - now) / 60_000)) });
        // The operational alert, once per authorization (a restart or another daemon finds it raised).
        await this.#fencedWrite((tx) => raiseAlert(tx, { key: `authorization:${piId}`, kind: 'authorization.expiring', node: row.node_id, ref: `stream:${row.id}`, now,
          data: { ...f, asset: row.asset, billedMicro: row.billed_micro.toString(), minutesLeft: Math.max(0, Math.floor((deadline - now) / 60_000)) } }));
      }
      if (!this.#nearDeadline(deadline)) continue;
      const reason = `the authorization of payment intent ${piId} reaches its capture deadline at ${iso(deadline)}: what is billed is captured now and the rest released`;
      const waiting = await this.#fencedWrite(async (tx) => {
        const r = (await streams.get(tx, row.node_id, row.id))!;
        // Inside the write lock: no voucher can slip in between this reading and the stream being closed to vouchers.
        if (r.funding_status !== 'unfunded' || r.funding_reason !== reason)
          await streams.setFunding(tx, r.node_id, r.id, { status: 'unfunded', reason, limitMicro: r.funding_limit_micro, now });
        return this.settleable(r) > (await settlements.frontier(tx, r.node_id, r.id)) || (await settlements.inFlight(tx, r.node_id, r.id));
      });
      if (waiting) continue; // the engine captures it as final (closeRequested); released on a later tick
      try {
        const note = await this.release(row);
        await this.#fencedWrite((tx) => streams.released(tx, row.node_id, row.id, this.#now()));
        log.warn('card authorization released at its capture deadline margin', { ...f, ...(note ? { note } : {}) });
      } catch (err) {
        log.warn('card authorization release failed; will retry', { ...f, error: (err as Error).message });
      }
    }
  }

  /** Only whole minor units are captured: the billed truth floored to the currency's minor unit. */
  settleable(stream: StreamRow): bigint {
    const currency = currencyOfAsset(stream.asset);
    return currency ? floorToMinor(stream.billed_micro, currency) : 0n;
  }

  async submit(stream: StreamRow, amount: bigint, record: (reference: string, detail: string | null) => void): Promise<void> {
    const piId = this.#piOf(stream);
    const pi = await this.#retrieve(piId);
    const { currency, mpm } = this.#check(stream, pi);
    const targetMinor = amount / mpm; // floored: only whole minor units are captured
    const targetMicro = targetMinor * mpm;
    const capturedMinor = BigInt(pi.amount_received);
    if (capturedMinor * mpm < stream.checkpointed_micro)
      throw new Error(`payment intent ${piId} has ${capturedMinor} ${currency} minor units captured, less than stream ${stream.id} already settled: its captures are on another authorization; nothing captured`);
    // The engine asks for settleable() amounts: whole minor units, above what is settled.
    if (targetMicro !== amount || targetMicro <= stream.checkpointed_micro) throw new Error(`${amount} micro is not a new whole number of ${currency} minor units; nothing captured`);
    const charge = pi.latest_charge.id;
    const key = `node-svc-capture-${createHash('sha256').update(`${stream.node_id}\0${stream.id}\0${piId}\0${targetMinor}`).digest('hex').slice(0, 48)}`;
    const base = { kind: 'capture' as const, paymentIntent: piId, charge, currency, targetMinor: targetMinor.toString(), idempotencyKey: key };

    if (targetMinor <= capturedMinor) {
      // Captured already (a crash after the capture, before it was recorded): find it, record it, send nothing.
      const bt = await this.#findCapture(charge, targetMinor);
      if (!bt) throw new Error(`payment intent ${piId} has ${capturedMinor} minor units captured, beyond this node's cumulative ${targetMinor}: captured outside node-svc; nothing captured`);
      await record(bt.id, JSON.stringify({ ...base, captureMinor: String(bt.amount), final: pi.status !== 'requires_capture', balanceTransaction: bt.id } satisfies CaptureDetail));
      return;
    }
    const delta = targetMinor - capturedMinor;
    if (pi.status !== 'requires_capture') throw new Error(`payment intent ${piId} is ${pi.status}, not requires_capture; nothing captured`);
    if (delta > BigInt(pi.amount_capturable))
      throw new Error(`payment intent ${piId} has ${pi.amount_capturable} ${currency} minor units left to capture, the billed truth needs ${delta}; nothing captured`);
    const closing = stream.status !== 'open' || !!stream.rev_ahead || (stream.budget_status !== null && stream.budget_status !== 'active')
      || this.#now() >= stream.exp * 1000 || this.#nearDeadline(this.#deadlineOf(pi));
    const final = closing || delta === BigInt(pi.amount_capturable);
    const multi = pi.latest_charge.payment_method_details?.card?.multicapture?.status ?? (pi.payment_method_options?.card?.request_multicapture === 'if_available' ? 'available' : 'unavailable');
    if (!final && multi !== 'available')
      throw new Error(`payment intent ${piId} has no multicapture, so it can be captured only once; nothing captured (request_multicapture: if_available)`);
    const detail: CaptureDetail = { ...base, captureMinor: delta.toString(), final };
    await record(piId, JSON.stringify(detail)); // durable before the capture leaves the process
    await this.#capture(piId, detail);
    const bt = await this.#findCapture(charge, targetMinor);
    if (bt) await record(bt.id, JSON.stringify({ ...detail, balanceTransaction: bt.id }));
    // else: status() looks again
  }

  #capture(pi: string, d: CaptureDetail) {
    this.#funded.delete(pi); // a final capture ends the authorization: the next funding read is fresh
    const amount = BigInt(d.captureMinor);
    if (amount > BigInt(Number.MAX_SAFE_INTEGER)) throw new Error('capture amount out of range');
    return this.#stripe.paymentIntents.capture(pi, { amount_to_capture: Number(amount), final_capture: d.final }, { idempotencyKey: d.idempotencyKey });
  }

  async status(s: SettlementRow): Promise<SettlementState> {
    const db = this.#db();
    const d = JSON.parse(s.detail ?? '{}') as CaptureDetail;
    if (d.kind !== 'capture') return { state: 'failed', error: 'unknown card settlement detail' };
    if (s.reference?.startsWith('txn_')) {
      let bt: Stripe.BalanceTransaction;
      try {
        bt = await this.#stripe.balanceTransactions.retrieve(s.reference);
      } catch (err) {
        if ((err as { statusCode?: number }).statusCode === 404) return { state: 'failed', error: `balance transaction ${s.reference} not found` };
        throw err;
      }
      return bt.status === 'available'
        ? { state: 'final', proof: { rail: 'card', processor: 'stripe', captureId: s.reference, paymentIntent: d.paymentIntent, account: this.#c.account } }
        : { state: 'checkpointed' };
    }
    // Recorded before sending, answer not recorded: did the capture happen?
    const bt = await this.#findCapture(d.charge, BigInt(d.targetMinor));
    if (bt) {
      // Fenced: a daemon that lost the settlement lease records nothing.
      await this.#fencedWrite((tx) => cardSettlements.setReference(tx, s.id, bt.id, JSON.stringify({ ...d, balanceTransaction: bt.id })));
      return { state: 'submitted', note: 'capture found after its answer was lost' };
    }
    const pi = await this.#stripe.paymentIntents.retrieve(d.paymentIntent);
    if (BigInt(pi.amount_received) >= BigInt(d.targetMinor)) return { state: 'failed', error: `payment intent ${pi.id} captured in other amounts than this settlement's` };
    if (pi.status !== 'requires_capture') return { state: 'failed', error: `payment intent ${pi.id} is ${pi.status}; nothing captured` };
    try {
      await this.#capture(d.paymentIntent, d); // the same idempotency key: at most one capture
      return { state: 'submitted', note: 'capture was not known to the processor; resent' };
    } catch (err) {
      if (definitive(err)) return { state: 'failed', error: `capture refused: ${describe(err)}` };
      throw err;
    }
  }

  onCheckpoint(s: SettlementRow): Array<{ type: 'capture.created'; reference: string }> {
    return s.reference?.startsWith('txn_') ? [{ type: 'capture.created', reference: s.reference }] : [];
  }

  async closeRequested(stream: StreamRow): Promise<boolean> {
    const pi = piOfClaims(stream.claims);
    if (!pi) return false;
    const known = this.#deadlines.get(pi);
    return this.#nearDeadline(known ?? this.#deadlineOf(await this.#retrieve(pi)));
  }

  async poll(): Promise<void> {
    await this.#deadlineWatch();
    const db = this.#db();
    const now = this.#now();
    const full = now - this.#lastScan >= (this.#c.refundScanMs ?? 30_000);
    if (!full && this.#dirty.size === 0) return;
    const dirty = this.#dirty;
    this.#dirty = new Set();
    if (full) this.#lastScan = now;
    for (const s of await capturedCardStreams(db)) {
      const pi = piOfClaims(s.claims);
      if (!pi || (!full && !dirty.has(pi))) continue;
      try {
        await this.#refunds(s, pi);
      } catch (err) {
        log.warn('card refunds unavailable', { stream: s.id, paymentIntent: pi, error: describe(err) });
        this.#dirty.add(pi);
      }
    }
  }

  async #refunds(s: { node_id: string; id: string; budget: string; asset: string }, pi: string): Promise<void> {
    const currency = currencyOfAsset(s.asset);
    if (!currency) return;
    let minor = 0n;
    let last: Stripe.Refund | undefined;
    for await (const r of this.#stripe.refunds.list({ payment_intent: pi, limit: 100 })) {
      if (r.status !== 'succeeded' || r.currency !== currency) continue;
      minor += BigInt(r.amount);
      if (!last || r.created > last.created) last = r;
    }
    if (!last || minor === 0n) return;
    const micro = minor * microPerMinor(currency);
    const now = this.#now();
    await this.#fencedWrite(async (tx) => {
      if (!(await cardRefunds.raise(tx, { nodeId: s.node_id, stream: s.id, paymentIntent: pi, minor, micro, lastRefund: last.id, now }))) return;
      await recordEvent(tx, s.node_id, 'refund.final', `stream:${s.id}`, { stream: s.id, budget: s.budget, asset: s.asset, amountMicro: micro.toString(), reference: last.id }, now);
    });
  }

  routes(app: Hono<any>): void {
    const secret = this.#c.webhookSecret;
    if (!secret) return;
    app.post('/processor/webhook', async (c) => {
      if (Number(c.req.header('content-length') ?? 0) > MAX_WEBHOOK_BYTES) return problem(c, 413, 'payload_too_large', 'processor webhook body too large');
      const raw = Buffer.from(await c.req.arrayBuffer());
      if (raw.length > MAX_WEBHOOK_BYTES) return problem(c, 413, 'payload_too_large', 'processor webhook body too large');
      let event: Stripe.Event;
      try {
        event = this.#stripe.webhooks.constructEvent(raw, c.req.header('stripe-signature') ?? '', secret, 300);
      } catch {
        log.warn('processor webhook refused: bad signature');
        return problem(c, 400, 'invalid_request', 'the Stripe-Signature header does not verify for this endpoint');
      }
      if (event.livemode !== this.#live) {
        log.warn('processor webhook refused: mode mismatch', { event: event.id, livemode: event.livemode });
        return problem(c, 400, 'invalid_request', `a ${event.livemode ? 'live' : 'test'} mode event on the ${this.env} rail`);
      }
      const obj = (event.data?.object ?? {}) as { id?: unknown; object?: unknown; payment_intent?: unknown };
      const pi = obj.object === 'payment_intent' ? obj.id : obj.payment_intent;
      if (typeof pi === 'string' && PI_RE.test(pi)) {
        this.#dirty.add(pi);
        this.#funded.delete(pi);
      }
      else if (/refund|charge/.test(event.type)) this.#lastScan = 0; // refund news without a PaymentIntent: scan all
      log.debug('processor webhook', { event: event.id, type: event.type });
      this.#wake?.();
      return c.json({ received: true });
    });
  }

  async close(): Promise<void> {}
}
