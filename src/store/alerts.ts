// Operational alerts: open alert conditions (alert_states), alert endpoints (webhook_subscriptions owned by the
// operator) and the recording of an operational event with its deliveries. The only SQL for them.
import { alertBody, OPERATOR, type AlertKind } from '../domain/alerts.js';
import { newId } from '../domain/ids.js';
import { iso } from '../domain/time.js';
import { wakeAfter } from './events.js';
import type { Sql } from './sql.js';
import { deliveries, type SubscriptionRow } from './webhooks.js';

export interface AlertStateRow { key: string; kind: string; node_id: string | null; since: number }

export const alertStates = {
  /**
   * Raise `kind` on `key`: true when this call made the transition (no row, or a row of another kind), false when
   * the condition was already raised. A conditional upsert: of two daemons raising it at once, one changes the row
   * (PostgreSQL re-checks the WHERE on the row the other committed), and a restart finds the row.
   */
  raise: async (tx: Sql, key: string, kind: AlertKind, nodeId: string | null, now: number): Promise<boolean> =>
    (await tx.run(`INSERT INTO alert_states(key, kind, node_id, since) VALUES (?, ?, ?, ?)
      ON CONFLICT(key) DO UPDATE SET kind = excluded.kind, since = excluded.since WHERE alert_states.kind != excluded.kind`, [key, kind, nodeId, now])) > 0,
  /** Clear the condition on `key` (of these kinds): what was raised, when this call cleared it; undefined when nothing was. */
  clear: (tx: Sql, key: string, kinds: readonly AlertKind[]) =>
    tx.get<{ kind: AlertKind; since: number }>(`DELETE FROM alert_states WHERE key = ? AND kind IN (${kinds.map(() => '?').join(', ')}) RETURNING kind, since`, [key, ...kinds]),
  /**
   * The store came back after an outage that began at `outageStart`: true when this daemon is the one to report it.
   * The `key` row keeps when the last outage reported ended; an outage that began before then was reported already
   * (by another daemon sharing the store, or this one before a restart).
   */
  claimOutage: async (tx: Sql, key: string, outageStart: number, now: number): Promise<boolean> =>
    (await tx.run(`INSERT INTO alert_states(key, kind, node_id, since) VALUES (@key, 'store.recovered', NULL, @now)
      ON CONFLICT(key) DO UPDATE SET since = excluded.since WHERE alert_states.since < @start`, { key, now, start: outageStart })) > 0,
  get: (q: Sql, key: string) => q.get<AlertStateRow>('SELECT key, kind, node_id, since FROM alert_states WHERE key = ?', [key]),
  /**
   * Conditions raised that a later event ends (`alerts list` shows them). The other rows only remember that a one-way
   * transition was raised (headroom.low per stream, stage and cap; authorization.expiring per authorization; the last
   * store outage reported), so it is not raised twice.
   */
  open: (q: Sql) => q.all<AlertStateRow>("SELECT key, kind, node_id, since FROM alert_states WHERE kind IN ('endpoint.failing', 'settlement.stuck', 'settlement.failed', 'wallet.low') ORDER BY since, key"),
};

export const alertEndpoints = {
  list: (q: Sql) => q.all<SubscriptionRow>("SELECT * FROM webhook_subscriptions WHERE node_id = ? AND status != 'deleted' ORDER BY created_at, id", [OPERATOR]),
  get: (q: Sql, id: string) => q.get<SubscriptionRow>("SELECT * FROM webhook_subscriptions WHERE node_id = ? AND id = ? AND status != 'deleted'", [OPERATOR, id]),
  /** Deliveries to alert endpoints that used up their retries (from the per-subscription counters). */
  dead: async (q: Sql) =>
    Number((await q.value<number>("SELECT CAST(SUM(n) AS BIGINT) FROM delivery_counts WHERE state = 'dead' AND subscription_id IN (SELECT id FROM webhook_subscriptions WHERE node_id = ?)", [OPERATOR])) ?? 0),
  /** Alert endpoints by health: active, failing (their latest attempts fail), disabled. */
  health: async (q: Sql) =>
    (await q.get<{ total: number; failing: number; failing_since: number | null; disabled: number }>(`SELECT COALESCE(SUM(CASE WHEN status = 'active' THEN 1 ELSE 0 END), 0) AS total,
      COALESCE(SUM(CASE WHEN status = 'active' AND failing_since IS NOT NULL THEN 1 ELSE 0 END), 0) AS failing,
      MIN(CASE WHEN status = 'active' THEN failing_since END) AS failing_since,
      COALESCE(SUM(CASE WHEN status = 'disabled' THEN 1 ELSE 0 END), 0) AS disabled
      FROM webhook_subscriptions WHERE node_id = ? AND status != 'deleted'`, [OPERATOR]))!,
};

/** Where the deliveries of one operational event stand (`alerts test --wait`). */
export const alertDeliveries = (q: Sql, eventId: string) =>
  q.all<{ endpoint: string; status: string; last_status: number | null; last_error: string | null }>(`SELECT d.subscription_id AS endpoint, d.status, d.last_status, d.last_error
    FROM deliveries d JOIN events e ON e.seq = d.event_seq WHERE e.id = ? AND e.node_id = ? ORDER BY d.subscription_id`, [eventId, OPERATOR]);

export interface RecordedAlert { seq: number; id: string; deliveries: number }

/**
 * Record one operational event and a pending delivery to each active alert endpoint that takes its kind (or only to
 * the `targets` given, whatever they filter: `alerts test`). Call inside the write of the transition that caused it: all of it commits, or none.
 */
export async function recordAlert(tx: Sql, kind: AlertKind, externalRef: string, data: Record<string, unknown>, now = Date.now(), targets?: string[]): Promise<RecordedAlert> {
  const id = newId('evt');
  const endpoints = (await tx.all<{ id: string; events: string }>("SELECT id, events FROM webhook_subscriptions WHERE node_id = ? AND status = 'active'", [OPERATOR]))
    .filter((e) => (targets !== undefined ? targets.includes(e.id) : e.events === '*' || (JSON.parse(e.events) as string[]).includes(kind)));
  // No endpoint takes it: nothing to keep (no API lists operational events; the transition itself is in alert_states).
  if (!endpoints.length) return { seq: 0, id, deliveries: 0 };
  const body = alertBody({ id, type: kind, occurredAt: iso(now), externalRef, data });
  const seq = Number(await tx.value<number>('INSERT INTO events(id, node_id, type, external_ref, occurred_at, body) VALUES (?, ?, ?, ?, ?, ?) RETURNING seq',
    [id, OPERATOR, kind, externalRef, now, body]));
  for (const e of endpoints) await deliveries.insert(tx, seq, e.id, now);
  wakeAfter(tx);
  return { seq, id, deliveries: endpoints.length };
}
