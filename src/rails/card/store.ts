// The card rail's SQL (kept beside the rail, since only the rail writes it): refunds announced per stream, and the
// two settlement-row adjustments the generic engine has no hook for yet (see the comment block in adapter.ts).
import type { Sql } from '../../store/sql.js';

export interface CardRefundRow { node_id: string; stream: string; payment_intent: string; refunded_minor: bigint; refunded_micro: bigint; last_refund: string; updated_at: bigint }

export const cardRefunds = {
  get: (q: Sql, nodeId: string, stream: string) =>
    q.get<CardRefundRow>('SELECT * FROM card_refunds WHERE node_id = ? AND stream = ?', [nodeId, stream], true),
  /** Raise the announced cumulative refund; returns false when it is not above what was announced (never twice, never lower). */
  raise: async (q: Sql, r: { nodeId: string; stream: string; paymentIntent: string; minor: bigint; micro: bigint; lastRefund: string; now: number }) =>
    (await q.run(`INSERT INTO card_refunds(node_id, stream, payment_intent, refunded_minor, refunded_micro, last_refund, updated_at) VALUES (?, ?, ?, ?, ?, ?, ?)
      ON CONFLICT(node_id, stream) DO UPDATE SET payment_intent = excluded.payment_intent, refunded_minor = excluded.refunded_minor,
        refunded_micro = excluded.refunded_micro, last_refund = excluded.last_refund, updated_at = excluded.updated_at
      WHERE excluded.refunded_micro > card_refunds.refunded_micro`,
      [r.nodeId, r.stream, r.paymentIntent, r.minor, r.micro, r.lastRefund, r.now])) > 0,
};

/** Card streams with something captured: the ones that can have refunds. */
export const capturedCardStreams = (q: Sql) =>
  q.all<{ node_id: string; id: string; budget: string; asset: string; claims: string }>(
    "SELECT node_id, id, budget, asset, claims FROM streams WHERE mode = 'card' AND checkpointed_micro > 0 ORDER BY node_id, id", [], true);

export const cardSettlements = {
  /** A capture found after its answer was lost: point the row at it. */
  setReference: (q: Sql, id: string, reference: string, detail: string) =>
    q.run("UPDATE settlements SET reference = ?, detail = ? WHERE id = ? AND status = 'submitted'", [reference, detail, id]),
};
