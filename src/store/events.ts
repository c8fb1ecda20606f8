// The transactional outbox: the only SQL that writes or reads events.
import { envelopeBody, kindInVersion, type EventKind } from '../domain/events.js';
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
  const body = envelopeBody(base, '1.1.0');
  const bodyV100 = kindInVersion(type, '1.0.0') ? envelopeBody(base, '1.0.0') : null;
  const info = stmt(db, 'INSERT INTO events(id, node_id, type, external_ref, occurred_at, body, body_v100) VALUES (?, ?, ?, ?, ?, ?, ?)')
    .run(id, nodeId, type, externalRef, now, body, bodyV100);
  const e = { seq: Number(info.lastInsertRowid), id, type, externalRef, occurredAt: now };
  for (const sub of subscriptions.activeForNode(db, nodeId)) if (matches(sub, type)) deliveries.insert(db, e.seq, sub.id, now);
  for (const w of wakers) w();
  return e;
}

export interface EventRow { seq: number; id: string; node_id: string; type: EventKind; external_ref: string; occurred_at: number; body: string; body_v100: string | null }

export const events = {
  get: (db: Db, nodeId: string, id: string) => stmt(db, 'SELECT * FROM events WHERE node_id = ? AND id = ?').get(nodeId, id) as EventRow | undefined,
  /** The node's events after `afterSeq`, oldest first. */
  page: (db: Db, nodeId: string, afterSeq: number, limit: number, type?: string) =>
    (type
      ? stmt(db, 'SELECT * FROM events WHERE node_id = ? AND seq > ? AND type = ? ORDER BY seq LIMIT ?').all(nodeId, afterSeq, type, limit)
      : stmt(db, 'SELECT * FROM events WHERE node_id = ? AND seq > ? ORDER BY seq LIMIT ?').all(nodeId, afterSeq, limit)) as EventRow[],
  forRef: (db: Db, nodeId: string, externalRef: string) =>
    stmt(db, 'SELECT * FROM events WHERE node_id = ? AND external_ref = ? ORDER BY seq').all(nodeId, externalRef) as EventRow[],
};
