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
  /** Every signed transaction sent for it, as escrow settlements keep them: JSON {nonce, txs: [{hash, raw}]}, newest last (migration 0170; older rows: raw_tx). */
  detail: string | null;
  /** The stream it bills (x402-<payer>-<resource hash>). */
  stream: string | null;
  valid_before: bigint | null;
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
  /** The stream it bills (service/x402.ts x402Stream). */
  stream: string;
  /** The authorization's validBefore (seconds). */
  validBefore: bigint;
  now: number;
}

/** A node's x402 stream, summed over its payments that were sent (failed and unsent claims bill nothing). */
export interface X402StreamRow {
  stream: string;
  chain_id: bigint;
  /** The asset token (lower case). */
  token: string;
  payer: string;
  resource: string;
  billed_micro: bigint;
  checkpointed_micro: bigint;
  final_micro: bigint;
  /** Payments sent (each one paid request). */
  payments: bigint;
  /** Billed by payments sent since the rate window's start. */
  window_micro: bigint;
  /** The newest payment's amount (the price of one request, as the resource server asked). */
  last_amount_micro: bigint;
  created_at: number;
  updated_at: number;
  /** The newest validBefore of its authorizations (seconds; null for payments from before migration 0170). */
  valid_before: number | null;
}

const SENT = "('submitted', 'checkpointed', 'final')";
const sumIf = (cond: string, what = 'amount_micro') => `CAST(SUM(CASE WHEN ${cond} THEN ${what} ELSE 0 END) AS BIGINT)`;
/** A payment's last change (its lifecycle only moves forward: final after checkpointed after its broadcasts); a stream's is its sent payments' latest. */
const CHANGED = 'COALESCE(final_at, checkpointed_at, last_broadcast_at, created_at)';
/** One row per stream of @node (only streams with a payment sent), as a subquery to filter and page on. */
const STREAMS = `(SELECT stream, MIN(payer) AS payer, MIN(resource) AS resource, MIN(chain_id) AS chain_id, MIN(token) AS token,
    ${sumIf(`status IN ${SENT}`)} AS billed_micro, ${sumIf("status IN ('checkpointed', 'final')")} AS checkpointed_micro,
    ${sumIf("status = 'final'")} AS final_micro, ${sumIf(`status IN ${SENT}`, '1')} AS payments,
    ${sumIf(`status IN ${SENT} AND created_at >= @windowStart`)} AS window_micro,
    MIN(CASE WHEN status IN ${SENT} THEN created_at END) AS created_at, MAX(CASE WHEN status IN ${SENT} THEN ${CHANGED} END) AS updated_at,
    MAX(CASE WHEN status IN ${SENT} THEN valid_before END) AS valid_before
  FROM x402_payments WHERE node_id = @node AND stream IS NOT NULL GROUP BY stream HAVING ${sumIf(`status IN ${SENT}`, '1')} > 0) g`;
const LAST_AMOUNT = `(SELECT p.amount_micro FROM x402_payments p WHERE p.node_id = @node AND p.stream = g.stream AND p.status IN ${SENT} ORDER BY p.created_at DESC LIMIT 1) AS last_amount_micro`;

function toStreamRow(r: Record<string, unknown>): X402StreamRow {
  for (const c of ['created_at', 'updated_at', 'valid_before']) if (r[c] !== null && r[c] !== undefined) r[c] = Number(r[c]);
  for (const c of ['billed_micro', 'checkpointed_micro', 'final_micro', 'payments', 'window_micro', 'last_amount_micro']) r[c] = BigInt((r[c] ?? 0) as bigint);
  return r as unknown as X402StreamRow;
}

const KEY = 'chain_id = ? AND token = ? AND payer = ? AND nonce = ?';

export const x402Payments = {
  /**
   * Claim an authorization: true when this insert made the row (the caller alone sends its transaction). A second
   * claim of the same (chain, token, payer, nonce), from this daemon or another on the same database, gets false.
   */
  claim: async (q: Sql, c: X402Claim) =>
    (await q.run(
      "INSERT INTO x402_payments(chain_id, token, payer, nonce, id, node_id, resource, stream, valid_before, pay_to, amount_micro, status, created_at) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, 'claimed', ?) ON CONFLICT DO NOTHING",
      [c.chainId, c.token.toLowerCase(), c.payer.toLowerCase(), c.nonce.toLowerCase(), c.id, c.nodeId, c.resource, c.stream, c.validBefore, c.payTo.toLowerCase(), c.amount, c.now],
    )) === 1,
  /**
   * Take over a claim that was never sent (status still `claimed`, older than `staleBefore`: its daemon died between the
   * claim and the send). The new id makes the old claimant's `submitted` match no row, so it sends nothing.
   */
  takeStale: async (q: Sql, c: X402Claim, staleBefore: number) =>
    (await q.run(
      `UPDATE x402_payments SET id = ?, node_id = ?, resource = ?, stream = ?, valid_before = ?, created_at = ? WHERE ${KEY} AND status = 'claimed' AND created_at < ?`,
      [c.id, c.nodeId, c.resource, c.stream, c.validBefore, c.now, c.chainId, c.token.toLowerCase(), c.payer.toLowerCase(), c.nonce.toLowerCase(), staleBefore],
    )) === 1,
  get: (q: Sql, chainId: number, token: string, payer: string, nonce: string) =>
    q.get<X402PaymentRow>(`SELECT * FROM x402_payments WHERE ${KEY}`, [chainId, token.toLowerCase(), payer.toLowerCase(), nonce.toLowerCase()], true),
  byId: (q: Sql, id: string) => q.get<X402PaymentRow>('SELECT * FROM x402_payments WHERE id = ?', [id], true),
  /** claimed → submitted: false when the claim is no longer this id's (taken over as stale): then nothing may be sent. */
  submitted: async (q: Sql, id: string, txHash: string, raw: string, detail: string, now: number) =>
    (await q.run("UPDATE x402_payments SET status = 'submitted', tx_hash = ?, raw_tx = ?, detail = ?, broadcasts = 1, last_broadcast_at = ? WHERE id = ? AND status = 'claimed'", [txHash, raw, detail, now, id])) === 1,
  /** The transactions it has sent or is about to send (recorded before a rebroadcast or replacement leaves the process; mined, one may still wait above). */
  transactions: (q: Sql, id: string, detail: string) => q.run("UPDATE x402_payments SET detail = ? WHERE id = ? AND status IN ('submitted', 'checkpointed')", [detail, id]),
  /** Sent again (the same bytes) or replaced (same nonce, higher fees: `txHash` the newest), with why in `error`. */
  rebroadcast: (q: Sql, id: string, now: number, txHash: string, detail: string, note: string) =>
    q.run("UPDATE x402_payments SET broadcasts = broadcasts + 1, last_broadcast_at = ?, tx_hash = ?, detail = ?, error = ? WHERE id = ? AND status = 'submitted'", [now, txHash, detail, note, id]),
  /** The mined transaction (of the ones sent) that paid: the payment's reference from then on. */
  minedAs: (q: Sql, id: string, txHash: string) => q.run("UPDATE x402_payments SET tx_hash = ? WHERE id = ? AND status = 'submitted'", [txHash, id]),
  /** Nothing left the process: the claim is dropped, so the same authorization can be settled again. */
  unclaim: (q: Sql, id: string) => q.run("DELETE FROM x402_payments WHERE id = ? AND status = 'claimed'", [id]),
  failed: (q: Sql, id: string, error: string) => q.run("UPDATE x402_payments SET status = 'failed', error = ? WHERE id = ? AND status IN ('claimed', 'submitted', 'checkpointed')", [error, id]),
  /** submitted → checkpointed: true when this call moved it (its event is recorded once). */
  checkpointed: async (q: Sql, id: string, block: bigint, now: number) =>
    (await q.run("UPDATE x402_payments SET status = 'checkpointed', block_number = ?, checkpointed_at = ? WHERE id = ? AND status = 'submitted'", [block, now, id])) === 1,
  final: async (q: Sql, id: string, now: number) =>
    (await q.run("UPDATE x402_payments SET status = 'final', final_at = ? WHERE id = ? AND status = 'checkpointed'", [now, id])) === 1,
  /** Every payment whose transactions may still hold a nonce of the wallet (sent, or mined and not final). */
  sent: (q: Sql) => q.all<Pick<X402PaymentRow, 'id' | 'detail' | 'raw_tx'>>("SELECT id, detail, raw_tx FROM x402_payments WHERE status IN ('submitted', 'checkpointed')"),
  /** Sent and not mined: what node_svc_x402_pending_transactions counts. */
  pendingCount: async (q: Sql) => Number((await q.value<number | bigint>("SELECT COUNT(*) FROM x402_payments WHERE status = 'submitted'")) ?? 0),
  /** The node's x402 streams, by id or by last activity (newest first), keyset-paged like GET /v1/streams. */
  streams: async (q: Sql, nodeId: string, l: { sort: 'id' | 'activity'; afterId: string; afterAt: number | null; limit: number; windowStart: number }) =>
    (await q.all<Record<string, unknown>>(`SELECT g.*, ${LAST_AMOUNT} FROM ${STREAMS} WHERE ` + (l.sort === 'id'
      ? 'g.stream > @afterId ORDER BY g.stream LIMIT @limit'
      : '(CAST(@afterAt AS BIGINT) IS NULL OR g.updated_at < @afterAt OR (g.updated_at = @afterAt AND g.stream < @afterId)) ORDER BY g.updated_at DESC, g.stream DESC LIMIT @limit'),
    { node: nodeId, afterId: l.afterId, afterAt: l.afterAt, limit: l.limit, windowStart: l.windowStart }, true)).map(toStreamRow),
  stream: async (q: Sql, nodeId: string, stream: string, windowStart: number) => {
    const r = await q.get<Record<string, unknown>>(`SELECT g.*, ${LAST_AMOUNT} FROM ${STREAMS} WHERE g.stream = @stream`, { node: nodeId, stream, windowStart }, true);
    return r ? toStreamRow(r) : undefined;
  },
  /** The stream's newest mined payment: the frontier's reference. */
  newestMined: (q: Sql, nodeId: string, stream: string) =>
    q.get<X402PaymentRow>("SELECT * FROM x402_payments WHERE node_id = ? AND stream = ? AND status IN ('checkpointed', 'final') ORDER BY checkpointed_at DESC, id DESC LIMIT 1", [nodeId, stream], true),
  /** The stream's newest payment not final yet (claimed, sent, or mined): what the finality view shows as in progress. */
  newestUnfinished: (q: Sql, nodeId: string, stream: string) =>
    q.get<X402PaymentRow>("SELECT * FROM x402_payments WHERE node_id = ? AND stream = ? AND status IN ('claimed', 'submitted', 'checkpointed') ORDER BY created_at DESC, id DESC LIMIT 1", [nodeId, stream], true),
  /** Sent and not final yet, oldest first. */
  open: (q: Sql, limit = 64) =>
    q.all<X402PaymentRow>("SELECT * FROM x402_payments WHERE status IN ('submitted', 'checkpointed') ORDER BY created_at LIMIT ?", [limit], true),
};
