// node-svc/sdk: the offline verifier, typed client, webhook signature check and reference consumer.
import type { VerifyResult } from '../domain/credential.js';
import { KeySet } from './keys.js';
import { Verifier } from './verifier.js';

export { KeySet, jwkProblems, type TrustedKey, type Jwk } from './keys.js';
export { loadKeySet, type LoadKeySetOptions } from './keyset.js';
export { Verifier, type VerifierOptions, type VerifyOptions } from './verifier.js';
export { createClient, ApiError, type Client, type ClientOptions, type Problem } from './client.js';
export { verifyWebhookSignature } from './signature.js';
export { createConsumer, memoryStore, sqliteStore, type Consumer, type ConsumerOptions, type ConsumerStore, type ConsumerState, type HandleResult } from './consumer.js';
export type { VerifyResult, ValidCredential, RefusedCredential } from '../domain/credential.js';
export { REFUSALS, OFFLINE_REFUSALS } from '../domain/refusals.js';
export { verifyReceipt, receiptKeySet, type VerifyReceiptOptions, type ReceiptResult, type ChainCheck } from './receipt.js';
export { RECEIPT_TYP, RECEIPT_REFUSALS, type ReceiptClaims, type ReceiptRefusal, type RailReference } from '../domain/receipts.js';

export interface VerifyAllowanceOptions {
  keys: KeySet | KeySet[];
  audience: string;
  /** ms since the epoch */
  now?: number;
  /** seconds (default 30) */
  clockTolerance?: number;
}

// One verifier (and its cache of verified credentials) per key set and tolerance, so repeated
// credentials are cheap and the cache drops when the key set changes.
const verifiers = new WeakMap<object, Map<number, Verifier>>();

/** Exactly the answer of `node-svc verify`: `{valid:true,…}` or `{valid:false, refusal, detail}`; never throws. */
export function verifyAllowance(jws: string, opts: VerifyAllowanceOptions): VerifyResult {
  try {
    const tol = opts.clockTolerance ?? 30;
    let byTol = verifiers.get(opts.keys);
    if (!byTol) verifiers.set(opts.keys, (byTol = new Map()));
    let v = byTol.get(tol);
    if (!v) byTol.set(tol, (v = new Verifier({ keys: opts.keys, clockTolerance: tol })));
    return v.verify(jws, { audience: opts.audience, ...(opts.now !== undefined ? { now: opts.now } : {}) });
  } catch {
    return { valid: false, refusal: 'malformed', detail: 'credential could not be verified' };
  }
}
