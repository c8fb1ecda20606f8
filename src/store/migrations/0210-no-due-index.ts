import type { Migration } from './index.js';

// deliveries_due (next_attempt_at, of pending rows) was the queue's index when claims read the oldest due rows of all
// subscriptions at once. Claims now read each subscription's own range of deliveries_subscription_due (migration 0070),
// and the two reads left on it — the daemon's start (releaseStaleLeases) and /healthz's oldest pending delivery — both
// read every pending row anyway, which deliveries_subscription_due holds as well. Yet it was written four times per
// delivery: the fan-out insert, the claim (next_attempt_at moves), a retry's reschedule, and the delivered update (the
// row leaves the pending set). bench/delivery's store cost per delivery (record, claim, attempt; one process, no HTTP):
// 122-146 µs with it, 109-124 µs without it, same run alternated.
const m: Migration = {
  version: 210,
  name: 'deliveries: the all-subscriptions due index dropped (claims read per subscription)',
  up(db) {
    db.exec('DROP INDEX deliveries_due');
  },
  postgres: 'DROP INDEX deliveries_due',
};
export default m;
