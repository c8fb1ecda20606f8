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
export function pruneDeliveries(db: Db, horizon: number, after: number, limit: number): Batch {
  return unsynced(db, () => {
    const rows = stmt(db, `SELECT rowid AS r, id, created_at < ? AS old,
      status IN ('delivered', 'cancelled') AND (delivered_at IS NULL OR delivered_at < ?) AS finished
      FROM deliveries WHERE rowid > ? ORDER BY rowid LIMIT ?`).all(horizon, horizon, after, limit) as Array<{ r: number; id: string; old: number; finished: number }>;
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
      const list = JSON.stringify(drop);
      attempts = stmt(db, 'DELETE FROM delivery_attempts WHERE delivery_id IN (SELECT value FROM json_each(?))').run(list).changes;
      deliveries = stmt(db, "DELETE FROM deliveries WHERE id IN (SELECT value FROM json_each(?)) AND status IN ('delivered', 'cancelled')").run(list).changes;
    }
    return { deliveries, attempts, events: 0, last, done };
  });
}

/**
 * One batch of events after `afterSeq` in seq order (at most `limit` looked at): those that occurred before
 * `horizon` and that no delivery points at are deleted. Returns the last seq looked at (the next cursor) and
 * `done` once an event at or after the horizon (or the end) is reached.
 */
export function pruneEvents(db: Db, horizon: number, afterSeq: number, limit: number): Batch {
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
    return { deliveries: 0, attempts: 0, events, last: lastSeq, done };
  });
}
