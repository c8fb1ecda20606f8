// Compact-JWS mechanics shared by the credential, voucher and control checks. The signature is checked
// with node:crypto's one-shot verify: jose v6 routes every verify through WebCrypto's asynchronous
// path, which alone measured 0.58 of the raw Ed25519 rate here, leaving no room for the claim checks.
import { isUtf8 } from 'node:buffer';
import { createPrivateKey, createPublicKey, generateKeyPairSync, sign, verify, type KeyObject, type VerifyKeyObjectInput } from 'node:crypto';
import type { Refusal } from '../domain/refusals.js';
import { Lru } from '../lru.js';

const B64URL_RE = /^[A-Za-z0-9_-]+$/;

/**
 * The three parts of a compact JWS, or undefined when it is not one. The signature may be empty (an unsecured
 * `alg: none` JWS) so the header check can refuse it as unsupported_algorithm; no empty signature ever verifies.
 */
export function splitCompact(jws: string): [string, string, string] | undefined {
  // One pass of one expression over the whole string, then the cuts (three tests and a split each walked it again).
  if (!COMPACT_RE.test(jws)) return undefined;
  const a = jws.indexOf('.');
  const b = jws.indexOf('.', a + 1);
  return [jws.slice(0, a), jws.slice(a + 1, b), jws.slice(b + 1)];
}
const COMPACT_RE = /^[A-Za-z0-9_-]+\.[A-Za-z0-9_-]+\.[A-Za-z0-9_-]*$/;

/**
 * decodeJson for a protected header, remembered by its exact text: every credential of one issuer key (every voucher
 * of one payer key) carries the same header, and decoding it again was ~7 % of a first-sight verify (bench/verify).
 * The object is frozen (callers only read it); a header that does not decode is not remembered.
 */
export function decodeHeader(part: string): Record<string, unknown> | undefined {
  const hit = headers.get(part);
  if (hit) return hit;
  const h = decodeJson(part);
  if (h && part.length <= 1024) headers.set(part, deepFreeze(h));
  return h;
}
const headers = new Lru<string, Record<string, unknown>>(256);
function deepFreeze<T>(v: T): T {
  if (typeof v === 'object' && v !== null) { for (const x of Object.values(v)) deepFreeze(x); Object.freeze(v); }
  return v;
}

/**
 * Decode a base64url JSON object; undefined for anything else: bad UTF-8, and duplicate member names at any depth
 * (JSON.parse keeps the last one; RFC 7515 §5.2 lets us refuse instead, and we fail closed: a header or claim that
 * two parsers could read differently is malformed).
 */
export function decodeJson(part: string): Record<string, unknown> | undefined {
  // 'base64' reads the url-safe alphabet too, and is the faster path here (see verifySignature); the alphabet is
  // checked first, so nothing that is not base64url decodes.
  return B64URL_RE.test(part) ? decodePart(part) : undefined;
}

/** decodeJson of a part that splitCompact returned: its alphabet was checked there (not again over every byte). */
export function decodePart(part: string): Record<string, unknown> | undefined {
  return decodePartText(part)?.[0];
}

/** decodePart, with the JSON text the object was parsed from (what the verifier's cache keeps of a credential). */
export function decodePartText(part: string): [Record<string, unknown>, string] | undefined {
  try {
    const bytes = Buffer.from(part, 'base64');
    // Bad UTF-8 is refused (a fatal decoder's check, done natively); a byte-order mark is not JSON either.
    if (!isUtf8(bytes)) return undefined;
    const text = bytes.toString('utf8');
    const v: unknown = JSON.parse(text);
    if (typeof v !== 'object' || v === null || Array.isArray(v)) return undefined;
    return hasDuplicateMembers(text, v) ? undefined : [v as Record<string, unknown>, text];
  } catch {
    return undefined;
  }
}

/**
 * Does this (valid) JSON text hold an object with two members of the same name? Names are compared decoded, so
 * {"a":1,"\u0061":2} counts. JSON.parse keeps one member per name, so a text has a duplicate exactly when it holds
 * more members than its parsed value has keys: the members are counted as the colons outside strings (in valid
 * JSON a colon outside a string separates a member's name from its value), the keys by walking the value. One pass
 * over the text and one over the value, no name copied: it was a set of names per object, 4 µs of a credential's
 * first-sight verify (bench/verify). `parsed`: JSON.parse(text), when the caller has it.
 */
export function hasDuplicateMembers(text: string, parsed: unknown = JSON.parse(text)): boolean {
  return colonsOutsideStrings(text) !== keyCount(parsed);
}

function colonsOutsideStrings(text: string): number {
  let n = 0;
  for (let i = 0; i < text.length; i++) {
    const c = text.charCodeAt(i);
    if (c === 0x22) {
      // a string: to its closing quote, an escape's next character skipped
      for (i++; i < text.length; i++) {
        const d = text.charCodeAt(i);
        if (d === 0x5c) i++;
        else if (d === 0x22) break;
      }
    } else if (c === 0x3a) n++;
  }
  return n;
}

/** Own keys of every object in a parsed JSON value (an explicit stack: nesting depth is the sender's choice). */
function keyCount(value: unknown): number {
  let n = 0;
  const stack: unknown[] = [value];
  while (stack.length) {
    const v = stack.pop();
    if (typeof v !== 'object' || v === null) continue;
    if (Array.isArray(v)) {
      for (let i = 0; i < v.length; i++) if (typeof v[i] === 'object' && v[i] !== null) stack.push(v[i]);
    } else {
      const keys = Object.keys(v);
      n += keys.length;
      for (let i = 0; i < keys.length; i++) {
        const x = (v as Record<string, unknown>)[keys[i]!];
        if (typeof x === 'object' && x !== null) stack.push(x);
      }
    }
  }
  return n;
}

export interface SigningKey {
  kid: string;
  alg: string;
  key: KeyObject;
}

export interface HeaderRefusal {
  refusal: Refusal;
  detail: string;
  valid: false;
}

const no = (refusal: Refusal, detail: string): HeaderRefusal => ({ valid: false, refusal, detail });

/** `typ` compared as RFC 7515 says: case-insensitive, `application/` prefix optional. */
export function isTyp(value: unknown, expected: string): boolean {
  if (typeof value !== 'string') return false;
  const v = value.toLowerCase();
  return v === expected || v === `application/${expected}`;
}

/**
 * The protected-header rules (DESIGN §4): alg in the allowlist (never none or HS*), the expected typ,
 * no crit or b64 (we understand no extension), a kid naming a trusted key of that same alg.
 */
export function checkHeader<K extends SigningKey>(
  header: Record<string, unknown>,
  typ: string,
  algorithms: ReadonlySet<string>,
  sets: ReadonlyArray<{ get(kid: string): K | undefined }>,
): K | HeaderRefusal {
  const alg = header.alg;
  if (typeof alg !== 'string' || !algorithms.has(alg))
    return no('unsupported_algorithm', `alg ${JSON.stringify(alg ?? null)} is not allowed (allowed: ${[...algorithms].join(', ')})`);
  if (!isTyp(header.typ, typ)) return no('wrong_type', `typ must be "${typ}", got ${JSON.stringify(header.typ ?? null)}`);
  if (header.crit !== undefined) return no('malformed', `critical header parameters are not supported: ${JSON.stringify(header.crit)}`);
  if (header.b64 !== undefined) return no('malformed', 'the b64 header parameter is not supported');
  if (typeof header.kid !== 'string' || !header.kid) return no('malformed', 'protected header has no kid');
  let entry: K | undefined;
  for (const s of sets) if ((entry = s.get(header.kid))) break;
  if (!entry) return no('unknown_key', `no trusted key has kid "${header.kid}"`);
  if (entry.alg !== alg) return no('unsupported_algorithm', `key "${entry.kid}" is trusted for ${entry.alg}, the JWS says ${alg}`);
  return entry;
}

/** Verify the signature of a compact JWS with one key: EdDSA (Ed25519) or ES256 (raw r||s, 64 bytes). */
export function verifySignature(k: { alg: string; key: KeyObject }, parts: readonly [string, string, string]): boolean {
  const signed = signedBytes(k, parts);
  if (!signed) return false;
  try {
    return verify(signed.digest, signed.input, signed.key, signed.sig);
  } catch {
    return false;
  }
}

/**
 * verifySignature in libuv's thread pool: the same answer, while the event loop goes on serving (on another core when
 * the machine has one). The daemon checks a voucher's signature this way before judging it (service/streams.ts), so
 * the ~110 µs of an Ed25519 verify (bench/verify's raw figure here) stop holding every other request.
 */
export function verifySignatureAsync(k: { alg: string; key: KeyObject }, parts: readonly [string, string, string]): Promise<boolean> {
  const signed = signedBytes(k, parts);
  if (!signed) return Promise.resolve(false);
  return new Promise((resolve) => {
    try {
      verify(signed.digest, signed.input, signed.key, signed.sig, (err, ok) => resolve(!err && ok));
    } catch {
      resolve(false);
    }
  });
}

/** What `verify` takes for this key and JWS: the digest, what the signature covers (header.payload as bytes), the key
 *  (ES256: its raw r||s encoding) and the signature; undefined for an algorithm we do not verify or a bad signature part. */
function signedBytes(k: { alg: string; key: KeyObject }, parts: readonly [string, string, string]): { digest: string | null; input: Buffer; key: KeyObject | VerifyKeyObjectInput; sig: Buffer } | undefined {
  if (k.alg !== 'EdDSA' && k.alg !== 'ES256') return undefined;
  // Decoded with 'base64', which reads the url-safe alphabet too: the parts are base64url (splitCompact checked the
  // alphabet), so the bytes are the same; node's 'base64url' path left a signature that made the Ed25519 verify after
  // it ~7 % slower (bench/verify: 0.92 of raw with 'base64url', 0.99 with 'base64'; the decoding itself is 0.4 µs).
  if (!B64URL_RE.test(parts[2])) return undefined;
  const sig = Buffer.from(parts[2], 'base64');
  if (sig.length !== 64) return undefined; // Ed25519, and ES256 as raw r||s: 64 bytes each
  const input = Buffer.allocUnsafe(parts[0].length + 1 + parts[1].length);
  input.write(parts[0], 0, 'latin1');
  input[parts[0].length] = 0x2e; // '.'
  input.write(parts[1], parts[0].length + 1, 'latin1');
  return k.alg === 'ES256' ? { digest: 'sha256', input, key: { key: k.key, dsaEncoding: 'ieee-p1363' }, sig } : { digest: null, input, key: k.key, sig };
}

/** A compact JWS over JSON header and payload, signed with an Ed25519 private key (EdDSA): receipts, dev tools. */
export function signCompactEdDSA(header: Record<string, unknown>, payload: Record<string, unknown>, key: KeyObject): string {
  const input = `${Buffer.from(JSON.stringify(header)).toString('base64url')}.${Buffer.from(JSON.stringify(payload)).toString('base64url')}`;
  return `${input}.${sign(null, Buffer.from(input), key).toString('base64url')}`;
}

/** What precedes the 32 key bytes in those encodings (RFC 8410: PKCS#8 v1 of id-Ed25519, and its SubjectPublicKeyInfo). */
const PKCS8_ED25519 = Buffer.from('302e020100300506032b657004220420', 'hex');
const SPKI_ED25519 = Buffer.from('302a300506032b6570032100', 'hex');

/**
 * A new Ed25519 key pair for node-svc's own signing keys (receipt keys, the sandbox's issuer and payer): generated as
 * DER bytes, then imported as a JWK, never handed out as the KeyObjects generateKeyPairSync returns. On Node 20
 * (v20.20.2 here) those share a mutex with the finished generation job, and a JWK export holds it while it allocates
 * JavaScript objects: a garbage collection at that moment destroys the job, whose destructor takes the same mutex, and
 * the process hangs for good (gdb: `KeyGenJob::~KeyGenJob` under `ExportJWKEdKey`, in `futex_wait`; bench/headroom hung
 * so in bench/lib/setup.mjs on 2026-12-02). A loop of generateKeyPairSync and JWK exports hung after 836-9,699 rounds
 * in six runs here; this function's keys passed 20,000 (test/sdk/keygen.test.ts). DER exports take no such risk.
 */
export function newEd25519KeyPair(): { privateKey: KeyObject; publicKey: KeyObject } {
  // DER bytes: no KeyObject of the generation job's is ever made.
  const { privateKey: pkcs8, publicKey: spki } = generateKeyPairSync('ed25519', { privateKeyEncoding: { format: 'der', type: 'pkcs8' }, publicKeyEncoding: { format: 'der', type: 'spki' } });
  if (pkcs8.length !== 48 || !pkcs8.subarray(0, 16).equals(PKCS8_ED25519) || spki.length !== 44 || !spki.subarray(0, 12).equals(SPKI_ED25519))
    throw new Error('node:crypto encoded an Ed25519 key pair in an unexpected layout');
  const privateKey = createPrivateKey({ key: { kty: 'OKP', crv: 'Ed25519', d: pkcs8.subarray(16).toString('base64url'), x: spki.subarray(12).toString('base64url') }, format: 'jwk' });
  return { privateKey, publicKey: createPublicKey(privateKey) };
}
