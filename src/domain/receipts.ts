// Signed settlement receipts (issue #24): what a receipt says, whichever rail made the settlement final.
// A receipt is a compact JWS (alg EdDSA, typ node-svc-receipt+jwt, kid of a daemon receipt key) that anyone holding the
// daemon's receipt JWKS can check offline; with an RPC URL an escrow receipt is also checked against the chain.

export const RECEIPT_TYP = 'node-svc-receipt+jwt';
export const RECEIPT_ALG = 'EdDSA';

/**
 * The rail's reference of a final settlement. Escrow: the transaction that paid (the mined one, whichever of its
 * broadcasts it was), its block, the chain and the contract it was sent to; `channel` when it settled an escrow channel
 * (the contract's Settled log then carries the cumulative amount). Card: the processor and the capture (its balance
 * transaction, the object whose funds became available), with the PaymentIntent and connected account.
 * An x402 payment settled on the escrow rail gets the escrow form without `channel` (`contract`: the token it called).
 */
export type RailReference =
  | { rail: 'escrow'; chainId: number; contract: string; txHash: string; blockNumber: number; channel?: string }
  | { rail: 'card'; processor: string; captureId: string; paymentIntent?: string; account?: string };

/** The claims of a receipt. Money is a decimal string of micro units; times: iat NumericDate, finalAt RFC 3339. */
export interface ReceiptClaims {
  iss: string;
  iat: number;
  /** The settlement's id: one receipt per final settlement. */
  jti: string;
  node: string;
  stream: string;
  asset: string;
  /** The cumulative amount final with this settlement (micro units). */
  amountMicro: string;
  /** When the settlement became final. */
  finalAt: string;
  rail: 'escrow' | 'card';
  escrow?: { chainId: number; contract: string; txHash: string; blockNumber: number; channel?: string };
  card?: { processor: string; captureId: string; paymentIntent?: string; account?: string };
}

/** What a final settlement needs for its receipt. */
export interface ReceiptFacts {
  jti: string;
  node: string;
  stream: string;
  asset: string;
  amountMicro: bigint;
  finalAt: number;
  reference: RailReference;
}

export function receiptClaims(f: ReceiptFacts, iss: string, now: number): ReceiptClaims {
  const { rail, ...ref } = f.reference;
  return {
    iss, iat: Math.floor(now / 1000), jti: f.jti, node: f.node, stream: f.stream, asset: f.asset, amountMicro: f.amountMicro.toString(),
    finalAt: new Date(f.finalAt).toISOString(), rail, [rail]: ref,
  };
}

/**
 * Names a receipt check refuses with. Offline: malformed, unsupported_algorithm, wrong_type, unknown_key (no key of the
 * JWKS has its kid: another daemon's, or a retired key), bad_signature (changed after signing, or signed by another
 * key), missing_claim, wrong_node. With an RPC (escrow): chain_mismatch (the RPC serves another chain), tx_not_found,
 * tx_not_mined, tx_failed (reverted), block_mismatch, wrong_contract (the transaction was sent elsewhere),
 * amount_mismatch (the Settled log names another cumulative amount, or none), chain_unavailable (the RPC cannot be
 * read: nothing is confirmed).
 */
export const RECEIPT_REFUSALS = [
  'malformed', 'unsupported_algorithm', 'wrong_type', 'unknown_key', 'bad_signature', 'missing_claim', 'wrong_node',
  'chain_mismatch', 'tx_not_found', 'tx_not_mined', 'tx_failed', 'block_mismatch', 'wrong_contract', 'amount_mismatch', 'chain_unavailable',
] as const;
export type ReceiptRefusal = (typeof RECEIPT_REFUSALS)[number];
