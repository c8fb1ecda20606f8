import { COUNTER_SLOTS } from './0130-counter-slots.js';
import type { Migration } from './index.js';

// A dead delivery is resolved once its event reached the same subscription after all (a replay, `webhooks replay`,
// was delivered): it stays dead (history, `node_svc_webhook_dead_deliveries`), but stops degrading /healthz. The
// trigger marks it in the transaction that records the replay's success, whichever path records it; a counter kept
// the same way ('dead_resolved' rows of delivery_counts) lets /healthz and /metrics subtract without a count of the
// history. Only a redelivery can resolve (a first delivery of an event has no dead sibling), so the trigger costs
// the other deliveries one comparison. Dead deliveries of a deleted subscription are left out where they are read.
const RESOLVE = `UPDATE deliveries SET resolved_at = NEW.delivered_at
  WHERE event_seq = NEW.event_seq AND subscription_id = NEW.subscription_id AND status = 'dead' AND resolved_at IS NULL`;

/** The function that counts resolved dead deliveries, writing in counter slot `slot` (0220 passes its own). */
export const countResolved = (slot: string) => `
    CREATE OR REPLACE FUNCTION deliveries_count_resolved() RETURNS trigger LANGUAGE plpgsql AS $$
    BEGIN
      IF TG_OP = 'DELETE' THEN
        INSERT INTO delivery_counts(subscription_id, state, slot, n) VALUES (OLD.subscription_id, 'dead_resolved', ${slot}, -1)
          ON CONFLICT(subscription_id, state, slot) DO UPDATE SET n = delivery_counts.n - 1;
      ELSE
        INSERT INTO delivery_counts(subscription_id, state, slot, n) VALUES (NEW.subscription_id, 'dead_resolved', ${slot}, 1)
          ON CONFLICT(subscription_id, state, slot) DO UPDATE SET n = delivery_counts.n + 1;
      END IF;
      RETURN NULL;
    END $$;
`;

const m: Migration = {
  version: 180,
  name: 'dead deliveries resolved by a later delivery of their event to their subscription',
  up(db) {
    db.exec(`
      ALTER TABLE deliveries ADD COLUMN resolved_at INTEGER;
      UPDATE deliveries SET resolved_at = (SELECT MIN(x.delivered_at) FROM deliveries x
        WHERE x.event_seq = deliveries.event_seq AND x.subscription_id = deliveries.subscription_id AND x.status = 'delivered')
        WHERE status = 'dead';
      INSERT INTO delivery_counts(subscription_id, state, n)
        SELECT subscription_id, 'dead_resolved', COUNT(*) FROM deliveries WHERE status = 'dead' AND resolved_at IS NOT NULL GROUP BY 1;
      CREATE TRIGGER deliveries_resolve_dead AFTER UPDATE OF status ON deliveries
        WHEN NEW.status = 'delivered' AND OLD.status IS NOT 'delivered' AND NEW.redelivery = 1 BEGIN
        ${RESOLVE};
      END;
      CREATE TRIGGER deliveries_count_resolved AFTER UPDATE OF resolved_at ON deliveries
        WHEN NEW.status = 'dead' AND OLD.resolved_at IS NULL AND NEW.resolved_at IS NOT NULL BEGIN
        INSERT INTO delivery_counts(subscription_id, state, n) VALUES (NEW.subscription_id, 'dead_resolved', 1)
          ON CONFLICT(subscription_id, state) DO UPDATE SET n = n + 1;
      END;
      CREATE TRIGGER deliveries_count_resolved_delete AFTER DELETE ON deliveries WHEN OLD.status = 'dead' AND OLD.resolved_at IS NOT NULL BEGIN
        UPDATE delivery_counts SET n = n - 1 WHERE subscription_id = OLD.subscription_id AND state = 'dead_resolved';
      END;
    `);
  },
  postgres: `
    ALTER TABLE deliveries ADD COLUMN resolved_at BIGINT;
    CREATE OR REPLACE FUNCTION deliveries_resolve_dead() RETURNS trigger LANGUAGE plpgsql AS $$
    BEGIN
      ${RESOLVE};
      RETURN NULL;
    END $$;
    CREATE TRIGGER deliveries_resolve_dead AFTER UPDATE OF status ON deliveries FOR EACH ROW
      WHEN (NEW.status = 'delivered' AND OLD.status IS DISTINCT FROM 'delivered' AND NEW.redelivery = 1) EXECUTE FUNCTION deliveries_resolve_dead();
    ${countResolved(`pg_backend_pid() % ${COUNTER_SLOTS}`)}
    CREATE TRIGGER deliveries_count_resolved AFTER UPDATE OF resolved_at ON deliveries FOR EACH ROW
      WHEN (NEW.status = 'dead' AND OLD.resolved_at IS NULL AND NEW.resolved_at IS NOT NULL) EXECUTE FUNCTION deliveries_count_resolved();
    CREATE TRIGGER deliveries_count_resolved_delete AFTER DELETE ON deliveries FOR EACH ROW
      WHEN (OLD.status = 'dead' AND OLD.resolved_at IS NOT NULL) EXECUTE FUNCTION deliveries_count_resolved();
  `,
};
export default m;
