// The transactional outbox: the only SQL that writes or reads events.
import { envelopeBody, type EventKind } from '../domain/events.js';
import { newId } from '../domain/ids.js';
import { iso } from '../domain/time.js';
import type { Sql } from './sql.js';
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
 * Call inside the write of the state change that caused it: all of it commits, or none. The seq comes from the
 * database, in commit order (writes are serialised, whichever daemon makes them).
 */
export async function recordEvent(tx: Sql, nodeId: string, type: EventKind, externalRef: string, data: Record<string, unknown>, now = Date.now()): Promise<RecordedEvent> {
  const id = newId('evt');
  const base = { id, type, occurredAt: iso(now), externalRef, data };
  // Stored once: the 1.0.0 envelope (body_v100) is a generated column (migration 0090).
  const body = envelopeBody(base, '1.1.0');
  const seq = await tx.value<number>('INSERT INTO events(id, node_id, type, external_ref, occurred_at, body) VALUES (?, ?, ?, ?, ?, ?) RETURNING seq',
    [id, nodeId, type, externalRef, now, body]);
  const e = { seq: Number(seq), id, type, externalRef, occurredAt: now };
  for (const sub of await subscriptions.activeForNode(tx, nodeId)) if (matches(sub, type)) await deliveries.insert(tx, e.seq, sub.id, now);
  for (const w of wakers) w();
  return e;
}

export interface EventRow { seq: number; id: string; node_id: string; type: EventKind; external_ref: string; occurred_at: number; body: string }

// Not `*`: body_v100 is computed when read (a generated column), and these reads only need the 1.1.0 body.
const COLUMNS = 'seq, id, node_id, type, external_ref, occurred_at, body';

export const events = {
  get: (q: Sql, nodeId: string, id: string) => q.get<EventRow>(`SELECT ${COLUMNS} FROM events WHERE node_id = ? AND id = ?`, [nodeId, id]),
  /** The node's events after `afterSeq`, oldest first (by type: on the (node, type, seq) index). */
  page: (q: Sql, nodeId: string, afterSeq: number, limit: number, type?: string) =>
    type
      ? q.all<EventRow>(`SELECT ${COLUMNS} FROM events WHERE node_id = ? AND seq > ? AND type = ? ORDER BY seq LIMIT ?`, [nodeId, afterSeq, type, limit])
      : q.all<EventRow>(`SELECT ${COLUMNS} FROM events WHERE node_id = ? AND seq > ? ORDER BY seq LIMIT ?`, [nodeId, afterSeq, limit]),
  /** Tests and tools (not a run-time path): walks the node's events. */
  forRef: (q: Sql, nodeId: string, externalRef: string) =>
    q.all<EventRow>(`SELECT ${COLUMNS} FROM events WHERE node_id = ? AND external_ref = ? ORDER BY seq`, [nodeId, externalRef]),
  /** The seq just before the node's first event recorded at or after `time` (a cursor for "since"), on the (node, time) index. */
  seqBefore: async (q: Sql, nodeId: string, time: number) => {
    const seq = await q.value<number>('SELECT seq FROM events WHERE node_id = ? AND occurred_at >= ? ORDER BY occurred_at, seq LIMIT 1', [nodeId, time]);
    return seq === undefined ? undefined : seq - 1;
  },
  /** The node's newest seq (0: none). */
  lastSeq: async (q: Sql, nodeId: string) => (await q.value<number | null>('SELECT MAX(seq) AS s FROM events WHERE node_id = ?', [nodeId])) ?? 0,
};
