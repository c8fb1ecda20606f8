// Webhook subscription use cases (DESIGN §8), shared by the API and the CLI.
import { isIP } from 'node:net';
import { invalidRequest, limitExceeded, notFound, requestRefused } from '../domain/errors.js';
import { EVENT_KIND_LIST, EVENT_KINDS, isEventKind, type SchemaVersion } from '../domain/events.js';
import { newId } from '../domain/ids.js';
import { hasControl, lengthOver } from '../domain/text.js';
import { iso } from '../domain/time.js';
import { newWebhookSecret } from '../delivery/sign.js';
import { events as eventsTable, START, type EventPosition, type EventRow } from '../store/events.js';
import { attempts, deliveries, matches, subscriptions, type SubscriptionRow } from '../store/webhooks.js';
import { lockKey, type Sql } from '../store/sql.js';
import { alertStates } from '../store/alerts.js';
import type { Deps } from './deps.js';

export const MAX_URL_LENGTH = 2048;
export const DEFAULT_OVERLAP_S = 86_400;
const REDELIVERY_RETRY_AFTER_S = 10;

export interface CreateSubscription {
  url: string;
  events?: string[] | undefined;
  schemaVersion?: SchemaVersion | undefined;
  description?: string | undefined;
}

export function view(s: SubscriptionRow, now: number) {
  return {
    id: s.id,
    url: s.url,
    events: s.events === '*' ? ['*'] : (JSON.parse(s.events) as string[]),
    schemaVersion: s.schema_version,
    description: s.description,
    status: s.status as 'active' | 'disabled',
    disabledReason: s.disabled_reason,
    createdAt: iso(s.created_at),
    lastSuccessAt: s.last_success_at === null ? null : iso(s.last_success_at),
    failingSince: s.failing_since === null ? null : iso(s.failing_since),
    previousSecretExpiresAt: s.previous_secret_expires_at !== null && s.previous_secret_expires_at > now ? iso(s.previous_secret_expires_at) : null,
  };
}

/** Free text a caller stores and an operator later reads on a terminal: no control characters (400 naming the field). */
export function refuseControl(field: string, value: string | undefined): void {
  if (value !== undefined && hasControl(value))
    throw invalidRequest(`${field} must not contain control characters`, { issues: [{ path: field, message: 'must not contain control characters' }] });
}

/**
 * The URL as the WHATWG parser normalises it (what is stored, shown and connected to). The document allows any string
 * of 1 to 2,048 characters without control characters and names the rest: anything else is 422 `url_invalid` (or
 * `url_target_refused` for an IP the target policy refuses), naming the problem.
 */
export function checkUrl(d: Pick<Deps, 'webhookPolicy'>, raw: string): string {
  if (lengthOver(raw, MAX_URL_LENGTH)) throw invalidRequest(`url is longer than ${MAX_URL_LENGTH} characters`); // the schema's maxLength
  // The parser would silently drop tabs and line breaks and percent-encode the rest: refuse instead of guessing.
  refuseControl('url', raw);
  const bad = (detail: string) => requestRefused('url_invalid', detail);
  let u: URL;
  try {
    u = new URL(raw);
  } catch {
    throw bad('url is not an absolute URL');
  }
  if (u.protocol !== 'http:' && u.protocol !== 'https:') throw bad('url must be http or https');
  if (u.username || u.password) throw bad('url must not carry userinfo (user:password@); put credentials in the path or rely on the signature');
  if (u.hash) throw bad('url must not have a #fragment');
  const host = u.hostname.replace(/^\[|\]$/g, '');
  if (isIP(host) && d.webhookPolicy) {
    const ok = d.webhookPolicy.allowed(host);
    if (!ok.ok) throw requestRefused('url_target_refused', `url is not an allowed webhook target: ${ok.reason}`);
  }
  if (u.href.length > MAX_URL_LENGTH) throw bad(`url is longer than ${MAX_URL_LENGTH} characters once normalised`);
  return u.href;
}

export async function createSubscription(d: Deps, nodeId: string, req: CreateSubscription) {
  const url = checkUrl(d, req.url);
  refuseControl('description', req.description);
  const version = req.schemaVersion ?? '1.1.0';
  let events = '*';
  if (req.events !== undefined) {
    if (!req.events.length) throw invalidRequest('events must list at least one kind (omit it for all kinds)');
    const bad = req.events.filter((k) => !isEventKind(k));
    if (bad.length) throw invalidRequest(`unknown event kinds: ${bad.join(', ')} (known: ${EVENT_KIND_LIST.join(', ')})`);
    const newer = req.events.filter((k) => version === '1.0.0' && EVENT_KINDS[k as keyof typeof EVENT_KINDS] !== '1.0.0');
    if (newer.length) throw requestRefused('kind_not_in_schema_version', `schemaVersion 1.0.0 has no ${newer.join(', ')} (added in 1.1.0)`);
    events = JSON.stringify([...new Set(req.events)].sort());
  }
  const now = d.now();
  const row = {
    id: newId('whk'), node_id: nodeId, url, events, schema_version: version, description: req.description ?? null,
    status: 'active' as const, secret: newWebhookSecret(), created_at: now,
  };
  const s = await d.store.write(async (tx) => {
    await lockKey(tx, `subscriptions:${nodeId}`); // PostgreSQL: the count and the insert, one daemon at a time per node
    const max = d.config.maxSubscriptionsPerNode;
    if ((await subscriptions.countForNode(tx, nodeId)) >= max)
      throw limitExceeded('subscriptions', max, `this node already has ${max} webhook subscriptions (the limit); delete one first`);
    await subscriptions.insert(tx, row);
    await d.store.invalidate(tx, { topic: 'subscriptions', key: row.id });
    return (await subscriptions.byId(tx, row.id))!;
  });
  // The secret appears here, once.
  return { ...view(s, now), secret: row.secret };
}

export const listSubscriptions = async (d: Deps, nodeId: string) => ({ data: (await subscriptions.list(d.store.q, nodeId)).map((s) => view(s, d.now())) });

async function requireSubscription(q: Sql, nodeId: string, id: string): Promise<SubscriptionRow> {
  const s = await subscriptions.get(q, nodeId, id);
  if (!s) throw notFound('webhook subscription'); // unknown and another node's look the same
  return s;
}

/** Revoke: no more deliveries, pending ones cancelled; afterwards the id is 404. */
export async function deleteSubscription(d: Deps, nodeId: string, id: string): Promise<void> {
  await d.store.write(async (tx) => {
    await requireSubscription(tx, nodeId, id);
    await subscriptions.setStatus(tx, id, 'deleted', null, d.now());
    await deliveries.cancelPending(tx, id);
    await alertStates.clear(tx, `endpoint:${id}`, ['endpoint.failing']); // nothing more is attempted: no recovery to wait for
    await d.store.invalidate(tx, { topic: 'subscriptions', key: id });
  });
}

/** New secret now; the old one still signs (second signature) until the overlap ends. */
export function rotateSecret(d: Deps, nodeId: string, id: string, overlapSeconds = DEFAULT_OVERLAP_S) {
  if (!Number.isInteger(overlapSeconds) || overlapSeconds < 0 || overlapSeconds > 7 * 86_400) throw invalidRequest('overlapSeconds must be an integer from 0 to 604800');
  return d.store.write(async (tx) => {
    await requireSubscription(tx, nodeId, id);
    const now = d.now();
    const secret = newWebhookSecret();
    await subscriptions.rotate(tx, id, secret, now + overlapSeconds * 1000, now);
    await d.store.invalidate(tx, { topic: 'subscriptions', key: id });
    return { ...view((await subscriptions.byId(tx, id))!, now), secret };
  });
}

export async function listAttempts(d: Deps, nodeId: string, id: string, cursor: string | undefined, limit: number) {
  const s = await requireSubscription(d.store.q, nodeId, id);
  // Health before the page: two reads, not one snapshot (on PostgreSQL a delivery's last attempt and its dead status
  // can commit between them). Read in this order, a status the health shows has its attempts in the page: a fresh-clone
  // CI run saw dead: 1 beside two of the three attempts when the page was read first.
  const h = await attempts.health(d.store.q, s.id);
  const rows = await attempts.page(d.store.q, s.id, cursor ?? null, limit + 1);
  const page = rows.slice(0, limit);
  return {
    subscription: s.id,
    health: { pending: h.pending, retrying: h.retrying, dead: h.dead, delivered: h.delivered },
    data: page.map((a) => ({
      id: a.id,
      deliveryId: a.delivery_id,
      eventId: a.event_id,
      attempt: a.attempt,
      attemptedAt: iso(a.attempted_at),
      statusCode: a.status_code,
      durationMs: a.duration_ms,
      error: a.error,
      outcome: a.outcome as 'delivered' | 'failed' | 'gone',
      nextAttemptAt: a.next_attempt_at === null ? null : iso(a.next_attempt_at),
      deliveryStatus: a.delivery_status as 'pending' | 'delivered' | 'dead' | 'cancelled',
    })),
    nextCursor: rows.length > limit ? page[page.length - 1]!.id : null,
  };
}

async function requireEvent(q: Sql, nodeId: string, id: string): Promise<EventRow> {
  const e = await eventsTable.get(q, nodeId, id);
  if (!e) throw notFound('event');
  return e;
}

/** Queue the event again for every active matching subscription (or just one): a new delivery, same event id. */
export async function redeliver(d: Deps, nodeId: string, eventId: string, subscriptionId?: string) {
  const out = await d.store.write(async (tx) => {
    await lockKey(tx, `redeliveries:${nodeId}`); // PostgreSQL: the limit's count and the rows it admits, one at a time per node
    const e = await requireEvent(tx, nodeId, eventId);
    const subs = subscriptionId ? [await requireSubscription(tx, nodeId, subscriptionId)] : await subscriptions.list(tx, nodeId);
    const now = d.now();
    const targets = subs.filter((s) => s.status === 'active' && matches(s, e.type));
    // A delivery of this event still waiting (retrying) is the one to complete: brought forward, never doubled by
    // a second row that would send again when the old one's retry comes due. One in flight right now may already
    // be acknowledged: a replay asked for another send, so it gets a new row.
    const plan: Array<{ s: SubscriptionRow; complete: string | undefined }> = [];
    for (const s of targets) {
      const pending = await deliveries.pendingFor(tx, e.seq, s.id);
      plan.push({ s, complete: pending && !pending.in_flight ? pending.id : undefined });
    }
    // One node's flood of redeliveries must not grow without bound (the claim keeps it from delaying others).
    const max = d.config.maxRedeliveriesPerNode;
    // At the limit every redeliver is refused, even one that would only bring a pending delivery forward.
    const fresh = plan.filter((p) => !p.complete).length;
    const pendingCount = plan.length ? await deliveries.pendingRedeliveries(tx, nodeId) : 0;
    if (pendingCount + fresh > max || pendingCount >= max)
      throw limitExceeded('redeliveries', max, `this node has ${pendingCount} redeliveries pending (the limit is ${max}); retry when some are delivered`, REDELIVERY_RETRY_AFTER_S);
    const queued: Array<{ subscription: string; deliveryId: string }> = [];
    for (const { s, complete } of plan)
      queued.push(complete && (await deliveries.dueNow(tx, complete, now))
        ? { subscription: s.id, deliveryId: complete }
        : { subscription: s.id, deliveryId: await deliveries.insert(tx, e.seq, s.id, now, true) });
    return { event: e.id, queued };
  });
  d.wakeDelivery?.();
  return out;
}

/** An events cursor: base64url of the position, `seq` (SQLite) or `tx.seq` (PostgreSQL: see events.page). */
const eventCursor = (p: EventPosition) => Buffer.from(p.tx === null ? String(p.seq) : `${p.tx}.${p.seq}`).toString('base64url');

/** Strict: only a cursor this API gave out; anything else is the documented 422 `cursor_unknown`. */
async function readEventCursor(q: Sql, nodeId: string, cursor: string | undefined): Promise<EventPosition> {
  if (cursor === undefined) return START;
  const text = Buffer.from(cursor, 'base64url').toString('utf8');
  const m = /^(?:(\d{1,20})\.)?(\d{1,15})$/.exec(text);
  const seq = m ? Number(m[2]) : NaN;
  if (!m || !Number.isSafeInteger(seq) || (m[1] !== undefined && q.dialect !== 'postgres')) throw requestRefused('cursor_unknown', 'cursor is not a cursor this API gave out (use nextCursor of a previous page)');
  if (m[1] !== undefined) return { tx: m[1], seq };
  // PostgreSQL, a bare seq (given out before events carried their transaction): from that event's place.
  if (q.dialect === 'postgres') return { tx: (await eventsTable.txOf(q, nodeId, seq)) ?? '0', seq };
  return { tx: null, seq };
}

/** The shape `since` must have (the OpenAPI pattern); a string of that shape that is no real time is 422 `since_invalid`. */
export const SINCE_PATTERN = '^[0-9]{4}-[0-9]{2}-[0-9]{2}T';
const SINCE_RE = new RegExp(SINCE_PATTERN);

const envelope = (e: EventRow) => JSON.parse(e.body) as Record<string, unknown>;

/**
 * The node's events oldest first, after `cursor` or from the first one recorded at or after `since` (RFC 3339).
 * With retention on, events older than the horizon may be gone: the answer names the horizon and says when
 * `since` reaches before it.
 */
export async function listEvents(d: Deps, nodeId: string, cursor: string | undefined, limit: number, type?: string, since?: string) {
  if (type !== undefined && !isEventKind(type)) throw invalidRequest(`unknown event type ${type}`);
  if (cursor !== undefined && since !== undefined) throw requestRefused('cursor_with_since', 'give cursor or since, not both');
  const q = d.store.q;
  let after = await readEventCursor(q, nodeId, cursor);
  const sinceMs = since === undefined ? undefined : Date.parse(since);
  if (sinceMs !== undefined && !SINCE_RE.test(since!)) throw invalidRequest(`since "${since}" is not an RFC 3339 time (e.g. 2026-11-21T10:00:00Z)`); // the schema's pattern
  if (sinceMs !== undefined && Number.isNaN(sinceMs)) throw requestRefused('since_invalid', `since "${since}" is not a real time (e.g. 2026-11-21T10:00:00Z)`);
  if (sinceMs !== undefined) after = (await eventsTable.positionBefore(q, nodeId, sinceMs)) ?? (await eventsTable.lastPosition(q, nodeId));
  const horizon = d.config.retentionMs > 0 ? d.now() - d.config.retentionMs : null;
  const rows = await eventsTable.page(q, nodeId, after, limit + 1, type);
  const page = rows.slice(0, limit);
  const last = page[page.length - 1];
  return {
    retentionHorizon: horizon === null ? null : iso(horizon),
    sincePruned: sinceMs !== undefined && horizon !== null && sinceMs < horizon,
    data: page.map(envelope),
    // Always a cursor (the last event seen), so a reconciler can poll for what comes next.
    nextCursor: last ? eventCursor({ tx: last.xact ?? null, seq: Number(last.seq) }) : cursor ?? (sinceMs !== undefined ? eventCursor(after) : null),
    hasMore: rows.length > limit,
  };
}
