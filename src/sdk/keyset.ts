// loadKeySet: a JWKS (object, or URL fetched once and refreshed in the background) bound to one issuer.
import type { AllowedAlgorithm } from '../domain/credential.js';
import { jwkProblems, KeySet, type Jwk, type TrustedKey } from './keys.js';

export interface LoadKeySetOptions {
  issuer: string;
  /** For URLs: refresh interval, ms (default 10 min). The old keys stay in use when a refresh fails. */
  refreshMs?: number;
  fetch?: typeof fetch;
}

function toTrusted(jwks: unknown, issuer: string): TrustedKey[] {
  const keys = (jwks as { keys?: unknown })?.keys;
  if (!Array.isArray(keys)) throw new TypeError('not a JWKS: expected {"keys": [...]}');
  const out: TrustedKey[] = [];
  for (const k of keys as Jwk[]) {
    if (jwkProblems(k).length) continue; // untrustable keys are left out, never trusted
    out.push({ kid: k.kid as string, issuer, alg: k.alg as AllowedAlgorithm, jwk: k });
  }
  return out;
}

export async function loadKeySet(jwks: object | string | URL, opts: LoadKeySetOptions): Promise<KeySet & { close(): void }> {
  if (!opts?.issuer) throw new TypeError('loadKeySet needs { issuer }');
  if (typeof jwks === 'object' && !(jwks instanceof URL)) return Object.assign(new KeySet(toTrusted(jwks, opts.issuer)), { close() {} });
  const url = String(jwks);
  const f = opts.fetch ?? fetch;
  const get = async () => {
    const res = await f(url, { signal: AbortSignal.timeout(10_000), redirect: 'error' });
    if (!res.ok) throw new Error(`JWKS fetch answered HTTP ${res.status}`);
    return toTrusted(await res.json(), opts.issuer);
  };
  const set = new KeySet(await get());
  const timer = setInterval(() => {
    get().then((keys) => set.replace(keys), () => undefined);
  }, opts.refreshMs ?? 600_000);
  timer.unref();
  return Object.assign(set, { close: () => clearInterval(timer) });
}

