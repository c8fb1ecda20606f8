import type { Store } from '../store/db.js';
import type { Keyring } from './keyring.js';
import type { TargetPolicy } from '../delivery/target.js';

export interface ServiceConfig {
  /** Seconds of leeway for exp/nbf/iat (DESIGN §4). */
  clockTolerance: number;
  /** Window over which the observed rate is measured, seconds. */
  rateWindowSeconds: number;
  /** Degradation thresholds, percent of cap left / percent of the rate limit (DESIGN §5). */
  lowPercentLeft: number;
  criticalPercentLeft: number;
  lowRatePercent: number;
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
  /** Wakes the delivery worker (redeliver). */
  wakeDelivery?: () => void;
}
