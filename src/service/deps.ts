import type { Store } from '../store/sql.js';
import type { Keyring } from './keyring.js';
import type { TargetPolicy } from '../delivery/target.js';
import type { FundingCheck, FundingSubject } from '../domain/funding.js';
import type { Rail } from '../rails/rail.js';
import type { X402Facilitator } from './x402.js';

export interface ServiceConfig {
  /** Seconds of leeway for exp/nbf/iat (DESIGN §4). */
  clockTolerance: number;
  /** Window over which the observed rate is measured, seconds. */
  rateWindowSeconds: number;
  /** Degradation thresholds, percent of cap left / percent of the rate limit (DESIGN §5). */
  lowPercentLeft: number;
  criticalPercentLeft: number;
  lowRatePercent: number;
  /** A settlement sent but not mined (captured) for this long is stuck: warned, counted, /healthz degraded. */
  settlementStuckMs: number;
  /** Delivered deliveries, their attempts and events older than this are pruned (ms; 0 keeps all). */
  retentionMs: number;
  /** Per node: subscriptions (active or disabled) at most; beyond, 429 limit_exceeded. */
  maxSubscriptionsPerNode: number;
  /** Per node: redeliveries queued and not yet delivered, dead or cancelled at most; beyond, 429 limit_exceeded. */
  maxRedeliveriesPerNode: number;
}

export const DEFAULT_SERVICE_CONFIG: ServiceConfig = {
  clockTolerance: 30,
  rateWindowSeconds: 60,
  lowPercentLeft: 20,
  criticalPercentLeft: 5,
  lowRatePercent: 80,
  settlementStuckMs: 60_000,
  retentionMs: 30 * 86_400_000,
  maxSubscriptionsPerNode: 20,
  maxRedeliveriesPerNode: 1000,
};

/** What the use cases need: no HTTP or terminal types in here. */
export interface Deps {
  store: Store;
  keyring: Keyring;
  config: ServiceConfig;
  now(): number;
  /** Where webhooks may be delivered (checked at subscription time for IP literals, and at connect time). */
  webhookPolicy?: TargetPolicy;
  /** Reads a stream's funding source on its rail (registration), and says when the rail has been unreadable for too long. */
  funding?: FundingGate;
  /** The x402 facilitator (escrow mode only). */
  x402?: X402Facilitator;
  /** Wakes the delivery worker (redeliver). */
  wakeDelivery?: () => void;
  /** What the health verdict reads beyond the store (the rail, the key refresh). */
  health?: HealthSources;
}

/** The rail's side of funding, as the use cases see it (the daemon wires it to the configured rail). */
export interface FundingGate {
  /** Read the source now. Throws FundingUnavailable when the rail cannot be read. */
  check(subject: FundingSubject): Promise<FundingCheck>;
  /** Why funding answers cannot be trusted now (the rail unreadable for a while), or undefined. */
  unavailable(): string | undefined;
}

/** Without a rail nothing can pay a stream that names a funding source: not payable, never a guess. */
export const NO_RAIL: FundingGate = {
  check: async (s) => ({ funded: false, reason: `this daemon settles on no rail, so nothing can pay the ${s.mode} funding source the credential names (start the daemon with --mode ${s.mode})` }),
  unavailable: () => undefined,
};

/** The last run of the issuer key refresh (kept in memory by the daemon). */
export interface KeyRefreshState {
  at: number | null;
  results: Array<{ issuer: string; source: string; error?: string }>;
}

/** What the daemon knows beyond the store: its rail and the key refresh. */
export interface HealthSources {
  rail?: Rail;
  keyRefresh?: KeyRefreshState;
  /** A rail probe that takes longer than this counts as unreachable (the probe keeps a verdict fast). */
  probeTimeoutMs?: number;
  /** Deliveries pending longer than this make the outbox degraded (default 15 min). */
  outboxAgeLimitMs?: number;
}
