import { STATE } from './0090-history.js';
import type { Migration } from './index.js';

/** Rows per counter on PostgreSQL: each session adds to the slot of its backend, so concurrent writers rarely meet. */
export const COUNTER_SLOTS = 16;
const SLOT = `pg_backend_pid() % ${COUNTER_SLOTS}`;

/** The streams' counter functions (money per asset, unsettled streams), writing in counter slot `slot` (0220 passes its own). */
export const streamCounters = (slot: string) => ({
  assets: `
    CREATE OR REPLACE FUNCTION streams_asset_totals() RETURNS trigger LANGUAGE plpgsql AS $$
    DECLARE
      db BIGINT := 0; df BIGINT := 0; dn BIGINT := 0; a TEXT;
    BEGIN
      IF TG_OP <> 'INSERT' THEN
        db := db - OLD.billed_micro; df := df - OLD.final_micro; dn := dn - (CASE WHEN OLD.billed_micro > 0 THEN 1 ELSE 0 END); a := OLD.asset;
      END IF;
      IF TG_OP <> 'DELETE' THEN
        db := db + NEW.billed_micro; df := df + NEW.final_micro; dn := dn + (CASE WHEN NEW.billed_micro > 0 THEN 1 ELSE 0 END); a := NEW.asset;
      END IF;
      INSERT INTO asset_totals(asset, slot, billed_micro, final_micro, billed_streams) VALUES (a, ${slot}, db, df, dn)
        ON CONFLICT (asset, slot) DO UPDATE SET billed_micro = asset_totals.billed_micro + EXCLUDED.billed_micro,
          final_micro = asset_totals.final_micro + EXCLUDED.final_micro, billed_streams = asset_totals.billed_streams + EXCLUDED.billed_streams;
      RETURN NULL;
    END $$;
`,
  unsettled: `
    CREATE OR REPLACE FUNCTION streams_unsettled() RETURNS trigger LANGUAGE plpgsql AS $$
    DECLARE d BIGINT;
    BEGIN
      IF TG_OP = 'INSERT' THEN d := 1;
      ELSIF TG_OP = 'UPDATE' THEN d := CASE WHEN NEW.billed_micro > NEW.final_micro THEN 1 ELSE -1 END;
      ELSE d := -1;
      END IF;
      INSERT INTO store_gauges(name, slot, n) VALUES ('unsettled_streams', ${slot}, d)
        ON CONFLICT (name, slot) DO UPDATE SET n = store_gauges.n + EXCLUDED.n;
      RETURN NULL;
    END $$;
`,
});

const m: Migration = {
  version: 130,
  name: 'counters kept by triggers spread over slots (PostgreSQL: no hot row that every write waits on)',
  // SQLite has one writer: a counter row is never contended. Nothing to change; the reads sum per counter either way.
  up() {},
  postgres: `
    -- Money per asset (every voucher), deliveries per subscription and state (every event and attempt), and the
    -- unsettled-streams gauge were one row each: every write that moved one waited for the previous writer of that
    -- row to commit (its fsync included), a database-wide lock in all but name. Each counter is now up to
    -- ${COUNTER_SLOTS} rows, one per slot; a trigger adds its delta to the slot of its session's backend, and a read
    -- sums the slots (at most ${COUNTER_SLOTS} rows per counter: still flat with history).
    ALTER TABLE asset_totals ADD COLUMN slot SMALLINT NOT NULL DEFAULT 0;
    ALTER TABLE asset_totals DROP CONSTRAINT asset_totals_pkey;
    ALTER TABLE asset_totals ADD PRIMARY KEY (asset, slot);
    ${streamCounters(SLOT).assets}

    ALTER TABLE delivery_counts ADD COLUMN slot SMALLINT NOT NULL DEFAULT 0;
    ALTER TABLE delivery_counts DROP CONSTRAINT delivery_counts_pkey;
    ALTER TABLE delivery_counts ADD PRIMARY KEY (subscription_id, state, slot);
    CREATE OR REPLACE FUNCTION deliveries_count() RETURNS trigger LANGUAGE plpgsql AS $$
    BEGIN
      IF TG_OP <> 'INSERT' THEN
        INSERT INTO delivery_counts(subscription_id, state, slot, n) VALUES (OLD.subscription_id, ${STATE('OLD')}, ${SLOT}, -1)
          ON CONFLICT(subscription_id, state, slot) DO UPDATE SET n = delivery_counts.n - 1;
      END IF;
      IF TG_OP <> 'DELETE' THEN
        INSERT INTO delivery_counts(subscription_id, state, slot, n) VALUES (NEW.subscription_id, ${STATE('NEW')}, ${SLOT}, 1)
          ON CONFLICT(subscription_id, state, slot) DO UPDATE SET n = delivery_counts.n + 1;
      END IF;
      RETURN NULL;
    END $$;

    ALTER TABLE store_gauges ADD COLUMN slot SMALLINT NOT NULL DEFAULT 0;
    ALTER TABLE store_gauges DROP CONSTRAINT store_gauges_pkey;
    ALTER TABLE store_gauges ADD PRIMARY KEY (name, slot);
    ${streamCounters(SLOT).unsettled}
  `,
};
export default m;
