// x402 payments as streams (issue #24): GET /v1/streams, …/{id}/verify|headroom|finality show a node's x402 streams
// (x402-<payer>-<resource hash>, budget x402) next to its credential streams, summed from x402_payments. There is no
// allowance credential behind them: every request is paid by its own authorization before it is served, so nothing is
// authorized ahead: cap = billed, nothing remains, stage halted, not payable by voucher. Loads no chain code.
import { iso } from '../domain/time.js';
import { x402Payments, type X402PaymentRow, type X402StreamRow } from '../store/x402.js';
import type { Deps } from './deps.js';

/** Only ids of this shape can be x402 streams: any other 404 costs no second read. */
export const isX402StreamId = (id: string) => id.startsWith('x402-');

/** What `source` says of a stream: an allowance credential's, or x402 payments'. */
export type StreamSource = 'credential' | 'x402';

const HEADROOM_REASON = 'an x402 stream: each request is paid by its own x402 payment; nothing is authorized ahead (no allowance credential)';

const windowStart = (d: Deps) => d.now() - d.config.rateWindowSeconds * 1000;

/** The CAIP-19 asset the facilitator names (service/x402.ts asset), from the payments' chain and token. */
const assetOf = (r: X402StreamRow) => `eip155:${r.chain_id}/erc20:${r.token}`;

export async function x402StreamRow(d: Deps, nodeId: string, id: string): Promise<X402StreamRow | undefined> {
  return isX402StreamId(id) ? x402Payments.stream(d.store.q, nodeId, id, windowStart(d)) : undefined;
}

/** The frontier: everything mined, final when all of it is. */
const frontierFinality = (r: X402StreamRow) => (r.checkpointed_micro === 0n ? 'none' : r.final_micro === r.checkpointed_micro ? 'final' : 'checkpointed') as 'none' | 'checkpointed' | 'final';

export function x402Summary(r: X402StreamRow) {
  return {
    stream: r.stream, budget: 'x402', payer: r.payer, issuer: 'x402', mode: 'escrow' as const, asset: assetOf(r), source: 'x402' as const,
    status: 'open' as const, degradationStage: 'halted' as const, capMicro: r.billed_micro.toString(), billedMicro: r.billed_micro.toString(),
    remainingCapMicro: '0', finality: frontierFinality(r), finalMicro: r.final_micro.toString(), checkpointedMicro: r.checkpointed_micro.toString(),
    unsettledMicro: (r.billed_micro - r.checkpointed_micro).toString(), expiresAt: iso((r.valid_before ?? Math.floor(r.updated_at / 1000)) * 1000),
    lastActivityAt: iso(r.updated_at),
  };
}

export const x402Verify = (r: X402StreamRow) => ({ stream: r.stream, open: true, payable: false, status: 'open' as const, reason: HEADROOM_REASON, source: 'x402' as const });

export function x402Headroom(d: Deps, r: X402StreamRow) {
  return {
    stream: r.stream, asset: assetOf(r), source: 'x402' as const,
    capMicro: r.billed_micro.toString(), effectiveCapMicro: r.billed_micro.toString(), fundedMicro: null, billedMicro: r.billed_micro.toString(),
    remainingCapMicro: '0', unitPriceMicro: r.last_amount_micro.toString(), remainingUnits: '0',
    rate: { limitMicroPerSecond: null, observedMicroPerSecond: (r.window_micro / BigInt(d.config.rateWindowSeconds)).toString() },
    degradationStage: 'halted' as const, status: 'open' as const, asOf: iso(d.now()),
  };
}

/** An x402 payment's state as a settlement's: claimed (not sent yet) is pending. */
const SETTLEMENT_STATUS = { claimed: 'pending', submitted: 'submitted', checkpointed: 'checkpointed' } as const;

export async function x402Finality(d: Deps, nodeId: string, r: X402StreamRow) {
  const [mined, open] = await Promise.all([x402Payments.newestMined(d.store.q, nodeId, r.stream), x402Payments.newestUnfinished(d.store.q, nodeId, r.stream)]);
  const finality = frontierFinality(r);
  const notFinal = r.billed_micro - r.final_micro;
  return {
    stream: r.stream, asset: assetOf(r), source: 'x402' as const, finality,
    finalMicro: r.final_micro.toString(), checkpointedMicro: r.checkpointed_micro.toString(),
    frontier: {
      amountMicro: r.checkpointed_micro.toString(), finality, reference: mined?.tx_hash ?? null,
      checkpointedAt: mined?.checkpointed_at == null ? null : iso(Number(mined.checkpointed_at)),
      finalAt: mined?.final_at == null ? null : iso(Number(mined.final_at)),
    },
    // The billed truth is the payments sent (each one request paid): no voucher behind them.
    billedTruth: { amountMicro: r.billed_micro.toString(), units: r.payments.toString(), signedAt: null, voucher: null },
    unsettledMicro: (r.billed_micro - r.checkpointed_micro).toString(),
    reason: notFinal === 0n ? null : `x402 payments of ${notFinal} are not final yet (sent and not mined, or mined and short of --confirmations)`,
    funding: { status: 'none' as const, reason: null, fundedMicro: null },
    settlement: open ? inProgress(d, open) : null,
    x402: { payer: r.payer, resource: r.resource, payments: Number(r.payments) },
    asOf: iso(d.now()),
  };
}

/** The newest payment not final: stuck when sent and not mined past --settle-stuck-after (as a settlement is). */
function inProgress(d: Deps, p: X402PaymentRow) {
  const sentAt = Number(p.created_at);
  return {
    amountMicro: p.amount_micro.toString(), status: SETTLEMENT_STATUS[p.status as keyof typeof SETTLEMENT_STATUS] ?? 'pending',
    reference: p.tx_hash, createdAt: iso(sentAt), submittedAt: p.tx_hash ? iso(sentAt) : null, attempts: Number(p.broadcasts),
    lastError: p.error, stuck: p.status === 'submitted' && d.now() - sentAt > d.config.settlementStuckMs, payment: p.id,
  };
}

/**
 * The node's x402 streams for a page of GET /v1/streams (open standing: they are in status=open and all, never closed),
 * `limit` past the same keyset position as the credential streams: the caller merges the two.
 */
export async function x402Page(d: Deps, nodeId: string, o: { status: 'open' | 'closed' | 'all'; sort: 'id' | 'activity'; afterId: string; afterAt: number | null; limit: number }) {
  if (o.status === 'closed') return [];
  return x402Payments.streams(d.store.q, nodeId, { sort: o.sort, afterId: o.afterId, afterAt: o.afterAt, limit: o.limit, windowStart: windowStart(d) });
}
