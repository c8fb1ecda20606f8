import type { Migration } from './index.js';

// The owner of alert endpoints and operational events (domain/alerts.ts OPERATOR): not a valid node id.
const OPERATOR_ROW = "INSERT INTO nodes(id, created_at) VALUES ('@operator', 0) ON CONFLICT(id) DO NOTHING;";

const m: Migration = {
  version: 150,
  name: 'operational alerts: the operator channel, open alert conditions, consecutive failures per subscription',
  up(db) {
    db.exec(`
      ${OPERATOR_ROW}
      -- One row per condition raised and not yet recovered (key: the thing it is about, e.g. endpoint:whk_…). A
      -- transition is the conditional insert (or delete) of its row, in the transaction that records its event: it
      -- is emitted once, across restarts and by one daemon of several sharing a store.
      CREATE TABLE alert_states (
        key TEXT PRIMARY KEY,
        kind TEXT NOT NULL,
        node_id TEXT,
        since INTEGER NOT NULL
      ) STRICT;
      -- Failed attempts since the subscription's last success (endpoint.failing at --alert-failing-after).
      ALTER TABLE webhook_subscriptions ADD COLUMN consecutive_failures INTEGER NOT NULL DEFAULT 0;
    `);
  },
  postgres: `
    ${OPERATOR_ROW}
    CREATE TABLE alert_states (
      key TEXT PRIMARY KEY,
      kind TEXT NOT NULL,
      node_id TEXT,
      since BIGINT NOT NULL
    );
    ALTER TABLE webhook_subscriptions ADD COLUMN consecutive_failures BIGINT NOT NULL DEFAULT 0;
  `,
};
export default m;
