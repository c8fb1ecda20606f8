// The transactional outbox: the only SQL that writes or reads events.
import { envelopeBody, kindInVersion, type EventKind } from '../domain/events.js';
import { BLOCK_DIGITS, CROCKFORD, newId, newIdBlock } from '../domain/ids.js';
import { iso } from '../domain/time.js';
import { mergeable, onCommit, type Sql } from './sql.js';
import { countInserted } from './webhooks.js';

/** Called after each recorded event that made a delivery, so the delivery worker wakes at once, once it can claim it. */
const wakers = new Set<() => void>();
const wakeAll = () => { for (const w of wakers) w(); };
/** Wake the worker once the event's transaction has committed (PostgreSQL: a claim before it would miss the event). */
export const wakeAfter = (tx: Sql) => onCommit(tx, wakeAll);
export const onEventRecorded = (wake: () => void): (() => void) => {
  wakers.add(wake);
  return () => wakers.delete(wake);
};

/**
 * PostgreSQL: the last BLOCK_DIGITS characters of the k-th id of a block (newIdBlock), `k` a bigint expression from 0 to
 * 32^BLOCK_DIGITS - 1: its Crockford base-32 digits, the most significant first, so ids sort as their k.
 */
export function blockDigitsSql(k: string): string {
  const digit = (place: number) => `substr('${CROCKFORD}', CAST((${k} / ${32 ** place}) % 32 AS INTEGER) + 1, 1)`;
  return Array.from({ length: BLOCK_DIGITS }, (_, i) => digit(BLOCK_DIGITS - 1 - i)).join(' || ');
}

/**
 * SQL: the subscription (its columns prefixed `w`) is the node's, active, and takes the event: matches(), in SQL (the
 * kind in the subscription's schema version, and in its events list, a JSON array of kind names or '*').
 */
const takesEvent = (w: string, node: string, in100: string, quoted: string, find = 'strpos') =>
  `${w}node_id = ${node} AND ${w}status = 'active' AND (${w}schema_version = '1.1.0' OR ${in100} = 1) AND (${w}events = '*' OR ${find}(${w}events, ${quoted}) > 0)`;

const SQLITE_INSERT = 'INSERT INTO events(id, node_id, type, external_ref, occurred_at, body) VALUES (?, ?, ?, ?, ?, ?) RETURNING seq';
/**
 * SQLite: an event's deliveries, one per subscription that takes it, in one statement (PG_RECORD's fan-out: the same
 * test of the subscription in SQL, SQLite's instr for strpos; the ids a block of this process, numbered in the order
 * the node's active subscriptions are read from webhook_subscriptions_node, which is their rowid order (the order they
 * were made in, unless a VACUUM renumbered the rows; nothing depends on it).
 * PostgreSQL numbers them by id; here that would sort them in a temporary b-tree per event). One INSERT per matching
 * subscription after a read of the node's active ones until 2026-12-02.
 */
const SQLITE_FAN_OUT = `INSERT INTO deliveries(id, event_seq, subscription_id, status, next_attempt_at, created_at, redelivery)
  SELECT @block || ${blockDigitsSql('s.k')}, @seq, s.id, 'pending', @now, @now, 0
  FROM (SELECT id, row_number() OVER () AS k FROM webhook_subscriptions WHERE ${takesEvent('', '@node', '@in100', '@quoted', 'instr')}) s`;
/** recordEvent's PostgreSQL statement, made once: its text is the same for every event (and so is the store's cache key). */
const PG_RECORD = `WITH e AS (INSERT INTO events(id, node_id, type, external_ref, occurred_at, body)
          VALUES (@id, @node, @type, @ref, @now, @body) RETURNING seq),
        s AS (SELECT id, row_number() OVER (ORDER BY id) AS k FROM webhook_subscriptions
          WHERE ${takesEvent('', '@node', '@in100', '@quoted')}),
        d AS (INSERT INTO deliveries(id, event_seq, subscription_id, status, next_attempt_at, created_at, redelivery)
          SELECT @block || ${blockDigitsSql('s.k')}, e.seq, s.id, 'pending', @now, @now, 0 FROM e, s
          RETURNING subscription_id),
        c AS (${countInserted('d')})
      SELECT e.seq, (SELECT COUNT(*) FROM d) AS made FROM e`;

/**
 * PG_RECORD for several events in one statement, in their order (a write batch's held last statements: `mergeable`
 * in sql.ts; control facts end so). Each event's deliveries, ids and counts are PG_RECORD's. Measured (bench/postgres
 * compare, deliveries, alternated with one statement per event): PostgreSQL / SQLite 0.61, 0.62, 0.67 against 0.52, 0.50, 0.53.
 */
const PG_RECORD_MANY = `WITH v AS (SELECT * FROM unnest(CAST(@ids AS TEXT[]), CAST(@nodes AS TEXT[]), CAST(@types AS TEXT[]), CAST(@refs AS TEXT[]),
          CAST(@ats AS BIGINT[]), CAST(@bodies AS TEXT[]), CAST(@in100s AS INTEGER[]), CAST(@quoteds AS TEXT[]), CAST(@blocks AS TEXT[]))
          WITH ORDINALITY AS v(id, node, type, ref, at, body, in100, quoted, block, o)),
        e AS (INSERT INTO events(id, node_id, type, external_ref, occurred_at, body) SELECT id, node, type, ref, at, body FROM v ORDER BY o RETURNING seq, id),
        s AS (SELECT v.id AS event_id, w.id, row_number() OVER (PARTITION BY v.id ORDER BY w.id) AS k FROM v JOIN webhook_subscriptions w
          ON ${takesEvent('w.', 'v.node', 'v.in100', 'v.quoted')}),
        d AS (INSERT INTO deliveries(id, event_seq, subscription_id, status, next_attempt_at, created_at, redelivery)
          SELECT v.block || ${blockDigitsSql('s.k')}, e.seq, s.id, 'pending', v.at, v.at, 0 FROM s JOIN v ON v.id = s.event_id JOIN e ON e.id = s.event_id
          ORDER BY e.seq, s.k
          RETURNING subscription_id, event_seq),
        c AS (${countInserted('d')}),
        m AS (SELECT event_seq, COUNT(*) AS made FROM d GROUP BY event_seq)
      SELECT e.id, e.seq, COALESCE(m.made, 0) AS made FROM e LEFT JOIN m ON m.event_seq = e.seq`;
mergeable.set(PG_RECORD, {
  sql: PG_RECORD_MANY,
  key: 'id',
  merge: (ps) => ({
    ids: ps.map((p) => p.id), nodes: ps.map((p) => p.node), types: ps.map((p) => p.type), refs: ps.map((p) => p.ref), ats: ps.map((p) => p.now),
    bodies: ps.map((p) => p.body), in100s: ps.map((p) => p.in100), quoteds: ps.map((p) => p.quoted), blocks: ps.map((p) => p.block),
  }),
});

export interface RecordedEvent {
  seq: number;
  id: string;
  type: EventKind;
  externalRef: string;
  occurredAt: number;
}

/**
 * Record one event and fan it out to one pending delivery per active matching subscription of the node.
 * Call inside the write of the state change that caused it: all of it commits, or none. The seq comes from the
 * database (PostgreSQL: with the writing transaction, which orders the node's events for cursors: events.page).
 */
export async function recordEvent(tx: Sql, nodeId: string, type: EventKind, externalRef: string, data: Record<string, unknown>, now = Date.now(), id = newId('evt'),
  opts: { last?: boolean } = {}): Promise<RecordedEvent> {
  const base = { id, type, occurredAt: iso(now), externalRef, data };
  // Stored once, at 1.1.0: a 1.0.0 subscription's envelope is made from it when claimed (bodyV100; migration 0200).
  const body = envelopeBody(base, '1.1.0');
  if (tx.dialect === 'postgres') {
    // One statement, one round trip: the event, and its delivery to each active subscription of the node that takes
    // its kind (matches(), in SQL: the kind in the subscription's schema version, and in its events list, a JSON array
    // of kind names or '*'), and their count (countInserted). The delivery ids are made here too, however many match:
    // a block of ids reserved in this process (newIdBlock), the k-th subscription (by id) getting the block's k-th id,
    // so they are ids as newId makes them, in the same order. (A node has at most 10,000 subscriptions,
    // --max-subscriptions; a block holds 32^4: an id past it would repeat one, and the unique key would refuse the
    // write, never drop a delivery.) The write's last statement (opts.last): its COMMIT goes with it
    // (Sql.commitWithNext); nothing follows it here.
    if (opts.last === true && tx.commitWithNext !== undefined) tx.commitWithNext();
    const row = await tx.get<{ seq: number; made: number }>(PG_RECORD,
      { id, node: nodeId, type, ref: externalRef, now, body, in100: kindInVersion(type, '1.0.0') ? 1 : 0, quoted: JSON.stringify(type), block: newIdBlock('dlv') });
    if (Number(row!.made) > 0) wakeAfter(tx);
    return { seq: Number(row!.seq), id, type, externalRef, occurredAt: now };
  }
  // SQLite: the event, then its deliveries (SQLITE_FAN_OUT; counted by the insert trigger).
  const seq = Number(await tx.value<number>(SQLITE_INSERT, [id, nodeId, type, externalRef, now, body]));
  const made = await tx.run(SQLITE_FAN_OUT, { block: newIdBlock('dlv'), seq, now, node: nodeId, in100: kindInVersion(type, '1.0.0') ? 1 : 0, quoted: JSON.stringify(type) });
  if (made > 0) wakeAfter(tx);
  return { seq, id, type, externalRef, occurredAt: now };
}

export interface EventRow { seq: number; id: string; node_id: string; type: EventKind; external_ref: string; occurred_at: number; body: string; xact?: string }

/**
 * Where a page of the node's events stands. SQLite: the seq (one writer, so events commit in seq order).
 * PostgreSQL: (tx, seq), the writing transaction first: writes of several daemons commit in any order, and only
 * transactions below the oldest one still in flight are served, so a later commit never lands behind a cursor.
 */
export interface EventPosition { tx: string | null; seq: number }
export const START: EventPosition = { tx: null, seq: 0 };

// The columns of an event every read returns (PostgreSQL adds its writing transaction, as text: PG_COLUMNS).
const COLUMNS = 'seq, id, node_id, type, external_ref, occurred_at, body';
// The writing transaction as text (a JS number cannot hold every xid8), named apart: ORDER BY tx must sort the xid8.
const PG_COLUMNS = `${COLUMNS}, CAST(tx AS TEXT) AS xact`;
/** PostgreSQL: committed by every transaction older than the oldest one still running (nothing can appear below it). */
const VISIBLE = 'tx < pg_snapshot_xmin(pg_current_snapshot())';
/** How far apart in time two events of overlapping write transactions can be recorded, at most (writes await only the database). */
const SINCE_WINDOW_MS = 10_000;
const AFTER = '(tx > CAST(@tx AS xid8) OR (tx = CAST(@tx AS xid8) AND seq > @seq))';

export const events = {
  get: (q: Sql, nodeId: string, id: string) => q.get<EventRow>(`SELECT ${COLUMNS} FROM events WHERE node_id = ? AND id = ?`, [nodeId, id]),
  /** The node's events after `after`, oldest first (by type: on the (node, type, …) index). */
  page: (q: Sql, nodeId: string, after: EventPosition, limit: number, type?: string): Promise<EventRow[]> => {
    if (q.dialect === 'postgres') {
      const p = { node: nodeId, tx: after.tx ?? '0', seq: after.seq, limit, type: type ?? null };
      return type
        ? q.all<EventRow>(`SELECT ${PG_COLUMNS} FROM events WHERE node_id = @node AND type = @type AND ${AFTER} AND ${VISIBLE} ORDER BY tx, seq LIMIT @limit`, p)
        : q.all<EventRow>(`SELECT ${PG_COLUMNS} FROM events WHERE node_id = @node AND ${AFTER} AND ${VISIBLE} ORDER BY tx, seq LIMIT @limit`, p);
    }
    return type
      ? q.all<EventRow>(`SELECT ${COLUMNS} FROM events WHERE node_id = ? AND seq > ? AND type = ? ORDER BY seq LIMIT ?`, [nodeId, after.seq, type, limit])
      : q.all<EventRow>(`SELECT ${COLUMNS} FROM events WHERE node_id = ? AND seq > ? ORDER BY seq LIMIT ?`, [nodeId, after.seq, limit]);
  },
  /** Tests and tools (not a run-time path): walks the node's events. */
  forRef: (q: Sql, nodeId: string, externalRef: string) =>
    q.all<EventRow>(`SELECT ${COLUMNS} FROM events WHERE node_id = ? AND external_ref = ? ORDER BY seq`, [nodeId, externalRef]),
  /**
   * The position just before the node's first event recorded at or after `time` (a cursor for "since"), on the (node,
   * time) index. PostgreSQL: "first" in cursor order, (tx, seq), which is not quite time order when writes overlap:
   * the lowest position among the events of the first SINCE_WINDOW_MS from `time` and the first event after it (an
   * event of that window in a transaction that began before the first one's is not skipped).
   */
  positionBefore: async (q: Sql, nodeId: string, time: number): Promise<EventPosition | undefined> => {
    if (q.dialect === 'postgres') {
      const r = await q.get<{ seq: number; xact: string }>(`SELECT seq, CAST(tx AS TEXT) AS xact FROM (
          (SELECT seq, tx FROM events WHERE node_id = @node AND occurred_at >= @time ORDER BY occurred_at, seq LIMIT 1)
          UNION ALL
          (SELECT seq, tx FROM events WHERE node_id = @node AND occurred_at >= @time AND occurred_at < @until)
        ) e ORDER BY tx, seq LIMIT 1`, { node: nodeId, time, until: time + SINCE_WINDOW_MS });
      return r === undefined ? undefined : { tx: r.xact, seq: Number(r.seq) - 1 };
    }
    const seq = await q.value<number>('SELECT seq FROM events WHERE node_id = ? AND occurred_at >= ? ORDER BY occurred_at, seq LIMIT 1', [nodeId, time]);
    return seq === undefined ? undefined : { tx: null, seq: Number(seq) - 1 };
  },
  /** The node's newest position served (START: none). */
  lastPosition: async (q: Sql, nodeId: string): Promise<EventPosition> => {
    if (q.dialect === 'postgres') {
      const r = await q.get<{ seq: number; xact: string }>(`SELECT seq, CAST(tx AS TEXT) AS xact FROM events WHERE node_id = ? AND ${VISIBLE} ORDER BY tx DESC, seq DESC LIMIT 1`, [nodeId]);
      return r ? { tx: r.xact, seq: Number(r.seq) } : START;
    }
    return { tx: null, seq: (await q.value<number | null>('SELECT MAX(seq) AS s FROM events WHERE node_id = ?', [nodeId])) ?? 0 };
  },
  /** PostgreSQL: the writing transaction of the node's event `seq` (a cursor given out before positions had one). */
  txOf: (q: Sql, nodeId: string, seq: number) => q.value<string>('SELECT CAST(tx AS TEXT) FROM events WHERE node_id = ? AND seq = ?', [nodeId, seq]),
};
