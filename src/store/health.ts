// Figures behind the daemon's health verdict (`node-svc status`, /healthz): the only SQL for them.
// Money is summed per asset in SQL INTEGER and read as BigInt: different assets are never added together.
import { stmt, type Db } from './db.js';

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

export const health = {
  ping: (db: Db) => stmt(db, 'SELECT 1 AS ok').get() as { ok: number },
  outbox: (db: Db): OutboxFigures => {
    // last_error marks a delivery that failed at least once (attempts also counts a claim in flight).
    const r = stmt(db, `SELECT COALESCE(SUM(status = 'pending' AND last_error IS NULL), 0) AS pending,
      COALESCE(SUM(status = 'pending' AND last_error IS NOT NULL), 0) AS retrying,
      COALESCE(SUM(status = 'dead'), 0) AS dead,
      MIN(CASE WHEN status = 'pending' THEN created_at END) AS oldest
      FROM deliveries WHERE status IN ('pending', 'dead')`).get() as { pending: number; retrying: number; dead: number; oldest: number | null };
    return { pending: r.pending, retrying: r.retrying, dead: r.dead, oldestPendingAt: r.oldest };
  },
  settlements: (db: Db, now: number, stuckAfterMs: number): SettlementFigures => {
    const s = stmt(db, `SELECT COALESCE(SUM(status IN ('pending', 'submitted')), 0) AS in_flight,
      COALESCE(SUM(status = 'checkpointed'), 0) AS checkpointed,
      MIN(CASE WHEN status IN ('pending', 'submitted', 'checkpointed') THEN created_at END) AS oldest,
      COALESCE(SUM(status IN ('pending', 'submitted') AND COALESCE(submitted_at, created_at) < ?), 0) AS stuck,
      MIN(CASE WHEN status IN ('pending', 'submitted') THEN COALESCE(submitted_at, created_at) END) AS oldest_unmined
      FROM settlements WHERE status IN ('pending', 'submitted', 'checkpointed')`).get(now - stuckAfterMs) as {
        in_flight: number; checkpointed: number; oldest: number | null; stuck: number; oldest_unmined: number | null };
    // A failing stream is retried with backoff of at most 5 minutes, so its latest (failed) row is recent: count those.
    const failed = stmt(db, `SELECT COUNT(*) AS n FROM settlements t WHERE t.status = 'failed' AND t.created_at > ?
      AND NOT EXISTS (SELECT 1 FROM settlements u WHERE u.node_id = t.node_id AND u.stream = t.stream AND u.created_at > t.created_at)`)
      .get(now - 3_600_000) as { n: number };
    const byAsset = (stmt(db, 'SELECT asset, billed_micro - final_micro AS unsettled, final_micro AS final, billed_streams AS n FROM asset_totals WHERE billed_streams > 0 ORDER BY asset', true)
      .all() as Array<{ asset: string; unsettled: bigint; final: bigint; n: bigint }>)
      .map((r) => ({ asset: r.asset, unsettledMicro: r.unsettled, finalMicro: r.final, streams: Number(r.n) }));
    return { inFlight: s.in_flight, checkpointed: s.checkpointed, failed: failed.n, oldestOpenAt: s.oldest, stuck: s.stuck, oldestUnminedAt: s.oldest_unmined, byAsset };
  },
  /** Active subscriptions whose latest attempts fail (failing_since is cleared by the next success). */
  subscriptions: (db: Db) =>
    stmt(db, `SELECT COUNT(*) AS total, COALESCE(SUM(failing_since IS NOT NULL), 0) AS failing, MIN(failing_since) AS failing_since,
      (SELECT COUNT(*) FROM webhook_subscriptions WHERE status = 'disabled') AS disabled
      FROM webhook_subscriptions WHERE status = 'active'`).get() as { total: number; failing: number; failing_since: number | null; disabled: number },
  keys: (db: Db) =>
    stmt(db, `SELECT issuer, COUNT(*) AS keys, MAX(fetched_at) AS fetched_at,
      MAX(source LIKE 'http://%' OR source LIKE 'https://%') AS from_url FROM issuer_keys GROUP BY issuer ORDER BY issuer`).all() as Array<{ issuer: string; keys: number; fetched_at: number; from_url: number }>,
  nodes: (db: Db) => (stmt(db, 'SELECT COUNT(*) AS n FROM nodes').get() as { n: number }).n,
};
