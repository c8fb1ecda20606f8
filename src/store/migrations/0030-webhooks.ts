import type { Migration } from './index.js';

const m: Migration = {
  version: 30,
  name: 'webhook subscriptions, deliveries (outbox fan-out), attempts',
  up(db) {
    db.exec(`
      -- The secret is kept: every delivery is signed with it (HMAC needs the key). The file is 0600.
      CREATE TABLE webhook_subscriptions (
        id TEXT PRIMARY KEY,
        node_id TEXT NOT NULL REFERENCES nodes(id),
        url TEXT NOT NULL,
        events TEXT NOT NULL,
        schema_version TEXT NOT NULL CHECK (schema_version IN ('1.0.0', '1.1.0')),
        description TEXT,
        status TEXT NOT NULL CHECK (status IN ('active', 'disabled', 'deleted')),
        disabled_reason TEXT,
        secret TEXT NOT NULL,
        previous_secret TEXT,
        previous_secret_expires_at INTEGER,
        created_at INTEGER NOT NULL,
        updated_at INTEGER NOT NULL,
        last_success_at INTEGER,
        failing_since INTEGER
      ) STRICT;
      CREATE INDEX webhook_subscriptions_node ON webhook_subscriptions(node_id, status);

      -- One row per (event, subscription), written in the transaction that records the event.
      -- A claimed row is leased by moving next_attempt_at past now: a crash lets the lease run out and it is due again.
      CREATE TABLE deliveries (
        id TEXT PRIMARY KEY,
        event_seq INTEGER NOT NULL REFERENCES events(seq),
        subscription_id TEXT NOT NULL REFERENCES webhook_subscriptions(id),
        status TEXT NOT NULL CHECK (status IN ('pending', 'delivered', 'dead', 'cancelled')),
        attempts INTEGER NOT NULL DEFAULT 0,
        next_attempt_at INTEGER NOT NULL,
        created_at INTEGER NOT NULL,
        delivered_at INTEGER,
        last_status INTEGER,
        last_error TEXT
      ) STRICT;
      CREATE INDEX deliveries_due ON deliveries(next_attempt_at) WHERE status = 'pending';
      CREATE INDEX deliveries_subscription ON deliveries(subscription_id, status);
      CREATE INDEX deliveries_event ON deliveries(event_seq);

      CREATE TABLE delivery_attempts (
        id TEXT PRIMARY KEY,
        delivery_id TEXT NOT NULL REFERENCES deliveries(id),
        subscription_id TEXT NOT NULL,
        event_seq INTEGER NOT NULL,
        attempt INTEGER NOT NULL,
        attempted_at INTEGER NOT NULL,
        duration_ms INTEGER NOT NULL,
        status_code INTEGER,
        error TEXT,
        outcome TEXT NOT NULL CHECK (outcome IN ('delivered', 'failed', 'gone')),
        next_attempt_at INTEGER
      ) STRICT;
      CREATE INDEX delivery_attempts_subscription ON delivery_attempts(subscription_id, attempted_at);
    `);
  },
};
export default m;
