import { createPublicKey, type KeyObject } from 'node:crypto';
import { ALLOWED_ALGORITHMS, type AllowedAlgorithm } from '../domain/credential.js';

export type Jwk = Record<string, unknown>;

/** A public key trusted for one issuer, as stored by `node-svc keys add`. */
export interface TrustedKey {
  kid: string;
  issuer: string;
  alg: AllowedAlgorithm;
  jwk: Jwk;
}

interface Entry extends TrustedKey {
  /** Imported once per key set, so verification never re-imports. */
  key: KeyObject;
}

const PRIVATE_MEMBERS = ['d', 'p', 'q', 'dp', 'dq', 'qi', 'oth', 'k'];
const ALG_SHAPE: Record<AllowedAlgorithm, { kty: string; crv: string }> = {
  EdDSA: { kty: 'OKP', crv: 'Ed25519' },
  ES256: { kty: 'EC', crv: 'P-256' },
};

/**
 * Check one JWK for trust: a public asymmetric key with kid and alg from the allowlist.
 * Returns the problems (empty when it is fine); never throws.
 */
export function jwkProblems(jwk: unknown, allowed: readonly string[] = ALLOWED_ALGORITHMS): string[] {
  if (typeof jwk !== 'object' || jwk === null || Array.isArray(jwk)) return ['not a JSON object'];
  const k = jwk as Jwk;
  const problems: string[] = [];
  const kid = typeof k.kid === 'string' && k.kid.length > 0 ? k.kid : undefined;
  if (!kid) problems.push('has no "kid"');
  if (k.kty === 'oct') problems.push('is a symmetric (oct) key; only public asymmetric keys can be trusted');
  const priv = PRIVATE_MEMBERS.filter((m) => m in k && m !== 'k');
  if (priv.length) problems.push(`contains private key material (${priv.join(', ')}); give the public key only`);
  if (typeof k.alg !== 'string' || !k.alg) problems.push('has no "alg"');
  else if (!allowed.includes(k.alg)) problems.push(`alg "${k.alg}" is not allowed (allowed: ${allowed.join(', ')})`);
  else if (k.kty !== 'oct' && !priv.length) {
    const shape = ALG_SHAPE[k.alg as AllowedAlgorithm];
    if (k.kty !== shape.kty || k.crv !== shape.crv) problems.push(`alg ${k.alg} needs kty ${shape.kty} crv ${shape.crv}, got kty ${String(k.kty)} crv ${String(k.crv)}`);
    else {
      try {
        createPublicKey({ key: publicMembers(k) as never, format: 'jwk' });
      } catch {
        problems.push('is not a valid public key');
      }
    }
  }
  if (k.use !== undefined && k.use !== 'sig') problems.push(`has use "${String(k.use)}", expected "sig"`);
  return problems;
}

/** The members of a public JWK that identify the key (no private parts, no metadata). */
export function publicMembers(jwk: Jwk): Jwk {
  const out: Jwk = { kty: jwk.kty };
  for (const m of ['crv', 'x', 'y', 'n', 'e']) if (jwk[m] !== undefined) out[m] = jwk[m];
  return out;
}

/** A set of trusted keys, looked up by kid. `version` changes whenever the keys do, so caches can drop. */
export class KeySet {
  #byKid = new Map<string, Entry>();
  #version = 0;

  constructor(keys: TrustedKey[] = []) {
    this.replace(keys);
  }

  get version(): number {
    return this.#version;
  }

  get size(): number {
    return this.#byKid.size;
  }

  /** Swap the whole set at once (a refresh); keys that fail the trust checks are left out. */
  replace(keys: TrustedKey[]): void {
    const next = new Map<string, Entry>();
    for (const k of keys) {
      if (jwkProblems(k.jwk).length) continue;
      next.set(k.kid, { ...k, key: createPublicKey({ key: publicMembers(k.jwk) as never, format: 'jwk' }) });
    }
    this.#byKid = next;
    this.#version++;
  }

  get(kid: string): Entry | undefined {
    return this.#byKid.get(kid);
  }

  list(): TrustedKey[] {
    return [...this.#byKid.values()].map(({ kid, issuer, alg, jwk }) => ({ kid, issuer, alg, jwk }));
  }
}
