import type { Migration } from './index.js';

// A delivery's health bucket: pending (never failed yet, in flight included), retrying (failed at least once),
// or its final status. Shared by the counters' backfill and their triggers.
export const STATE = (r: string) => `CASE WHEN ${r}.status = 'pending' THEN CASE WHEN ${r}.last_error IS NULL THEN 'pending' ELSE 'retrying' END ELSE ${r}.status END`;
const ENVELOPE_V110 = `'"schemaVersion":"1.1.0"'`;

const m: Migration = {
  version: 90,
  name: 'cost that does not grow with history: indexes per access path, counters, one envelope body per event',
  up(db) {
    db.exec(`
      -- Restart after an outage: the claims a previous run made and never recorded are attempts > recorded_attempts,
      -- a per-row comparison instead of a count of attempts per pending delivery.
      ALTER TABLE deliveries ADD COLUMN recorded_attempts INTEGER NOT NULL DEFAULT 0;
      CREATE INDEX delivery_attempts_delivery ON delivery_attempts(delivery_id);
      UPDATE deliveries SET recorded_attempts = (SELECT COUNT(*) FROM delivery_attempts a WHERE a.delivery_id = deliveries.id) WHERE status = 'pending';

      -- The attempts page walks a subscription's attempts newest first in insertion order: (subscription_id) and
      -- the rowid the index carries, no sort of all of them (and 8 bytes less per attempt than with attempted_at).
      DROP INDEX delivery_attempts_subscription;
      CREATE INDEX delivery_attempts_subscription ON delivery_attempts(subscription_id);

      -- Events by type and events since a time (retention walks events by seq, their primary key).
      CREATE INDEX events_node_type ON events(node_id, type, seq);
      CREATE INDEX events_node_time ON events(node_id, occurred_at);

      -- Per-subscription delivery counts by health bucket, kept by triggers in the transaction that changes a
      -- delivery: the deliveries API health and the outbox gauges read these rows, never the history.
      CREATE TABLE delivery_counts (
        subscription_id TEXT NOT NULL,
        state TEXT NOT NULL, -- pending, retrying, delivered, dead, cancelled (no CHECK: a status added later is counted, not refused)
        n INTEGER NOT NULL,
        PRIMARY KEY (subscription_id, state)
      ) STRICT, WITHOUT ROWID;
      INSERT INTO delivery_counts(subscription_id, state, n) SELECT d.subscription_id, ${STATE('d')}, COUNT(*) FROM deliveries d GROUP BY 1, 2;
      CREATE TRIGGER deliveries_count_insert AFTER INSERT ON deliveries BEGIN
        INSERT INTO delivery_counts(subscription_id, state, n) VALUES (NEW.subscription_id, ${STATE('NEW')}, 1)
          ON CONFLICT(subscription_id, state) DO UPDATE SET n = n + 1;
      END;
      CREATE TRIGGER deliveries_count_update AFTER UPDATE OF status, last_error ON deliveries WHEN ${STATE('OLD')} IS NOT ${STATE('NEW')} BEGIN
        UPDATE delivery_counts SET n = n - 1 WHERE subscription_id = OLD.subscription_id AND state = ${STATE('OLD')};
        INSERT INTO delivery_counts(subscription_id, state, n) VALUES (NEW.subscription_id, ${STATE('NEW')}, 1)
          ON CONFLICT(subscription_id, state) DO UPDATE SET n = n + 1;
      END;
      CREATE TRIGGER deliveries_count_delete AFTER DELETE ON deliveries BEGIN
        UPDATE delivery_counts SET n = n - 1 WHERE subscription_id = OLD.subscription_id AND state = ${STATE('OLD')};
      END;

      -- Streams whose billed truth is above their final amount, kept by triggers (the /metrics gauge).
      CREATE TABLE store_gauges (name TEXT PRIMARY KEY, n INTEGER NOT NULL) STRICT, WITHOUT ROWID;
      INSERT INTO store_gauges(name, n) VALUES ('unsettled_streams', (SELECT COUNT(*) FROM streams WHERE billed_micro > final_micro));
      CREATE TRIGGER streams_unsettled_insert AFTER INSERT ON streams WHEN NEW.billed_micro > NEW.final_micro BEGIN
        UPDATE store_gauges SET n = n + 1 WHERE name = 'unsettled_streams';
      END;
      CREATE TRIGGER streams_unsettled_update AFTER UPDATE OF billed_micro, final_micro ON streams
        WHEN (OLD.billed_micro > OLD.final_micro) IS NOT (NEW.billed_micro > NEW.final_micro) BEGIN
        UPDATE store_gauges SET n = n + CASE WHEN NEW.billed_micro > NEW.final_micro THEN 1 ELSE -1 END WHERE name = 'unsettled_streams';
      END;
      CREATE TRIGGER streams_unsettled_delete AFTER DELETE ON streams WHEN OLD.billed_micro > OLD.final_micro BEGIN
        UPDATE store_gauges SET n = n - 1 WHERE name = 'unsettled_streams';
      END;

      -- One envelope body per event: the 1.0.0 envelope differs from the 1.1.0 one only in its schemaVersion
      -- (the third key, so its first occurrence), and is computed when read. NULL for the kinds added in 1.1.0.
      ALTER TABLE events DROP COLUMN body_v100;
      ALTER TABLE events ADD COLUMN body_v100 TEXT GENERATED ALWAYS AS (
        CASE WHEN type IN ('subscription.period_opened', 'subscription.renewal_declined', 'subscription.closed') OR instr(body, ${ENVELOPE_V110}) = 0 THEN NULL
        ELSE substr(body, 1, instr(body, ${ENVELOPE_V110}) - 1) || '"schemaVersion":"1.0.0"' || substr(body, instr(body, ${ENVELOPE_V110}) + 23) END
      ) VIRTUAL;
    `);
  },
  postgres: `
    ALTER TABLE deliveries ADD COLUMN recorded_attempts BIGINT NOT NULL DEFAULT 0;
    CREATE INDEX delivery_attempts_delivery ON delivery_attempts(delivery_id);
    -- (SQLite's backfill of recorded_attempts has nothing to do on a new database.)

    -- The attempts page walks (subscription_id, rowid) backwards: SQLite's index carries the rowid, here it is named.
    DROP INDEX delivery_attempts_subscription;
    CREATE INDEX delivery_attempts_subscription ON delivery_attempts(subscription_id, rowid);

    CREATE INDEX events_node_type ON events(node_id, type, seq);
    CREATE INDEX events_node_time ON events(node_id, occurred_at);

    CREATE TABLE delivery_counts (
      subscription_id TEXT NOT NULL,
      state TEXT NOT NULL,
      n BIGINT NOT NULL,
      PRIMARY KEY (subscription_id, state)
    );
    INSERT INTO delivery_counts(subscription_id, state, n) SELECT d.subscription_id, ${STATE('d')}, COUNT(*) FROM deliveries d GROUP BY 1, 2;
    -- SQLite's three triggers: one function, the update trigger fired under the same WHEN.
    CREATE FUNCTION deliveries_count() RETURNS trigger LANGUAGE plpgsql AS $$
    BEGIN
      IF TG_OP <> 'INSERT' THEN
        UPDATE delivery_counts SET n = n - 1 WHERE subscription_id = OLD.subscription_id AND state = ${STATE('OLD')};
      END IF;
      IF TG_OP <> 'DELETE' THEN
        INSERT INTO delivery_counts(subscription_id, state, n) VALUES (NEW.subscription_id, ${STATE('NEW')}, 1)
          ON CONFLICT(subscription_id, state) DO UPDATE SET n = delivery_counts.n + 1;
      END IF;
      RETURN NULL;
    END $$;
    CREATE TRIGGER deliveries_count_insert AFTER INSERT ON deliveries FOR EACH ROW EXECUTE FUNCTION deliveries_count();
    CREATE TRIGGER deliveries_count_update AFTER UPDATE OF status, last_error ON deliveries FOR EACH ROW
      WHEN (${STATE('OLD')} IS DISTINCT FROM ${STATE('NEW')}) EXECUTE FUNCTION deliveries_count();
    CREATE TRIGGER deliveries_count_delete AFTER DELETE ON deliveries FOR EACH ROW EXECUTE FUNCTION deliveries_count();

    CREATE TABLE store_gauges (name TEXT PRIMARY KEY, n BIGINT NOT NULL);
    INSERT INTO store_gauges(name, n) VALUES ('unsettled_streams', (SELECT COUNT(*) FROM streams WHERE billed_micro > final_micro));
    CREATE FUNCTION streams_unsettled() RETURNS trigger LANGUAGE plpgsql AS $$
    BEGIN
      IF TG_OP = 'INSERT' THEN
        UPDATE store_gauges SET n = n + 1 WHERE name = 'unsettled_streams';
      ELSIF TG_OP = 'UPDATE' THEN
        UPDATE store_gauges SET n = n + CASE WHEN NEW.billed_micro > NEW.final_micro THEN 1 ELSE -1 END WHERE name = 'unsettled_streams';
      ELSE
        UPDATE store_gauges SET n = n - 1 WHERE name = 'unsettled_streams';
      END IF;
      RETURN NULL;
    END $$;
    CREATE TRIGGER streams_unsettled_insert AFTER INSERT ON streams FOR EACH ROW
      WHEN (NEW.billed_micro > NEW.final_micro) EXECUTE FUNCTION streams_unsettled();
    CREATE TRIGGER streams_unsettled_update AFTER UPDATE OF billed_micro, final_micro ON streams FOR EACH ROW
      WHEN ((OLD.billed_micro > OLD.final_micro) IS DISTINCT FROM (NEW.billed_micro > NEW.final_micro)) EXECUTE FUNCTION streams_unsettled();
    CREATE TRIGGER streams_unsettled_delete AFTER DELETE ON streams FOR EACH ROW
      WHEN (OLD.billed_micro > OLD.final_micro) EXECUTE FUNCTION streams_unsettled();

    -- PostgreSQL 15 has no virtual generated columns: the 1.0.0 body is stored (strpos/substr count characters, as
    -- SQLite's instr/substr do on text).
    ALTER TABLE events DROP COLUMN body_v100;
    ALTER TABLE events ADD COLUMN body_v100 TEXT GENERATED ALWAYS AS (
      CASE WHEN type IN ('subscription.period_opened', 'subscription.renewal_declined', 'subscription.closed') OR strpos(body, ${ENVELOPE_V110}) = 0 THEN NULL
      ELSE substr(body, 1, strpos(body, ${ENVELOPE_V110}) - 1) || '"schemaVersion":"1.0.0"' || substr(body, strpos(body, ${ENVELOPE_V110}) + 23) END
    ) STORED;
  `,
};
export default m;
