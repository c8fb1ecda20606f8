// Retention: the only SQL that deletes history. What it may delete, and nothing else:
//   - deliveries that were delivered (or cancelled when their subscription was deleted) before the horizon,
//     and their attempts;
//   - events that occurred before the horizon and that no delivery row points at any more (so never the event
//     of a delivery still pending, retrying or dead).
// Never streams, vouchers (billed truth), settlements, revocations, budgets, control facts, periods, keys or tokens.
import type { Sql } from './sql.js';
import { placeholders } from './webhooks.js';

export interface PruneCount {
  deliveries: number;
  attempts: number;
  events: number;
}

export interface Batch {
  /** Rows deleted. */
  deliveries: number;
  attempts: number;
  events: number;
  /** The last rowid (deliveries) or seq (events) looked at: where the next batch starts. */
  last: number;
  /** An old-enough row was not reached in this batch (or the table ended): the walk is over. */
  done: boolean;
}

/**
 * One batch of deliveries after rowid `after` in insertion order (at most `limit` looked at, no index of its
 * own needed): those delivered or cancelled, created and finished before `horizon`, are deleted with their
 * attempts. Done once a delivery created at or after the horizon (or the end) is reached.
 */
export async function pruneDeliveries(tx: Sql, horizon: number, after: number, limit: number): Promise<Batch> {
  {
    const rows = await tx.all<{ r: number; id: string; old: number; finished: number }>(`SELECT rowid AS r, id, CASE WHEN created_at < ? THEN 1 ELSE 0 END AS old,
      CASE WHEN status IN ('delivered', 'cancelled') AND (delivered_at IS NULL OR delivered_at < ?) THEN 1 ELSE 0 END AS finished
      FROM deliveries WHERE rowid > ? ORDER BY rowid LIMIT ?`, [horizon, horizon, after, limit]);
    const drop: string[] = [];
    let last = after;
    let done = rows.length < limit;
    for (const x of rows) {
      if (!x.old) { done = true; break; } // deliveries are written in time order: the rest are newer
      last = x.r;
      if (x.finished) drop.push(x.id);
    }
    let attempts = 0;
    let deliveries = 0;
    if (drop.length) {
      attempts = await tx.run(`DELETE FROM delivery_attempts WHERE delivery_id IN (${placeholders(drop.length)})`, drop);
      deliveries = await tx.run(`DELETE FROM deliveries WHERE id IN (${placeholders(drop.length)}) AND status IN ('delivered', 'cancelled')`, drop);
    }
    return { deliveries, attempts, events: 0, last, done };
  }
}

/**
 * One batch of events after `afterSeq` in seq order (at most `limit` looked at): those that occurred before
 * `horizon` and that no delivery points at are deleted. Returns the last seq looked at (the next cursor) and
 * `done` once an event at or after the horizon (or the end) is reached.
 */
export async function pruneEvents(tx: Sql, horizon: number, afterSeq: number, limit: number): Promise<Batch> {
  {
    const rows = await tx.all<{ seq: number; old: number; held: number }>(`SELECT e.seq, CASE WHEN e.occurred_at < ? THEN 1 ELSE 0 END AS old,
      CASE WHEN EXISTS (SELECT 1 FROM deliveries d WHERE d.event_seq = e.seq) THEN 1 ELSE 0 END AS held
      FROM events e WHERE e.seq > ? ORDER BY e.seq LIMIT ?`, [horizon, afterSeq, limit]);
    const drop: number[] = [];
    let lastSeq = afterSeq;
    let done = rows.length < limit;
    for (const r of rows) {
      if (!r.old) { done = true; break; } // events are recorded in time order: the rest are newer
      lastSeq = r.seq;
      if (!r.held) drop.push(r.seq);
    }
    const events = drop.length
      ? await tx.run(`DELETE FROM events WHERE seq IN (${placeholders(drop.length)}) AND NOT EXISTS (SELECT 1 FROM deliveries d WHERE d.event_seq = events.seq)`, drop)
      : 0;
    return { deliveries: 0, attempts: 0, events, last: lastSeq, done };
  }
}
