import type { Migration } from './index.js';

// Every delivery is written three times (fan-out insert, claim, recorded attempt). An insert writes every index of
// `deliveries`; an update, on SQLite the indexes whose columns it changes, on PostgreSQL all of them unless the update
// is HOT. Two indexes no read needs (bench/delivery timed each statement of the worker: the insert 29 µs, the
// delivered update 28 µs):
// - deliveries_event (event_seq) is the prefix of deliveries_event_subscription (event_seq, subscription_id,
//   created_at), which serves every read by event (retention's "held" test, replay, alerts test);
// - deliveries_subscription (subscription_id, status) moved on every status change. The reads by subscription and
//   status are all of pending rows and use the partial indexes deliveries_subscription_due and
//   deliveries_redelivery_pending; the counts per subscription and state are kept in delivery_counts.
// test/store/history.test.ts holds every statement run in its tests to a plan that neither scans nor sorts a growing table.
const m: Migration = {
  version: 190,
  name: 'deliveries: two indexes no read uses dropped (fewer index writes per delivery)',
  up(db) {
    db.exec(`
      DROP INDEX deliveries_event;
      DROP INDEX deliveries_subscription;
    `);
  },
  postgres: `
    DROP INDEX deliveries_event;
    DROP INDEX deliveries_subscription;
  `,
};
export default m;
