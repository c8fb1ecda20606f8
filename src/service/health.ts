// What /healthz and the settlement gauges report: the store answers, and no settlement is stuck or failing.
import { settlements } from '../store/settlements.js';
import type { Deps } from './deps.js';

export interface SettlementHealth {
  /** Sent but not mined (captured) for longer than the stuck limit. */
  stuck: number;
  /** Sent, or mined and not final yet. */
  inFlight: number;
  /** Streams whose newest settlement failed (it is retried with backoff). */
  failed: number;
  /** Seconds since the oldest unmined settlement was sent (0 when none). */
  oldestUnminedSeconds: number;
}

export function settlementHealth(d: Deps): SettlementHealth {
  const now = d.now();
  const h = settlements.health(d.store.db, now, d.config.settlementStuckMs);
  return {
    stuck: Number(h.stuck ?? 0),
    inFlight: Number(h.in_flight ?? 0),
    failed: settlements.failingStreams(d.store.db),
    oldestUnminedSeconds: h.oldest_unmined === null ? 0 : Math.max(0, Math.round((now - Number(h.oldest_unmined)) / 1000)),
  };
}

/** The verdict for probes: ok, or degraded with the reasons (still HTTP 200: the daemon serves, money is late). */
export function healthVerdict(d: Deps): { status: 'ok' | 'degraded'; reasons: string[] } {
  const reasons: string[] = [];
  const s = settlementHealth(d);
  if (s.stuck > 0) reasons.push(`${s.stuck} settlement(s) sent but not mined for more than ${Math.round(d.config.settlementStuckMs / 1000)} s (oldest ${s.oldestUnminedSeconds} s)`);
  if (s.failed > 0) reasons.push(`${s.failed} stream(s) whose last settlement failed (retried with backoff; see streams finality)`);
  const funding = d.funding?.unavailable();
  if (funding) reasons.push(funding);
  return { status: reasons.length ? 'degraded' : 'ok', reasons };
}
