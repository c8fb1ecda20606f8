import type { Migration } from './index.js';

const m: Migration = {
  version: 50,
  name: 'card rail: refunds seen per stream',
  up(db) {
    db.exec(`
      -- The cumulative refunded amount already announced (refund.final) per card stream, so the same
      -- cumulative amount is never announced twice and announcements only grow.
      CREATE TABLE card_refunds (
        node_id TEXT NOT NULL,
        stream TEXT NOT NULL,
        payment_intent TEXT NOT NULL,
        refunded_minor INTEGER NOT NULL CHECK (refunded_minor >= 0),
        refunded_micro INTEGER NOT NULL CHECK (refunded_micro >= 0),
        last_refund TEXT NOT NULL,
        updated_at INTEGER NOT NULL,
        PRIMARY KEY (node_id, stream),
        FOREIGN KEY (node_id, stream) REFERENCES streams(node_id, id)
      ) STRICT;
    `);
  },
  postgres: `
    CREATE TABLE card_refunds (
      node_id TEXT NOT NULL,
      stream TEXT NOT NULL,
      payment_intent TEXT NOT NULL,
      refunded_minor BIGINT NOT NULL CHECK (refunded_minor >= 0),
      refunded_micro BIGINT NOT NULL CHECK (refunded_micro >= 0),
      last_refund TEXT NOT NULL,
      updated_at BIGINT NOT NULL,
      PRIMARY KEY (node_id, stream),
      FOREIGN KEY (node_id, stream) REFERENCES streams(node_id, id)
    );
  `,
};
export default m;
