import { STATE } from './0090-history.js';
import { COUNTER_SLOTS } from './0130-counter-slots.js';
import type { Migration } from './index.js';

const SLOT = `pg_backend_pid() % ${COUNTER_SLOTS}`;
/** The rows of a statement whose count state changed, old and new (the transition tables, joined on the id). */
const CHANGED = `old_rows o JOIN new_rows n ON n.id = o.id WHERE ${STATE('o')} IS DISTINCT FROM ${STATE('n')}`;

// PostgreSQL kept delivery_counts with a trigger FOR EACH ROW: every delivered attempt cost two upserts of a counter
// row (pending -1, delivered +1) and every fan-out row one, each a plpgsql call and an ON CONFLICT update of a row
// updated thousands of times a second. bench/postgres (BENCH_PG_STATEMENTS=1) timed them at 65-90 µs each in the
// server, about a third of what the server spent per delivered event. The worker records attempts in batches (one
// UPDATE of up to 32 rows) and an event fans out in one INSERT: a trigger FOR EACH STATEMENT, reading the statement's
// transition tables, adds each (subscription, state)'s change once per statement. Same counts, same slots.
// SQLite is unchanged: its triggers cost a b-tree step each, and it has one writer.
const m: Migration = {
  version: 220,
  name: 'PostgreSQL: delivery counts kept once per statement (transition tables) instead of once per row',
  up() {},
  postgres: `
    DROP TRIGGER deliveries_count_insert ON deliveries;
    DROP TRIGGER deliveries_count_update ON deliveries;
    DROP TRIGGER deliveries_count_delete ON deliveries;
    DROP FUNCTION deliveries_count();
    CREATE FUNCTION deliveries_count() RETURNS trigger LANGUAGE plpgsql AS $$
    BEGIN
      IF TG_OP = 'INSERT' THEN
        INSERT INTO delivery_counts(subscription_id, state, slot, n)
          SELECT n.subscription_id, ${STATE('n')}, ${SLOT}, COUNT(*) FROM new_rows n GROUP BY 1, 2
          ON CONFLICT(subscription_id, state, slot) DO UPDATE SET n = delivery_counts.n + EXCLUDED.n;
      ELSIF TG_OP = 'DELETE' THEN
        INSERT INTO delivery_counts(subscription_id, state, slot, n)
          SELECT o.subscription_id, ${STATE('o')}, ${SLOT}, -COUNT(*) FROM old_rows o GROUP BY 1, 2
          ON CONFLICT(subscription_id, state, slot) DO UPDATE SET n = delivery_counts.n + EXCLUDED.n;
      ELSE
        INSERT INTO delivery_counts(subscription_id, state, slot, n)
          SELECT subscription_id, state, ${SLOT}, SUM(d) FROM (
            SELECT o.subscription_id, ${STATE('o')} AS state, -1 AS d FROM ${CHANGED}
            UNION ALL
            SELECT n.subscription_id, ${STATE('n')}, 1 FROM ${CHANGED}
          ) x GROUP BY 1, 2
          ON CONFLICT(subscription_id, state, slot) DO UPDATE SET n = delivery_counts.n + EXCLUDED.n;
      END IF;
      RETURN NULL;
    END $$;
    -- One event each (a trigger with transition tables takes one), no column list (UPDATE OF ... cannot have them):
    -- the update trigger also runs for a claim's UPDATE, whose rows change no state (CHANGED is empty).
    CREATE TRIGGER deliveries_count_insert AFTER INSERT ON deliveries REFERENCING NEW TABLE AS new_rows
      FOR EACH STATEMENT EXECUTE FUNCTION deliveries_count();
    CREATE TRIGGER deliveries_count_update AFTER UPDATE ON deliveries REFERENCING OLD TABLE AS old_rows NEW TABLE AS new_rows
      FOR EACH STATEMENT EXECUTE FUNCTION deliveries_count();
    CREATE TRIGGER deliveries_count_delete AFTER DELETE ON deliveries REFERENCING OLD TABLE AS old_rows
      FOR EACH STATEMENT EXECUTE FUNCTION deliveries_count();
  `,
};
export default m;
