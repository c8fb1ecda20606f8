// The rail interface: settle a stream's billed truth, then watch what was sent until it is final.
// Sandbox and production rails differ only in keys and endpoints, never in these semantics.
import type { Hono } from 'hono';
import type { FundingCheck, FundingSubject } from '../domain/funding.js';
import type { RailReference } from '../domain/receipts.js';
import type { Sql, Store } from '../store/sql.js';
import type { SettlementRow } from '../store/settlements.js';
import type { StreamRow } from '../store/streams.js';

export type RailMode = 'escrow' | 'card';
export type RailEnv = 'sandbox' | 'production';

export type SettlementState =
  // sent, not yet checkpointed (or reorged out: resend done). `rebroadcast`: the rail sent it again or replaced it
  // (same nonce, higher fees: a new reference and detail) because it was not mined in time.
  | { state: 'submitted'; note?: string; rebroadcast?: { reference: string; detail: string; note: string } }
  | { state: 'checkpointed'; block?: bigint }
  // `proof`: the rail's reference of what became final (the mined transaction, the capture), signed into its receipt.
  | { state: 'final'; proof?: RailReference }
  | { state: 'failed'; error: string }; // will be retried with a new settlement

/** What `node-svc status` shows of a rail: where it settles and whether that is reachable now. */
export interface RailProbe {
  /** Chain id (escrow) or connected account (card). */
  network: string;
  reachable: boolean;
  /** Why it is not reachable or not usable (never a key). */
  error?: string;
  /** Escrow: the payee wallet that pays gas, and its native balance in wei (decimal string). */
  wallet?: { address: string; balanceWei: string };
}

export interface Rail {
  readonly mode: RailMode;
  readonly env: RailEnv;
  /**
   * How much of the billed truth the rail can settle now (card: floored to whole minor units of the currency).
   * The engine settles exactly this amount and starts nothing when it is not above what is settled.
   */
  settleable?(stream: StreamRow): bigint;
  /** Whether this rail can settle the stream at all (escrow: its credential names this chain and contract). */
  accepts?(stream: StreamRow): boolean;
  /** Refuse to start on any doubt: chain id, keys vs rail, token decimals. Throws a config error naming the problem. */
  preflight(): Promise<void>;
  /**
   * Settle `amount` (cumulative micro units) of the stream. `record(reference, detail)` must be called
   * before anything irrevocable leaves the process, so a crash can resume; returns when it is sent.
   */
  submit(stream: StreamRow, amount: bigint, record: (reference: string, detail: string | null) => Promise<void>): Promise<void>;
  /** Where a sent settlement is now. May resend it (same transaction) when the network lost it. */
  status(s: SettlementRow): Promise<SettlementState>;
  /** Extra events of a settlement at checkpoint (card: capture.created before settlement.checkpointed). */
  onCheckpoint?(s: SettlementRow): Array<{ type: 'capture.created'; reference: string }>;
  /**
   * Read the stream's funding source on the rail (DESIGN §14): funded with what it can pay in all, or unfunded with a
   * reason naming what differs. Throws FundingUnavailable when the rail cannot be read (never a guess).
   * Called when a stream is registered, and again for open streams every funding-refresh interval.
   */
  fund?(subject: FundingSubject): Promise<FundingCheck>;
  /**
   * Funding sources (domain/funding.ts keys) that changed on the rail since the last call (escrow: the contract's
   * Deposited / CloseRequested / Withdrawn / Settled logs): their streams are read again at once, so the periodic
   * re-read of every open stream can be slow. undefined: the rail cannot tell; streams are re-read by age only.
   */
  changedSources?(): Promise<string[] | undefined>;
  /**
   * A stream closed (exhausted, revoked, expired, budget halted or released) with nothing left to settle: release
   * what the funding source still holds for it (card: cancel the authorization, or capture the rest as final).
   * Returns a note for the log when something was released; throws to be retried on a later tick.
   */
  release?(stream: StreamRow): Promise<string | undefined>;
  /** Whether the payer asked to close this stream's channel on chain (settle now). */
  closeRequested?(stream: StreamRow): Promise<boolean>;
  /**
   * This daemon just took the settlement lease over (at start, or from a daemon that stopped or died): whatever the
   * rail remembers of the account's sends (a nonce) may be stale; read it again from the store and the rail.
   */
  takeover?(): void;
  /**
   * What a settlement's client spans say of the peer the rail talks to (semantic conventions: server.address,
   * server.port, rpc.system): never a key, nor a URL's userinfo or query.
   */
  readonly peer?: Readonly<Record<string, string | number>>;
  /** The name of the account the rail settles from (wallet address, connected account): one settler per account. */
  readonly account?: string;
  /** Given the store and a way to wake the settler (e.g. on a processor webhook), before the first tick. */
  attach?(ctx: RailContext): void;
  /** Rail-specific work on every settler tick (card: refunds → refund.final). */
  poll?(): Promise<void>;
  /** Routes the rail needs outside /v1 bearer auth (the card processor's own webhooks). */
  routes?(app: Hono<any>): void;
  /** A cheap read for the health verdict (bounded by the adapter's own timeout); never throws. */
  probe?(): Promise<RailProbe>;
  close(): Promise<void>;
}

/** What the settlement engine gives its rail. */
export interface RailContext {
  store: Store;
  /** Run a tick soon (a processor webhook said something changed). */
  wake(): void;
  /** A settlement write, fenced by the settlement lease: refused once another daemon settles this account. */
  settlementWrite<T>(fn: (tx: Sql) => Promise<T>): Promise<T>;
}
