// Why a stream's billed truth is not final yet, in words: `finality: none` alone looked like "wait forever".
import type { StreamRow } from '../store/streams.js';
import type { Deps } from './deps.js';

export function finalityReason(d: Deps, row: StreamRow): string | null {
  if (row.frontier_finality === 'final' && row.final_micro >= row.billed_micro) return null;
  if (row.billed_micro === 0n) return 'nothing billed yet: no voucher accepted for this stream';
  if (row.frontier_finality === 'checkpointed') return 'settled and visible (checkpointed), waiting for the rail to make it final';
  if (row.mode === 'escrow') {
    let channel: unknown;
    try {
      channel = (JSON.parse(row.claims) as { channel?: unknown }).channel;
    } catch { /* below */ }
    // JWS vouchers (cnf.jwk) cannot be redeemed on chain: such a stream never settles on the escrow rail.
    if (!channel) return 'no escrow channel in the credential: nothing can be settled on chain';
  }
  if (row.funding_status === 'unfunded') return `not payable: ${row.funding_reason ?? 'its funding source cannot pay this node'}`;
  if (row.funding_status === 'pending') return 'its funding source has not been read on the rail yet';
  const rail = d.health?.rail;
  if (!rail) return 'no settlement rail configured on the daemon (--mode escrow|card)';
  if (rail.mode !== row.mode) return `the stream is in ${row.mode} mode, the daemon settles on the ${rail.mode} rail`;
  if (rail.accepts && !rail.accepts(row)) return "the credential names another chain or contract than the daemon's rail";
  return row.frontier_finality === 'final'
    ? 'final up to the frontier; the rest waits for the settlement policy (threshold, interval, close)'
    : 'waiting for the settlement policy (threshold, interval, close) or a settlement in flight';
}
