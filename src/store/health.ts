// Figures behind the daemon's health verdict (`node-svc status`, /healthz): the only SQL for them.
// Money is summed per asset in SQL INTEGER and read as BigInt: different assets are never added together.
import { OPERATOR } from '../domain/alerts.js';
import type { Sql } from './sql.js';

export interface OutboxFigures { pending: number; retrying: number; dead: number; oldestPendingAt: number | null }
export interface SettlementFigures {
  /** Settlements sent or about to be sent, not yet checkpointed. */
  inFlight: number;
  /** Checkpointed (visible, pending) but not final yet. */
  checkpointed: number;
  /** Streams whose latest settlement attempt failed (the engine retries with a new one). */
  failed: number;
  /** Age of the oldest settlement not final yet (ms timestamp), null when none is open. */
  oldestOpenAt: number | null;
  /** Sent but not mined (captured) for longer than the stuck limit (--settle-stuck-after). */
  stuck: number;
  /** When the oldest settlement not mined yet was sent (ms timestamp), null when none. */
  oldestUnminedAt: number | null;
  byAsset: Array<{ asset: string; unsettledMicro: bigint; finalMicro: bigint; streams: number }>;
}

const count = (cond: string) => `COALESCE(SUM(CASE WHEN ${cond} THEN 1 ELSE 0 END), 0)`;

export const health = {
  ping: (q: Sql) => q.get<{ ok: number }>('SELECT 1 AS ok'),
  /** The node deliveries (alert endpoints' are the `alerts` check's: a node cannot replay them). */
  outbox: async (q: Sql): Promise<OutboxFigures> => {
    // last_error marks a delivery that failed at least once (attempts also counts a claim in flight).
    const r = (await q.get<{ pending: number; retrying: number; dead: number; oldest: number | null }>(`SELECT ${count("status = 'pending' AND last_error IS NULL")} AS pending,
      ${count("status = 'pending' AND last_error IS NOT NULL")} AS retrying,
      ${count("status = 'dead'")} AS dead,
      MIN(CASE WHEN status = 'pending' THEN created_at END) AS oldest
      FROM deliveries WHERE status IN ('pending', 'dead') AND subscription_id NOT IN (SELECT id FROM webhook_subscriptions WHERE node_id = ?)`, [OPERATOR]))!;
    return { pending: r.pending, retrying: r.retrying, dead: r.dead, oldestPendingAt: r.oldest };
  },
  settlements: async (q: Sql, now: number, stuckAfterMs: number): Promise<SettlementFigures> => {
    const s = (await q.get<{ in_flight: number; checkpointed: number; oldest: number | null; stuck: number; oldest_unmined: number | null }>(
      `SELECT ${count("status IN ('pending', 'submitted')")} AS in_flight,
      ${count("status = 'checkpointed'")} AS checkpointed,
      MIN(CASE WHEN status IN ('pending', 'submitted', 'checkpointed') THEN created_at END) AS oldest,
      ${count("status IN ('pending', 'submitted') AND COALESCE(submitted_at, created_at) < ?")} AS stuck,
      MIN(CASE WHEN status IN ('pending', 'submitted') THEN COALESCE(submitted_at, created_at) END) AS oldest_unmined
      FROM settlements WHERE status IN ('pending', 'submitted', 'checkpointed')`, [now - stuckAfterMs]))!;
    // A failing stream is retried with backoff of at most 5 minutes, so its latest (failed) row is recent: count those.
    const failed = (await q.value<number>(`SELECT COUNT(*) AS n FROM settlements t WHERE t.status = 'failed' AND t.created_at > ?
      AND NOT EXISTS (SELECT 1 FROM settlements u WHERE u.node_id = t.node_id AND u.stream = t.stream AND u.created_at > t.created_at)`, [now - 3_600_000])) ?? 0;
    const byAsset = (await q.all<{ asset: string; unsettled: bigint; final: bigint; n: bigint }>(
      // Summed per asset: PostgreSQL keeps each counter in slots (migration 0130), SQLite in one row.
      `SELECT asset, CAST(SUM(billed_micro) - SUM(final_micro) AS BIGINT) AS unsettled, CAST(SUM(final_micro) AS BIGINT) AS final, CAST(SUM(billed_streams) AS BIGINT) AS n
        FROM asset_totals GROUP BY asset HAVING SUM(billed_streams) > 0 ORDER BY asset`, [], true))
      .map((r) => ({ asset: r.asset, unsettledMicro: r.unsettled, finalMicro: r.final, streams: Number(r.n) }));
    return { inFlight: s.in_flight, checkpointed: s.checkpointed, failed, oldestOpenAt: s.oldest, stuck: s.stuck, oldestUnminedAt: s.oldest_unmined, byAsset };
  },
  /** Active subscriptions whose latest attempts fail (failing_since is cleared by the next success). */
  subscriptions: async (q: Sql) =>
    (await q.get<{ total: number; failing: number; failing_since: number | null; disabled: number }>(`SELECT COUNT(*) AS total, ${count('failing_since IS NOT NULL')} AS failing,
      MIN(failing_since) AS failing_since, (SELECT COUNT(*) FROM webhook_subscriptions WHERE status = 'disabled' AND node_id != @op) AS disabled
      FROM webhook_subscriptions WHERE status = 'active' AND node_id != @op`, { op: OPERATOR }))!,
  keys: (q: Sql) =>
    q.all<{ issuer: string; keys: number; fetched_at: number; from_url: number }>(`SELECT issuer, COUNT(*) AS keys, MAX(fetched_at) AS fetched_at,
      MAX(CASE WHEN source LIKE 'http://%' OR source LIKE 'https://%' THEN 1 ELSE 0 END) AS from_url FROM issuer_keys GROUP BY issuer ORDER BY issuer`),
  /** Streams whose billed truth is above their final amount (a counter kept by triggers, migration 0090). */
  unsettledStreams: async (q: Sql) => Number((await q.value<number>("SELECT CAST(SUM(n) AS BIGINT) AS n FROM store_gauges WHERE name = 'unsettled_streams'")) ?? 0),
  nodes: async (q: Sql) => (await q.value<number>('SELECT COUNT(*) AS n FROM nodes WHERE id != ?', [OPERATOR])) ?? 0,
};
