import { exportJWK, generateKeyPair, generateSecret } from 'jose';
import { beforeAll, describe, expect, it } from 'vitest';
import { jwkProblems, KeySet, publicMembers } from '../../src/sdk/keys.js';
import { keyPair, trusted, type KeyPair } from '../helpers/issuer.js';

let ed: KeyPair;
let es: KeyPair;

beforeAll(async () => {
  ed = await keyPair('EdDSA', 'ed-1');
  es = await keyPair('ES256', 'es-1');
});

describe('jwkProblems', () => {
  it('accepts public Ed25519 and P-256 keys with kid, alg and use sig (or no use)', () => {
    expect(jwkProblems(ed.publicJwk)).toEqual([]);
    expect(jwkProblems(es.publicJwk)).toEqual([]);
    const { use: _use, ...noUse } = ed.publicJwk;
    expect(jwkProblems(noUse)).toEqual([]);
  });

  it('refuses a key without kid (missing or empty)', () => {
    const { kid: _kid, ...noKid } = ed.publicJwk;
    expect(jwkProblems(noKid)).toEqual([expect.stringMatching(/kid/)]);
    expect(jwkProblems({ ...ed.publicJwk, kid: '' })).toEqual([expect.stringMatching(/kid/)]);
    expect(jwkProblems({ ...ed.publicJwk, kid: 7 })).toEqual([expect.stringMatching(/kid/)]);
  });

  it('refuses a key without alg', () => {
    const { alg: _alg, ...noAlg } = es.publicJwk;
    expect(jwkProblems(noAlg)).toEqual([expect.stringMatching(/alg/)]);
  });

  it('refuses private keys (d), naming the private material', () => {
    const edProblems = jwkProblems(ed.privateJwk);
    expect(edProblems).toHaveLength(1);
    expect(edProblems[0]).toMatch(/private key material \(d\)/);
    expect(jwkProblems(es.privateJwk)).toEqual([expect.stringMatching(/private/)]);
  });

  it('refuses RSA private members too (p, q, dp, dq, qi)', async () => {
    const rsa = await generateKeyPair('RS256', { extractable: true });
    const priv = { ...(await exportJWK(rsa.privateKey)), kid: 'rsa-1', alg: 'RS256' };
    const problems = jwkProblems(priv).join('\n');
    expect(problems).toMatch(/private key material \(d, p, q, dp, dq, qi\)/);
    expect(problems).toMatch(/alg "RS256" is not allowed/);
  });

  it('refuses a symmetric (oct) key', async () => {
    const secret = await generateSecret('HS256', { extractable: true });
    const oct = { ...(await exportJWK(secret)), kid: 'hs-1', alg: 'HS256', use: 'sig' };
    expect(oct.kty).toBe('oct');
    const problems = jwkProblems(oct);
    expect(problems).toContainEqual(expect.stringMatching(/symmetric \(oct\)/));
    expect(problems).toContainEqual(expect.stringMatching(/alg "HS256" is not allowed/));
    // An oct key claiming an allowed alg is still refused.
    expect(jwkProblems({ ...oct, alg: 'EdDSA' })).toContainEqual(expect.stringMatching(/symmetric/));
  });

  it('refuses an alg outside the allowlist: RS256, HS256, none, ES384', async () => {
    const rsa = await generateKeyPair('RS256', { extractable: true });
    const rsaPub = { ...(await exportJWK(rsa.publicKey)), kid: 'rsa-1', alg: 'RS256', use: 'sig' };
    expect(jwkProblems(rsaPub)).toEqual([expect.stringMatching(/alg "RS256" is not allowed \(allowed: EdDSA, ES256\)/)]);
    for (const alg of ['HS256', 'none', 'ES384', 'eddsa'])
      expect(jwkProblems({ ...ed.publicJwk, alg }), alg).toEqual([expect.stringMatching(new RegExp(`alg "${alg}" is not allowed`))]);
  });

  it('honours a narrower allowlist', () => {
    expect(jwkProblems(es.publicJwk, ['EdDSA'])).toEqual([expect.stringMatching(/alg "ES256" is not allowed \(allowed: EdDSA\)/)]);
    expect(jwkProblems(ed.publicJwk, ['EdDSA'])).toEqual([]);
  });

  it('refuses a crv or kty that does not match the alg', async () => {
    expect(jwkProblems({ ...es.publicJwk, crv: 'P-384' })).toEqual([expect.stringMatching(/needs kty EC crv P-256, got kty EC crv P-384/)]);
    expect(jwkProblems({ ...ed.publicJwk, crv: 'Ed448' })).toEqual([expect.stringMatching(/needs kty OKP crv Ed25519/)]);
    expect(jwkProblems({ ...ed.publicJwk, crv: 'X25519' })).toEqual([expect.stringMatching(/needs kty OKP crv Ed25519/)]);
    // An Ed25519 key labelled ES256, and a P-256 key labelled EdDSA.
    expect(jwkProblems({ ...ed.publicJwk, alg: 'ES256' })).toEqual([expect.stringMatching(/needs kty EC crv P-256, got kty OKP crv Ed25519/)]);
    expect(jwkProblems({ ...es.publicJwk, alg: 'EdDSA' })).toEqual([expect.stringMatching(/needs kty OKP crv Ed25519, got kty EC crv P-256/)]);
    const p384 = await generateKeyPair('ES384', { extractable: true });
    expect(jwkProblems({ ...(await exportJWK(p384.publicKey)), kid: 'p384', alg: 'ES256' })).toEqual([expect.stringMatching(/crv P-384/)]);
  });

  it('refuses use "enc"', () => {
    expect(jwkProblems({ ...ed.publicJwk, use: 'enc' })).toEqual([expect.stringMatching(/use "enc", expected "sig"/)]);
  });

  it('refuses key material that is not a valid public key', () => {
    expect(jwkProblems({ ...ed.publicJwk, x: 'AAAA' })).toEqual(['is not a valid public key']);
    const { y: _y, ...noY } = es.publicJwk;
    expect(jwkProblems(noY)).toEqual(['is not a valid public key']);
  });

  it('reports every problem at once', () => {
    const problems = jwkProblems({ kty: 'oct', k: 'c2VjcmV0', alg: 'HS256', use: 'enc' });
    expect(problems).toHaveLength(4); // no kid, oct, alg, use
  });

  it('never throws on non-objects', () => {
    for (const v of [null, undefined, 1, 'jwk', [], [ed.publicJwk]]) expect(jwkProblems(v)).toEqual(['not a JSON object']);
  });
});

describe('publicMembers', () => {
  it('keeps only the key-identifying members', () => {
    expect(publicMembers(ed.privateJwk)).toEqual({ kty: 'OKP', crv: 'Ed25519', x: ed.publicJwk.x });
    expect(publicMembers(es.privateJwk)).toEqual({ kty: 'EC', crv: 'P-256', x: es.publicJwk.x, y: es.publicJwk.y });
  });
});

describe('KeySet', () => {
  it('looks keys up by kid and leaves out keys that fail the trust checks', () => {
    const set = new KeySet([trusted(ed), trusted(es), { kid: 'bad', issuer: 'x', alg: 'EdDSA', jwk: { ...ed.privateJwk, kid: 'bad' } }]);
    expect(set.size).toBe(2);
    expect(set.get('ed-1')?.issuer).toBe('https://issuer.test');
    expect(set.get('ed-1')?.key.asymmetricKeyType).toBe('ed25519');
    expect(set.get('es-1')?.key.asymmetricKeyType).toBe('ec');
    expect(set.get('bad')).toBeUndefined();
    expect(set.list().map((k) => k.kid).sort()).toEqual(['ed-1', 'es-1']);
    // The imported key object is public: no private material survives.
    expect(set.get('ed-1')?.key.type).toBe('public');
  });

  it('moves its version on every replace', () => {
    const set = new KeySet([trusted(ed)]);
    const v = set.version;
    set.replace([trusted(es)]);
    expect(set.version).toBeGreaterThan(v);
    expect(set.get('ed-1')).toBeUndefined();
    expect(set.get('es-1')).toBeDefined();
  });
});
