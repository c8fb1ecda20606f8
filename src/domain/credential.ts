import type { Refusal } from './refusals.js';

export const ALLOWED_ALGORITHMS = ['EdDSA', 'ES256'] as const;
export type AllowedAlgorithm = (typeof ALLOWED_ALGORITHMS)[number];
export const CREDENTIAL_TYP = 'allowance+jwt';
export const MAX_CREDENTIAL_BYTES = 16 * 1024;
export const DEFAULT_CLOCK_TOLERANCE_S = 30;
export const MODES = ['escrow', 'card'] as const;
export type Mode = (typeof MODES)[number];

/** The payer's voucher key, from the credential's `cnf` claim. */
export type VoucherKey = { jwk: Record<string, unknown> } | { addr: string };

/** What `node-svc verify`, the HTTP verify and the SDK answer for a valid credential (DESIGN §4). */
export interface ValidCredential {
  valid: true;
  credentialId: string;
  issuer: string;
  payer: string;
  node: string;
  stream: string;
  budget: string;
  capMicro: string;
  asset: string;
  unitPriceMicro: string;
  rateMicroPerSecond: string | null;
  mode: 'escrow' | 'card';
  issuedAt: string;
  expiresAt: string;
  /** Escrow-mode credentials (cnf.addr): where their EIP-712 vouchers are redeemable. */
  escrow?: { chainId: number; contract: string; channel: string; payerAddress: string };
}

export interface RefusedCredential {
  valid: false;
  refusal: Refusal;
  detail: string;
}

export type VerifyResult = ValidCredential | RefusedCredential;

/** A verified credential with what the daemon needs beyond the public answer. */
export interface VerifiedClaims {
  result: ValidCredential;
  iat: number;
  exp: number;
  nbf: number | undefined;
  cnf: VoucherKey;
  /** Every claim as signed, for rails that need their own (e.g. escrow channel). */
  claims: Record<string, unknown>;
}
