// Dev-only signing: credentials, JWS vouchers and control facts as an issuer and a payer would make them.
import { randomUUID } from 'node:crypto';
import { signCompactEdDSA } from '../sdk/jws.js';
import type { SandboxState } from './state.js';
import { keyOf, publicJwk } from './state.js';

export const signJws = (header: Record<string, unknown>, payload: Record<string, unknown>, privateJwk: Record<string, unknown>): string =>
  signCompactEdDSA(header, payload, keyOf(privateJwk));

export interface CredentialOpts {
  stream: string;
  budget?: string;
  capMicro: bigint;
  unitPriceMicro: bigint;
  rateMicroPerSecond?: bigint;
  ttlSeconds?: number;
  asset?: string;
  /** Escrow terms: with them the credential carries cnf.addr (EIP-712 vouchers); without, cnf.jwk (JWS vouchers). */
  escrow?: { payerAddress: string; chainId: number; contract: string; channel: string };
  mode?: 'escrow' | 'card';
  /** More claims (card: `paymentIntent`). */
  extra?: Record<string, unknown>;
}

export function mintCredential(st: SandboxState, o: CredentialOpts): string {
  const now = Math.floor(Date.now() / 1000);
  const claims: Record<string, unknown> = {
    iss: st.issuer.iss, sub: 'sandbox-payer', aud: st.node, jti: `cred-${randomUUID()}`, iat: now, exp: now + (o.ttlSeconds ?? 3600),
    stream: o.stream, budget: o.budget ?? 'sandbox-budget', cap: o.capMicro.toString(), asset: o.asset ?? 'USDC',
    unitPrice: o.unitPriceMicro.toString(), mode: o.mode ?? 'escrow',
  };
  if (o.rateMicroPerSecond !== undefined) claims.rate = o.rateMicroPerSecond.toString();
  if (o.escrow) Object.assign(claims, { cnf: { addr: o.escrow.payerAddress }, chainId: o.escrow.chainId, escrow: o.escrow.contract, channel: o.escrow.channel });
  else claims.cnf = { jwk: publicJwk(st.payer.privateJwk) };
  if (o.extra) Object.assign(claims, o.extra);
  return signJws({ alg: 'EdDSA', typ: 'allowance+jwt', kid: st.issuer.kid }, claims, st.issuer.privateJwk);
}

export function mintVoucher(st: SandboxState, stream: string, amountMicro: bigint, units: bigint): string {
  return signJws({ alg: 'EdDSA', typ: 'voucher+jwt' }, { stream, amount: amountMicro.toString(), units: units.toString(), iat: Math.floor(Date.now() / 1000) }, st.payer.privateJwk);
}

export function mintControl(st: SandboxState, kind: string, claims: Record<string, unknown>): string {
  const now = Math.floor(Date.now() / 1000);
  return signJws({ alg: 'EdDSA', typ: 'control+jwt', kid: st.issuer.kid }, { iss: st.issuer.iss, aud: st.node, jti: `ctl-${randomUUID()}`, iat: now, kind, ...claims }, st.issuer.privateJwk);
}
