import { SignJWT } from 'jose';
import fc from 'fast-check';
import { beforeAll, describe, expect, it } from 'vitest';
import { KeySet } from '../../src/sdk/keys.js';
import { Verifier } from '../../src/sdk/verifier.js';
import {
  credentialClaims,
  ISSUER,
  keyPair,
  mintCredential,
  NODE,
  nowSeconds,
  payerKeyPair,
  signCompact,
  trusted,
  type KeyPair,
} from '../helpers/issuer.js';

let ed: KeyPair;
let es: KeyPair;
let payer: KeyPair;
let keys: KeySet;
let verifier: Verifier;

beforeAll(async () => {
  ed = await keyPair('EdDSA', 'ed-1');
  es = await keyPair('ES256', 'es-1');
  payer = await payerKeyPair();
  keys = new KeySet([trusted(ed), trusted(es)]);
  verifier = new Verifier({ keys });
});

const NOW = nowSeconds();
const at = (seconds: number) => seconds * 1000;
const check = (jws: unknown, audience = NODE, now = at(NOW)) => verifier.verify(jws, { audience, now });
const refusal = (jws: unknown, audience = NODE, now = at(NOW)) => {
  const r = check(jws, audience, now);
  return r.valid ? 'valid' : r.refusal;
};
const mint = (o: { header?: Record<string, unknown>; claims?: Record<string, unknown>; key?: KeyPair; signWith?: Parameters<typeof mintCredential>[0]['signWith'] } = {}) =>
  mintCredential({ key: o.key ?? ed, now: NOW, payer, ...o });

describe('Verifier: valid credentials', () => {
  it('answers every field of a valid EdDSA credential (DESIGN §4)', () => {
    const jws = mint({ claims: { jti: 'cred-ed', iat: NOW - 10, exp: NOW + 600 } });
    expect(check(jws)).toEqual({
      valid: true,
      credentialId: 'cred-ed',
      issuer: ISSUER,
      payer: 'payer-1',
      node: NODE,
      stream: 'stream-1',
      budget: 'budget-1',
      capMicro: '5000000',
      asset: 'USDC',
      unitPriceMicro: '25',
      rateMicroPerSecond: '1000',
      mode: 'escrow',
      issuedAt: new Date((NOW - 10) * 1000).toISOString(),
      expiresAt: new Date((NOW + 600) * 1000).toISOString(),
    });
  });

  it('answers every field of a valid ES256 credential, rate absent → null, card mode', () => {
    const jws = mint({
      key: es,
      claims: { jti: 'cred-es', sub: 'payer-9', stream: 's:9', budget: 'b@x', cap: '9223372036854775807', asset: 'EURC', unitPrice: '1', rate: undefined, mode: 'card', exp: NOW + 60 },
    });
    expect(check(jws)).toEqual({
      valid: true,
      credentialId: 'cred-es',
      issuer: ISSUER,
      payer: 'payer-9',
      node: NODE,
      stream: 's:9',
      budget: 'b@x',
      capMicro: '9223372036854775807',
      asset: 'EURC',
      unitPriceMicro: '1',
      rateMicroPerSecond: null,
      mode: 'card',
      issuedAt: new Date(NOW * 1000).toISOString(),
      expiresAt: new Date((NOW + 60) * 1000).toISOString(),
    });
  });

  it('verifyClaims also hands back cnf, iat, exp, nbf and the signed claims', () => {
    const jws = mint({ claims: { nbf: NOW - 5 } });
    const out = verifier.verifyClaims(jws, { audience: NODE, now: at(NOW) });
    expect('ok' in out && out.ok).toBe(true);
    if (!('ok' in out)) return;
    expect(out.claims.cnf).toEqual({ jwk: payer.publicJwk });
    expect(out.claims.iat).toBe(NOW);
    expect(out.claims.exp).toBe(NOW + 3600);
    expect(out.claims.nbf).toBe(NOW - 5);
    expect(out.claims.claims.stream).toBe('stream-1');
  });

  it('accepts a cnf.addr credential (EIP-712 vouchers) naming its chain, escrow contract and channel', () => {
    const escrow = { chainId: 1337, escrow: `0x${'cd'.repeat(20)}`, channel: `0x${'ef'.repeat(32)}` };
    const jws = mint({ claims: { cnf: { addr: `0x${'AB'.repeat(20)}` }, ...escrow } });
    expect(refusal(jws)).toBe('valid');
    const r = check(jws);
    expect(r.valid && r.escrow).toEqual({ chainId: 1337, contract: escrow.escrow, channel: escrow.channel, payerAddress: `0x${'ab'.repeat(20)}` });
  });

  it('refuses a cnf.addr credential without chainId, escrow or channel (missing_claim) or with a bad one (malformed)', () => {
    const full = { cnf: { addr: `0x${'ab'.repeat(20)}` }, chainId: 1337, escrow: `0x${'cd'.repeat(20)}`, channel: `0x${'ef'.repeat(32)}` };
    for (const name of ['chainId', 'escrow', 'channel'] as const) expect(refusal(mint({ claims: { ...full, [name]: undefined } }))).toBe('missing_claim');
    expect(refusal(mint({ claims: { ...full, chainId: '1337' } }))).toBe('malformed');
    expect(refusal(mint({ claims: { ...full, escrow: '0x1234' } }))).toBe('malformed');
    expect(refusal(mint({ claims: { ...full, channel: `0x${'ef'.repeat(31)}` } }))).toBe('malformed');
  });

  it('accepts a credential signed by jose itself (interop, not only our own signer)', async () => {
    const c = credentialClaims({ now: NOW, payer });
    const { iss, sub, aud, jti, iat, exp, ...rest } = c as Record<string, string & number>;
    const jws = await new SignJWT(rest)
      .setProtectedHeader({ alg: 'ES256', typ: 'allowance+jwt', kid: es.kid })
      .setIssuer(iss).setSubject(sub).setAudience(aud).setJti(jti).setIssuedAt(iat).setExpirationTime(exp)
      .sign(es.privateKey);
    expect(refusal(jws)).toBe('valid');
  });

  it('takes typ case-insensitively and with the application/ prefix (RFC 7515)', () => {
    expect(refusal(mint({ header: { typ: 'application/Allowance+JWT' } }))).toBe('valid');
  });
});

describe('Verifier: header and signature refusals', () => {
  it('alg none (empty signature) → unsupported_algorithm', () => {
    const jws = signCompact({ alg: 'none', typ: 'allowance+jwt', kid: ed.kid }, credentialClaims({ now: NOW }));
    expect(jws.endsWith('.')).toBe(true);
    expect(refusal(jws)).toBe('unsupported_algorithm');
  });

  it('alg none with a signature attached → unsupported_algorithm', () => {
    const jws = signCompact({ alg: 'none', typ: 'allowance+jwt', kid: ed.kid }, credentialClaims({ now: NOW }), ed.privateKey);
    expect(refusal(jws)).toBe('unsupported_algorithm');
  });

  it('HS256 keyed with the trusted public key bytes (key confusion) → unsupported_algorithm', () => {
    for (const secret of [Buffer.from(JSON.stringify(ed.publicJwk)), Buffer.from(ed.publicJwk.x!, 'base64url'), ed.publicKey.export({ type: 'spki', format: 'der' })]) {
      const jws = mint({ header: { alg: 'HS256' }, signWith: secret });
      expect(refusal(jws)).toBe('unsupported_algorithm');
    }
  });

  it('an algorithm the verifier is configured without, even if allowlisted by default → unsupported_algorithm', () => {
    const edOnly = new Verifier({ keys, algorithms: ['EdDSA'] });
    expect(edOnly.verify(mint({ key: es }), { audience: NODE, now: at(NOW) })).toMatchObject({ valid: false, refusal: 'unsupported_algorithm' });
    expect(edOnly.verify(mint({ key: ed }), { audience: NODE, now: at(NOW) }).valid).toBe(true);
  });

  it('none and HS* stay refused even when configured as allowed', () => {
    const lax = new Verifier({ keys, algorithms: ['EdDSA', 'none', 'HS256'] });
    const hs = mint({ header: { alg: 'HS256' }, signWith: Buffer.from(ed.publicJwk.x!, 'base64url') });
    expect(lax.verify(hs, { audience: NODE, now: at(NOW) })).toMatchObject({ valid: false, refusal: 'unsupported_algorithm' });
    const none = signCompact({ alg: 'none', typ: 'allowance+jwt', kid: ed.kid }, credentialClaims({ now: NOW }));
    expect(lax.verify(none, { audience: NODE, now: at(NOW) })).toMatchObject({ valid: false, refusal: 'unsupported_algorithm' });
  });

  it('header alg differing from the algorithm the kid is trusted for → unsupported_algorithm', () => {
    expect(refusal(mint({ header: { alg: 'ES256' }, signWith: es.privateKey }))).toBe('unsupported_algorithm');
  });

  it('wrong typ → wrong_type (and a missing typ, and a voucher typ)', () => {
    expect(refusal(mint({ header: { typ: 'JWT' } }))).toBe('wrong_type');
    expect(refusal(mint({ header: { typ: undefined } }))).toBe('wrong_type');
    expect(refusal(mint({ header: { typ: 'voucher+jwt' } }))).toBe('wrong_type');
  });

  it('missing kid → malformed', () => {
    const r = check(mint({ header: { kid: undefined } }));
    expect(r).toMatchObject({ valid: false, refusal: 'malformed' });
    expect(!r.valid && r.detail).toMatch(/kid/);
  });

  it('unknown kid → unknown_key', () => {
    expect(refusal(mint({ header: { kid: 'nobody' } }))).toBe('unknown_key');
  });

  it('a foreign key reusing a trusted kid → bad_signature', async () => {
    const foreign = await keyPair('EdDSA', ed.kid);
    expect(refusal(mint({ key: foreign }))).toBe('bad_signature');
    const foreignEs = await keyPair('ES256', es.kid);
    expect(refusal(mint({ key: foreignEs }))).toBe('bad_signature');
  });

  it('tampered payload → bad_signature', () => {
    const jws = mint();
    const [h, , s] = jws.split('.');
    const forged = Buffer.from(JSON.stringify({ ...credentialClaims({ now: NOW, payer }), cap: '999999999' })).toString('base64url');
    expect(refusal(`${h}.${forged}.${s}`)).toBe('bad_signature');
  });

  it('tampered header or signature → refused', () => {
    const [h, p, s] = mint().split('.') as [string, string, string];
    const h2 = Buffer.from(JSON.stringify({ alg: 'EdDSA', typ: 'allowance+jwt', kid: ed.kid, x: 1 })).toString('base64url');
    expect(refusal(`${h2}.${p}.${s}`)).toBe('bad_signature');
    const sig = Buffer.from(s, 'base64url');
    sig[10]! ^= 1;
    expect(refusal(`${h}.${p}.${sig.toString('base64url')}`)).toBe('bad_signature');
    expect(refusal(`${h}.${p}.${s.slice(0, -4)}`)).toBe('bad_signature');
    expect(refusal(`${h}.${p}.`)).toBe('bad_signature'); // signature stripped, alg kept
  });

  it('an ES256 signature in DER instead of raw r||s → bad_signature', () => {
    const jws = signCompact({ alg: 'ES256', typ: 'allowance+jwt', kid: es.kid }, credentialClaims({ now: NOW }), es.privateKey, { dsaEncoding: 'der' });
    expect(refusal(jws)).toBe('bad_signature');
  });

  it('unknown crit → malformed (and an empty crit, and b64)', () => {
    expect(refusal(mint({ header: { crit: ['exp2'], exp2: 1 } }))).toBe('malformed');
    expect(refusal(mint({ header: { crit: [] } }))).toBe('malformed');
    expect(refusal(mint({ header: { b64: false, crit: ['b64'] } }))).toBe('malformed');
    expect(refusal(mint({ header: { b64: true } }))).toBe('malformed');
  });
});

describe('Verifier: time, audience and issuer', () => {
  it('expired → expired', () => {
    expect(refusal(mint({ claims: { iat: NOW - 7200, exp: NOW - 60 } }))).toBe('expired');
  });

  it('expired but within the 30 s tolerance → valid; at the tolerance edge → expired', () => {
    expect(refusal(mint({ claims: { iat: NOW - 3600, exp: NOW - 20 } }))).toBe('valid');
    expect(refusal(mint({ claims: { iat: NOW - 3600, exp: NOW - 30 } }))).toBe('expired');
  });

  it('the tolerance is configurable', () => {
    const strict = new Verifier({ keys, clockTolerance: 0 });
    const jws = mint({ claims: { iat: NOW - 3600, exp: NOW - 1 } });
    expect(strict.verify(jws, { audience: NODE, now: at(NOW) })).toMatchObject({ valid: false, refusal: 'expired' });
    expect(refusal(jws)).toBe('valid');
  });

  it('nbf in the future → not_yet_valid; within tolerance → valid', () => {
    expect(refusal(mint({ claims: { nbf: NOW + 120 } }))).toBe('not_yet_valid');
    expect(refusal(mint({ claims: { nbf: NOW + 20 } }))).toBe('valid');
  });

  it('iat in the future → not_yet_valid; within tolerance → valid', () => {
    expect(refusal(mint({ claims: { iat: NOW + 120, exp: NOW + 3600 } }))).toBe('not_yet_valid');
    expect(refusal(mint({ claims: { iat: NOW + 20, exp: NOW + 3600 } }))).toBe('valid');
  });

  it('wrong aud → wrong_audience', () => {
    expect(refusal(mint(), 'node-b')).toBe('wrong_audience');
    expect(refusal(mint({ claims: { aud: 'node-b' } }))).toBe('wrong_audience');
  });

  it('wrong iss → untrusted_issuer (the key is trusted for another issuer)', () => {
    expect(refusal(mint({ claims: { iss: 'https://evil.test' } }))).toBe('untrusted_issuer');
    const other = new Verifier({ keys: new KeySet([trusted(ed, 'https://other.test')]) });
    expect(other.verify(mint(), { audience: NODE, now: at(NOW) })).toMatchObject({ valid: false, refusal: 'untrusted_issuer' });
  });

  it('uses the real clock when now is not given', () => {
    const real = nowSeconds();
    expect(verifier.verify(mintCredential({ key: ed, now: real }), { audience: NODE }).valid).toBe(true);
    expect(verifier.verify(mintCredential({ key: ed, claims: { iat: real - 7200, exp: real - 3600 } }), { audience: NODE })).toMatchObject({ refusal: 'expired' });
  });
});

describe('Verifier: claims', () => {
  const required = ['iss', 'sub', 'aud', 'jti', 'iat', 'exp', 'stream', 'budget', 'cap', 'asset', 'unitPrice', 'mode', 'cnf'];
  for (const name of required) {
    it(`missing ${name} → missing_claim`, () => {
      const r = check(mint({ claims: { [name]: undefined } }));
      expect(r).toMatchObject({ valid: false, refusal: 'missing_claim' });
      expect(!r.valid && r.detail).toContain(name);
    });
  }

  it('null counts as missing', () => {
    expect(refusal(mint({ claims: { cap: null } }))).toBe('missing_claim');
  });

  it('optional claims may be absent: nbf, rate', () => {
    expect(refusal(mint({ claims: { nbf: undefined, rate: undefined } }))).toBe('valid');
  });

  const mistyped: Array<[string, Record<string, unknown>]> = [
    ['cap "1.5"', { cap: '1.5' }],
    ['cap "-1"', { cap: '-1' }],
    ['cap "0"', { cap: '0' }],
    ['cap over int64', { cap: '9223372036854775808' }],
    ['cap with a leading zero', { cap: '0100' }],
    ['cap as a number', { cap: 5000000 }],
    ['cap "1e6"', { cap: '1e6' }],
    ['unitPrice 0', { unitPrice: '0' }],
    ['unitPrice as number 0', { unitPrice: 0 }],
    ['rate "abc"', { rate: 'abc' }],
    ['rate "0"', { rate: '0' }],
    ['mode "cash"', { mode: 'cash' }],
    ['cnf without jwk or addr', { cnf: {} }],
    ['cnf as a string', { cnf: 'jwk' }],
    ['cnf.jwk not an object', { cnf: { jwk: 'abc' } }],
    ['cnf.jwk with private d', { cnf: { jwk: { kty: 'OKP', crv: 'Ed25519', x: 'AAAA', d: 'BBBB' } } }],
    ['cnf.addr not an address', { cnf: { addr: '0x1234' } }],
    ['stream with a slash', { stream: 'a/b' }],
    ['stream empty', { stream: '' }],
    ['budget with a space', { budget: 'b 1' }],
    ['aud as an array', { aud: [NODE] }],
    ['sub empty', { sub: '' }],
    ['sub as a number', { sub: 42 }],
    ['jti over 256 characters', { jti: 'j'.repeat(257) }],
    ['iat as a string', { iat: String(NOW) }],
    ['exp fractional', { exp: NOW + 3600.5 }],
    ['nbf as a string', { nbf: 'soon' }],
    ['asset over 32 characters', { asset: 'A'.repeat(33) }],
  ];
  for (const [label, claims] of mistyped) {
    it(`${label} → malformed`, () => {
      const r = check(mint({ claims }));
      expect(r).toMatchObject({ valid: false, refusal: 'malformed' });
    });
  }
});

describe('Verifier: garbage never throws', () => {
  it('oversize (> 16 KiB) → malformed, even when correctly signed', () => {
    const big = mint({ claims: { pad: 'x'.repeat(17 * 1024) } });
    expect(big.length).toBeGreaterThan(16 * 1024);
    const r = check(big);
    expect(r).toMatchObject({ valid: false, refusal: 'malformed' });
    expect(!r.valid && r.detail).toMatch(/longer/);
  });

  it('garbage strings → malformed', () => {
    const [h, p, s] = mint().split('.') as [string, string, string];
    const notJson = Buffer.from('not json').toString('base64url');
    for (const g of ['', '.', '..', 'abc', 'a.b', 'a.b.c.d', `${h}.${p}`, `${h}.${p}.${s}.${s}`, `${h}..${s}`, `.${p}.${s}`, '%%%.%%%.%%%', `${h}.${p}.${s}=`, `${h} .${p}.${s}`, `${notJson}.${p}.${s}`, `${Buffer.from('[1]').toString('base64url')}.${p}.${s}`, `${Buffer.from('\xff\xfe').toString('base64url')}.${p}.${s}`, '\u0000', 'é.é.é']) {
      expect(check(g), JSON.stringify(g)).toMatchObject({ valid: false, refusal: 'malformed' });
    }
  });

  it('a correctly signed payload that is not a JSON object → malformed', () => {
    for (const payload of ['not json', '[1,2]', '"str"', '42', 'null']) {
      const jws = signCompact({ alg: 'EdDSA', typ: 'allowance+jwt', kid: ed.kid }, payload, ed.privateKey);
      expect(check(jws), payload).toMatchObject({ valid: false, refusal: 'malformed' });
    }
  });

  it('non-string input → malformed', () => {
    for (const v of [undefined, null, 42, true, {}, [], [mint()], Buffer.from(mint()), Symbol('x'), () => 1, 10n]) {
      expect(check(v)).toMatchObject({ valid: false, refusal: 'malformed' });
    }
  });

  it('any string or value: a refusal from the list, never a throw (property)', () => {
    const names = new Set(['malformed', 'unsupported_algorithm', 'unknown_key', 'bad_signature', 'wrong_type', 'untrusted_issuer', 'wrong_audience', 'expired', 'not_yet_valid', 'missing_claim']);
    fc.assert(
      fc.property(fc.oneof(fc.string(), fc.anything(), fc.array(fc.base64String(), { minLength: 3, maxLength: 3 }).map((a) => a.join('.'))), (v) => {
        const r = check(v);
        return r.valid === false && names.has(r.refusal) && typeof r.detail === 'string';
      }),
      { numRuns: 300 },
    );
  });

  it('a valid credential with any single character changed is refused, never valid (property)', () => {
    const jws = mint();
    const alphabet = 'ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_.=+/ ';
    fc.assert(
      fc.property(fc.nat(jws.length - 1), fc.constantFrom(...alphabet), (i, ch) => {
        fc.pre(jws[i] !== ch);
        const mutated = jws.slice(0, i) + ch + jws.slice(i + 1);
        const r = new Verifier({ keys, cacheSize: 0 }).verify(mutated, { audience: NODE, now: at(NOW) });
        // The last base64url character of a part can carry unused bits, so a change there may decode to the same bytes.
        if (r.valid) return Buffer.from(mutated.split('.')[2] ?? '', 'base64url').equals(Buffer.from(jws.split('.')[2]!, 'base64url')) ||
          Buffer.from(mutated.split('.')[1] ?? '', 'base64url').equals(Buffer.from(jws.split('.')[1]!, 'base64url')) ||
          Buffer.from(mutated.split('.')[0] ?? '', 'base64url').equals(Buffer.from(jws.split('.')[0]!, 'base64url'));
        return true;
      }),
      { numRuns: 300 },
    );
  });
});

describe('Verifier: cache of verified credentials', () => {
  it('re-checks expiry on every hit', () => {
    const v = new Verifier({ keys });
    const jws = mint({ claims: { iat: NOW, exp: NOW + 100 } });
    expect(v.verify(jws, { audience: NODE, now: at(NOW) }).valid).toBe(true);
    expect(v.verify(jws, { audience: NODE, now: at(NOW + 50) }).valid).toBe(true);
    expect(v.verify(jws, { audience: NODE, now: at(NOW + 200) })).toMatchObject({ valid: false, refusal: 'expired' });
    // …and not-before too: a hit from an earlier clock is still judged against that clock.
    expect(v.verify(jws, { audience: NODE, now: at(NOW - 600) })).toMatchObject({ valid: false, refusal: 'not_yet_valid' });
  });

  it('a cached credential still answers wrong_audience for another audience', () => {
    const v = new Verifier({ keys });
    const jws = mint();
    expect(v.verify(jws, { audience: NODE, now: at(NOW) }).valid).toBe(true);
    expect(v.verify(jws, { audience: 'node-b', now: at(NOW) })).toMatchObject({ valid: false, refusal: 'wrong_audience' });
    expect(v.verify(jws, { audience: NODE, now: at(NOW) }).valid).toBe(true);
  });

  it('drops the cache when the KeySet changes: a removed key → unknown_key on the next call', async () => {
    const k = new KeySet([trusted(ed), trusted(es)]);
    const v = new Verifier({ keys: k });
    const jws = mint();
    expect(v.verify(jws, { audience: NODE, now: at(NOW) }).valid).toBe(true);
    expect(v.verify(jws, { audience: NODE, now: at(NOW) }).valid).toBe(true);
    k.replace([trusted(es)]);
    expect(v.verify(jws, { audience: NODE, now: at(NOW) })).toMatchObject({ valid: false, refusal: 'unknown_key' });
    // The same kid now bound to another key: the old credential no longer verifies.
    const rotated = await keyPair('EdDSA', ed.kid);
    k.replace([trusted(rotated), trusted(es)]);
    expect(v.verify(jws, { audience: NODE, now: at(NOW) })).toMatchObject({ valid: false, refusal: 'bad_signature' });
    // Moving the key to another issuer: untrusted_issuer, not a stale valid answer.
    k.replace([trusted(ed, 'https://other.test')]);
    expect(v.verify(jws, { audience: NODE, now: at(NOW) })).toMatchObject({ valid: false, refusal: 'untrusted_issuer' });
  });

  it('watches every KeySet it was given', () => {
    const a = new KeySet([trusted(es)]);
    const b = new KeySet([trusted(ed)]);
    const v = new Verifier({ keys: [a, b] });
    const jws = mint();
    expect(v.verify(jws, { audience: NODE, now: at(NOW) }).valid).toBe(true);
    b.replace([]);
    expect(v.verify(jws, { audience: NODE, now: at(NOW) })).toMatchObject({ valid: false, refusal: 'unknown_key' });
  });

  it('first, second and later sights give the same claims as an uncached verifier (the cache keeps only the text at first sight)', () => {
    const escrow = { chainId: 1337, escrow: `0x${'CD'.repeat(20)}`, channel: `0x${'EF'.repeat(32)}` };
    const cases = [
      mint({ claims: { nbf: NOW - 5, rate: '7', note: 'ünïcode ✓', nested: { a: [1, { b: 'c:"d' }] } } }),
      mint({ key: es, claims: { cnf: { addr: `0x${'AB'.repeat(20)}` }, ...escrow } }),
    ];
    for (const jws of cases) {
      const opts = { audience: NODE, now: at(NOW) };
      const uncached = new Verifier({ keys, cacheSize: 0 }).verifyClaims(jws, opts);
      expect(uncached).toMatchObject({ ok: true });
      const v = new Verifier({ keys });
      const sights = [1, 2, 3, 4].map(() => v.verifyClaims(jws, opts));
      for (const [k, out] of sights.entries()) expect(out, `sight ${k + 1}`).toEqual(uncached);
      // From the second sight on, the claims are the cache's expanded object, the same one each time.
      const [, second, third] = sights as [unknown, { claims: unknown }, { claims: unknown }];
      expect(third.claims).toBe(second.claims);
      // Audience and clock are still judged on a hit that expanded the text.
      const w = new Verifier({ keys });
      expect(w.verifyClaims(jws, opts)).toMatchObject({ ok: true });
      expect(w.verifyClaims(jws, { audience: 'node-b', now: at(NOW) })).toMatchObject({ valid: false, refusal: 'wrong_audience' });
      expect(w.verifyClaims(jws, { audience: NODE, now: at(NOW + 7200) })).toMatchObject({ valid: false, refusal: 'expired' });
      expect(w.verifyClaims(jws, opts)).toEqual(uncached);
    }
  });

  it('refusals are not cached as valid, and a small cache evicts without breaking answers', () => {
    const v = new Verifier({ keys, cacheSize: 2 });
    const creds = [mint(), mint(), mint()];
    for (let round = 0; round < 3; round++)
      for (const c of creds) expect(v.verify(c, { audience: NODE, now: at(NOW) }).valid).toBe(true);
    const bad = mint({ header: { kid: 'nobody' } });
    expect(refusal(bad)).toBe('unknown_key');
    expect(refusal(bad)).toBe('unknown_key');
  });
});

describe('Verifier: the signature checked in the thread pool first (verifyClaimsAsync, the daemon)', () => {
  it('answers exactly as verifyClaims, for every kind of credential', async () => {
    const [h, p, s] = mint().split('.') as [string, string, string];
    const sig = Buffer.from(s, 'base64url');
    sig[3]! ^= 1;
    const foreign = await keyPair('EdDSA', ed.kid);
    const cases: unknown[] = [
      mint(), mint({ key: es }), ` ${mint()}\n`, `${h}.${p}.${sig.toString('base64url')}`, `${h}.${p}.`, mint({ key: foreign }),
      mint({ header: { kid: 'nobody' } }), mint({ claims: { exp: NOW - 3600 } }), mint({ claims: { aud: 'node-b' } }),
      `${h}.${Buffer.from(JSON.stringify({ ...credentialClaims({ now: NOW, payer }), cap: '9' })).toString('base64url')}.${s}`,
      signCompact({ alg: 'ES256', typ: 'allowance+jwt', kid: es.kid }, credentialClaims({ now: NOW }), es.privateKey, { dsaEncoding: 'der' }),
      signCompact({ alg: 'EdDSA', typ: 'allowance+jwt', kid: ed.kid }, '[1,2]', ed.privateKey),
      mint({ claims: { pad: 'x'.repeat(17 * 1024) } }), 'a.b.c', 42, undefined,
    ];
    for (const c of cases) {
      const opts = { audience: NODE, now: at(NOW) };
      const sync = new Verifier({ keys }).verifyClaims(c, opts);
      const pooled = new Verifier({ keys });
      expect(await pooled.verifyClaimsAsync(c, opts), String(c).slice(0, 40)).toEqual(sync);
      expect(await pooled.verifyClaimsAsync(c, opts), 'again (from the cache when valid)').toEqual(sync);
    }
  });

  it('what the pool found holds only for the key object it used: a key replaced meanwhile is checked again', async () => {
    const set = new KeySet([trusted(ed)]);
    const v = new Verifier({ keys: set });
    const jws = mint();
    const other = await keyPair('EdDSA', ed.kid);
    const pending = v.verifyClaimsAsync(jws, { audience: NODE, now: at(NOW) });
    // While the pool verifies with ed's key, the issuer's key under the same kid is replaced by another one.
    set.replace([trusted(other)]);
    expect(await pending).toMatchObject({ valid: false, refusal: 'bad_signature' });
  });
});
