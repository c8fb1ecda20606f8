import type { Migration } from './index.js';

const m: Migration = {
  version: 140,
  name: 'signed settlement receipts: the daemon receipt keys and one receipt per final settlement',
  up(db) {
    db.exec(`
      -- The daemon's receipt signing keys (Ed25519). One is active (signs); rotated ones stay published in the JWKS so
      -- receipts they signed still verify; retired ones are left out of it. private_jwk is a secret like a webhook
      -- secret: it never leaves the store except to sign. The partial unique index makes "create if absent" safe for
      -- daemons sharing one database: the first insert wins, the others' do nothing and read it.
      CREATE TABLE receipt_keys (
        kid TEXT PRIMARY KEY,
        issuer TEXT NOT NULL,
        alg TEXT NOT NULL,
        public_jwk TEXT NOT NULL,
        private_jwk TEXT NOT NULL,
        status TEXT NOT NULL CHECK (status IN ('active', 'rotated', 'retired')),
        created_at INTEGER NOT NULL,
        rotated_at INTEGER,
        retired_at INTEGER
      ) STRICT;
      CREATE UNIQUE INDEX receipt_keys_one_active ON receipt_keys(status) WHERE status = 'active';

      -- One receipt per final settlement (jti: the settlement id), kept as long as the settlement (never pruned).
      CREATE TABLE receipts (
        jti TEXT PRIMARY KEY,
        node_id TEXT NOT NULL,
        stream TEXT NOT NULL,
        amount_micro INTEGER NOT NULL,
        kid TEXT NOT NULL,
        jws TEXT NOT NULL,
        final_at INTEGER NOT NULL,
        created_at INTEGER NOT NULL
      ) STRICT;
      CREATE INDEX receipts_stream ON receipts(node_id, stream, amount_micro);
    `);
  },
  postgres: `
    CREATE TABLE receipt_keys (
      kid TEXT PRIMARY KEY,
      issuer TEXT NOT NULL,
      alg TEXT NOT NULL,
      public_jwk TEXT NOT NULL,
      private_jwk TEXT NOT NULL,
      status TEXT NOT NULL CHECK (status IN ('active', 'rotated', 'retired')),
      created_at BIGINT NOT NULL,
      rotated_at BIGINT,
      retired_at BIGINT
    );
    CREATE UNIQUE INDEX receipt_keys_one_active ON receipt_keys(status) WHERE status = 'active';
    CREATE TABLE receipts (
      jti TEXT PRIMARY KEY,
      node_id TEXT NOT NULL,
      stream TEXT NOT NULL,
      amount_micro BIGINT NOT NULL,
      kid TEXT NOT NULL,
      jws TEXT NOT NULL,
      final_at BIGINT NOT NULL,
      created_at BIGINT NOT NULL
    );
    CREATE INDEX receipts_stream ON receipts(node_id, stream, amount_micro);
  `,
};
export default m;
