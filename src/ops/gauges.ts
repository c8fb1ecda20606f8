// Gauges read at scrape time: outbox depth, settlement lag, money per asset and the health verdict. Each read is
// bounded by the number of subscriptions, assets or open settlements, never by history: counts come from rows the
// store's triggers keep (migration 0090). Each source is read once per scrape, however many gauges it feeds.
import type { Deps } from '../service/deps.js';
import { healthVerdict, type CheckStatus } from '../service/health.js';
import { health } from '../store/health.js';
import { attempts } from '../store/webhooks.js';
import { x402Payments } from '../store/x402.js';
import type { Gauge } from './metrics.js';

const STATUSES: CheckStatus[] = ['ok', 'degraded', 'down'];
/** One series per status, 1 for the current one (the usual shape of an enum in Prometheus). */
const oneHot = (current: CheckStatus, labels: Record<string, string> = {}) => STATUSES.map((status) => ({ labels: { ...labels, status }, value: current === status ? 1 : 0 }));

const once = <T>(read: () => Promise<T>) => {
  let p: Promise<T> | undefined;
  return () => (p ??= read());
};

export function opsGauges(d: Deps): Gauge[] {
  const totals = once(() => attempts.totals(d.store.q));
  const settlements = once(() => health.settlements(d.store.q, d.now(), d.config.settlementStuckMs));
  const money = once(() => health.moneyByAsset(d.store.q));
  // The verdict /healthz answers (the same checks, the rail probe included); it never throws: a store that does not
  // answer is its `store` check, down.
  const verdict = once(() => healthVerdict(d, d.health));
  const lagOf = (at: number | null) => (at === null ? 0 : Math.max(0, (d.now() - at) / 1000));
  const perAsset = (pick: (m: Awaited<ReturnType<typeof money>>[number]) => bigint) => async () => (await money()).map((m) => ({ labels: { asset: m.asset }, value: pick(m) }));
  return [
    {
      name: 'node_svc_outbox_depth',
      help: 'Webhook deliveries not yet acknowledged, by status (pending = not failed yet, in flight included; retrying = failed at least once)',
      read: async () => {
        const t = await totals();
        return [{ labels: { status: 'pending' }, value: t.pending }, { labels: { status: 'retrying' }, value: t.retrying }];
      },
    },
    {
      name: 'node_svc_outbox_oldest_pending_age_seconds',
      help: 'Age of the oldest delivery not yet acknowledged (0 when none is pending)',
      read: async () => {
        const o = (await verdict()).checks.find((c) => c.name === 'outbox');
        if (!o || typeof o.figures.oldestPendingAgeSeconds !== 'number') throw new Error('no outbox figures');
        return o.figures.oldestPendingAgeSeconds;
      },
    },
    {
      name: 'node_svc_webhook_dead_deliveries',
      help: 'Deliveries that used up their retry schedule (replay them with node-svc webhooks replay)',
      read: async () => (await totals()).dead,
    },
    {
      name: 'node_svc_webhook_dead_deliveries_unresolved',
      help: 'Dead node webhook deliveries not resolved: their event has not reached their subscription since (a replay that is delivered resolves them) and the subscription is not deleted',
      read: async () => health.deadUnresolved(d.store.q),
    },
    {
      name: 'node_svc_settlement_lag_seconds',
      help: 'Age of the oldest settlement not yet final, by rail (0 when none is open)',
      read: async () => {
        const by = (await settlements()).oldestOpenAtByRail;
        return [{ labels: { rail: 'escrow' }, value: lagOf(by.escrow) }, { labels: { rail: 'card' }, value: lagOf(by.card) }];
      },
    },
    {
      name: 'node_svc_settlements',
      help: 'Settlements by state: in_flight (sent or mined, not final), stuck (sent, not mined past --settle-stuck-after), failed (streams whose last settlement failed)',
      read: async () => {
        const h = await settlements();
        return [{ labels: { state: 'in_flight' }, value: h.inFlight + h.checkpointed }, { labels: { state: 'stuck' }, value: h.stuck }, { labels: { state: 'failed' }, value: h.failed }];
      },
    },
    {
      name: 'node_svc_unsettled_streams',
      help: 'Streams whose billed truth is above their final amount',
      read: async () => (await health.unsettledStreams(d.store.q)) ?? 0,
    },
    {
      name: 'node_svc_x402_pending_transactions',
      help: 'x402 payments whose transaction was sent and is not mined yet (settle answers settlement_pending for them)',
      read: () => x402Payments.pendingCount(d.store.q),
    },
    { name: 'node_svc_billed_micro', help: 'Money billed (accepted vouchers), in micro units of the asset, by asset', read: perAsset((m) => m.billedMicro) },
    { name: 'node_svc_checkpointed_micro', help: 'Money settled at least as far as checkpointed (final included), in micro units of the asset, by asset', read: perAsset((m) => m.checkpointedMicro) },
    { name: 'node_svc_final_micro', help: 'Money final (credit-safe), in micro units of the asset, by asset', read: perAsset((m) => m.finalMicro) },
    {
      name: 'node_svc_store_commits_total',
      help: 'Write transactions this daemon committed through its store\'s group commit since it started (SQLite: its write queue; PostgreSQL: its write pool)',
      counter: true,
      read: async () => d.store.stats.commits,
    },
    {
      name: 'node_svc_store_writes_total',
      help: 'Writes (requests\' and the worker\'s) in those commits: more than the commits when concurrent writes shared one (SQLite\'s write queue; PostgreSQL once --store-pool transactions are running)',
      counter: true,
      read: async () => d.store.stats.jobs,
    },
    {
      name: 'node_svc_store_up',
      help: 'Whether the store (SQLite or PostgreSQL) answers: 1 or 0',
      read: async () => ((await verdict()).checks.find((c) => c.name === 'store')?.status === 'ok' ? 1 : 0),
    },
    {
      name: 'node_svc_clock_offset_seconds',
      help: 'PostgreSQL store: how far this host\'s clock is ahead of the database server\'s (negative: behind), as the clock check of /healthz read it; no sample on SQLite',
      read: async () => {
        const c = (await verdict()).checks.find((x) => x.name === 'clock');
        return typeof c?.figures.offsetMs === 'number' ? c.figures.offsetMs / 1000 : []; // none when the check could not read it
      },
    },
    {
      name: 'node_svc_health_status',
      help: 'The /healthz verdict: 1 for the current status (ok, degraded or down), 0 for the others',
      read: async () => oneHot((await verdict()).status),
    },
    {
      name: 'node_svc_health_check_status',
      help: 'Each check of /healthz (store, keys, rail, outbox, …), by name: 1 for its current status, 0 for the others',
      read: async () => (await verdict()).checks.flatMap((c) => oneHot(c.status, { check: c.name })),
    },
  ];
}
