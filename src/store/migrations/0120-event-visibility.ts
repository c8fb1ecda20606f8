import type { Migration } from './index.js';

const m: Migration = {
  version: 120,
  name: 'events carry their writing transaction (PostgreSQL: cursors never skip a late commit without a global write lock)',
  // SQLite has one writer: events commit in seq order, the seq alone is the cursor. Nothing to change.
  up() {},
  postgres: `
    -- Writes are no longer serialised database-wide, so a lower seq can commit after a higher one. Each event records
    -- the transaction that wrote it; GET /v1/events orders by (tx, seq) and serves only tx below the oldest transaction
    -- still in flight (pg_snapshot_xmin): whatever commits later has a tx at or above that, so it sorts after every
    -- cursor already given out. Events written before this step share the migration's transaction, in seq order.
    ALTER TABLE events ADD COLUMN tx xid8 NOT NULL DEFAULT pg_current_xact_id();
    DROP INDEX events_node;
    DROP INDEX events_node_type;
    CREATE INDEX events_node ON events(node_id, tx, seq);
    CREATE INDEX events_node_type ON events(node_id, type, tx, seq);
  `,
};
export default m;
