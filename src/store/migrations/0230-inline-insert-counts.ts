import type { Migration } from './index.js';

/** The session setting by which node-svc's own sessions say that they count the deliveries they insert themselves. */
export const INLINE_COUNTS = 'node_svc.inline_counts';

// PostgreSQL: a new delivery was counted (delivery_counts, pending +1) by the statement trigger of 0220, which costs a
// plpgsql call and a read of the statement's transition table on every event's fan-out INSERT: bench/postgres's
// recording of events alone (no deliveries), the server's CPU per event 405-448 µs with it, 335-360 µs with the trigger
// skipped. node-svc's two INSERTs into deliveries (store/events.ts recordEvent's fan-out, store/webhooks.ts
// deliveries.insert) now add their own count in the same statement (a CTE upsert of the slot's counter row), and
// node-svc's sessions say so with the setting node_svc.inline_counts = on (store/postgres.ts, every session); the
// trigger still counts for every session that does not say so: a daemon of the release before during a rolling
// upgrade, psql, a tool. Same counts either way. The UPDATE and DELETE triggers are unchanged.
// SQLite is unchanged (a trigger there costs a b-tree step).
const m: Migration = {
  version: 230,
  name: "PostgreSQL: node-svc's sessions count the deliveries they insert in the same statement; the trigger counts the rest",
  up() {},
  postgres: `
    DROP TRIGGER deliveries_count_insert ON deliveries;
    CREATE TRIGGER deliveries_count_insert AFTER INSERT ON deliveries REFERENCING NEW TABLE AS new_rows
      FOR EACH STATEMENT WHEN (current_setting('${INLINE_COUNTS}', true) IS DISTINCT FROM 'on') EXECUTE FUNCTION deliveries_count();
  `,
};
export default m;
