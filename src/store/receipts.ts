// Receipt keys and receipts: the only SQL for them.
import type { Sql } from './sql.js';

export interface ReceiptKeyRow {
  kid: string;
  issuer: string;
  alg: string;
  public_jwk: string;
  /** Secret: read only to sign. */
  private_jwk: string;
  status: 'active' | 'rotated' | 'retired';
  created_at: number;
  rotated_at: number | null;
  retired_at: number | null;
}

export interface ReceiptRow { jti: string; node_id: string; stream: string; amount_micro: bigint; kid: string; jws: string; final_at: bigint; created_at: bigint }

export const receiptKeys = {
  active: (q: Sql) => q.get<ReceiptKeyRow>("SELECT * FROM receipt_keys WHERE status = 'active'"),
  /** Insert a key as the active one unless one is active already (another daemon won): true when this one was stored. */
  insertIfNoActive: async (q: Sql, k: Omit<ReceiptKeyRow, 'status' | 'rotated_at' | 'retired_at'>) =>
    (await q.run(
      "INSERT INTO receipt_keys(kid, issuer, alg, public_jwk, private_jwk, status, created_at) VALUES (@kid, @issuer, @alg, @public_jwk, @private_jwk, 'active', @created_at) ON CONFLICT DO NOTHING",
      k as unknown as Record<string, unknown>,
    )) === 1,
  /** Every key without its private part, oldest first. */
  list: (q: Sql) =>
    q.all<Omit<ReceiptKeyRow, 'private_jwk'>>('SELECT kid, issuer, alg, public_jwk, status, created_at, rotated_at, retired_at FROM receipt_keys ORDER BY created_at, kid'),
  get: (q: Sql, kid: string) => q.get<Omit<ReceiptKeyRow, 'private_jwk'>>('SELECT kid, issuer, alg, public_jwk, status, created_at, rotated_at, retired_at FROM receipt_keys WHERE kid = ?', [kid]),
  rotateActive: (q: Sql, now: number) => q.run("UPDATE receipt_keys SET status = 'rotated', rotated_at = ? WHERE status = 'active'", [now]),
  retire: (q: Sql, kid: string, now: number) => q.run("UPDATE receipt_keys SET status = 'retired', retired_at = ? WHERE kid = ? AND status = 'rotated'", [now, kid]),
};

export const receipts = {
  /** Stored once per jti: a second issue of the same settlement (a retried write) keeps the first. */
  insert: (q: Sql, r: { jti: string; nodeId: string; stream: string; amount: bigint; kid: string; jws: string; finalAt: number; now: number }) =>
    q.run('INSERT INTO receipts(jti, node_id, stream, amount_micro, kid, jws, final_at, created_at) VALUES (?, ?, ?, ?, ?, ?, ?, ?) ON CONFLICT (jti) DO NOTHING',
      [r.jti, r.nodeId, r.stream, r.amount, r.kid, r.jws, r.finalAt, r.now]),
  byJti: (q: Sql, jti: string) => q.get<ReceiptRow>('SELECT * FROM receipts WHERE jti = ?', [jti], true),
  /** The stream's receipt for its highest final amount. */
  latest: (q: Sql, nodeId: string, stream: string) =>
    q.get<ReceiptRow>('SELECT * FROM receipts WHERE node_id = ? AND stream = ? ORDER BY amount_micro DESC, final_at DESC LIMIT 1', [nodeId, stream], true),
};
