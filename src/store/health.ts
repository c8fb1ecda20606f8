// Figures behind the daemon's health verdict (`node-svc status`, /healthz): the only SQL for them.
// Money is summed per asset in SQL INTEGER and read as BigInt: different assets are never added together.
import { OPERATOR } from '../domain/alerts.js';
import { unavailable } from '../domain/errors.js';
import type { Sql } from './sql.js';
import { attempts } from './webhooks.js';

export interface OutboxFigures {
  pending: number;
  retrying: number;
  /** Every dead delivery kept (replayed or not). */
  dead: number;
  /** Dead deliveries whose event has not reached their subscription since, and whose subscription was not deleted. */
  deadUnresolved: number;
  oldestPendingAt: number | null;
}
export interface SettlementFigures {
  /** Settlements sent or about to be sent, not yet checkpointed (x402 payments sent and not mined included). */
  inFlight: number;
  /** Checkpointed (visible, pending) but not final yet. */
  checkpointed: number;
  /** Streams whose latest settlement attempt failed (the engine retries with a new one). */
  failed: number;
  /** Age of the oldest settlement not final yet (ms timestamp), null when none is open. */
  oldestOpenAt: number | null;
  /** The same per rail (card finality takes days, escrow minutes: an alert needs each apart). */
  oldestOpenAtByRail: { escrow: number | null; card: number | null };
  /** Sent but not mined (captured) for longer than the stuck limit (--settle-stuck-after). */
  stuck: number;
  /** When the oldest settlement not mined yet was sent (ms timestamp), null when none. */
  oldestUnminedAt: number | null;
  byAsset: Array<{ asset: string; unsettledMicro: bigint; finalMicro: bigint; streams: number }>;
}

/**
 * A ping not answered within this is a store that does not answer. A database cut off by the network (packets dropped,
 * not refused) answers no error for minutes: without a limit, the health verdict and the alert watch would wait on it.
 * The same 5 s as the PostgreSQL connect timeout's default (store/postgres.ts).
 */
export const PING_TIMEOUT_MS = 5_000;

/** `p`, or a 503 `unavailable` once `ms` pass without its answer (what it answers later is dropped). */
async function answered<T>(p: Promise<T>, ms: number): Promise<T> {
  let timer: NodeJS.Timeout | undefined;
  const late = new Promise<never>((_, reject) => {
    timer = setTimeout(() => reject(unavailable(`the store did not answer within ${ms / 1000} s`)), ms);
    timer.unref();
  });
  p.catch(() => {}); // a ping that fails after its time is up: already reported as the timeout
  try {
    return await Promise.race([p, late]);
  } finally {
    clearTimeout(timer);
  }
}

const count = (cond: string) => `COALESCE(SUM(CASE WHEN ${cond} THEN 1 ELSE 0 END), 0)`;

export const health = {
  /** The store answers `SELECT 1` within PING_TIMEOUT_MS; else a 503 `unavailable` saying so. */
  ping: (q: Sql, ms = PING_TIMEOUT_MS) => answered(q.get<{ ok: number }>('SELECT 1 AS ok'), ms),
  /**
   * PostgreSQL: how far this host's clock (`now`, read just before and after) is ahead of the database server's
   * (negative: behind), and the read's uncertainty (half its round trip), in ms.
   */
  clockOffset: async (q: Sql, now: () => number): Promise<{ offsetMs: number; uncertaintyMs: number }> => {
    const t0 = now();
    const db = Number(await answered(q.value<number | bigint>('SELECT CAST(EXTRACT(EPOCH FROM clock_timestamp()) * 1000 AS BIGINT) AS t'), PING_TIMEOUT_MS));
    const t1 = now();
    return { offsetMs: Math.round((t0 + t1) / 2 - db), uncertaintyMs: Math.ceil((t1 - t0) / 2) };
  },
  /** The node deliveries (alert endpoints' are the `alerts` check's: a node cannot replay them). */
  outbox: async (q: Sql): Promise<OutboxFigures> => {
    // Counts from the counters the triggers keep (migration 0090); the oldest pending delivery through the partial
    // index of pending rows (deliveries_subscription_due): bounded by what is pending, never by the delivered or dead history. The
    // operator's alert endpoints are left out (their failures are the alerts check; a node cannot replay them).
    const t = await attempts.totals(q, OPERATOR);
    const oldest = (await q.value<number | null>("SELECT MIN(created_at) AS oldest FROM deliveries WHERE status = 'pending' AND subscription_id NOT IN (SELECT id FROM webhook_subscriptions WHERE node_id = ?)", [OPERATOR])) ?? null;
    return { pending: t.pending, retrying: t.retrying, dead: t.dead, deadUnresolved: await health.deadUnresolved(q), oldestPendingAt: oldest === null ? null : Number(oldest) };
  },
  /**
   * Node deliveries that are dead and unresolved: not delivered by a later send of their event to their subscription
   * (migration 0180 counts those as 'dead_resolved'), of a subscription not deleted. From the counters, per subscription.
   */
  deadUnresolved: async (q: Sql): Promise<number> =>
    Number((await q.value<number>(`SELECT CAST(COALESCE(SUM(CASE WHEN state = 'dead' THEN n ELSE -n END), 0) AS BIGINT) AS n FROM delivery_counts
      WHERE state IN ('dead', 'dead_resolved') AND subscription_id IN (SELECT id FROM webhook_subscriptions WHERE node_id != ? AND status != 'deleted')`, [OPERATOR])) ?? 0),
  settlements: async (q: Sql, now: number, stuckAfterMs: number): Promise<SettlementFigures> => {
    const s = (await q.get<{ in_flight: number; checkpointed: number; oldest: number | null; oldest_escrow: number | null; oldest_card: number | null; stuck: number; oldest_unmined: number | null }>(
      `SELECT ${count("status IN ('pending', 'submitted')")} AS in_flight,
      ${count("status = 'checkpointed'")} AS checkpointed,
      MIN(CASE WHEN status IN ('pending', 'submitted', 'checkpointed') THEN created_at END) AS oldest,
      MIN(CASE WHEN rail = 'escrow' THEN created_at END) AS oldest_escrow, MIN(CASE WHEN rail = 'card' THEN created_at END) AS oldest_card,
      ${count("status IN ('pending', 'submitted') AND COALESCE(submitted_at, created_at) < ?")} AS stuck,
      MIN(CASE WHEN status IN ('pending', 'submitted') THEN COALESCE(submitted_at, created_at) END) AS oldest_unmined
      FROM settlements WHERE status IN ('pending', 'submitted', 'checkpointed')`, [now - stuckAfterMs]))!;
    // x402 payments sent from the escrow wallet (issue #24) count as escrow settlements: in flight, mined, stuck.
    const x = (await q.get<{ in_flight: number; checkpointed: number; oldest: number | null; stuck: number; oldest_unmined: number | null }>(
      `SELECT ${count("status = 'submitted'")} AS in_flight, ${count("status = 'checkpointed'")} AS checkpointed, MIN(created_at) AS oldest,
      ${count("status = 'submitted' AND created_at < ?")} AS stuck, MIN(CASE WHEN status = 'submitted' THEN created_at END) AS oldest_unmined
      FROM x402_payments WHERE status IN ('submitted', 'checkpointed')`, [now - stuckAfterMs]))!;
    const older = (a: number | null, b: number | null) => (a === null ? (b === null ? null : Number(b)) : b === null ? Number(a) : Math.min(Number(a), Number(b)));
    // A failing stream is retried with backoff of at most 5 minutes, so its latest (failed) row is recent: count those.
    const failed = (await q.value<number>(`SELECT COUNT(*) AS n FROM settlements t WHERE t.status = 'failed' AND t.created_at > ?
      AND NOT EXISTS (SELECT 1 FROM settlements u WHERE u.node_id = t.node_id AND u.stream = t.stream AND u.created_at > t.created_at)`, [now - 3_600_000])) ?? 0;
    const byAsset = (await q.all<{ asset: string; unsettled: bigint; final: bigint; n: bigint }>(
      // Summed per asset: PostgreSQL keeps each counter in slots (migrations 0130 and 0220), SQLite in one row.
      `SELECT asset, CAST(SUM(billed_micro) - SUM(final_micro) AS BIGINT) AS unsettled, CAST(SUM(final_micro) AS BIGINT) AS final, CAST(SUM(billed_streams) AS BIGINT) AS n
        FROM asset_totals GROUP BY asset HAVING SUM(billed_streams) > 0 ORDER BY asset`, [], true))
      .map((r) => ({ asset: r.asset, unsettledMicro: r.unsettled, finalMicro: r.final, streams: Number(r.n) }));
    return {
      inFlight: Number(s.in_flight) + Number(x.in_flight), checkpointed: Number(s.checkpointed) + Number(x.checkpointed), failed,
      oldestOpenAt: older(s.oldest, x.oldest), oldestOpenAtByRail: { escrow: older(s.oldest_escrow, x.oldest), card: s.oldest_card },
      stuck: Number(s.stuck) + Number(x.stuck), oldestUnminedAt: older(s.oldest_unmined, x.oldest_unmined), byAsset,
    };
  },
  /**
   * Money per asset at each stage, exact micro units: billed ≥ checkpointed ≥ final. Billed and final are the
   * counters the store keeps (asset_totals); checkpointed is final plus what streams with a checkpointed settlement
   * have checkpointed beyond final, read from those open settlements only (summed here: no sort of a growing table).
   */
  moneyByAsset: async (q: Sql): Promise<Array<{ asset: string; billedMicro: bigint; checkpointedMicro: bigint; finalMicro: bigint }>> => {
    const totals = await q.all<{ asset: string; billed: bigint; final: bigint }>(
      'SELECT asset, CAST(SUM(billed_micro) AS BIGINT) AS billed, CAST(SUM(final_micro) AS BIGINT) AS final FROM asset_totals GROUP BY asset ORDER BY asset', [], true);
    // The IN term is the partial index's own (settlements_open): SQLite uses that index only when the query says so.
    const ahead = await q.all<{ node_id: string; stream: string; asset: string; ahead: bigint }>(
      `SELECT t.node_id, t.stream, s.asset, s.checkpointed_micro - s.final_micro AS ahead FROM settlements t
        JOIN streams s ON s.node_id = t.node_id AND s.id = t.stream
        WHERE t.status IN ('pending', 'submitted', 'checkpointed') AND t.status = 'checkpointed'`, [], true);
    const seen = new Set<string>();
    const extra = new Map<string, bigint>();
    for (const r of ahead) {
      const k = `${r.node_id}\0${r.stream}`; // a stream can have more than one checkpointed settlement: count it once
      if (seen.has(k) || r.ahead <= 0n) continue;
      seen.add(k);
      extra.set(r.asset, (extra.get(r.asset) ?? 0n) + r.ahead);
    }
    return totals.map((t) => ({ asset: t.asset, billedMicro: t.billed, checkpointedMicro: t.final + (extra.get(t.asset) ?? 0n), finalMicro: t.final }));
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
