import type { Migration } from './index.js';

const m: Migration = {
  version: 10,
  name: 'admin: nodes, tokens, issuer keys',
  up(db) {
    db.exec(`
      CREATE TABLE nodes (
        id TEXT PRIMARY KEY,
        created_at INTEGER NOT NULL
      ) STRICT;

      -- Only a SHA-256 of each bearer token is kept; the token itself is shown once.
      CREATE TABLE tokens (
        id TEXT PRIMARY KEY,
        node_id TEXT NOT NULL REFERENCES nodes(id) ON DELETE CASCADE,
        hash TEXT NOT NULL UNIQUE,
        status TEXT NOT NULL CHECK (status IN ('active', 'grace', 'revoked')),
        created_at INTEGER NOT NULL,
        expires_at INTEGER,
        revoked_at INTEGER
      ) STRICT;
      CREATE UNIQUE INDEX tokens_one_active ON tokens(node_id) WHERE status = 'active';

      CREATE TABLE issuer_keys (
        kid TEXT PRIMARY KEY,
        issuer TEXT NOT NULL,
        alg TEXT NOT NULL,
        jwk TEXT NOT NULL,
        source TEXT NOT NULL,
        added_at INTEGER NOT NULL,
        fetched_at INTEGER NOT NULL
      ) STRICT;
      CREATE INDEX issuer_keys_issuer ON issuer_keys(issuer);

      -- Counters other processes watch: keys_generation moves whenever trusted keys change.
      CREATE TABLE meta (
        key TEXT PRIMARY KEY,
        value INTEGER NOT NULL
      ) STRICT;
      INSERT INTO meta(key, value) VALUES ('keys_generation', 0);
    `);
  },
  postgres: `
    CREATE TABLE nodes (
      id TEXT PRIMARY KEY,
      created_at BIGINT NOT NULL
    );

    CREATE TABLE tokens (
      id TEXT PRIMARY KEY,
      node_id TEXT NOT NULL REFERENCES nodes(id) ON DELETE CASCADE,
      hash TEXT NOT NULL UNIQUE,
      status TEXT NOT NULL CHECK (status IN ('active', 'grace', 'revoked')),
      created_at BIGINT NOT NULL,
      expires_at BIGINT,
      revoked_at BIGINT
    );
    CREATE UNIQUE INDEX tokens_one_active ON tokens(node_id) WHERE status = 'active';

    CREATE TABLE issuer_keys (
      kid TEXT PRIMARY KEY,
      issuer TEXT NOT NULL,
      alg TEXT NOT NULL,
      jwk TEXT NOT NULL,
      source TEXT NOT NULL,
      added_at BIGINT NOT NULL,
      fetched_at BIGINT NOT NULL
    );
    CREATE INDEX issuer_keys_issuer ON issuer_keys(issuer);

    CREATE TABLE meta (
      key TEXT PRIMARY KEY,
      value BIGINT NOT NULL
    );
    INSERT INTO meta(key, value) VALUES ('keys_generation', 0);
  `,
};
export default m;
