// Gauges read from the store at scrape time: outbox depth and settlement lag. Each read is bounded by the number of
// subscriptions or open settlements, never by history: counts come from rows the store's triggers keep (migration 0090).
import type { Deps } from '../service/deps.js';
import { health } from '../store/health.js';
import { attempts } from '../store/webhooks.js';
import type { Gauge } from './metrics.js';

export function opsGauges(d: Deps): Gauge[] {
  return [
    {
      name: 'node_svc_outbox_depth',
      help: 'Webhook deliveries not yet acknowledged, by status (pending = not failed yet, in flight included; retrying = failed at least once)',
      read: async () => {
        const t = await attempts.totals(d.store.q);
        return [{ labels: { status: 'pending' }, value: t.pending }, { labels: { status: 'retrying' }, value: t.retrying }];
      },
    },
    {
      name: 'node_svc_webhook_dead_deliveries',
      help: 'Deliveries that used up their retry schedule (replay them with node-svc webhooks replay)',
      read: async () => (await attempts.totals(d.store.q)).dead,
    },
    {
      name: 'node_svc_settlement_lag_seconds',
      help: 'Age of the oldest settlement not yet final (0 when none is open)',
      read: async () => {
        const t = (await health.settlements(d.store.q, d.now(), d.config.settlementStuckMs)).oldestOpenAt;
        return t === null ? 0 : Math.max(0, (d.now() - t) / 1000);
      },
    },
    {
      name: 'node_svc_settlements',
      help: 'Settlements by state: in_flight (sent or mined, not final), stuck (sent, not mined past --settle-stuck-after), failed (streams whose last settlement failed)',
      read: async () => {
        const h = await health.settlements(d.store.q, d.now(), d.config.settlementStuckMs);
        return [{ labels: { state: 'in_flight' }, value: h.inFlight + h.checkpointed }, { labels: { state: 'stuck' }, value: h.stuck }, { labels: { state: 'failed' }, value: h.failed }];
      },
    },
    {
      name: 'node_svc_unsettled_streams',
      help: 'Streams whose billed truth is above their final amount',
      read: async () => (await health.unsettledStreams(d.store.q)) ?? 0,
    },
  ];
}
