import type { Migration } from './index.js';

const m: Migration = {
  version: 70,
  name: 'fair delivery claims (due rows per subscription) and redeliveries counted per node',
  up(db) {
    db.exec(`
      -- The claim walks each subscription's own due rows, so one subscription's backlog never hides another's.
      CREATE INDEX deliveries_subscription_due ON deliveries(subscription_id, next_attempt_at) WHERE status = 'pending';
      -- Deliveries queued by POST /v1/events/{id}/redeliver (and webhooks replay): bounded per node while pending.
      ALTER TABLE deliveries ADD COLUMN redelivery INTEGER NOT NULL DEFAULT 0 CHECK (redelivery IN (0, 1));
      CREATE INDEX deliveries_redelivery_pending ON deliveries(subscription_id) WHERE status = 'pending' AND redelivery = 1;
    `);
  },
  postgres: `
    CREATE INDEX deliveries_subscription_due ON deliveries(subscription_id, next_attempt_at) WHERE status = 'pending';
    ALTER TABLE deliveries ADD COLUMN redelivery BIGINT NOT NULL DEFAULT 0 CHECK (redelivery IN (0, 1));
    CREATE INDEX deliveries_redelivery_pending ON deliveries(subscription_id) WHERE status = 'pending' AND redelivery = 1;
  `,
};
export default m;
