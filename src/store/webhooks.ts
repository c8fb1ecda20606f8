// Webhook subscriptions, deliveries and attempts: the only SQL for them.
import { bodyV100, kindInVersion, type EventKind } from '../domain/events.js';
import { newId } from '../domain/ids.js';
import type { Sql } from './sql.js';

export interface SubscriptionRow {
  id: string;
  node_id: string;
  url: string;
  events: string;
  schema_version: '1.0.0' | '1.1.0';
  description: string | null;
  status: 'active' | 'disabled' | 'deleted';
  disabled_reason: string | null;
  secret: string;
  previous_secret: string | null;
  previous_secret_expires_at: number | null;
  created_at: number;
  updated_at: number;
  last_success_at: number | null;
  failing_since: number | null;
  /** Failed attempts since the last success (migration 0150). */
  consecutive_failures: number;
}

export const subscriptions = {
  insert: (q: Sql, s: Omit<SubscriptionRow, 'disabled_reason' | 'previous_secret' | 'previous_secret_expires_at' | 'last_success_at' | 'failing_since' | 'updated_at' | 'consecutive_failures'>) =>
    (activeChanged(), q.run(`INSERT INTO webhook_subscriptions(id, node_id, url, events, schema_version, description, status, secret, created_at, updated_at)
      VALUES (@id, @node_id, @url, @events, @schema_version, @description, @status, @secret, @created_at, @created_at)`, s as unknown as Record<string, unknown>)),
  /** A subscription the node can see (deleted ones are gone for the API). */
  get: (q: Sql, nodeId: string, id: string) =>
    q.get<SubscriptionRow>("SELECT * FROM webhook_subscriptions WHERE node_id = ? AND id = ? AND status != 'deleted'", [nodeId, id]),
  byId: (q: Sql, id: string) => q.get<SubscriptionRow>('SELECT * FROM webhook_subscriptions WHERE id = ?', [id]),
  list: (q: Sql, nodeId: string) =>
    q.all<SubscriptionRow>("SELECT * FROM webhook_subscriptions WHERE node_id = ? AND status != 'deleted' ORDER BY created_at, id", [nodeId]),
  /** Subscriptions that count against the node's limit (active and disabled; deleted ones are gone). */
  countForNode: async (q: Sql, nodeId: string) =>
    (await q.value<number>("SELECT COUNT(*) FROM webhook_subscriptions WHERE node_id = ? AND status != 'deleted'", [nodeId])) ?? 0,
  setStatus: (q: Sql, id: string, status: SubscriptionRow['status'], reason: string | null, now: number) =>
    (activeChanged(), q.run('UPDATE webhook_subscriptions SET status = ?, disabled_reason = ?, updated_at = ? WHERE id = ?', [status, reason, now, id])),
  rotate: (q: Sql, id: string, secret: string, previousExpiresAt: number, now: number) =>
    q.run(`UPDATE webhook_subscriptions SET previous_secret = secret, previous_secret_expires_at = ?, secret = ?, updated_at = ? WHERE id = ?`, [previousExpiresAt, secret, now, id]),
  failed: (q: Sql, id: string, now: number) =>
    q.run('UPDATE webhook_subscriptions SET failing_since = COALESCE(failing_since, ?) WHERE id = ?', [now, id]),
  /** `failed` that also counts the group's `n` failed attempts since the last success: the count after this write. */
  failedCounting: async (q: Sql, id: string, now: number, n: number) =>
    Number(await q.value<number>('UPDATE webhook_subscriptions SET failing_since = COALESCE(failing_since, ?), consecutive_failures = consecutive_failures + ? WHERE id = ? RETURNING consecutive_failures', [now, n, id])),
  /** `succeededThenFailing` that also sets the failures counted since that success. */
  succeededCounting: (q: Sql, id: string, lastSuccessAt: number, failingSince: number | null, failuresAfter: number) =>
    q.run('UPDATE webhook_subscriptions SET last_success_at = ?, failing_since = ?, consecutive_failures = ? WHERE id = ?', [lastSuccessAt, failingSince, failuresAfter, id]),
  /** Disable an active subscription: 1 when this call disabled it (a transition happens once, whoever else tries). */
  disableIfActive: (q: Sql, id: string, reason: string, now: number) =>
    (activeChanged(), q.run("UPDATE webhook_subscriptions SET status = 'disabled', disabled_reason = ?, updated_at = ? WHERE id = ? AND status = 'active'", [reason, now, id])),
  /** A success in a group of results, then maybe failures after it: one write for the subscription's whole group. */
  succeededThenFailing: (q: Sql, id: string, lastSuccessAt: number, failingSince: number | null) =>
    q.run('UPDATE webhook_subscriptions SET last_success_at = ?, failing_since = ? WHERE id = ?', [lastSuccessAt, failingSince, id]),
};

/** Does a subscription with this filter and schema version take events of `kind`? (1.0.0 never gets the 1.1.0 kinds) */
export function matches(sub: Pick<SubscriptionRow, 'events' | 'schema_version'>, kind: EventKind): boolean {
  if (!kindInVersion(kind, sub.schema_version)) return false;
  return sub.events === '*' || (JSON.parse(sub.events) as string[]).includes(kind);
}

/** `?, ?, ?` for a list of n values (an IN list both dialects read). */
export const placeholders = (n: number) => new Array(n).fill('?').join(', ');

/**
 * PostgreSQL: the count of new pending deliveries (delivery_counts, in the session's counter slot), for the statement
 * that inserts them: `inserted` names its CTE `INSERT INTO deliveries … RETURNING subscription_id`. node-svc's
 * sessions say that they count their inserts so (migration 0230), and the trigger skips them: every INSERT INTO
 * deliveries of node-svc's own must count this way (there are two: here and store/events.ts recordEvent's fan-out).
 */
export const countInserted = (inserted: string) => `INSERT INTO delivery_counts(subscription_id, state, slot, n)
  SELECT subscription_id, 'pending', node_svc_counter_slot(), COUNT(*) FROM ${inserted} GROUP BY subscription_id ORDER BY subscription_id
  ON CONFLICT(subscription_id, state, slot) DO UPDATE SET n = delivery_counts.n + EXCLUDED.n`;

export const deliveries = {
  insert: async (q: Sql, eventSeq: number, subscriptionId: string, now: number, redelivery = false) => {
    const id = newId('dlv');
    const insert = "INSERT INTO deliveries(id, event_seq, subscription_id, status, next_attempt_at, created_at, redelivery) VALUES (?, ?, ?, 'pending', ?, ?, ?)";
    // SQLite counts it by trigger (one writer: a b-tree step); PostgreSQL in the same statement (countInserted).
    await q.run(q.dialect === 'postgres' ? `WITH d AS (${insert} RETURNING subscription_id) ${countInserted('d')}` : insert,
      [id, eventSeq, subscriptionId, now, now, redelivery ? 1 : 0]);
    return id;
  },
  /** Redeliveries of the node's subscriptions not yet delivered, dead or cancelled. */
  pendingRedeliveries: async (q: Sql, nodeId: string) =>
    (await q.value<number>(`SELECT COUNT(*) FROM deliveries d JOIN webhook_subscriptions s ON s.id = d.subscription_id
      WHERE s.node_id = ? AND d.status = 'pending' AND d.redelivery = 1`, [nodeId])) ?? 0,
  cancelPending: (q: Sql, subscriptionId: string) =>
    q.run("UPDATE deliveries SET status = 'cancelled', last_error = 'subscription deleted' WHERE subscription_id = ? AND status = 'pending'", [subscriptionId]),
  /**
   * The retrying delivery of an event to a subscription (pending, failed at least once), if any, and whether it is in flight (claimed, its attempt not
   * recorded yet): a replay brings that one forward instead of queueing a second send.
   */
  pendingFor: (q: Sql, eventSeq: number, subscriptionId: string) =>
    q.get<{ id: string; in_flight: number }>(`SELECT d.id, CASE WHEN d.attempts > (SELECT COUNT(*) FROM delivery_attempts a WHERE a.delivery_id = d.id) THEN 1 ELSE 0 END AS in_flight
      FROM deliveries d WHERE d.event_seq = ? AND d.subscription_id = ? AND d.status = 'pending' AND d.last_error IS NOT NULL ORDER BY d.created_at LIMIT 1`,
      [eventSeq, subscriptionId]),
  /** Due now (a replay of a retrying delivery), unless it is claimed meanwhile. */
  dueNow: (q: Sql, id: string, now: number) =>
    q.run(`UPDATE deliveries SET next_attempt_at = ? WHERE id = ? AND status = 'pending'
      AND attempts = (SELECT COUNT(*) FROM delivery_attempts a WHERE a.delivery_id = deliveries.id)`, [now, id]),
};

export interface ClaimedDelivery {
  id: string;
  subscription_id: string;
  node_id: string;
  attempts: number;
  event_seq: number;
  event_id: string;
  body: string;
  url: string;
  secret: string;
  previous_secret: string | null;
  previous_secret_expires_at: number | null;
  created_at: number;
  failing_since: number | null;
}

// The active subscriptions and their budgets, read once per change instead of on every pump (the claim runs
// thousands of times a second under load; its garbage showed in bench/delivery's RSS). Subscriptions are written
// only by this process (API and worker) through insert/setStatus, which bump the generation; a second of age at
// most covers any other writer.
let activeGeneration = 0;
const activeChanged = () => { activeGeneration++; };
const ACTIVE_MAX_AGE_MS = 1000;
const activeCache = new WeakMap<object, { generation: number; at: number; limits: string; active: Array<{ id: string; node_id: string }>; b: ReturnType<typeof budgets> }>();

/** Another daemon (or the CLI) changed subscriptions: the next claim reads them again. */
export const subscriptionsChanged = activeChanged;

async function activeWithBudgets(q: Sql, l: ClaimLimits, cacheKey: object) {
  const key = `${l.concurrency}/${l.perNode}/${l.perSubscription}`;
  const now = Date.now();
  const c = activeCache.get(cacheKey);
  if (c && c.generation === activeGeneration && c.limits === key && now - c.at < ACTIVE_MAX_AGE_MS) return c;
  const generation = activeGeneration;
  const active = await q.all<{ id: string; node_id: string }>("SELECT id, node_id FROM webhook_subscriptions WHERE status = 'active' ORDER BY node_id, id");
  const fresh = { generation, at: now, limits: key, active, b: budgets(active, l) };
  activeCache.set(cacheKey, fresh);
  return fresh;
}

export interface ClaimLimits {
  /** In flight in all (the worker's concurrency). */
  concurrency: number;
  /** In flight per node at most; a node's share is also at most concurrency ÷ nodes with active subscriptions. */
  perNode: number;
  /** Sockets per subscription at most; a subscription's share is also at most its node's share ÷ its subscriptions. */
  perSubscription: number;
}

export interface InFlight {
  bySubscription: Record<string, number>;
  byNode: Record<string, number>;
  /** Subscriptions with an attempt in flight for longer than the worker's stall mark: they borrow nothing. */
  stalled?: ReadonlySet<string>;
}

/** Sockets kept free for subscriptions with nothing to send, one each, so that their next event goes out at once: at most this share of the concurrency in all. */
const IDLE_RESERVE_SHARE = 4;

/**
 * Every active subscription's budget of concurrent attempts (its socket budget). The budgets add up to at most the
 * concurrency (and a node's to at most its share), so a receiver that hangs holds only its own subscription's
 * budget: every other subscription, of this node or another, always has room. At least 1 each.
 */
export function budgets(active: Array<{ id: string; node_id: string }>, l: ClaimLimits): { bySubscription: Map<string, number>; byNode: Map<string, number> } {
  const perNodeSubs = new Map<string, number>();
  for (const s of active) perNodeSubs.set(s.node_id, (perNodeSubs.get(s.node_id) ?? 0) + 1);
  const nodeShare = Math.max(1, Math.min(l.perNode, Math.floor(l.concurrency / Math.max(1, perNodeSubs.size))));
  const byNode = new Map<string, number>();
  const bySubscription = new Map<string, number>();
  for (const node of perNodeSubs.keys()) byNode.set(node, nodeShare);
  for (const s of active) bySubscription.set(s.id, Math.max(1, Math.min(l.perSubscription, Math.floor(nodeShare / perNodeSubs.get(s.node_id)!))));
  return { bySubscription, byNode };
}

/**
 * Claim due deliveries with a lease, fairly: round-robin over nodes, and within a node over its subscriptions with
 * room, oldest due first within a subscription, `limit` in all (the worker's free sockets). `turn` rotates where the
 * round starts, so no node or subscription is always served first. Each subscription's due rows are read from its
 * own index range (LIMIT its room), so a backlog of one subscription (a hanging receiver's retries, a node's flood
 * of redeliveries) is never scanned past to reach another's. The lease is next_attempt_at = now + leaseMs.
 *
 * Budgets (see `budgets`) are guarantees, not limits: first every subscription gets up to its guaranteed budget; then
 * sockets nobody is using are lent, round-robin again, to subscriptions with more due rows, each up to the caps
 * (perSubscription, perNode). What is lent never takes what the others may need at once: a subscription with work
 * (in flight or due) keeps its whole unused budget free, one with nothing to send keeps one socket free (at most a
 * quarter of the concurrency for all of those together), a node never holds more than half the concurrency while
 * other nodes have subscriptions, and a subscription marked stalled (an attempt in flight for long: a receiver that
 * stopped answering) borrows nothing. Without lending, one busy node among ten idle ones had
 * a tenth of the sockets however idle the rest (bench/delivery: 2 sockets for each of its 10 subscriptions).
 */
export async function claimDue(tx: Sql, now: number, leaseMs: number, limit: number, l: ClaimLimits, inFlight: InFlight, turn = 0, cacheKey: object = tx): Promise<ClaimedDelivery[]> {
  if (limit <= 0) return [];
  const { active, b } = await activeWithBudgets(tx, l, cacheKey);
  if (!active.length) return [];
  // The subscription's status is checked again here: a cached list never claims for one disabled since. On PostgreSQL
  // the due rows are locked, skipping those another daemon is claiming right now: a delivery is claimed once.
  // The status test names the subscription by the parameter, not by d.subscription_id: a condition on no row of d,
  // evaluated once per read instead of once per due row (bench/delivery: this read runs about twice per delivery).
  // The LIMIT is written into the statement, not bound: SQLite (3.53, as better-sqlite3 builds it) prepares a
  // statement again on every run whose LIMIT is a bound parameter (the planner reads the bound value, and marks the
  // statement expired whenever that parameter is bound). Measured on a store of 200,000 deliveries, in a transaction:
  // this read 9.2 -> 0.8 us when it finds nothing, 13.4 -> 3.9 us for 5 rows; in bench/delivery's daemon the due reads
  // went from 869 ms to 218 ms of the store's time (2,441 claims, 55,455 reads before; 81,760 deliveries), and
  // deliveries/s rose ~8 % alternated with the build before. One text per count: at most the worker's concurrency,
  // each prepared once per connection (PostgreSQL: one named statement each).
  const dueSql = (count: number) => `SELECT d.id FROM deliveries d WHERE d.subscription_id = ? AND d.status = 'pending' AND d.next_attempt_at <= ?
    AND EXISTS (SELECT 1 FROM webhook_subscriptions s WHERE s.id = ? AND s.status = 'active') ORDER BY d.next_attempt_at LIMIT ${literalCount(count)}${tx.dialect === 'postgres' ? ' FOR UPDATE OF d SKIP LOCKED' : ''}`;
  // A node borrows up to perNode, and while other nodes have subscriptions up to half the concurrency: whatever its
  // receivers then do (hang with what they borrowed), the other nodes find at least half the sockets.
  const nodeMost = b.byNode.size > 1 ? Math.min(l.perNode, Math.max(1, Math.floor(l.concurrency / 2))) : l.perNode;
  const u = usage(inFlight, b, nodeMost);
  const { busyOf, nodeBusy } = u;
  // Each subscription's most it could take now: its guarantee, or (not stalled) the caps, whichever is more.
  const rows = active.map((s) => {
    const guaranteed = Math.max(0, Math.min(b.bySubscription.get(s.id)! - busyOf(s.id), b.byNode.get(s.node_id)! - nodeBusy(s.node_id)));
    const capped = inFlight.stalled?.has(s.id) ? 0 : Math.max(0, Math.min(l.perSubscription - busyOf(s.id), l.perNode - nodeBusy(s.node_id)));
    return { s, guaranteed, most: Math.min(limit, Math.max(guaranteed, capped)) };
  });
  const asked = rows.filter((x) => x.most > 0);
  // Each subscription's due rows are read in up to two rounds, the reads of a round issued together (PostgreSQL: one
  // packet, one round trip for all). The first reads a fair share of what its node can take now (and its guarantee),
  // one row more: reading `most` for each (up to perSubscription) read ten subscriptions x 64 rows to claim the 80
  // their node had room for (bench/delivery: a millisecond of every claim). Only when the choice below ran out of a
  // subscription's rows that had more does a second round read the rest, and the choice is made again from the
  // whole lists: what is claimed is what one round of `most` rows each would claim.
  const askedInNode = new Map<string, number>();
  for (const x of asked) askedInNode.set(x.s.node_id, (askedInNode.get(x.s.node_id) ?? 0) + 1);
  const share = (x: Ask) => Math.ceil(Math.min(limit, Math.max(0, u.lendable(x.s.node_id))) / askedInNode.get(x.s.node_id)!) + 1;
  const found = new Map<string, Due>();
  const read = async (list: Array<{ x: Ask; count: number }>) => {
    const got = await Promise.all(list.map(({ x, count }) => tx.all<{ id: string }>(dueSql(count), [x.s.id, now, x.s.id])));
    list.forEach(({ x, count }, i) => { if (got[i]!.length) found.set(x.s.id, { due: got[i]!.map((r) => r.id), read: count }); });
  };
  await read(asked.map((x) => ({ x, count: Math.min(x.most, Math.max(x.guaranteed, share(x))) })));
  if (!found.size) return [];
  const weighed = { rows, found, b, l, u, limit, turn };
  let chosen = choose(weighed);
  // Read again in full (not from an offset: on PostgreSQL, rows others lock come and go between two reads) those whose
  // rows the choice ran out of while they had more to give.
  const again = asked.filter((x) => {
    const f = found.get(x.s.id);
    return f !== undefined && f.due.length === f.read && f.read < x.most && chosen.ranOut.has(x.s.id);
  });
  if (again.length) {
    await read(again.map((x) => ({ x, count: x.most })));
    chosen = choose(weighed);
  }
  return lease(tx, chosen.ids, now, leaseMs);
}

/** A row count written into SQL text (a LIMIT): a whole number, or the statement is not made. */
function literalCount(n: number): string {
  if (!Number.isSafeInteger(n) || n < 0) throw new Error(`not a row count: ${n}`);
  return String(n);
}

/**
 * The sockets in use as claimDue and its choice read them: per subscription, per node, and what a node may still take
 * when sockets are lent (up to `nodeMost`, or its budget when that is more, less what it has in flight).
 */
function usage(inFlight: InFlight, b: ReturnType<typeof budgets>, nodeMost: number) {
  const nodeBusy = (node: string) => inFlight.byNode[node] ?? 0;
  return {
    busyOf: (id: string) => inFlight.bySubscription[id] ?? 0,
    nodeBusy,
    lendable: (node: string) => Math.max(nodeMost, b.byNode.get(node)!) - nodeBusy(node),
  };
}
type Usage = ReturnType<typeof usage>;

/** A subscription as claimDue weighs it: its guaranteed budget left, and the most it could take now. */
interface Ask { s: { id: string; node_id: string }; guaranteed: number; most: number }
/** A subscription's due rows read (oldest first), and how many the read asked for (as many came back: it may have more). */
interface Due { due: string[]; read: number }

/**
 * claimDue's choice among the due rows read: round-robin over nodes, and within a node over its subscriptions, first
 * their guarantees, then the spare sockets lent. The ids to claim, and the subscriptions whose rows read it took to the
 * last (`ranOut`).
 */
function choose(c: { rows: Ask[]; found: Map<string, Due>; b: ReturnType<typeof budgets>; l: ClaimLimits; u: Usage; limit: number; turn: number }): { ids: string[]; ranOut: Set<string> } {
  const { rows, found, b, l, u, limit, turn } = c;
  const { busyOf, nodeBusy } = u;
  // Per node: its subscriptions with due rows, in rotated order; `at` is how many of the subscription's rows are taken.
  const nodes = new Map<string, Array<{ id: string; due: string[]; at: number; guaranteed: number; most: number }>>();
  const entries = new Map<string, { at: number; due: string[] }>(); // by subscription
  for (const x of rows) {
    const f = found.get(x.s.id);
    if (!f) continue;
    const entry = { id: x.s.id, due: f.due, at: 0, guaranteed: x.guaranteed, most: x.most };
    entries.set(x.s.id, entry);
    const list = nodes.get(x.s.node_id) ?? [];
    list.push(entry);
    nodes.set(x.s.node_id, list);
  }
  const rotate = <T>(xs: T[]) => { const k = turn % xs.length; return [...xs.slice(k), ...xs.slice(0, k)]; };
  const order = rotate([...nodes.entries()]).map(([node, subs]) => ({ node, subs: rotate(subs), next: 0, taken: 0 }));
  const ids: string[] = [];
  /** One round-robin pass: each node, then each of its subscriptions in turn, one row at a time, within `room`s, `total` in all. */
  const pass = (total: number, subRoom: (s: { at: number; guaranteed: number; most: number }) => number, nodeRoom: (node: string, taken: number) => number) => {
    const end = Math.min(limit, ids.length + total);
    for (let progress = true; progress && ids.length < end; ) {
      progress = false;
      for (const n of order) {
        if (ids.length >= end) break;
        if (nodeRoom(n.node, n.taken) <= 0) continue;
        // This node's next subscription that still has a due row and room.
        for (let k = 0; k < n.subs.length; k++) {
          const s = n.subs[(n.next + k) % n.subs.length]!;
          if (s.at >= s.due.length || subRoom(s) <= 0) continue;
          ids.push(s.due[s.at++]!);
          n.next = (n.next + k + 1) % n.subs.length;
          n.taken++;
          progress = true;
          break;
        }
      }
    }
  };
  // First the guarantees.
  pass(limit, (s) => s.guaranteed - s.at, (node, taken) => b.byNode.get(node)! - nodeBusy(node) - taken);
  // Then the spare sockets, lent: what is left after every subscription's unused guarantee (one socket for one with
  // nothing to send) is kept free.
  if (ids.length < limit) {
    let keep = 0;
    let keepIdle = 0;
    for (const x of rows) {
      const used = busyOf(x.s.id) + (entries.get(x.s.id)?.at ?? 0);
      if (used > 0 || found.has(x.s.id)) keep += Math.max(0, b.bySubscription.get(x.s.id)! - used);
      else keepIdle++; // one socket (every budget is at least 1)
    }
    const spare = limit - ids.length - keep - Math.min(keepIdle, Math.floor(l.concurrency / IDLE_RESERVE_SHARE));
    if (spare > 0) pass(spare, (s) => s.most - s.at, (node, t) => u.lendable(node) - t);
  }
  const ranOut = new Set<string>();
  for (const [id, e] of entries) if (e.at >= e.due.length) ranOut.add(id);
  return { ids, ranOut };
}

/**
 * The lease: due again at now + leaseMs. `attempts` is the claim's fencing token: the attempt is recorded only while
 * no later claim took the delivery over (recordAttempt). The update and the read of what it claimed, issued together
 * (they run in this order). The body as stored (1.1.0); a 1.0.0 subscription's is made from it here (bodyV100), not
 * stored twice (migration 0200).
 */
async function lease(tx: Sql, ids: string[], now: number, leaseMs: number): Promise<ClaimedDelivery[]> {
  if (!ids.length) return [];
  const [, claimed] = await Promise.all([
    tx.run(`UPDATE deliveries SET next_attempt_at = ?, attempts = attempts + 1 WHERE id IN (${placeholders(ids.length)}) AND status = 'pending'`, [now + leaseMs, ...ids]),
    tx.all<ClaimedDelivery & { schema_version: string }>(`
    SELECT d.id, d.subscription_id, s.node_id, d.attempts, d.event_seq, d.created_at, e.id AS event_id, e.body, s.schema_version,
           s.url, s.secret, s.previous_secret, s.previous_secret_expires_at, s.failing_since
    FROM deliveries d JOIN events e ON e.seq = d.event_seq JOIN webhook_subscriptions s ON s.id = d.subscription_id
    WHERE d.id IN (${placeholders(ids.length)})`, ids),
  ]);
  for (const c of claimed) if (c.schema_version === '1.0.0') c.body = bodyV100(c.body);
  return claimed;
}

/**
 * When the next delivery becomes due among subscriptions with room (null: none pending). Subscriptions at their
 * budget are left out: a completion pumps for them, and their backlog (a hanging receiver's) is always "due".
 */
export async function nextDueWithRoom(q: Sql, l: ClaimLimits, inFlight: InFlight, cacheKey: object = q): Promise<number | null> {
  const { active, b } = await activeWithBudgets(q, l, cacheKey);
  let next: number | null = null;
  for (const s of active) {
    if ((inFlight.bySubscription[s.id] ?? 0) >= b.bySubscription.get(s.id)! || (inFlight.byNode[s.node_id] ?? 0) >= b.byNode.get(s.node_id)!) continue;
    const t = (await q.value<number | null>("SELECT MIN(next_attempt_at) FROM deliveries WHERE subscription_id = ? AND status = 'pending'", [s.id])) ?? null;
    if (t !== null && (next === null || t < next)) next = t;
  }
  return next;
}

/**
 * At start, with the data dir locked to this process (SQLite only: with PostgreSQL other daemons may hold leases,
 * which simply run out): deliveries claimed by a previous run that never recorded their attempt (it crashed
 * mid-send) are due now, instead of when their lease would have run out. A claim adds to `attempts`, a recorded
 * attempt sets `recorded_attempts`: one comparison per leased row.
 */
export function releaseStaleLeases(q: Sql, now: number): Promise<number> {
  // Every delivery's subscription is in webhook_subscriptions (a foreign key): the IN names no fewer rows, and walks
  // each subscription's range of deliveries_subscription_due (the all-subscriptions due index is gone, migration 0210).
  return q.run(`UPDATE deliveries SET next_attempt_at = ? WHERE subscription_id IN (SELECT id FROM webhook_subscriptions) AND status = 'pending'
    AND next_attempt_at > ? AND attempts > recorded_attempts`, [now, now]);
}

export interface AttemptRecord {
  deliveryId: string;
  subscriptionId: string;
  eventSeq: number;
  attempt: number;
  at: number;
  durationMs: number;
  statusCode: number | null;
  error: string | null;
  outcome: 'delivered' | 'failed' | 'gone';
  /** For failures: when to try again, or null when the schedule is used up (dead). */
  nextAttemptAt: number | null;
}

/**
 * Record an attempt's outcome, fenced: only while the delivery is still pending under this claim (`attempts` is
 * still the claim's number). A worker whose lease ran out and was claimed again elsewhere records nothing: false.
 * Call inside a write.
 */
export async function recordAttempt(tx: Sql, a: AttemptRecord): Promise<boolean> {
  const recorded = `CASE WHEN recorded_attempts > @attempt THEN recorded_attempts ELSE @attempt END`;
  const dead = a.outcome === 'gone' || (a.outcome !== 'delivered' && a.nextAttemptAt === null);
  const set = a.outcome === 'delivered'
    ? `status = 'delivered', delivered_at = @doneAt, last_status = @status, last_error = NULL, recorded_attempts = ${recorded}`
    : `status = CASE WHEN @dead = 1 THEN 'dead' ELSE status END, next_attempt_at = COALESCE(@next, next_attempt_at), last_status = @status, last_error = @error, recorded_attempts = ${recorded}`;
  const p = {
    id: a.deliveryId, attempt: a.attempt, doneAt: a.at + a.durationMs, status: a.statusCode, dead: dead ? 1 : 0, next: a.nextAttemptAt, error: a.error,
    aid: newId('atm'), sub: a.subscriptionId, seq: a.eventSeq, at: a.at, ms: a.durationMs, outcome: a.outcome,
  };
  const update = `UPDATE deliveries SET ${set} WHERE id = @id AND status = 'pending' AND attempts = @attempt`;
  const values = `@aid, @id, @sub, @seq, @attempt, @at, @ms, @status, @error, @outcome, @next`;
  const insert = 'INSERT INTO delivery_attempts(id, delivery_id, subscription_id, event_seq, attempt, attempted_at, duration_ms, status_code, error, outcome, next_attempt_at)';
  // PostgreSQL: the fenced update and the attempt row in one statement (one round trip under the write lock); the
  // attempt is inserted only when the update matched. SQLite has no UPDATE in a WITH: two statements, same effect.
  if (tx.dialect === 'postgres')
    return (await tx.run(`WITH d AS (${update} RETURNING id) ${insert}
      SELECT @aid, d.id, @sub, CAST(@seq AS BIGINT), CAST(@attempt AS BIGINT), CAST(@at AS BIGINT), CAST(@ms AS BIGINT), CAST(@status AS BIGINT),
        CAST(@error AS TEXT), CAST(@outcome AS TEXT), CAST(@next AS BIGINT) FROM d`, p)) > 0;
  if (!(await tx.run(update, p))) return false;
  await tx.run(`${insert} VALUES (${values})`, p);
  return true;
}

/**
 * recordAttempt for each of a batch, in order; which were recorded. PostgreSQL: one statement for the whole batch
 * (the fenced updates and the attempt rows, from arrays), where one each would cost the database a statement's
 * overhead per delivery; attempt rows are inserted in the batch's order (their ids are in that order too). A batch
 * that names one delivery twice goes one by one: each must see the update before it.
 */
export async function recordAttempts(tx: Sql, batch: AttemptRecord[]): Promise<boolean[]> {
  if (tx.dialect !== 'postgres' || batch.length < 2 || new Set(batch.map((a) => a.deliveryId)).size < batch.length)
    return Promise.all(batch.map((a) => recordAttempt(tx, a)));
  const col = <T>(f: (a: AttemptRecord) => T) => batch.map(f);
  const rows = await tx.all<{ id: string }>(
    `WITH v AS (SELECT * FROM unnest(CAST(@ids AS TEXT[]), CAST(@attempts AS BIGINT[]), CAST(@doneAts AS BIGINT[]), CAST(@statuses AS BIGINT[]),
        CAST(@errors AS TEXT[]), CAST(@outcomes AS TEXT[]), CAST(@nexts AS BIGINT[]), CAST(@deads AS INT[]), CAST(@aids AS TEXT[]), CAST(@subs AS TEXT[]),
        CAST(@seqs AS BIGINT[]), CAST(@ats AS BIGINT[]), CAST(@mss AS BIGINT[])) WITH ORDINALITY
        AS v(id, attempt, done_at, status, error, outcome, next, dead, aid, sub, seq, at, ms, n)),
      u AS (UPDATE deliveries d SET
          status = CASE WHEN v.outcome = 'delivered' THEN 'delivered' WHEN v.dead = 1 THEN 'dead' ELSE d.status END,
          delivered_at = CASE WHEN v.outcome = 'delivered' THEN v.done_at ELSE d.delivered_at END,
          next_attempt_at = CASE WHEN v.outcome = 'delivered' THEN d.next_attempt_at ELSE COALESCE(v.next, d.next_attempt_at) END,
          last_status = v.status,
          last_error = CASE WHEN v.outcome = 'delivered' THEN NULL ELSE v.error END,
          recorded_attempts = CASE WHEN d.recorded_attempts > v.attempt THEN d.recorded_attempts ELSE v.attempt END
        FROM v WHERE d.id = v.id AND d.status = 'pending' AND d.attempts = v.attempt RETURNING d.id),
      i AS (INSERT INTO delivery_attempts(id, delivery_id, subscription_id, event_seq, attempt, attempted_at, duration_ms, status_code, error, outcome, next_attempt_at)
        SELECT v.aid, v.id, v.sub, v.seq, v.attempt, v.at, v.ms, v.status, v.error, v.outcome, v.next FROM v JOIN u ON u.id = v.id ORDER BY v.n)
    SELECT id FROM u`,
    {
      ids: col((a) => a.deliveryId), attempts: col((a) => a.attempt), doneAts: col((a) => a.at + a.durationMs), statuses: col((a) => a.statusCode),
      errors: col((a) => (a.outcome === 'delivered' ? null : a.error)), outcomes: col((a) => a.outcome), nexts: col((a) => a.nextAttemptAt),
      deads: col((a) => (a.outcome === 'gone' || (a.outcome !== 'delivered' && a.nextAttemptAt === null) ? 1 : 0)), aids: col(() => newId('atm')),
      subs: col((a) => a.subscriptionId), seqs: col((a) => a.eventSeq), ats: col((a) => a.at), mss: col((a) => a.durationMs),
    },
  );
  const recorded = new Set(rows.map((r) => r.id));
  return batch.map((a) => recorded.has(a.deliveryId));
}

export interface AttemptRow { id: string; delivery_id: string; event_id: string; attempt: number; attempted_at: number; duration_ms: number; status_code: number | null; error: string | null; outcome: string; next_attempt_at: number | null; delivery_status: string }

const ATTEMPT_PAGE = `SELECT a.id, a.delivery_id, e.id AS event_id, a.attempt, a.attempted_at, a.duration_ms, a.status_code, a.error, a.outcome, a.next_attempt_at, d.status AS delivery_status
  FROM delivery_attempts a JOIN events e ON e.seq = a.event_seq JOIN deliveries d ON d.id = a.delivery_id`;

export type DeliveryState = 'pending' | 'retrying' | 'delivered' | 'dead' | 'cancelled';

export const attempts = {
  /**
   * Newest first (insertion order, which is attempt id order: ids are monotonic ULIDs made at insert); `before` is an
   * attempt id cursor (an unknown one gives an empty page). Walks (subscription_id, rowid) backwards: no sort.
   */
  page: (q: Sql, subscriptionId: string, before: string | null, limit: number) =>
    before === null
      ? q.all<AttemptRow>(`${ATTEMPT_PAGE} WHERE a.subscription_id = ? ORDER BY a.rowid DESC LIMIT ?`, [subscriptionId, limit])
      : q.all<AttemptRow>(`${ATTEMPT_PAGE} WHERE a.subscription_id = ? AND a.rowid < (SELECT c.rowid FROM delivery_attempts c WHERE c.id = ?) ORDER BY a.rowid DESC LIMIT ?`,
          [subscriptionId, before, limit]),
  /** Deliveries by health bucket, from the counters the triggers keep (migration 0090): not a count of the history. */
  health: async (q: Sql, subscriptionId: string) => {
    const out: Record<DeliveryState, number> = { pending: 0, retrying: 0, delivered: 0, dead: 0, cancelled: 0 };
    for (const r of await q.all<{ state: DeliveryState; n: number }>('SELECT state, CAST(SUM(n) AS BIGINT) AS n FROM delivery_counts WHERE subscription_id = ? GROUP BY state', [subscriptionId])) if (r.state in out) out[r.state] = Number(r.n);
    return out;
  },
  /** All subscriptions' deliveries by health bucket (the outbox gauges). */
  /** `exceptOwner`: leave out the deliveries of that owner's subscriptions (the operator's alert endpoints). */
  totals: async (q: Sql, exceptOwner?: string) => {
    const out: Record<DeliveryState, number> = { pending: 0, retrying: 0, delivered: 0, dead: 0, cancelled: 0 };
    const rows = exceptOwner === undefined
      ? await q.all<{ state: DeliveryState; n: number }>('SELECT state, CAST(SUM(n) AS BIGINT) AS n FROM delivery_counts GROUP BY state')
      : await q.all<{ state: DeliveryState; n: number }>('SELECT state, CAST(SUM(n) AS BIGINT) AS n FROM delivery_counts WHERE subscription_id NOT IN (SELECT id FROM webhook_subscriptions WHERE node_id = ?) GROUP BY state', [exceptOwner]);
    for (const r of rows) if (r.state in out) out[r.state] = Number(r.n);
    return out;
  },
};
