// The compact-JWS mechanics (src/sdk/jws.ts): the parts are base64url and nothing else, though the decoder used
// ('base64', the faster path) would also read standard base64; protected headers are remembered, frozen.
import { generateKeyPairSync, sign } from 'node:crypto';
import { describe, expect, it } from 'vitest';
import { decodeHeader, decodeJson, splitCompact, verifySignature } from '../../src/sdk/jws.js';

const b64u = (v: unknown) => Buffer.from(JSON.stringify(v)).toString('base64url');

describe('compact JWS parts', () => {
  const { publicKey, privateKey } = generateKeyPairSync('ed25519');
  const h = b64u({ alg: 'EdDSA', typ: 'allowance+jwt', kid: 'k1' });
  const p = b64u({ a: 1, s: 'ÿ?>' }); // bytes that standard base64 writes with + and /
  const sig = sign(null, Buffer.from(`${h}.${p}`), privateKey).toString('base64url');

  it('splits a compact JWS and verifies it', () => {
    const parts = splitCompact(`${h}.${p}.${sig}`)!;
    expect(parts).toEqual([h, p, sig]);
    expect(verifySignature({ alg: 'EdDSA', key: publicKey }, parts)).toBe(true);
    expect(splitCompact(`${h}.${p}.`)).toEqual([h, p, '']); // unsecured: refused later, by its alg
  });

  it('refuses what is not base64url: standard base64 characters, padding, whitespace, a wrong number of dots', () => {
    const std = (s: string) => Buffer.from(s, 'base64url').toString('base64'); // the same bytes, standard alphabet
    expect(std(p)).toMatch(/[+/=]/);
    for (const bad of [`${h}.${std(p)}.${sig}`, `${h}.${p}.${std(sig)}`, `${h}=.${p}.${sig}`, `${h}.${p} .${sig}`, `${h}.${p}`, `${h}.${p}.${sig}.x`, `.${p}.${sig}`, `${h}..${sig}`])
      expect(splitCompact(bad), bad).toBeUndefined();
    expect(decodeJson(Buffer.from(JSON.stringify({ a: 'ÿ?>' })).toString('base64'))).toBeUndefined();
    expect(verifySignature({ alg: 'EdDSA', key: publicKey }, [h, p, std(sig)])).toBe(false);
  });

  it('remembers a header by its text, frozen; one that does not decode is refused every time', () => {
    const a = decodeHeader(h)!;
    expect(a).toEqual({ alg: 'EdDSA', typ: 'allowance+jwt', kid: 'k1' });
    expect(decodeHeader(h)).toBe(a);
    expect(Object.isFrozen(a)).toBe(true);
    const dup = Buffer.from('{"alg":"EdDSA","alg":"none"}').toString('base64url');
    expect(decodeHeader(dup)).toBeUndefined();
    expect(decodeHeader(dup)).toBeUndefined();
  });
});
