// x402 payments (issue #24): the only SQL for them.
import type { Sql } from './sql.js';

export type X402Status = 'claimed' | 'submitted' | 'checkpointed' | 'final' | 'failed';

export interface X402PaymentRow {
  chain_id: bigint;
  token: string;
  payer: string;
  nonce: string;
  id: string;
  node_id: string;
  resource: string;
  pay_to: string;
  amount_micro: bigint;
  status: X402Status;
  tx_hash: string | null;
  /** The signed transaction (public: it is on the chain once mined), resent as it is when the chain lost it. */
  raw_tx: string | null;
  broadcasts: bigint;
  last_broadcast_at: bigint | null;
  block_number: bigint | null;
  error: string | null;
  created_at: bigint;
  checkpointed_at: bigint | null;
  final_at: bigint | null;
}

export interface X402Claim {
  chainId: number;
  token: string;
  payer: string;
  nonce: string;
  id: string;
  nodeId: string;
  resource: string;
  payTo: string;
  amount: bigint;
  now: number;
}

const KEY = 'chain_id = ? AND token = ? AND payer = ? AND nonce = ?';

export const x402Payments = {
  /**
   * Claim an authorization: true when this insert made the row (the caller alone sends its transaction). A second
   * claim of the same (chain, token, payer, nonce), from this daemon or another on the same database, gets false.
   */
  claim: async (q: Sql, c: X402Claim) =>
    (await q.run(
      "INSERT INTO x402_payments(chain_id, token, payer, nonce, id, node_id, resource, pay_to, amount_micro, status, created_at) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, 'claimed', ?) ON CONFLICT DO NOTHING",
      [c.chainId, c.token.toLowerCase(), c.payer.toLowerCase(), c.nonce.toLowerCase(), c.id, c.nodeId, c.resource, c.payTo.toLowerCase(), c.amount, c.now],
    )) === 1,
  /**
   * Take over a claim that was never sent (status still `claimed`, older than `staleBefore`: its daemon died between the
   * claim and the send). The new id makes the old claimant's `submitted` match no row, so it sends nothing.
   */
  takeStale: async (q: Sql, c: X402Claim, staleBefore: number) =>
    (await q.run(
      `UPDATE x402_payments SET id = ?, node_id = ?, resource = ?, created_at = ? WHERE ${KEY} AND status = 'claimed' AND created_at < ?`,
      [c.id, c.nodeId, c.resource, c.now, c.chainId, c.token.toLowerCase(), c.payer.toLowerCase(), c.nonce.toLowerCase(), staleBefore],
    )) === 1,
  get: (q: Sql, chainId: number, token: string, payer: string, nonce: string) =>
    q.get<X402PaymentRow>(`SELECT * FROM x402_payments WHERE ${KEY}`, [chainId, token.toLowerCase(), payer.toLowerCase(), nonce.toLowerCase()], true),
  byId: (q: Sql, id: string) => q.get<X402PaymentRow>('SELECT * FROM x402_payments WHERE id = ?', [id], true),
  /** claimed → submitted: false when the claim is no longer this id's (taken over as stale): then nothing may be sent. */
  submitted: async (q: Sql, id: string, txHash: string, raw: string, now: number) =>
    (await q.run("UPDATE x402_payments SET status = 'submitted', tx_hash = ?, raw_tx = ?, broadcasts = 1, last_broadcast_at = ? WHERE id = ? AND status = 'claimed'", [txHash, raw, now, id])) === 1,
  rebroadcast: (q: Sql, id: string, now: number) => q.run("UPDATE x402_payments SET broadcasts = broadcasts + 1, last_broadcast_at = ? WHERE id = ? AND status = 'submitted'", [now, id]),
  /** Nothing left the process: the claim is dropped, so the same authorization can be settled again. */
  unclaim: (q: Sql, id: string) => q.run("DELETE FROM x402_payments WHERE id = ? AND status = 'claimed'", [id]),
  failed: (q: Sql, id: string, error: string) => q.run("UPDATE x402_payments SET status = 'failed', error = ? WHERE id = ? AND status IN ('claimed', 'submitted', 'checkpointed')", [error, id]),
  /** submitted → checkpointed: true when this call moved it (its event is recorded once). */
  checkpointed: async (q: Sql, id: string, block: bigint, now: number) =>
    (await q.run("UPDATE x402_payments SET status = 'checkpointed', block_number = ?, checkpointed_at = ? WHERE id = ? AND status = 'submitted'", [block, now, id])) === 1,
  final: async (q: Sql, id: string, now: number) =>
    (await q.run("UPDATE x402_payments SET status = 'final', final_at = ? WHERE id = ? AND status = 'checkpointed'", [now, id])) === 1,
  /** Sent and not final yet, oldest first. */
  open: (q: Sql, limit = 64) =>
    q.all<X402PaymentRow>("SELECT * FROM x402_payments WHERE status IN ('submitted', 'checkpointed') ORDER BY created_at LIMIT ?", [limit], true),
};
