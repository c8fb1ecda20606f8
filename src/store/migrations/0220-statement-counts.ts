import { STATE } from './0090-history.js';
import { streamCounters } from './0130-counter-slots.js';
import { countResolved } from './0180-dead-resolved.js';
import type { Migration } from './index.js';

/** The advisory-lock namespace (first key of the two-int4 form) in which a session holds its counter slot. */
export const SLOT_LOCKS = 7220;
/** Slots a session can hold alone; past that many sessions writing at once, they share as before (pid modulo). */
export const SESSION_SLOTS = 64;
const SLOT = 'node_svc_counter_slot()';
/** A statement's rows as counter changes (subscription, state, ±1): its new rows count +1, its old rows -1. */
const ADDED = `SELECT n.subscription_id, ${STATE('n')} AS state, 1 AS d FROM new_rows n`;
const REMOVED = `SELECT o.subscription_id, ${STATE('o')} AS state, -1 AS d FROM old_rows o`;
/** Adds the changes up per (subscription, state) into the session's slot, skipping those that net to zero, in key order. */
const addUp = (...changes: string[]) => `INSERT INTO delivery_counts(subscription_id, state, slot, n)
          SELECT subscription_id, state, ${SLOT}, SUM(d) FROM (${changes.join(' UNION ALL ')}) x GROUP BY 1, 2 HAVING SUM(d) <> 0 ORDER BY 1, 2
          ON CONFLICT(subscription_id, state, slot) DO UPDATE SET n = delivery_counts.n + EXCLUDED.n`;
// PostgreSQL kept delivery_counts with a trigger FOR EACH ROW: every delivered attempt cost two upserts of a counter
// row (pending -1, delivered +1) and every fan-out row one, each a plpgsql call and an ON CONFLICT update of a row
// updated thousands of times a second. bench/postgres (BENCH_PG_STATEMENTS=1) timed them at 65-90 µs each in the
// server, about a third of what the server spent per delivered event. The worker records a flush of attempts in one
// UPDATE (up to 128 deliveries, src/delivery/worker.ts) and an event fans out to up to 8 subscriptions in one INSERT
// (store/events.ts; since 53b78f0 to every matching subscription): a trigger FOR EACH STATEMENT, reading the
// statement's transition tables, adds each (subscription, state)'s net change once per statement, and nothing where it
// nets to zero. Same counts.
// An UPDATE trigger with transition tables cannot name columns (UPDATE OF status, last_error), so it runs for every
// UPDATE of deliveries: a claim's, a lease release's, resolved_at's (0180). Their rows keep their state, so their old
// and new rows cancel out and nothing is written; what they cost is the capture of their rows and one function call.
// The old rows count -1 in their state and the new rows +1 in theirs: no join on the id, so it holds whatever the
// UPDATE changes. Groups are written in (subscription, state) order, so two statements sharing a slot lock its rows
// in the same order.
// SQLite is unchanged: its triggers cost a b-tree step each, and it has one writer.
// Slots: pg_backend_pid() % 16 (0130) gave two of a daemon's eleven sessions the same slot whenever their pids met
// modulo 16, and a batch holds the counter rows it wrote until its COMMIT: the other waited (Lock:transactionid in
// pg_stat_activity, 7 % of the sessions' samples in bench/postgres; the counter upsert 52 µs in one run, 199 µs in
// the next). Each session now takes a slot of its own once, the first free one of 64 (SESSION_SLOTS), by a session
// advisory lock (released when the session ends), and remembers it in a setting of the session; a setting that a
// rolled-back transaction undid is found again from the lock the session still holds. Reads sum the slots as before.
// The other counters kept by triggers (asset_totals, store_gauges, the dead_resolved rows) take the same slot: their
// functions are issued again with it (0130's and 0180's, the slot aside unchanged).
// Rolling restarts: a daemon of the release before keeps running on schema 220 (the counts are kept by the server as
// before), but cannot start on it (a database migrated by a newer node-svc is refused).
const m: Migration = {
  version: 220,
  name: 'PostgreSQL: delivery counts kept once per statement (transition tables); every counter in a slot of its session',
  up() {},
  postgres: `
    DROP TRIGGER deliveries_count_insert ON deliveries;
    DROP TRIGGER deliveries_count_update ON deliveries;
    DROP TRIGGER deliveries_count_delete ON deliveries;
    DROP FUNCTION deliveries_count();
    CREATE FUNCTION node_svc_counter_slot() RETURNS SMALLINT LANGUAGE plpgsql AS $$
    DECLARE s TEXT := current_setting('node_svc.counter_slot', true);
    BEGIN
      IF s IS NOT NULL AND s <> '' THEN RETURN CAST(s AS SMALLINT); END IF;
      SELECT CAST(objid AS TEXT) INTO s FROM pg_locks
        WHERE locktype = 'advisory' AND pid = pg_backend_pid() AND classid = ${SLOT_LOCKS} AND objsubid = 2 LIMIT 1;
      IF s IS NULL THEN
        FOR i IN 0..${SESSION_SLOTS - 1} LOOP
          IF pg_try_advisory_lock(${SLOT_LOCKS}, i) THEN s := CAST(i AS TEXT); EXIT; END IF;
        END LOOP;
      END IF;
      s := COALESCE(s, CAST(pg_backend_pid() % ${SESSION_SLOTS} AS TEXT));
      PERFORM set_config('node_svc.counter_slot', s, false);
      RETURN CAST(s AS SMALLINT);
    END $$;
    -- The other counters' functions (money per asset and unsettled streams: every voucher; resolved dead deliveries)
    -- the same as before, in the session's slot.
    ${streamCounters(SLOT).assets}
    ${streamCounters(SLOT).unsettled}
    ${countResolved(SLOT)}
    CREATE FUNCTION deliveries_count() RETURNS trigger LANGUAGE plpgsql AS $$
    BEGIN
      IF TG_OP = 'INSERT' THEN ${addUp(ADDED)};
      ELSIF TG_OP = 'DELETE' THEN ${addUp(REMOVED)};
      ELSE ${addUp(REMOVED, ADDED)};
      END IF;
      RETURN NULL;
    END $$;
    -- One event each (a trigger with transition tables takes one), and no column list (see above).
    CREATE TRIGGER deliveries_count_insert AFTER INSERT ON deliveries REFERENCING NEW TABLE AS new_rows
      FOR EACH STATEMENT EXECUTE FUNCTION deliveries_count();
    CREATE TRIGGER deliveries_count_update AFTER UPDATE ON deliveries REFERENCING OLD TABLE AS old_rows NEW TABLE AS new_rows
      FOR EACH STATEMENT EXECUTE FUNCTION deliveries_count();
    CREATE TRIGGER deliveries_count_delete AFTER DELETE ON deliveries REFERENCING OLD TABLE AS old_rows
      FOR EACH STATEMENT EXECUTE FUNCTION deliveries_count();
  `,
};
export default m;
