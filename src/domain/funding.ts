// Funding is live state (DESIGN §14): a stream is payable only while its rail can pay this node. The rail reads the
// funding source (an escrow channel on chain, a card authorization at the processor); the service keeps the answer.

/** What a rail answers about a stream's funding source. Throws FundingUnavailable when it cannot tell. */
export type FundingCheck =
  | { funded: true; /** The cumulative amount the source can pay in all (escrow: the deposit; card: captured + capturable). */ limitMicro: bigint; detail: string }
  | { funded: false; reason: string };

/** The stream as the rail needs to judge its funding: its claims as signed and who it is for. */
export interface FundingSubject {
  nodeId: string;
  stream: string;
  payer: string;
  asset: string;
  mode: 'escrow' | 'card';
  claims: Record<string, unknown>;
}

/** The rail could not be read (RPC down, processor 5xx): never a yes, a retriable 503. */
export class FundingUnavailable extends Error {
  override readonly name = 'FundingUnavailable';
}

/**
 * The funding source a credential names, as one key across nodes: escrow `escrow:<chainId>:<contract>:<channel>`,
 * card `card:<paymentIntent>`. A source's money is cumulative for the source, so one source backs one stream.
 * undefined: the credential names none (JWS vouchers without a channel), and no rail settles it.
 */
export function fundingSource(mode: string, claims: Record<string, unknown>): string | undefined {
  if (mode === 'escrow' && claims.channel !== undefined) {
    const { chainId, escrow, channel } = claims;
    return `escrow:${String(chainId)}:${String(escrow).toLowerCase()}:${String(channel).toLowerCase()}`;
  }
  if (mode === 'card' && typeof claims.paymentIntent === 'string') return `card:${claims.paymentIntent}`;
  return undefined;
}

/** The effective cap: the credential's cap, or less when the funding source can pay less. */
export const effectiveCap = (capMicro: bigint, limitMicro: bigint | null): bigint => (limitMicro !== null && limitMicro < capMicro ? limitMicro : capMicro);
