import type { Migration } from './index.js';

// x402 payments (issue #24): one row per EIP-3009 authorization this facilitator settles. The primary key (chain,
// token, payer, nonce) is the claim: the insert that wins sends the one transaction, whichever daemon of several
// sharing the store got the request.
const m: Migration = {
  version: 160,
  name: 'x402 payments: one claimed row per EIP-3009 authorization settled',
  up(db) {
    db.exec(`
      CREATE TABLE x402_payments (
        chain_id INTEGER NOT NULL,
        token TEXT NOT NULL,
        payer TEXT NOT NULL,
        nonce TEXT NOT NULL,
        id TEXT NOT NULL UNIQUE,
        node_id TEXT NOT NULL REFERENCES nodes(id),
        resource TEXT NOT NULL,
        pay_to TEXT NOT NULL,
        amount_micro INTEGER NOT NULL CHECK (amount_micro > 0),
        status TEXT NOT NULL CHECK (status IN ('claimed', 'submitted', 'checkpointed', 'final', 'failed')),
        tx_hash TEXT,
        raw_tx TEXT,
        broadcasts INTEGER NOT NULL DEFAULT 0,
        last_broadcast_at INTEGER,
        block_number INTEGER,
        error TEXT,
        created_at INTEGER NOT NULL,
        checkpointed_at INTEGER,
        final_at INTEGER,
        PRIMARY KEY (chain_id, token, payer, nonce)
      ) STRICT;
      CREATE INDEX x402_payments_open ON x402_payments(status) WHERE status IN ('submitted', 'checkpointed');
    `);
  },
  postgres: `
    CREATE TABLE x402_payments (
      chain_id BIGINT NOT NULL,
      token TEXT NOT NULL,
      payer TEXT NOT NULL,
      nonce TEXT NOT NULL,
      id TEXT NOT NULL UNIQUE,
      node_id TEXT NOT NULL REFERENCES nodes(id),
      resource TEXT NOT NULL,
      pay_to TEXT NOT NULL,
      amount_micro BIGINT NOT NULL CHECK (amount_micro > 0),
      status TEXT NOT NULL CHECK (status IN ('claimed', 'submitted', 'checkpointed', 'final', 'failed')),
      tx_hash TEXT,
      raw_tx TEXT,
      broadcasts BIGINT NOT NULL DEFAULT 0,
      last_broadcast_at BIGINT,
      block_number BIGINT,
      error TEXT,
      created_at BIGINT NOT NULL,
      checkpointed_at BIGINT,
      final_at BIGINT,
      PRIMARY KEY (chain_id, token, payer, nonce)
    );
    CREATE INDEX x402_payments_open ON x402_payments(status) WHERE status IN ('submitted', 'checkpointed');
  `,
};
export default m;
