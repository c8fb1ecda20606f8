// The transactional outbox: the only SQL that writes or reads events.
import { envelopeBody, type EventKind } from '../domain/events.js';
import { newId } from '../domain/ids.js';
import { iso } from '../domain/time.js';
import { stmt, type Db } from './db.js';
import { deliveries, matches, subscriptions } from './webhooks.js';

/** Called after each recorded event so the delivery worker wakes at once (it claims after the commit). */
const wakers = new Set<() => void>();
export const onEventRecorded = (wake: () => void): (() => void) => {
  wakers.add(wake);
  return () => wakers.delete(wake);
};

export interface RecordedEvent {
  seq: number;
  id: string;
  type: EventKind;
  externalRef: string;
  occurredAt: number;
}

/**
 * Record one event and fan it out to one pending delivery per active matching subscription of the node.
 * Call inside the transaction of the state change that caused it: all of it commits, or none.
 */
export function recordEvent(db: Db, nodeId: string, type: EventKind, externalRef: string, data: Record<string, unknown>, now = Date.now()): RecordedEvent {
  const id = newId('evt');
  const base = { id, type, occurredAt: iso(now), externalRef, data };
  // Stored once: the 1.0.0 envelope (body_v100) is a generated column (migration 0090).
  const body = envelopeBody(base, '1.1.0');
  const info = stmt(db, 'INSERT INTO events(id, node_id, type, external_ref, occurred_at, body) VALUES (?, ?, ?, ?, ?, ?)')
    .run(id, nodeId, type, externalRef, now, body);
  const e = { seq: Number(info.lastInsertRowid), id, type, externalRef, occurredAt: now };
  for (const sub of subscriptions.activeForNode(db, nodeId)) if (matches(sub, type)) deliveries.insert(db, e.seq, sub.id, now);
  for (const w of wakers) w();
  return e;
}

export interface EventRow { seq: number; id: string; node_id: string; type: EventKind; external_ref: string; occurred_at: number; body: string }

// Not `*`: body_v100 is computed when read (a generated column), and these reads only need the 1.1.0 body.
const COLUMNS = 'seq, id, node_id, type, external_ref, occurred_at, body';

export const events = {
  get: (db: Db, nodeId: string, id: string) => stmt(db, `SELECT ${COLUMNS} FROM events WHERE node_id = ? AND id = ?`).get(nodeId, id) as EventRow | undefined,
  /** The node's events after `afterSeq`, oldest first (by type: on the (node, type, seq) index). */
  page: (db: Db, nodeId: string, afterSeq: number, limit: number, type?: string) =>
    (type
      ? stmt(db, `SELECT ${COLUMNS} FROM events WHERE node_id = ? AND seq > ? AND type = ? ORDER BY seq LIMIT ?`).all(nodeId, afterSeq, type, limit)
      : stmt(db, `SELECT ${COLUMNS} FROM events WHERE node_id = ? AND seq > ? ORDER BY seq LIMIT ?`).all(nodeId, afterSeq, limit)) as EventRow[],
  /** Tests and tools (not a run-time path): walks the node's events. */
  forRef: (db: Db, nodeId: string, externalRef: string) =>
    stmt(db, `SELECT ${COLUMNS} FROM events WHERE node_id = ? AND external_ref = ? ORDER BY seq`).all(nodeId, externalRef) as EventRow[],
  /** The seq just before the node's first event recorded at or after `time` (a cursor for "since"), on the (node, time) index. */
  seqBefore: (db: Db, nodeId: string, time: number) => {
    const r = stmt(db, 'SELECT seq FROM events WHERE node_id = ? AND occurred_at >= ? ORDER BY occurred_at, seq LIMIT 1').get(nodeId, time) as { seq: number } | undefined;
    return r ? r.seq - 1 : undefined;
  },
  /** The node's newest seq (0: none). */
  lastSeq: (db: Db, nodeId: string) => (stmt(db, 'SELECT MAX(seq) AS s FROM events WHERE node_id = ?').get(nodeId) as { s: number | null }).s ?? 0,
};
