import type { Migration } from './index.js';

const m: Migration = {
  version: 110,
  name: 'leases with a fencing token (one settler per rail account among daemons sharing a store)',
  up(db) {
    db.exec(`
      CREATE TABLE leases (
        name TEXT PRIMARY KEY,
        holder TEXT NOT NULL,
        fence INTEGER NOT NULL,
        expires_at INTEGER NOT NULL
      ) STRICT;
    `);
  },
  postgres: `
    -- A lease is held by holder until expires_at (ms); every take-over bumps fence, so a holder that lost it cannot
    -- record a stale result (its writes name a fence that is no longer current).
    CREATE TABLE leases (
      name TEXT PRIMARY KEY,
      holder TEXT NOT NULL,
      fence BIGINT NOT NULL,
      expires_at BIGINT NOT NULL
    );
  `,
};
export default m;
