// Alert endpoints (the operator's channel of operational events): added, listed, removed and tested by the CLI
// against the store, never through a node's bearer token. Deliveries go through the outbox like a node's webhooks.
import { ALERT_KINDS, isAlertKind, OPERATOR } from '../domain/alerts.js';
import { limitExceeded, notFound, usageError } from '../domain/errors.js';
import { newId } from '../domain/ids.js';
import { iso } from '../domain/time.js';
import { newWebhookSecret } from '../delivery/sign.js';
import { targetPolicy, type TargetPolicy } from '../delivery/target.js';
import { emitAlert } from '../ops/alerts.js';
import { alertDeliveries, alertEndpoints, alertStates } from '../store/alerts.js';
import { lockKey, type Store } from '../store/sql.js';
import { deliveries, subscriptions, type SubscriptionRow } from '../store/webhooks.js';
import { checkUrl, refuseControl, view as subscriptionView } from './webhooks.js';

/** Alert endpoints at most (active or disabled). */
export const MAX_ALERT_ENDPOINTS = 20;

/** The kinds an endpoint can choose (alert.test reaches every endpoint tested, whatever it chose). */
export const ALERT_EVENT_CHOICES = ALERT_KINDS.filter((k) => k !== 'alert.test');

/** A subscription's view without what alert endpoints do not have (a schema to pin, a secret rotation). */
const view = (s: SubscriptionRow) => {
  const { schemaVersion: _schema, previousSecretExpiresAt: _rotation, ...rest } = subscriptionView(s, Date.now());
  return { ...rest, consecutiveFailures: Number(s.consecutive_failures) };
};

export async function addAlertEndpoint(store: Store, req: { url: string; events?: string[]; description?: string }, opts: { policy?: TargetPolicy; now?: number } = {}) {
  const url = checkUrl({ webhookPolicy: opts.policy ?? targetPolicy() }, req.url);
  refuseControl('description', req.description);
  let events = '*';
  if (req.events !== undefined) {
    if (!req.events.length) throw usageError('--events must name at least one kind (omit it for all kinds)');
    const bad = req.events.filter((k) => !isAlertKind(k) || k === 'alert.test');
    if (bad.length) throw usageError(`unknown alert kinds: ${bad.join(', ')}`, `known: ${ALERT_EVENT_CHOICES.join(', ')}`);
    events = JSON.stringify([...new Set(req.events)].sort());
  }
  const now = opts.now ?? Date.now();
  const row = {
    id: newId('alr'), node_id: OPERATOR, url, events, schema_version: '1.1.0' as const, description: req.description ?? null,
    status: 'active' as const, secret: newWebhookSecret(), created_at: now,
  };
  const s = await store.write(async (tx) => {
    await lockKey(tx, `subscriptions:${OPERATOR}`); // PostgreSQL: the count and the insert, one at a time
    if ((await alertEndpoints.list(tx)).length >= MAX_ALERT_ENDPOINTS)
      throw limitExceeded('alert_endpoints', MAX_ALERT_ENDPOINTS, `there are already ${MAX_ALERT_ENDPOINTS} alert endpoints (the limit); remove one first`);
    await subscriptions.insert(tx, row);
    await store.invalidate(tx, { topic: 'subscriptions', key: row.id });
    return (await alertEndpoints.get(tx, row.id))!;
  });
  // The secret appears here, once.
  return { ...view(s), secret: row.secret };
}

export async function listAlertEndpoints(store: Store) {
  const [rows, open] = await Promise.all([alertEndpoints.list(store.q), alertStates.open(store.q)]);
  return {
    data: rows.map(view),
    /** Conditions raised and not recovered yet (what the next recovery event will close). */
    open: open.map((o) => ({ kind: o.kind, subject: o.key, node: o.node_id, since: iso(Number(o.since)) })),
  };
}

export async function removeAlertEndpoint(store: Store, id: string, now = Date.now()) {
  await store.write(async (tx) => {
    if (!(await alertEndpoints.get(tx, id))) throw notFound(`alert endpoint "${id}"`);
    await subscriptions.setStatus(tx, id, 'deleted', null, now);
    await deliveries.cancelPending(tx, id);
    await store.invalidate(tx, { topic: 'subscriptions', key: id });
  });
  return { id, removed: true };
}

/** Queue an `alert.test` event to one endpoint (or every active one), whatever kinds it chose. */
export async function testAlertEndpoints(store: Store, id?: string, now = Date.now()) {
  return store.write(async (tx) => {
    const targets = id !== undefined ? [await alertEndpoints.get(tx, id)] : await alertEndpoints.list(tx);
    if (id !== undefined && !targets[0]) throw notFound(`alert endpoint "${id}"`);
    const active = (targets as SubscriptionRow[]).filter((s) => s.status === 'active').map((s) => s.id);
    if (!active.length) throw usageError(id !== undefined ? `alert endpoint ${id} is disabled` : 'no active alert endpoints', 'node-svc alerts add <url>');
    const r = await emitAlert(tx, 'alert.test', 'operator:test', { message: 'a test of the alert endpoint, sent by node-svc alerts test', requestedAt: iso(now) }, now, active);
    // Daemons sharing a PostgreSQL store look for the new delivery now (SQLite: the daemon watches the data dir's database).
    await store.invalidate(tx, { topic: 'subscriptions', key: r.id });
    return { event: r.id, endpoints: active };
  });
}

export type TestOutcome = 'delivered' | 'pending' | 'retrying' | 'dead' | 'cancelled';

/**
 * Where a test event's deliveries stand, read until each is delivered or dead, or `waitMs` has passed (every 200 ms;
 * the daemon delivers, this only reads the store).
 */
export async function awaitAlertDeliveries(store: Store, eventId: string, waitMs: number, now: () => number = Date.now) {
  const until = now() + waitMs;
  for (;;) {
    const rows = await alertDeliveries(store.q, eventId);
    const results = rows.map((r) => ({
      endpoint: r.endpoint,
      outcome: (r.status === 'pending' ? (r.last_error === null ? 'pending' : 'retrying') : r.status) as TestOutcome,
      lastStatus: r.last_status === null ? null : Number(r.last_status),
      lastError: r.last_error,
    }));
    if (results.every((r) => r.outcome === 'delivered' || r.outcome === 'dead' || r.outcome === 'cancelled') || now() >= until) return results;
    await new Promise((r) => setTimeout(r, Math.min(200, Math.max(0, until - now()))));
  }
}
