// Gauges read from the store at scrape time: outbox depth and settlement lag.
import type { Deps } from '../service/deps.js';
import { stmt } from '../store/db.js';
import { settlementHealth } from '../service/health.js';
import { health } from '../store/health.js';
import type { Gauge } from './metrics.js';

export function opsGauges(d: Deps): Gauge[] {
  return [
    {
      name: 'node_svc_outbox_depth',
      help: 'Webhook deliveries not yet acknowledged, by status (pending = not failed yet, in flight included; retrying = failed at least once)',
      read: () => {
        // `attempts` counts claims (a first attempt in flight has 1): a recorded failure is what sets last_error.
        const r = stmt(d.store.db, "SELECT SUM(last_error IS NULL) AS pending, SUM(last_error IS NOT NULL) AS retrying FROM deliveries WHERE status = 'pending'").get() as { pending: number | null; retrying: number | null };
        return [{ labels: { status: 'pending' }, value: r.pending ?? 0 }, { labels: { status: 'retrying' }, value: r.retrying ?? 0 }];
      },
    },
    {
      name: 'node_svc_webhook_dead_deliveries',
      help: 'Deliveries that used up their retry schedule (replay them with node-svc webhooks replay)',
      read: () => (stmt(d.store.db, "SELECT COUNT(*) AS n FROM deliveries WHERE status = 'dead'").get() as { n: number }).n,
    },
    {
      name: 'node_svc_settlement_lag_seconds',
      help: 'Age of the oldest settlement not yet final (0 when none is open)',
      read: () => {
        const r = stmt(d.store.db, "SELECT MIN(created_at) AS t FROM settlements WHERE status IN ('pending', 'submitted', 'checkpointed')").get() as { t: number | null };
        return r.t === null ? 0 : Math.max(0, (d.now() - r.t) / 1000);
      },
    },
    {
      name: 'node_svc_settlements',
      help: 'Settlements by state: in_flight (sent or mined, not final), stuck (sent, not mined past --settle-stuck-after), failed (streams whose last settlement failed)',
      read: () => {
        const h = settlementHealth(d);
        const failed = health.settlements(d.store.db).failed;
        return [{ labels: { state: 'in_flight' }, value: h.inFlight }, { labels: { state: 'stuck' }, value: h.stuck }, { labels: { state: 'failed' }, value: failed }];
      },
    },
    {
      name: 'node_svc_unsettled_streams',
      help: 'Streams whose billed truth is above their final amount',
      read: () => (stmt(d.store.db, 'SELECT COUNT(*) AS n FROM streams WHERE billed_micro > final_micro').get() as { n: number }).n,
    },
  ];
}
