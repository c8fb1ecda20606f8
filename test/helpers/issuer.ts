// Test issuers and payers: real keys (generated with jose), real signatures, and a raw signer for odd tokens.
import { createHmac, KeyObject, randomBytes, sign } from 'node:crypto';
import { writeFile } from 'node:fs/promises';
import { exportJWK, generateKeyPair, type JWK } from 'jose';
import type { TrustedKey } from '../../src/sdk/keys.js';

export const ISSUER = 'https://issuer.test';
export const NODE = 'node-a';
export const CREDENTIAL_TYP = 'allowance+jwt';
export const VOUCHER_TYP = 'voucher+jwt';

export type IssuerAlg = 'EdDSA' | 'ES256';

export interface KeyPair {
  kid: string;
  alg: IssuerAlg;
  privateKey: KeyObject;
  publicKey: KeyObject;
  /** The public JWK with kid, alg and use: 'sig' — what an issuer publishes in its JWKS. */
  publicJwk: JWK & { kid: string; alg: IssuerAlg; use: 'sig' };
  /** The private JWK (has `d`), for tests of refusing private material. */
  privateJwk: JWK & { kid: string; alg: IssuerAlg };
}

const shortId = () => randomBytes(6).toString('base64url');

/** A fresh asymmetric key pair for an allowed algorithm (EdDSA = Ed25519, ES256 = P-256). */
export async function keyPair(alg: IssuerAlg = 'EdDSA', kid = `${alg.toLowerCase()}-${shortId()}`): Promise<KeyPair> {
  const pair = await generateKeyPair(alg, { extractable: true });
  const pub = await exportJWK(pair.publicKey);
  const priv = await exportJWK(pair.privateKey);
  return {
    kid,
    alg,
    privateKey: KeyObject.from(pair.privateKey),
    publicKey: KeyObject.from(pair.publicKey),
    publicJwk: { ...pub, kid, alg, use: 'sig' },
    privateJwk: { ...priv, kid, alg },
  };
}

/** An issuer signing key pair: Ed25519 by default, or P-256 with `'ES256'`. */
export const issuerKeyPair = keyPair;

/** A payer's voucher key (Ed25519): its public JWK goes in the credential's `cnf.jwk`. */
export const payerKeyPair = (kid = `payer-${shortId()}`) => keyPair('EdDSA', kid);

/** The public JWKS of some key pairs. */
export const publicJwks = (...keys: KeyPair[]) => ({ keys: keys.map((k) => k.publicJwk) });

/** Write a JWKS (or any JSON, for refusal tests) to a file; returns the path. */
export async function writeJwks(path: string, jwks: unknown): Promise<string> {
  await writeFile(path, JSON.stringify(jwks, null, 2));
  return path;
}

/** A KeySet entry trusting `key` for `issuer`. */
export const trusted = (key: KeyPair, issuer = ISSUER): TrustedKey => ({ kid: key.kid, issuer, alg: key.alg, jwk: key.publicJwk });

const b64url = (v: string | Uint8Array) => Buffer.from(v).toString('base64url');

/** Signing material for signCompact: an asymmetric private key, raw HMAC secret bytes, or nothing (empty signature). */
export type SigningMaterial = KeyObject | Uint8Array | undefined;

/**
 * Sign anything as a compact JWS, with no checks at all, for crafting odd tokens. The signature follows the
 * key, not the header: Ed25519 → EdDSA; EC → ES256 (raw r||s unless `dsaEncoding: 'der'`); bytes → HMAC
 * (SHA-256, or 384/512 when the header says HS384/HS512); no key → empty signature (`alg: none` style).
 * A string or bytes payload is used as is (for non-JSON payloads).
 */
export function signCompact(
  header: Record<string, unknown>,
  payload: Record<string, unknown> | string | Uint8Array,
  key?: SigningMaterial,
  opts: { dsaEncoding?: 'ieee-p1363' | 'der' } = {},
): string {
  const h = b64url(JSON.stringify(header));
  const p = b64url(typeof payload === 'string' || payload instanceof Uint8Array ? payload : JSON.stringify(payload));
  const input = Buffer.from(`${h}.${p}`, 'ascii');
  let sig: Buffer;
  if (key === undefined) sig = Buffer.alloc(0);
  else if (!(key instanceof KeyObject)) {
    const hash = header.alg === 'HS384' ? 'sha384' : header.alg === 'HS512' ? 'sha512' : 'sha256';
    sig = createHmac(hash, key).update(input).digest();
  } else if (key.asymmetricKeyType === 'ed25519') sig = sign(null, input, key);
  else if (key.asymmetricKeyType === 'ec') sig = sign('sha256', input, { key, dsaEncoding: opts.dsaEncoding ?? 'ieee-p1363' });
  else throw new Error(`signCompact: unsupported key type ${String(key.asymmetricKeyType ?? key.type)}`);
  return `${h}.${p}.${b64url(sig)}`;
}

export const nowSeconds = (ms = Date.now()) => Math.floor(ms / 1000);

/** A control fact (stream.revoked, budget.halted, budget.released) for `node`, signed by the trusted issuer. */
export const controlMessage = (issuer: KeyPair, claims: Record<string, unknown>, node = NODE) =>
  signCompact(
    { alg: issuer.alg, typ: 'control+jwt', kid: issuer.kid },
    { iss: ISSUER, aud: node, jti: `ctl-${randomBytes(6).toString('hex')}`, iat: nowSeconds(), ...claims },
    issuer.privateKey,
  );

/** A budget.halted fact of a budget of its own (every call a new fact: a new jti and budget). */
export const haltFact = (issuer: KeyPair, node = NODE) =>
  controlMessage(issuer, { kind: 'budget.halted', budget: `b-${randomBytes(6).toString('hex')}`, reason: 'anomaly' }, node);

export interface MintOptions {
  key: KeyPair;
  /** Header members merged over {alg, typ, kid}; a member set to undefined is removed. */
  header?: Record<string, unknown>;
  /** Claims merged over the defaults; a claim set to undefined is removed. */
  claims?: Record<string, unknown>;
  /** Sign with this instead of key.privateKey (e.g. a foreign key reusing the kid). */
  signWith?: SigningMaterial;
  /** Seconds since the epoch for iat (default now); exp defaults to iat + 3600. */
  now?: number;
  /** The payer's voucher key (cnf.jwk); a fixed throwaway Ed25519 public JWK when omitted. */
  payer?: KeyPair;
}

// A valid Ed25519 public JWK (RFC 8037 A.2) for credentials that do not need a real payer.
const DEFAULT_CNF_JWK = { kty: 'OKP', crv: 'Ed25519', x: '11qYAYKxCrfVS_7TyWQHOg7hcvPapiMlrwIaaPcHURo' };

/** The default claims of a valid credential for NODE from ISSUER (DESIGN §4). */
export function credentialClaims(opts: { now?: number; payer?: KeyPair } = {}): Record<string, unknown> {
  const iat = opts.now ?? nowSeconds();
  return {
    iss: ISSUER,
    sub: 'payer-1',
    aud: NODE,
    jti: `cred-${shortId()}`,
    iat,
    exp: iat + 3600,
    stream: 'stream-1',
    budget: 'budget-1',
    cap: '5000000',
    asset: 'USDC',
    unitPrice: '25',
    rate: '1000',
    mode: 'escrow',
    cnf: { jwk: opts.payer ? opts.payer.publicJwk : DEFAULT_CNF_JWK },
  };
}

/** A signed allowance credential (compact JWS), valid unless the overrides say otherwise. */
export function mintCredential(opts: MintOptions): string {
  const header = { alg: opts.key.alg, typ: CREDENTIAL_TYP, kid: opts.key.kid, ...opts.header };
  const claims = { ...credentialClaims(opts), ...opts.claims };
  return signCompact(header, claims, 'signWith' in opts ? opts.signWith : opts.key.privateKey);
}

/** A payer's JWS voucher (DESIGN §5): cumulative amount and units for a stream, signed by the cnf.jwk key. */
export function signVoucher(
  payer: KeyPair,
  claims: { stream: string; amount: string; units: string; iat?: number } & Record<string, unknown>,
  header: Record<string, unknown> = {},
): string {
  return signCompact(
    { alg: payer.alg, typ: VOUCHER_TYP, kid: payer.kid, ...header },
    { iat: nowSeconds(), ...claims },
    payer.privateKey,
  );
}
