// The transactional outbox: the only SQL that writes or reads events.
import { envelopeBody, kindInVersion, type EventKind } from '../domain/events.js';
import { newId } from '../domain/ids.js';
import { iso } from '../domain/time.js';
import type { Db } from './db.js';

export interface RecordedEvent {
  seq: number;
  id: string;
  type: EventKind;
  externalRef: string;
  occurredAt: number;
}

/** Hooks run inside the recording transaction (the webhook fan-out writes its delivery rows here). */
type FanOut = (db: Db, nodeId: string, e: RecordedEvent) => void;
const fanOuts: FanOut[] = [];
export const onEventRecorded = (f: FanOut) => { fanOuts.push(f); };

/** Record one event; call inside the transaction of the state change that caused it. */
export function recordEvent(db: Db, nodeId: string, type: EventKind, externalRef: string, data: Record<string, unknown>, now = Date.now()): RecordedEvent {
  const id = newId('evt');
  const base = { id, type, occurredAt: iso(now), externalRef, data };
  const body = envelopeBody(base, '1.1.0');
  const bodyV100 = kindInVersion(type, '1.0.0') ? envelopeBody(base, '1.0.0') : null;
  const info = db
    .prepare('INSERT INTO events(id, node_id, type, external_ref, occurred_at, body, body_v100) VALUES (?, ?, ?, ?, ?, ?, ?)')
    .run(id, nodeId, type, externalRef, now, body, bodyV100);
  const e = { seq: Number(info.lastInsertRowid), id, type, externalRef, occurredAt: now };
  for (const f of fanOuts) f(db, nodeId, e);
  return e;
}

export interface EventRow { seq: number; id: string; node_id: string; type: EventKind; external_ref: string; occurred_at: number; body: string; body_v100: string | null }

export const events = {
  get: (db: Db, nodeId: string, id: string) => db.prepare('SELECT * FROM events WHERE node_id = ? AND id = ?').get(nodeId, id) as EventRow | undefined,
  /** The node's events after `afterSeq`, oldest first. */
  page: (db: Db, nodeId: string, afterSeq: number, limit: number, type?: string) =>
    (type
      ? db.prepare('SELECT * FROM events WHERE node_id = ? AND seq > ? AND type = ? ORDER BY seq LIMIT ?').all(nodeId, afterSeq, type, limit)
      : db.prepare('SELECT * FROM events WHERE node_id = ? AND seq > ? ORDER BY seq LIMIT ?').all(nodeId, afterSeq, limit)) as EventRow[],
  forRef: (db: Db, nodeId: string, externalRef: string) =>
    db.prepare('SELECT * FROM events WHERE node_id = ? AND external_ref = ? ORDER BY seq').all(nodeId, externalRef) as EventRow[],
};
