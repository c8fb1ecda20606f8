import type { Migration } from './index.js';

// Migration 0090's body_v100 (an event's 1.0.0 envelope) is a STORED generated column on PostgreSQL (PostgreSQL 15 has
// no virtual ones): every event's body was computed again and written twice, WAL included. The delivery claim now
// makes a 1.0.0 subscription's envelope from the stored body (domain/events.ts bodyV100, the same bytes), and the
// column goes on both databases (the same columns on both: test/store/postgres.test.ts). SQLite's was VIRTUAL (never
// stored): dropping it rewrites nothing.
const m: Migration = {
  version: 200,
  name: 'events: one stored body per event (the 1.0.0 envelope made when a delivery is claimed)',
  up(db) {
    db.exec('ALTER TABLE events DROP COLUMN body_v100');
  },
  postgres: `
    ALTER TABLE events DROP COLUMN body_v100;
  `,
};
export default m;
