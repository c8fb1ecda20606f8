import type { Migration } from './index.js';

const m: Migration = {
  version: 100,
  name: 'flat reads for health and settlement progress (no scan or sort of a growing table)',
  up(db) {
    db.exec(`
      -- The newest settlement of a stream (finality's settlement in progress) and the later-settlement test of health.
      CREATE INDEX settlements_stream_time ON settlements(node_id, stream, created_at);
      -- Failed settlements by time: health counts streams whose latest settlement failed recently (a failing stream is
      -- retried with backoff of at most 5 minutes, so it always has a recent failed row).
      CREATE INDEX settlements_failed_time ON settlements(created_at) WHERE status = 'failed';
      -- The pending delivery of an event to a subscription, oldest first (replay completes it).
      CREATE INDEX deliveries_event_subscription ON deliveries(event_seq, subscription_id, created_at);

      -- Money per asset for health, kept by triggers (one row per asset) instead of summing every stream per probe.
      CREATE TABLE asset_totals (
        asset TEXT PRIMARY KEY,
        billed_micro INTEGER NOT NULL DEFAULT 0,
        final_micro INTEGER NOT NULL DEFAULT 0,
        billed_streams INTEGER NOT NULL DEFAULT 0
      ) STRICT;
      INSERT INTO asset_totals(asset, billed_micro, final_micro, billed_streams)
        SELECT asset, SUM(billed_micro), SUM(final_micro), SUM(billed_micro > 0) FROM streams GROUP BY asset;
      CREATE TRIGGER streams_asset_insert AFTER INSERT ON streams BEGIN
        INSERT INTO asset_totals(asset) VALUES (NEW.asset) ON CONFLICT(asset) DO NOTHING;
        UPDATE asset_totals SET billed_micro = billed_micro + NEW.billed_micro, final_micro = final_micro + NEW.final_micro,
          billed_streams = billed_streams + (NEW.billed_micro > 0) WHERE asset = NEW.asset;
      END;
      CREATE TRIGGER streams_asset_update AFTER UPDATE OF billed_micro, final_micro ON streams BEGIN
        UPDATE asset_totals SET billed_micro = billed_micro - OLD.billed_micro + NEW.billed_micro,
          final_micro = final_micro - OLD.final_micro + NEW.final_micro,
          billed_streams = billed_streams - (OLD.billed_micro > 0) + (NEW.billed_micro > 0) WHERE asset = NEW.asset;
      END;
      CREATE TRIGGER streams_asset_delete AFTER DELETE ON streams BEGIN
        UPDATE asset_totals SET billed_micro = billed_micro - OLD.billed_micro, final_micro = final_micro - OLD.final_micro,
          billed_streams = billed_streams - (OLD.billed_micro > 0) WHERE asset = OLD.asset;
      END;
    `);
  },
  postgres: `
    CREATE INDEX settlements_stream_time ON settlements(node_id, stream, created_at);
    CREATE INDEX settlements_failed_time ON settlements(created_at) WHERE status = 'failed';
    CREATE INDEX deliveries_event_subscription ON deliveries(event_seq, subscription_id, created_at);

    CREATE TABLE asset_totals (
      asset TEXT PRIMARY KEY,
      billed_micro BIGINT NOT NULL DEFAULT 0,
      final_micro BIGINT NOT NULL DEFAULT 0,
      billed_streams BIGINT NOT NULL DEFAULT 0
    );
    INSERT INTO asset_totals(asset, billed_micro, final_micro, billed_streams)
      SELECT asset, SUM(billed_micro), SUM(final_micro), SUM(CASE WHEN billed_micro > 0 THEN 1 ELSE 0 END) FROM streams GROUP BY asset;
    -- The three SQLite triggers as one function (AFTER ... FOR EACH ROW): same rows, same arithmetic.
    CREATE FUNCTION streams_asset_totals() RETURNS trigger LANGUAGE plpgsql AS $$
    BEGIN
      IF TG_OP = 'INSERT' THEN
        INSERT INTO asset_totals(asset) VALUES (NEW.asset) ON CONFLICT(asset) DO NOTHING;
        UPDATE asset_totals SET billed_micro = billed_micro + NEW.billed_micro, final_micro = final_micro + NEW.final_micro,
          billed_streams = billed_streams + (CASE WHEN NEW.billed_micro > 0 THEN 1 ELSE 0 END) WHERE asset = NEW.asset;
      ELSIF TG_OP = 'UPDATE' THEN
        UPDATE asset_totals SET billed_micro = billed_micro - OLD.billed_micro + NEW.billed_micro,
          final_micro = final_micro - OLD.final_micro + NEW.final_micro,
          billed_streams = billed_streams - (CASE WHEN OLD.billed_micro > 0 THEN 1 ELSE 0 END) + (CASE WHEN NEW.billed_micro > 0 THEN 1 ELSE 0 END)
          WHERE asset = NEW.asset;
      ELSE
        UPDATE asset_totals SET billed_micro = billed_micro - OLD.billed_micro, final_micro = final_micro - OLD.final_micro,
          billed_streams = billed_streams - (CASE WHEN OLD.billed_micro > 0 THEN 1 ELSE 0 END) WHERE asset = OLD.asset;
      END IF;
      RETURN NULL;
    END $$;
    CREATE TRIGGER streams_asset_insert AFTER INSERT ON streams FOR EACH ROW EXECUTE FUNCTION streams_asset_totals();
    CREATE TRIGGER streams_asset_update AFTER UPDATE OF billed_micro, final_micro ON streams FOR EACH ROW EXECUTE FUNCTION streams_asset_totals();
    CREATE TRIGGER streams_asset_delete AFTER DELETE ON streams FOR EACH ROW EXECUTE FUNCTION streams_asset_totals();
  `,
};
export default m;
