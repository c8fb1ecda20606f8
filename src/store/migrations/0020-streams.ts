import type { Migration } from './index.js';

const m: Migration = {
  version: 20,
  name: 'streams, vouchers, budgets, payer subscriptions, control facts, events',
  up(db) {
    db.exec(`
      -- Keyed by (node, stream): two nodes never reach each other's stream, even if an issuer reuses an id.
      CREATE TABLE streams (
        node_id TEXT NOT NULL REFERENCES nodes(id),
        id TEXT NOT NULL,
        budget TEXT NOT NULL,
        issuer TEXT NOT NULL,
        payer TEXT NOT NULL,
        credential_id TEXT NOT NULL,
        credential TEXT NOT NULL,
        iat INTEGER NOT NULL,
        exp INTEGER NOT NULL,
        cap_micro INTEGER NOT NULL CHECK (cap_micro > 0),
        asset TEXT NOT NULL,
        unit_price_micro INTEGER NOT NULL CHECK (unit_price_micro > 0),
        rate_micro_per_s INTEGER,
        mode TEXT NOT NULL CHECK (mode IN ('escrow', 'card')),
        voucher_key TEXT NOT NULL,
        claims TEXT NOT NULL,
        status TEXT NOT NULL DEFAULT 'open' CHECK (status IN ('open', 'exhausted', 'revoked')),
        status_reason TEXT,
        billed_micro INTEGER NOT NULL DEFAULT 0 CHECK (billed_micro >= 0),
        billed_units INTEGER NOT NULL DEFAULT 0 CHECK (billed_units >= 0),
        billed_voucher TEXT,
        billed_signed_at INTEGER,
        checkpointed_micro INTEGER NOT NULL DEFAULT 0,
        final_micro INTEGER NOT NULL DEFAULT 0,
        frontier_micro INTEGER NOT NULL DEFAULT 0,
        frontier_finality TEXT NOT NULL DEFAULT 'none' CHECK (frontier_finality IN ('none', 'checkpointed', 'final')),
        frontier_reference TEXT,
        frontier_checkpointed_at INTEGER,
        frontier_final_at INTEGER,
        created_at INTEGER NOT NULL,
        updated_at INTEGER NOT NULL,
        PRIMARY KEY (node_id, id),
        CHECK (billed_micro <= cap_micro)
      ) STRICT;
      CREATE INDEX streams_budget ON streams(node_id, budget);

      -- Every accepted voucher (billed truth is the newest); the observed rate reads the recent ones.
      CREATE TABLE vouchers (
        seq INTEGER PRIMARY KEY,
        node_id TEXT NOT NULL,
        stream TEXT NOT NULL,
        amount_micro INTEGER NOT NULL,
        units INTEGER NOT NULL,
        signed_at INTEGER NOT NULL,
        received_at INTEGER NOT NULL,
        voucher TEXT NOT NULL,
        FOREIGN KEY (node_id, stream) REFERENCES streams(node_id, id)
      ) STRICT;
      CREATE INDEX vouchers_stream_time ON vouchers(node_id, stream, received_at);

      -- A revocation may arrive before the stream is seen: a later credential for it is refused.
      CREATE TABLE revocations (
        node_id TEXT NOT NULL REFERENCES nodes(id),
        stream TEXT NOT NULL,
        reason TEXT,
        revoked_at INTEGER NOT NULL,
        PRIMARY KEY (node_id, stream)
      ) STRICT;

      CREATE TABLE budgets (
        node_id TEXT NOT NULL REFERENCES nodes(id),
        id TEXT NOT NULL,
        status TEXT NOT NULL CHECK (status IN ('active', 'halted', 'released')),
        reasons TEXT NOT NULL DEFAULT '[]',
        released_micro INTEGER,
        updated_at INTEGER NOT NULL,
        PRIMARY KEY (node_id, id)
      ) STRICT;

      CREATE TABLE payer_subscription_periods (
        node_id TEXT NOT NULL REFERENCES nodes(id),
        subscription TEXT NOT NULL,
        period INTEGER NOT NULL,
        status TEXT NOT NULL CHECK (status IN ('open', 'renewal_declined', 'closed')),
        period_start INTEGER,
        period_end INTEGER,
        updated_at INTEGER NOT NULL,
        PRIMARY KEY (node_id, subscription, period)
      ) STRICT;

      -- Control facts are idempotent on (node, jti); the hash tells a replay from a different message.
      CREATE TABLE control_messages (
        node_id TEXT NOT NULL REFERENCES nodes(id),
        jti TEXT NOT NULL,
        message_hash TEXT NOT NULL,
        issuer TEXT NOT NULL,
        kind TEXT NOT NULL,
        event_id TEXT NOT NULL,
        received_at INTEGER NOT NULL,
        PRIMARY KEY (node_id, jti)
      ) STRICT;

      -- The transactional outbox: every state change writes its event in the same transaction.
      -- body is the exact envelope (schema 1.1.0); body_v100 the 1.0.0 envelope, NULL for kinds added in 1.1.0.
      CREATE TABLE events (
        seq INTEGER PRIMARY KEY,
        id TEXT NOT NULL UNIQUE,
        node_id TEXT NOT NULL REFERENCES nodes(id),
        type TEXT NOT NULL,
        external_ref TEXT NOT NULL,
        occurred_at INTEGER NOT NULL,
        body TEXT NOT NULL,
        body_v100 TEXT
      ) STRICT;
      CREATE INDEX events_node ON events(node_id, seq);
    `);
  },
  postgres: `
    CREATE TABLE streams (
      node_id TEXT NOT NULL REFERENCES nodes(id),
      id TEXT NOT NULL,
      budget TEXT NOT NULL,
      issuer TEXT NOT NULL,
      payer TEXT NOT NULL,
      credential_id TEXT NOT NULL,
      credential TEXT NOT NULL,
      iat BIGINT NOT NULL,
      exp BIGINT NOT NULL,
      cap_micro BIGINT NOT NULL CHECK (cap_micro > 0),
      asset TEXT NOT NULL,
      unit_price_micro BIGINT NOT NULL CHECK (unit_price_micro > 0),
      rate_micro_per_s BIGINT,
      mode TEXT NOT NULL CHECK (mode IN ('escrow', 'card')),
      voucher_key TEXT NOT NULL,
      claims TEXT NOT NULL,
      status TEXT NOT NULL DEFAULT 'open' CHECK (status IN ('open', 'exhausted', 'revoked')),
      status_reason TEXT,
      billed_micro BIGINT NOT NULL DEFAULT 0 CHECK (billed_micro >= 0),
      billed_units BIGINT NOT NULL DEFAULT 0 CHECK (billed_units >= 0),
      billed_voucher TEXT,
      billed_signed_at BIGINT,
      checkpointed_micro BIGINT NOT NULL DEFAULT 0,
      final_micro BIGINT NOT NULL DEFAULT 0,
      frontier_micro BIGINT NOT NULL DEFAULT 0,
      frontier_finality TEXT NOT NULL DEFAULT 'none' CHECK (frontier_finality IN ('none', 'checkpointed', 'final')),
      frontier_reference TEXT,
      frontier_checkpointed_at BIGINT,
      frontier_final_at BIGINT,
      created_at BIGINT NOT NULL,
      updated_at BIGINT NOT NULL,
      PRIMARY KEY (node_id, id),
      CHECK (billed_micro <= cap_micro)
    );
    CREATE INDEX streams_budget ON streams(node_id, budget);

    -- SQLite's INTEGER PRIMARY KEY is the rowid: a sequence assigned on insert.
    CREATE TABLE vouchers (
      seq BIGINT GENERATED BY DEFAULT AS IDENTITY PRIMARY KEY,
      node_id TEXT NOT NULL,
      stream TEXT NOT NULL,
      amount_micro BIGINT NOT NULL,
      units BIGINT NOT NULL,
      signed_at BIGINT NOT NULL,
      received_at BIGINT NOT NULL,
      voucher TEXT NOT NULL,
      FOREIGN KEY (node_id, stream) REFERENCES streams(node_id, id)
    );
    CREATE INDEX vouchers_stream_time ON vouchers(node_id, stream, received_at);

    CREATE TABLE revocations (
      node_id TEXT NOT NULL REFERENCES nodes(id),
      stream TEXT NOT NULL,
      reason TEXT,
      revoked_at BIGINT NOT NULL,
      PRIMARY KEY (node_id, stream)
    );

    CREATE TABLE budgets (
      node_id TEXT NOT NULL REFERENCES nodes(id),
      id TEXT NOT NULL,
      status TEXT NOT NULL CHECK (status IN ('active', 'halted', 'released')),
      reasons TEXT NOT NULL DEFAULT '[]',
      released_micro BIGINT,
      updated_at BIGINT NOT NULL,
      PRIMARY KEY (node_id, id)
    );

    CREATE TABLE payer_subscription_periods (
      node_id TEXT NOT NULL REFERENCES nodes(id),
      subscription TEXT NOT NULL,
      period BIGINT NOT NULL,
      status TEXT NOT NULL CHECK (status IN ('open', 'renewal_declined', 'closed')),
      period_start BIGINT,
      period_end BIGINT,
      updated_at BIGINT NOT NULL,
      PRIMARY KEY (node_id, subscription, period)
    );

    CREATE TABLE control_messages (
      node_id TEXT NOT NULL REFERENCES nodes(id),
      jti TEXT NOT NULL,
      message_hash TEXT NOT NULL,
      issuer TEXT NOT NULL,
      kind TEXT NOT NULL,
      event_id TEXT NOT NULL,
      received_at BIGINT NOT NULL,
      PRIMARY KEY (node_id, jti)
    );

    -- seq orders events per node: it is assigned inside the serialised write transactions, so it commits in order.
    CREATE TABLE events (
      seq BIGINT GENERATED BY DEFAULT AS IDENTITY PRIMARY KEY,
      id TEXT NOT NULL UNIQUE,
      node_id TEXT NOT NULL REFERENCES nodes(id),
      type TEXT NOT NULL,
      external_ref TEXT NOT NULL,
      occurred_at BIGINT NOT NULL,
      body TEXT NOT NULL,
      body_v100 TEXT
    );
    CREATE INDEX events_node ON events(node_id, seq);
  `,
};
export default m;
