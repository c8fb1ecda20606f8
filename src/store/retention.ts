// Retention: the only SQL that deletes history. What it may delete, and nothing else:
//   - deliveries that were delivered (or cancelled when their subscription was deleted) before the horizon,
//     and their attempts;
//   - events that occurred before the horizon and that no delivery row points at any more (so never the event
//     of a delivery still pending, retrying or dead).
// Never streams, vouchers (billed truth), settlements, revocations, budgets, control facts, periods, keys or tokens.
import { stmt, type Db } from './db.js';

/**
 * Pruning needs no fsync of its own: a prune lost in a crash is simply done again, and the next durable commit
 * (synchronous=FULL) syncs the WAL with it. Without the fsync a batch holds the store for its CPU time only.
 */
function unsynced<T>(db: Db, fn: () => T): T {
  db.pragma('synchronous = NORMAL');
  try {
    return db.transaction(fn).immediate();
  } finally {
    db.pragma('synchronous = FULL');
  }
}

export interface PruneCount {
  deliveries: number;
  attempts: number;
  events: number;
}

/**
 * One batch of finished deliveries (and their attempts) created and finished before `horizon`, oldest first,
 * at most `limit`, in one transaction. Walks the partial index of finished deliveries: cost ∝ `limit`.
 */
export function pruneDeliveries(db: Db, horizon: number, limit: number): PruneCount {
  return unsynced(db, () => {
    const ids = (stmt(db, `SELECT id FROM deliveries WHERE status IN ('delivered', 'cancelled') AND created_at < ?
      AND (delivered_at IS NULL OR delivered_at < ?) ORDER BY created_at LIMIT ?`).all(horizon, horizon, limit) as Array<{ id: string }>).map((r) => r.id);
    if (!ids.length) return { deliveries: 0, attempts: 0, events: 0 };
    const list = JSON.stringify(ids);
    const a = stmt(db, 'DELETE FROM delivery_attempts WHERE delivery_id IN (SELECT value FROM json_each(?))').run(list).changes;
    const d = stmt(db, "DELETE FROM deliveries WHERE id IN (SELECT value FROM json_each(?)) AND status IN ('delivered', 'cancelled')").run(list).changes;
    return { deliveries: d, attempts: a, events: 0 };
  });
}

/**
 * One batch of events after `afterSeq` in seq order (at most `limit` looked at): those that occurred before
 * `horizon` and that no delivery points at are deleted. Returns the last seq looked at (the next cursor) and
 * `done` once an event at or after the horizon (or the end) is reached.
 */
export function pruneEvents(db: Db, horizon: number, afterSeq: number, limit: number): { events: number; lastSeq: number; done: boolean } {
  return unsynced(db, () => {
    const rows = stmt(db, `SELECT e.seq, e.occurred_at < ? AS old, EXISTS (SELECT 1 FROM deliveries d WHERE d.event_seq = e.seq) AS held
      FROM events e WHERE e.seq > ? ORDER BY e.seq LIMIT ?`).all(horizon, afterSeq, limit) as Array<{ seq: number; old: number; held: number }>;
    const drop: number[] = [];
    let lastSeq = afterSeq;
    let done = rows.length < limit;
    for (const r of rows) {
      if (!r.old) { done = true; break; } // events are recorded in time order: the rest are newer
      lastSeq = r.seq;
      if (!r.held) drop.push(r.seq);
    }
    const events = drop.length
      ? stmt(db, 'DELETE FROM events WHERE seq IN (SELECT value FROM json_each(?)) AND NOT EXISTS (SELECT 1 FROM deliveries d WHERE d.event_seq = events.seq)').run(JSON.stringify(drop)).changes
      : 0;
    return { events, lastSeq, done };
  });
}
