import type { Migration } from './index.js';

const m: Migration = {
  version: 80,
  name: 'streams by last activity',
  up(db) {
    db.exec(`
      -- GET /v1/streams?sort=activity (watch): newest activity first, keyset-paged on (updated_at, id).
      CREATE INDEX streams_activity ON streams(node_id, updated_at, id);
    `);
  },
  postgres: `
    CREATE INDEX streams_activity ON streams(node_id, updated_at, id);
  `,
};
export default m;
