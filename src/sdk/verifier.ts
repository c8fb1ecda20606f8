import {
  ALLOWED_ALGORITHMS,
  CREDENTIAL_TYP,
  DEFAULT_CLOCK_TOLERANCE_S,
  MAX_CREDENTIAL_BYTES,
  MODES,
  type Mode,
  type RefusedCredential,
  type ValidCredential,
  type VerifiedClaims,
  type VerifyResult,
  type VoucherKey,
} from '../domain/credential.js';
import type { KeyObject } from 'node:crypto';
import { parsePositiveMicro } from '../domain/amount.js';
import { EXTERNAL_ID_RE } from '../domain/ids.js';
import { isoSeconds } from '../domain/time.js';
import type { Refusal } from '../domain/refusals.js';
import { KeySet } from './keys.js';
import { checkHeader, decodeHeader, decodePartText, splitCompact, verifySignature, verifySignatureAsync } from './jws.js';

/** A credential whose signature the thread pool found good with `key` (verifyClaimsAsync), and its parts. */
interface SignatureAhead {
  jws: string;
  parts: [string, string, string];
  key: KeyObject;
}

export interface VerifierOptions {
  keys: KeySet | KeySet[];
  algorithms?: readonly string[];
  /** Seconds of leeway for exp, nbf and iat (default 30). */
  clockTolerance?: number;
  /** Verified credentials remembered by their exact JWS string (default 10,000; 0 disables). */
  cacheSize?: number;
}

export interface VerifyOptions {
  audience: string;
  /** Milliseconds since the epoch (default Date.now()). */
  now?: number;
}

type Outcome = { ok: true; claims: VerifiedClaims } | RefusedCredential;

/**
 * A cached credential: at first sight only the JSON text of its verified payload (one flat string), expanded into its
 * claims the second time it is seen and kept expanded from then on. A credential seen once (a stream's open) then
 * leaves no object graph behind for the young generation to copy twice: keeping the graph from the first sight cost
 * ~6 µs of garbage collection per first-sight verify (bench/verify, and a probe that skipped the signature: 12.9 µs of
 * work besides the Ed25519 verify with the graph kept, 6.5 with nothing kept, 8.0 with a flat string kept).
 */
interface CacheEntry {
  seq: number;
  text: string;
  claims: VerifiedClaims | undefined;
}

const refuse = (refusal: Refusal, detail: string): RefusedCredential => ({ valid: false, refusal, detail });

const ADDR_RE = /^0x[0-9a-fA-F]{40}$/;
const REQUIRED = ['iss', 'sub', 'aud', 'jti', 'iat', 'exp', 'stream', 'budget', 'cap', 'asset', 'unitPrice', 'mode', 'cnf'] as const;

/**
 * The one allowance verifier (DESIGN §4), used by the CLI, the HTTP API, the SDK and the gateways.
 * It never throws and never returns a payload for anything but a valid, live credential aimed at `audience`.
 */
export class Verifier {
  readonly #sets: KeySet[];
  readonly #algorithms: ReadonlySet<string>;
  readonly #tolerance: number;
  readonly #cacheSize: number;
  readonly #cache = new Map<string, CacheEntry>();
  #cacheVersion = -1;
  #cacheSeq = 0;

  constructor(opts: VerifierOptions) {
    this.#sets = Array.isArray(opts.keys) ? opts.keys : [opts.keys];
    this.#algorithms = new Set((opts.algorithms ?? ALLOWED_ALGORITHMS).filter((a) => a !== 'none' && !a.startsWith('HS')));
    this.#tolerance = opts.clockTolerance ?? DEFAULT_CLOCK_TOLERANCE_S;
    this.#cacheSize = opts.cacheSize ?? 10_000;
  }

  /** The public answer: `{valid:true,…}` or `{valid:false, refusal, detail}`. */
  verify(jws: unknown, opts: VerifyOptions): VerifyResult {
    const out = this.verifyClaims(jws, opts);
    return 'ok' in out ? out.claims.result : out;
  }

  /** Like verify, with the claims the daemon needs (cnf, iat) on success. */
  verifyClaims(input: unknown, opts: VerifyOptions): Outcome {
    return this.#verifyClaims(input, opts, undefined);
  }

  /**
   * verifyClaims, with a credential's signature checked first in libuv's thread pool when it is not in the cache
   * (verifySignatureAsync): the same answers, while the event loop serves other requests (the daemon's stream opens,
   * bench/commit). What the pool found is used only for that JWS and that key object, and only a good signature is
   * carried over: every refusal is still found, and named, by the synchronous checks.
   */
  async verifyClaimsAsync(input: unknown, opts: VerifyOptions): Promise<Outcome> {
    const checked = typeof input === 'string' ? await this.#signatureAhead(input.trim()) : undefined;
    return this.#verifyClaims(input, opts, checked);
  }

  async #signatureAhead(jws: string): Promise<SignatureAhead | undefined> {
    if (jws.length > MAX_CREDENTIAL_BYTES || (this.#cacheVersion === this.#version() && this.#cache.has(jws))) return undefined;
    const parts = splitCompact(jws);
    const header = parts && decodeHeader(parts[0]);
    if (!parts || !header) return undefined;
    const entry = checkHeader(header, CREDENTIAL_TYP, this.#algorithms, this.#sets);
    if ('refusal' in entry) return undefined;
    return (await verifySignatureAsync(entry, parts)) ? { jws, parts, key: entry.key } : undefined;
  }

  #verifyClaims(input: unknown, opts: VerifyOptions, checked: SignatureAhead | undefined): Outcome {
    try {
      const now = opts.now ?? Date.now();
      if (typeof input !== 'string') return refuse('malformed', 'credential must be a string');
      // Whitespace around the JWS is trimmed here, so the SDK, gateways, HTTP and the CLI (which reads files and
      // stdin, trailing newline and all) give one answer; whitespace inside is never part of a compact JWS.
      const jws = input.trim();
      if (jws.length > MAX_CREDENTIAL_BYTES) return refuse('malformed', `credential is longer than ${MAX_CREDENTIAL_BYTES} bytes`);
      const cached = this.#cacheGet(jws);
      if (cached) return this.#checkLive(cached, opts.audience, now);
      const signed = this.#checkSignedParts(jws, checked);
      if ('valid' in signed) return signed;
      this.#cacheSet(jws, signed.text);
      return this.#checkLive(signed.claims, opts.audience, now);
    } catch (err) {
      // Fail closed: whatever went wrong, the answer is a refusal, never a payload.
      return refuse('malformed', `credential could not be verified (${err instanceof Error ? err.name : 'error'})`);
    }
  }

  #cacheGet(jws: string): VerifiedClaims | undefined {
    if (this.#cacheSize <= 0) return undefined;
    const version = this.#version();
    if (version !== this.#cacheVersion) {
      this.#cache.clear();
      this.#cacheVersion = version;
      return undefined;
    }
    const hit = this.#cache.get(jws);
    if (!hit) return undefined;
    // Move to the back only once the entry has aged past half the cache: a Map delete+set on every hit
    // costs O(entries) in V8 (~40 µs per hit with 10,000 cached), which sank the repeated-credential rate.
    if (this.#cacheSeq - hit.seq > this.#cacheSize >> 1) {
      this.#cache.delete(jws);
      hit.seq = ++this.#cacheSeq;
      this.#cache.set(jws, hit);
    }
    if (!hit.claims) {
      // Second sight: the text passed every check of the first (signature, unique members, claim shapes), so it
      // parses to the same claims; the text is let go once expanded.
      hit.claims = verified(JSON.parse(hit.text) as Record<string, unknown>);
      hit.text = '';
    }
    return hit.claims;
  }

  #cacheSet(jws: string, text: string): void {
    if (this.#cacheSize <= 0) return;
    if (this.#cache.size >= this.#cacheSize) this.#cache.delete(this.#cache.keys().next().value!);
    this.#cache.set(jws, { seq: ++this.#cacheSeq, text, claims: undefined });
  }

  #version(): number {
    let v = 0;
    for (const s of this.#sets) v = v * 1_000_003 + s.version;
    return v;
  }

  /** Everything that does not depend on the caller or the clock: parse, header, key, signature, claim shapes. */
  #checkSignedParts(jws: string, ahead?: SignatureAhead): { claims: VerifiedClaims; text: string } | RefusedCredential {
    const parts = ahead?.jws === jws ? ahead.parts : splitCompact(jws);
    if (!parts) return refuse('malformed', 'not a compact JWS (three base64url parts)');
    const header = decodeHeader(parts[0]);
    if (!header) return refuse('malformed', 'protected header is not a base64url JSON object with unique member names');
    const checked = checkHeader(header, CREDENTIAL_TYP, this.#algorithms, this.#sets);
    if ('refusal' in checked) return checked;
    const entry = checked;
    const known = ahead !== undefined && ahead.jws === jws && ahead.key === entry.key; // found good in the pool
    if (!known && !verifySignature(entry, parts)) return refuse('bad_signature', `signature does not verify with key "${entry.kid}"`);
    const decoded = decodePartText(parts[1]);
    if (!decoded) return refuse('malformed', 'payload is not a base64url JSON object with unique member names');
    const [c, text] = decoded;
    for (const name of REQUIRED) if (c[name] === undefined || c[name] === null) return refuse('missing_claim', `claim "${name}" is missing`);
    if (c.iss !== entry.issuer) return refuse('untrusted_issuer', `iss ${JSON.stringify(c.iss)} is not the issuer key "${entry.kid}" is trusted for`);
    return claimShapes(c) ?? { claims: verified(c), text };
  }

  /** Audience and time: re-checked on every call, cached or not. */
  #checkLive(v: VerifiedClaims, audience: string, now: number): Outcome {
    if (v.result.node !== audience) return refuse('wrong_audience', `credential is aimed at "${v.result.node}", not "${audience}"`);
    const t = now / 1000;
    if (t - this.#tolerance >= v.exp) return refuse('expired', `credential expired at ${v.result.expiresAt}`);
    if (v.nbf !== undefined && t + this.#tolerance < v.nbf) return refuse('not_yet_valid', `credential is not valid before ${new Date(v.nbf * 1000).toISOString()}`);
    if (t + this.#tolerance < v.iat) return refuse('not_yet_valid', `credential is issued in the future (${v.result.issuedAt})`);
    return { ok: true, claims: v };
  }
}

/** The claims of a credential whose signature, issuer and claim shapes passed (#checkSignedParts), as the daemon uses them. */
function verified(c: Record<string, unknown>): VerifiedClaims {
  return {
    result: {
      valid: true,
      credentialId: c.jti as string,
      issuer: c.iss as string,
      payer: c.sub as string,
      node: c.aud as string,
      stream: c.stream as string,
      budget: c.budget as string,
      capMicro: c.cap as string,
      asset: c.asset as string,
      unitPriceMicro: c.unitPrice as string,
      rateMicroPerSecond: (c.rate as string | undefined) ?? null,
      mode: c.mode as Mode,
      issuedAt: isoSeconds(c.iat as number),
      expiresAt: isoSeconds(c.exp as number),
      ...((c.cnf as { addr?: string }).addr
        ? { escrow: { chainId: c.chainId as number, contract: (c.escrow as string).toLowerCase(), channel: (c.channel as string).toLowerCase(), payerAddress: ((c.cnf as { addr: string }).addr).toLowerCase() } }
        : {}),
    } satisfies ValidCredential,
    iat: c.iat as number,
    exp: c.exp as number,
    nbf: c.nbf as number | undefined,
    cnf: c.cnf as VoucherKey,
    claims: c,
  };
}

const isNumericDate = (v: unknown): v is number => typeof v === 'number' && Number.isSafeInteger(v) && v >= 0;
const isText = (v: unknown, max = 1024): v is string => typeof v === 'string' && v.length > 0 && v.length <= max;

/** Present claims with the wrong type or format are `malformed` (missing ones were refused before). */
function claimShapes(c: Record<string, unknown>): RefusedCredential | undefined {
  const bad = (name: string, rule: string) => refuse('malformed', `claim "${name}" ${rule}`);
  if (!isText(c.sub)) return bad('sub', 'must be a non-empty string');
  if (typeof c.aud !== 'string' || !c.aud) return bad('aud', 'must be a single node id string');
  if (!isText(c.jti, 256)) return bad('jti', 'must be a non-empty string of at most 256 characters');
  if (!isNumericDate(c.iat)) return bad('iat', 'must be a NumericDate (integer seconds)');
  if (!isNumericDate(c.exp)) return bad('exp', 'must be a NumericDate (integer seconds)');
  if (c.nbf !== undefined && !isNumericDate(c.nbf)) return bad('nbf', 'must be a NumericDate (integer seconds)');
  for (const id of ['stream', 'budget'] as const)
    if (typeof c[id] !== 'string' || !EXTERNAL_ID_RE.test(c[id] as string)) return bad(id, 'must be an id of letters, digits and ._:@+=- (at most 256)');
  if (parsePositiveMicro(c.cap) === undefined) return bad('cap', 'must be a decimal string of a positive integer (micro units, int64)');
  if (parsePositiveMicro(c.unitPrice) === undefined) return bad('unitPrice', 'must be a decimal string of a positive integer (micro units, int64)');
  if (c.rate !== undefined && parsePositiveMicro(c.rate) === undefined) return bad('rate', 'must be a decimal string of a positive integer (micro units per second)');
  if (!isText(c.asset, 32)) return bad('asset', 'must be an asset label of 1 to 32 characters');
  if (!(MODES as readonly unknown[]).includes(c.mode)) return bad('mode', `must be one of ${MODES.join(', ')}`);
  const cnf = c.cnf;
  if (typeof cnf !== 'object' || cnf === null || Array.isArray(cnf)) return bad('cnf', 'must be an object with jwk or addr');
  const { jwk, addr } = cnf as Record<string, unknown>;
  if (jwk !== undefined) {
    if (typeof jwk !== 'object' || jwk === null || Array.isArray(jwk)) return bad('cnf', 'jwk must be a JWK object');
    if ('d' in jwk) return bad('cnf', 'jwk must be a public key');
  } else if (addr !== undefined) {
    if (typeof addr !== 'string' || !ADDR_RE.test(addr)) return bad('cnf', 'addr must be a 0x-prefixed 20-byte hex address');
    // EIP-712 vouchers are redeemable on one escrow contract, chain and channel: the credential names them.
    for (const name of ['chainId', 'escrow', 'channel'] as const) if (c[name] === undefined || c[name] === null) return refuse('missing_claim', `claim "${name}" is missing (required with cnf.addr)`);
    if (typeof c.chainId !== 'number' || !Number.isSafeInteger(c.chainId) || c.chainId <= 0) return bad('chainId', 'must be a positive integer');
    if (typeof c.escrow !== 'string' || !ADDR_RE.test(c.escrow)) return bad('escrow', 'must be a 0x-prefixed 20-byte hex address');
    if (typeof c.channel !== 'string' || !/^0x[0-9a-fA-F]{64}$/.test(c.channel)) return bad('channel', 'must be a 0x-prefixed 32-byte hex channel id');
  } else return bad('cnf', 'must carry jwk (JWS vouchers) or addr (EIP-712 vouchers)');
  return undefined;
}

