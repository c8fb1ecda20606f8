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
};
export default m;
