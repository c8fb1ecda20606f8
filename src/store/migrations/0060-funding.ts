import type { Migration } from './index.js';

const m: Migration = {
  version: 60,
  name: 'funding: the source behind each stream (one source, one stream) and settlement progress',
  up(db) {
    db.exec(`
      -- The funding source the credential names (escrow channel, card authorization) and what the rail last said of it.
      -- none: the credential names no source; pending: not read yet (not payable); funded / unfunded: the rail's answer.
      ALTER TABLE streams ADD COLUMN funding_source TEXT;
      ALTER TABLE streams ADD COLUMN funding_status TEXT NOT NULL DEFAULT 'none' CHECK (funding_status IN ('none', 'pending', 'funded', 'unfunded'));
      ALTER TABLE streams ADD COLUMN funding_reason TEXT;
      ALTER TABLE streams ADD COLUMN funding_limit_micro INTEGER;
      ALTER TABLE streams ADD COLUMN funding_checked_at INTEGER;
      -- When what the source still held for a closed stream was released (card: authorization cancelled or captured final).
      ALTER TABLE streams ADD COLUMN funding_released_at INTEGER;

      -- A source's money is cumulative for the source: the first stream registered with it holds it, for good.
      CREATE TABLE funding_sources (
        source TEXT PRIMARY KEY,
        node_id TEXT NOT NULL,
        stream TEXT NOT NULL,
        bound_at INTEGER NOT NULL,
        FOREIGN KEY (node_id, stream) REFERENCES streams(node_id, id)
      ) STRICT;

      UPDATE streams SET funding_status = 'pending', funding_source = 'escrow:' || json_extract(claims, '$.chainId') || ':'
          || lower(json_extract(claims, '$.escrow')) || ':' || lower(json_extract(claims, '$.channel'))
        WHERE mode = 'escrow' AND json_extract(claims, '$.channel') IS NOT NULL;
      UPDATE streams SET funding_status = 'pending', funding_source = 'card:' || json_extract(claims, '$.paymentIntent')
        WHERE mode = 'card' AND json_type(claims, '$.paymentIntent') = 'text';
      INSERT OR IGNORE INTO funding_sources(source, node_id, stream, bound_at)
        SELECT funding_source, node_id, id, created_at FROM streams WHERE funding_source IS NOT NULL ORDER BY created_at, node_id, id;
      UPDATE streams SET funding_status = 'unfunded', funding_reason = 'its funding source already backs another stream'
        WHERE funding_source IS NOT NULL AND NOT EXISTS (
          SELECT 1 FROM funding_sources f WHERE f.source = streams.funding_source AND f.node_id = streams.node_id AND f.stream = streams.id);
      CREATE INDEX streams_funding_due ON streams(funding_checked_at) WHERE funding_source IS NOT NULL;
      CREATE INDEX streams_funding_source ON streams(funding_source) WHERE funding_source IS NOT NULL;

      -- Settlement progress: how many times its transaction was (re)broadcast or replaced, and when last.
      ALTER TABLE settlements ADD COLUMN attempts INTEGER NOT NULL DEFAULT 0;
      ALTER TABLE settlements ADD COLUMN last_broadcast_at INTEGER;
    `);
  },
  postgres: `
    ALTER TABLE streams ADD COLUMN funding_source TEXT;
    ALTER TABLE streams ADD COLUMN funding_status TEXT NOT NULL DEFAULT 'none' CHECK (funding_status IN ('none', 'pending', 'funded', 'unfunded'));
    ALTER TABLE streams ADD COLUMN funding_reason TEXT;
    ALTER TABLE streams ADD COLUMN funding_limit_micro BIGINT;
    ALTER TABLE streams ADD COLUMN funding_checked_at BIGINT;
    ALTER TABLE streams ADD COLUMN funding_released_at BIGINT;

    CREATE TABLE funding_sources (
      source TEXT PRIMARY KEY,
      node_id TEXT NOT NULL,
      stream TEXT NOT NULL,
      bound_at BIGINT NOT NULL,
      FOREIGN KEY (node_id, stream) REFERENCES streams(node_id, id)
    );
    -- (SQLite's backfill of existing streams' sources has nothing to do on a new database.)
    CREATE INDEX streams_funding_due ON streams(funding_checked_at) WHERE funding_source IS NOT NULL;
    CREATE INDEX streams_funding_source ON streams(funding_source) WHERE funding_source IS NOT NULL;

    ALTER TABLE settlements ADD COLUMN attempts BIGINT NOT NULL DEFAULT 0;
    ALTER TABLE settlements ADD COLUMN last_broadcast_at BIGINT;
  `,
};
export default m;
