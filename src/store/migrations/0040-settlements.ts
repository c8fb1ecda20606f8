import type { Migration } from './index.js';

const m: Migration = {
  version: 40,
  name: 'settlements on a rail',
  up(db) {
    db.exec(`
      -- One row per attempt to bring a stream's settled frontier to amount_micro (cumulative).
      -- The row is written before anything is sent, so a crash leaves a trace to resume from.
      CREATE TABLE settlements (
        id TEXT PRIMARY KEY,
        node_id TEXT NOT NULL,
        stream TEXT NOT NULL,
        rail TEXT NOT NULL CHECK (rail IN ('escrow', 'card')),
        amount_micro INTEGER NOT NULL CHECK (amount_micro > 0),
        status TEXT NOT NULL CHECK (status IN ('pending', 'submitted', 'checkpointed', 'final', 'failed')),
        reference TEXT,
        detail TEXT,
        block_number INTEGER,
        error TEXT,
        created_at INTEGER NOT NULL,
        submitted_at INTEGER,
        checkpointed_at INTEGER,
        final_at INTEGER,
        FOREIGN KEY (node_id, stream) REFERENCES streams(node_id, id)
      ) STRICT;
      CREATE INDEX settlements_open ON settlements(status) WHERE status IN ('pending', 'submitted', 'checkpointed');
      CREATE INDEX settlements_stream ON settlements(node_id, stream, amount_micro);
      -- Never settle the same amount twice: one live settlement per (stream, amount).
      CREATE UNIQUE INDEX settlements_once ON settlements(node_id, stream, amount_micro) WHERE status != 'failed';
    `);
  },
  postgres: `
    CREATE TABLE settlements (
      id TEXT PRIMARY KEY,
      node_id TEXT NOT NULL,
      stream TEXT NOT NULL,
      rail TEXT NOT NULL CHECK (rail IN ('escrow', 'card')),
      amount_micro BIGINT NOT NULL CHECK (amount_micro > 0),
      status TEXT NOT NULL CHECK (status IN ('pending', 'submitted', 'checkpointed', 'final', 'failed')),
      reference TEXT,
      detail TEXT,
      block_number BIGINT,
      error TEXT,
      created_at BIGINT NOT NULL,
      submitted_at BIGINT,
      checkpointed_at BIGINT,
      final_at BIGINT,
      FOREIGN KEY (node_id, stream) REFERENCES streams(node_id, id)
    );
    CREATE INDEX settlements_open ON settlements(status) WHERE status IN ('pending', 'submitted', 'checkpointed');
    CREATE INDEX settlements_stream ON settlements(node_id, stream, amount_micro);
    CREATE UNIQUE INDEX settlements_once ON settlements(node_id, stream, amount_micro) WHERE status <> 'failed';
  `,
};
export default m;
