// x402 `exact` payments as @x402/evm makes them (EIP-3009 TransferWithAuthorization signed in the sandbox token's
// EIP-712 domain) for the facilitator's /v1/x402/verify and /settle bodies; options change one thing to refuse.
import { randomBytes } from 'node:crypto';
import { privateKeyToAccount } from 'viem/accounts';
import type { Hex } from 'viem';
import type { SandboxChain } from '../../src/rails/escrow/sandbox.js';
import { AUTHORIZATION_TYPES } from '../../src/rails/escrow/x402.js';

/** The sandbox TestToken's EIP-712 domain name and version (what requirements carry in `extra`). */
export const X402_DOMAIN = { name: 'node-svc Test USD', version: '2' };

export interface X402PaymentOptions {
  value: bigint;
  /** The payer's key (default the sandbox payer). */
  key?: Hex;
  to?: Hex;
  validAfter?: bigint;
  validBefore?: bigint;
  nonce?: Hex;
  /** Signed by another key than the payer's. */
  signWith?: Hex;
  /** Overrides of the payment requirements. */
  req?: Record<string, unknown>;
  resource?: string;
}

/** A signed exact payment of `value` to the daemon's wallet (the sandbox operator): `{x402Version, paymentPayload, paymentRequirements}`. */
export async function x402Payment(chain: SandboxChain, o: X402PaymentOptions) {
  const now = BigInt(Math.floor(Date.now() / 1000));
  const key = o.key ?? chain.payer.key;
  const requirements = { scheme: 'exact', network: `eip155:${chain.chainId}`, amount: o.value.toString(), asset: chain.token, payTo: chain.operator.address, maxTimeoutSeconds: 60, extra: X402_DOMAIN, ...o.req };
  const authorization = {
    from: privateKeyToAccount(key).address, to: o.to ?? chain.operator.address, value: o.value,
    validAfter: o.validAfter ?? now - 600n, validBefore: o.validBefore ?? now + 300n, nonce: o.nonce ?? (`0x${randomBytes(32).toString('hex')}` as Hex),
  };
  const signature = await privateKeyToAccount(o.signWith ?? key).signTypedData({
    domain: { ...X402_DOMAIN, chainId: chain.chainId, verifyingContract: chain.token }, types: AUTHORIZATION_TYPES, primaryType: 'TransferWithAuthorization', message: authorization,
  });
  const payload = { signature, authorization: Object.fromEntries(Object.entries(authorization).map(([k, v]) => [k, typeof v === 'bigint' ? v.toString() : v])) };
  return { x402Version: 2, paymentPayload: { x402Version: 2, resource: { url: o.resource ?? 'http://resource.test/data' }, accepted: requirements, payload }, paymentRequirements: requirements };
}
