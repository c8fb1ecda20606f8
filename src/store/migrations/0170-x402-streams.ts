import { createHash } from 'node:crypto';
import type { Migration } from './index.js';

// x402 payments in streams/finality and resent as escrow settles are (issue #24): each payment names its stream (so a
// node's x402 streams are grouped and paged by SQL), keeps every signed transaction sent for it as the escrow
// settlements do (`detail`: {nonce, txs}; the wallet's held nonces and fee-bumped replacements read it), and the
// authorization's validBefore (what a stream listing shows as its expiry).
const m: Migration = {
  version: 170,
  name: 'x402 payments: stream, transactions sent, validBefore',
  up(db) {
    db.exec(`
      ALTER TABLE x402_payments ADD COLUMN stream TEXT;
      ALTER TABLE x402_payments ADD COLUMN detail TEXT;
      ALTER TABLE x402_payments ADD COLUMN valid_before INTEGER;
    `);
    // Rows from before: the stream as service/x402.ts names it (the resource URL hashed); their one transaction is raw_tx.
    const rows = db.prepare('SELECT id, payer, resource FROM x402_payments').all() as Array<{ id: string; payer: string; resource: string }>;
    const set = db.prepare('UPDATE x402_payments SET stream = ? WHERE id = ?');
    for (const r of rows) set.run(`x402-${r.payer.toLowerCase()}-${createHash('sha256').update(r.resource).digest('hex').slice(0, 16)}`, r.id);
    db.exec('CREATE INDEX x402_payments_stream ON x402_payments(node_id, stream)');
  },
  postgres: `
    ALTER TABLE x402_payments ADD COLUMN stream TEXT;
    ALTER TABLE x402_payments ADD COLUMN detail TEXT;
    ALTER TABLE x402_payments ADD COLUMN valid_before BIGINT;
    CREATE INDEX x402_payments_stream ON x402_payments(node_id, stream);
  `,
};
export default m;
