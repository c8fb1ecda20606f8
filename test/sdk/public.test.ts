// The SDK through its public exports only (node-svc/sdk → dist/sdk/index.js, resolved like a user's import),
// checked against the real CLI (`node-svc verify --json`) on a temp data dir trusting the same keys.
import { createHmac } from 'node:crypto';
import { createServer, type Server } from 'node:http';
import type { AddressInfo } from 'node:net';
import { KeySet, loadKeySet, verifyAllowance, verifyWebhookSignature, type VerifyResult } from 'node-svc/sdk';
import { afterAll, beforeAll, describe, expect, it, vi } from 'vitest';
import { cliFor, json, tempDataDir, type TempDataDir } from '../helpers/cli.js';
import { ISSUER, keyPair, mintCredential, NODE, nowSeconds, publicJwks, signCompact, trusted, writeJwks, type KeyPair } from '../helpers/issuer.js';

vi.setConfig({ testTimeout: 60_000, hookTimeout: 60_000 });

let ed: KeyPair;
let es: KeyPair;
let stranger: KeyPair;
let t: TempDataDir;
let cli: ReturnType<typeof cliFor>;
let keys: KeySet;

beforeAll(async () => {
  ed = await keyPair('EdDSA');
  es = await keyPair('ES256');
  stranger = await keyPair('EdDSA', ed.kid); // same kid, different key: signatures must not verify
  keys = new KeySet([trusted(ed), trusted(es)]);
  t = await tempDataDir('node-svc-sdk-public-');
  cli = cliFor(t.dataDir);
  for (const args of [['nodes', 'add', NODE], ['nodes', 'add', 'node-b'], ['keys', 'add', '--issuer', ISSUER, await writeJwks(`${t.root}/jwks.json`, publicJwks(ed, es))]]) {
    const r = await cli(...args);
    expect(r.code, r.stderr).toBe(0);
  }
});
afterAll(async () => {
  await t?.cleanup();
});

/** What `node-svc verify <jws> --node <aud> --json` answers (stdout, on exit 0 or 1). */
async function cliVerify(jws: string, aud = NODE): Promise<VerifyResult> {
  const r = await cli('verify', jws, '--node', aud, '--json');
  expect([0, 1], r.stderr).toContain(r.code);
  const out = json<VerifyResult>(r.stdout);
  expect(r.code).toBe(out.valid ? 0 : 1);
  return out;
}

describe('verifyAllowance answers exactly what `node-svc verify` answers', () => {
  const now = nowSeconds();
  const cases: Array<[string, () => string, string, string | true]> = [
    ['a valid EdDSA credential', () => mintCredential({ key: ed, now }), NODE, true],
    ['a valid ES256 credential', () => mintCredential({ key: es, now, claims: { rate: undefined } }), NODE, true],
    ['an expired credential', () => mintCredential({ key: ed, now: now - 7200 }), NODE, 'expired'],
    ['another audience', () => mintCredential({ key: ed, now }), 'node-b', 'wrong_audience'],
    ['a foreign key reusing the kid', () => mintCredential({ key: ed, now, signWith: stranger.privateKey }), NODE, 'bad_signature'],
    ['an unknown kid', () => mintCredential({ key: ed, now, header: { kid: 'nobody' } }), NODE, 'unknown_key'],
    ['alg none', () => mintCredential({ key: ed, now, header: { alg: 'none' }, signWith: undefined }), NODE, 'unsupported_algorithm'],
    ['HS256 keyed with the public key', () => mintCredential({ key: ed, now, header: { alg: 'HS256' }, signWith: Buffer.from(JSON.stringify(ed.publicJwk)) }), NODE, 'unsupported_algorithm'],
    ['the wrong typ', () => mintCredential({ key: ed, now, header: { typ: 'JWT' } }), NODE, 'wrong_type'],
    ['a missing claim', () => mintCredential({ key: ed, now, claims: { cap: undefined } }), NODE, 'missing_claim'],
    ['another issuer', () => mintCredential({ key: ed, now, claims: { iss: 'https://evil.test' } }), NODE, 'untrusted_issuer'],
    ['issued in the future', () => mintCredential({ key: ed, now: now + 3600 }), NODE, 'not_yet_valid'],
    ['a cap that is a number', () => mintCredential({ key: ed, now, claims: { cap: 5000000 } }), NODE, 'malformed'],
    ['garbage', () => 'not.a.jws!', NODE, 'malformed'],
    ['a JSON payload that is an array', () => signCompact({ alg: 'EdDSA', typ: 'allowance+jwt', kid: ed.kid }, '[1,2]', ed.privateKey), NODE, 'malformed'],
  ];
  for (const [name, make, aud, want] of cases) {
    it(`${name} → ${want === true ? 'valid' : want}`, async () => {
      const jws = make();
      const fromCli = await cliVerify(jws, aud);
      const fromSdk = verifyAllowance(jws, { keys, audience: aud });
      expect(fromSdk).toEqual(fromCli);
      // Asked again (the cached path), the answer is the same.
      expect(verifyAllowance(jws, { keys, audience: aud })).toEqual(fromCli);
      if (want === true) {
        expect(fromSdk.valid).toBe(true);
        expect(fromSdk).toMatchObject({ issuer: ISSUER, node: NODE, stream: 'stream-1', budget: 'budget-1', capMicro: '5000000' });
      } else expect(fromSdk).toMatchObject({ valid: false, refusal: want, detail: expect.any(String) });
    });
  }

  it('a cached credential is re-checked against the clock and the audience on every call', () => {
    const jws = mintCredential({ key: ed, now, claims: { exp: now + 60 } });
    expect(verifyAllowance(jws, { keys, audience: NODE }).valid).toBe(true);
    expect(verifyAllowance(jws, { keys, audience: 'node-b' })).toMatchObject({ valid: false, refusal: 'wrong_audience' });
    expect(verifyAllowance(jws, { keys, audience: NODE, now: (now + 60 + 31) * 1000 })).toMatchObject({ valid: false, refusal: 'expired' });
    expect(verifyAllowance(jws, { keys, audience: NODE, now: (now + 60 + 31) * 1000, clockTolerance: 120 }).valid).toBe(true);
    expect(verifyAllowance(jws, { keys, audience: NODE }).valid).toBe(true);
  });
});

describe('verifyAllowance never throws', () => {
  const inputs: unknown[] = [
    undefined, null, 0, 42, NaN, true, {}, [], ['a.b.c'], Symbol('x'), () => 'x', new Uint8Array(8), 10n,
    '', '.', '..', '...', 'a.b', 'a.b.c.d', '\u0000.\u0000.\u0000', '😀.😀.😀', 'e30.e30.', 'e30.e30.e30', '#$%.^&*.()',
    'x'.repeat(10 * 1024 * 1024), `${'a'.repeat(1 << 20)}.${'b'.repeat(1 << 20)}.${'c'.repeat(1 << 20)}`,
  ];
  it.each(inputs.map((v, i) => [i, v]))('input #%i → a refusal, no payload', (i, input) => {
    let r: VerifyResult | undefined;
    expect(() => (r = verifyAllowance(input as string, { keys, audience: NODE }))).not.toThrow();
    expect(Object.keys(r!).sort()).toEqual(['detail', 'refusal', 'valid']);
    // `e30` is `{}`: a JWS-shaped string whose header has no alg.
    const want = String(input).startsWith('e30.') ? 'unsupported_algorithm' : 'malformed';
    expect(r, `input #${i}`).toEqual({ valid: false, refusal: want, detail: expect.any(String) });
  });

  it('bad options are a refusal too, never an exception', () => {
    const jws = mintCredential({ key: ed });
    for (const opts of [undefined, null, {}, { keys: undefined, audience: NODE }, { keys: 'k', audience: NODE }, { keys: [null], audience: NODE }, { keys, audience: undefined }])
      expect(() => verifyAllowance(jws, opts as never)).not.toThrow();
    expect(verifyAllowance(jws, { keys, audience: undefined as never }).valid).toBe(false);
    expect(verifyAllowance(jws, null as never).valid).toBe(false);
  });

  it('a tampered payload of a real credential is bad_signature', () => {
    const [h, , s] = mintCredential({ key: ed }).split('.');
    const p = Buffer.from(JSON.stringify({ cap: '999999999' })).toString('base64url');
    expect(verifyAllowance(`${h}.${p}.${s}`, { keys, audience: NODE })).toMatchObject({ valid: false, refusal: 'bad_signature' });
  });
});

describe('keys as an array of key sets', () => {
  it('a credential verifies with whichever set holds its key; the order of sets does not matter', () => {
    const a = new KeySet([trusted(ed)]);
    const b = new KeySet([trusted(es, 'https://other.test')]);
    const fromEd = mintCredential({ key: ed });
    const fromEs = mintCredential({ key: es, claims: { iss: 'https://other.test' } });
    for (const sets of [[a, b], [b, a]]) {
      expect(verifyAllowance(fromEd, { keys: sets, audience: NODE })).toMatchObject({ valid: true, issuer: ISSUER });
      expect(verifyAllowance(fromEs, { keys: sets, audience: NODE })).toMatchObject({ valid: true, issuer: 'https://other.test' });
    }
    // Each key is trusted only for its own issuer, even with both sets in play.
    const crossed = mintCredential({ key: es, claims: { iss: ISSUER } });
    expect(verifyAllowance(crossed, { keys: [a, b], audience: NODE })).toMatchObject({ valid: false, refusal: 'untrusted_issuer' });
    expect(verifyAllowance(fromEs, { keys: [a], audience: NODE })).toMatchObject({ valid: false, refusal: 'unknown_key' });
    expect(verifyAllowance(fromEd, { keys: [], audience: NODE })).toMatchObject({ valid: false, refusal: 'unknown_key' });
  });

  it('a set that changes (replace) drops the cached answers of the array', () => {
    const a = new KeySet([trusted(ed)]);
    const sets = [a];
    const jws = mintCredential({ key: ed });
    expect(verifyAllowance(jws, { keys: sets, audience: NODE }).valid).toBe(true);
    a.replace([]);
    expect(verifyAllowance(jws, { keys: sets, audience: NODE })).toMatchObject({ valid: false, refusal: 'unknown_key' });
  });
});

describe('loadKeySet', () => {
  it('from a JWKS object: keys with private parts or other algorithms are left out', async () => {
    const hs = { kty: 'oct', k: 'c2VjcmV0', kid: 'hs-1', alg: 'HS256' };
    const rs = { kty: 'RSA', n: 'AQAB', e: 'AQAB', kid: 'rs-1', alg: 'RS256' };
    const priv = await keyPair('EdDSA');
    const noAlg = { ...(await keyPair('EdDSA')).publicJwk, alg: undefined };
    const wrongCurve = { ...es.publicJwk, kid: 'es-as-ed', alg: 'EdDSA' };
    const set = await loadKeySet({ keys: [ed.publicJwk, es.publicJwk, hs, rs, priv.privateJwk, noAlg, wrongCurve, 'junk', null] }, { issuer: ISSUER });
    expect(set.list().map((k) => k.kid).sort()).toEqual([ed.kid, es.kid].sort());
    expect(set.list().every((k) => k.issuer === ISSUER)).toBe(true);
    expect(verifyAllowance(mintCredential({ key: ed }), { keys: set, audience: NODE }).valid).toBe(true);
    expect(verifyAllowance(mintCredential({ key: priv }), { keys: set, audience: NODE })).toMatchObject({ valid: false, refusal: 'unknown_key' });
    set.close();
  });

  it('refuses what is not a JWKS, and needs an issuer', async () => {
    await expect(loadKeySet({ nope: [] }, { issuer: ISSUER })).rejects.toThrow(/JWKS/);
    await expect(loadKeySet({ keys: [] }, {} as never)).rejects.toThrow(/issuer/);
  });

  describe('from an http URL on 127.0.0.1', () => {
    let server: Server;
    let url: string;
    let served: { status: number; body: string };
    let hits = 0;
    beforeAll(async () => {
      server = createServer((req, res) => {
        hits++;
        res.writeHead(served.status, { 'content-type': 'application/json' });
        res.end(served.body);
      });
      await new Promise<void>((r) => server.listen(0, '127.0.0.1', r));
      url = `http://127.0.0.1:${(server.address() as AddressInfo).port}/.well-known/jwks.json`;
    });
    afterAll(async () => {
      server.closeAllConnections();
      await new Promise((r) => server.close(r));
    });
    const serve = (jwks: unknown, status = 200) => (served = { status, body: typeof jwks === 'string' ? jwks : JSON.stringify(jwks) });
    const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));
    async function until(fn: () => boolean, ms = 5000) {
      const end = Date.now() + ms;
      while (!fn()) {
        if (Date.now() > end) throw new Error('condition not reached');
        await sleep(20);
      }
    }

    it('is fetched once; verifying many credentials fetches nothing more', async () => {
      serve(publicJwks(ed));
      hits = 0;
      const set = await loadKeySet(url, { issuer: ISSUER });
      try {
        expect(hits).toBe(1);
        for (let i = 0; i < 50; i++) expect(verifyAllowance(mintCredential({ key: ed }), { keys: set, audience: NODE }).valid).toBe(true);
        await sleep(100);
        expect(hits).toBe(1);
      } finally {
        set.close();
      }
    });

    it('a refresh picks up a new key after refreshMs; a failing refresh keeps the old keys', async () => {
      const fresh = await keyPair('EdDSA');
      serve(publicJwks(ed));
      hits = 0;
      const set = await loadKeySet(new URL(url), { issuer: ISSUER, refreshMs: 150 });
      try {
        const newCred = mintCredential({ key: fresh });
        expect(verifyAllowance(newCred, { keys: set, audience: NODE })).toMatchObject({ valid: false, refusal: 'unknown_key' });
        serve(publicJwks(ed, fresh));
        await until(() => verifyAllowance(newCred, { keys: set, audience: NODE }).valid);
        expect(hits).toBeGreaterThanOrEqual(2);

        // Failing refreshes (HTTP 500, not JSON, not a JWKS): the keys stay as they were.
        for (const [body, status] of [['{"error":"down"}', 500], ['<html>', 200], ['{"nope":1}', 200]] as const) {
          serve(body, status);
          const before = hits;
          await until(() => hits >= before + 2);
          expect(set.list().map((k) => k.kid).sort()).toEqual([ed.kid, fresh.kid].sort());
          expect(verifyAllowance(mintCredential({ key: fresh }), { keys: set, audience: NODE }).valid).toBe(true);
          expect(verifyAllowance(mintCredential({ key: ed }), { keys: set, audience: NODE }).valid).toBe(true);
        }
      } finally {
        set.close();
      }
      // After close() no more fetches happen (one already in flight may still land first).
      await sleep(200);
      const after = hits;
      await sleep(400);
      expect(hits).toBe(after);
    });

    it('a first fetch that fails rejects', async () => {
      serve('{}', 503);
      await expect(loadKeySet(url, { issuer: ISSUER })).rejects.toThrow(/503/);
    });
  });
});

describe('verifyWebhookSignature', () => {
  // GitHub's published test vector (docs: "Validating webhook deliveries").
  const secret = "It's a Secret to Everybody";
  const body = 'Hello, World!';
  const hex = '757107ea0eb2509fc211221cce984b8a37570b6d7586c22c46f4379c8b043e17';
  const good = `sha256=${hex}`;

  it('the GitHub vector verifies, as a string body and as a Buffer / Uint8Array body', () => {
    expect(verifyWebhookSignature(secret, body, good)).toBe(true);
    expect(verifyWebhookSignature(secret, Buffer.from(body, 'utf8'), good)).toBe(true);
    expect(verifyWebhookSignature(secret, new Uint8Array(Buffer.from(body, 'utf8')), good)).toBe(true);
  });

  it.each([
    ['uppercase hex', `sha256=${hex.toUpperCase()}`],
    ['uppercase prefix', `SHA256=${hex}`],
    ['truncated', good.slice(0, -1)],
    ['truncated to the prefix', 'sha256='],
    ['one char too many', `${good}0`],
    ['missing prefix', hex],
    ['another prefix', `sha1=${hex}`],
    ['leading space', ` ${good}`],
    ['trailing newline', `${good}\n`],
    ['one hex digit changed', `sha256=${hex.slice(0, -1)}${hex.endsWith('7') ? '8' : '7'}`],
    ['empty', ''],
  ])('%s → false', (_name, header) => {
    expect(verifyWebhookSignature(secret, body, header)).toBe(false);
  });

  it('wrong secret, other body, missing header or secret → false', () => {
    expect(verifyWebhookSignature("It's a Secret to Everybody!", body, good)).toBe(false);
    expect(verifyWebhookSignature(secret, 'Hello, World', good)).toBe(false);
    expect(verifyWebhookSignature(secret, Buffer.from('Hello, World!\n'), good)).toBe(false);
    expect(verifyWebhookSignature(secret, body, undefined)).toBe(false);
    expect(verifyWebhookSignature(secret, body, null)).toBe(false);
    expect(verifyWebhookSignature('', body, good)).toBe(false);
    expect(verifyWebhookSignature(undefined as never, body, good)).toBe(false);
    expect(verifyWebhookSignature(secret, body, [good] as never)).toBe(false);
  });

  it('a body that is not valid UTF-8 is signed over its exact bytes', () => {
    const raw = Buffer.from([0xff, 0xfe, 0x00, 0x41]);
    const sig = `sha256=${createHmac('sha256', Buffer.from(secret, 'utf8')).update(raw).digest('hex')}`;
    expect(verifyWebhookSignature(secret, raw, sig)).toBe(true);
    expect(verifyWebhookSignature(secret, raw.toString('utf8'), sig)).toBe(false);
  });
});

describe('verifyReceipt through node-svc/sdk, against `node-svc receipts verify` on the same store', () => {
  it('a receipt signed by the store key: valid; the wrong node, a changed claim and an unknown kid refused by name, as the CLI says', async () => {
    const { verifyReceipt, RECEIPT_TYP } = await import('node-svc/sdk');
    const { openStore } = await import('../../src/store/open.js');
    const { issueReceipt, receiptJwks } = await import('../../src/service/receipts.js');
    const store = await openStore({ dataDir: t.dataDir });
    let jws: string;
    let jwks: { keys: unknown[] };
    try {
      jws = await store.write((tx) => issueReceipt(tx, {
        jti: 'stl_public', node: NODE, stream: 's-1', asset: 'USD', amountMicro: 1_230_000n, finalAt: Date.UTC(2026, 10, 21, 10),
        reference: { rail: 'card', processor: 'stripe', captureId: 'txn_1', paymentIntent: 'pi_1', account: 'acct_1' },
      }, Date.now()));
      jwks = await receiptJwks(store);
    } finally {
      await store.close();
    }
    expect(JSON.parse(Buffer.from(jws.split('.')[0]!, 'base64url').toString()).typ).toBe(RECEIPT_TYP);
    const cliAnswer = async (...args: string[]) => json((await cli('receipts', 'verify', jws, ...args)).stdout);
    const ok = await verifyReceipt(jws, { jwks, node: NODE });
    expect(ok).toMatchObject({ valid: true, claims: { jti: 'stl_public', node: NODE, amountMicro: '1230000', finalAt: '2026-11-21T10:00:00.000Z', card: { captureId: 'txn_1' } }, chain: null });
    expect(await cliAnswer('--node', NODE)).toEqual(ok);
    const wrong = await verifyReceipt(jws, { jwks, node: 'node-b' });
    expect(wrong).toMatchObject({ valid: false, refusal: 'wrong_node' });
    expect(await cliAnswer('--node', 'node-b')).toEqual(wrong);
    const [h, p, s] = jws.split('.') as [string, string, string];
    const changed = `${h}.${Buffer.from(JSON.stringify({ ...JSON.parse(Buffer.from(p, 'base64url').toString()), stream: 's-2' })).toString('base64url')}.${s}`;
    expect(await verifyReceipt(changed, { jwks })).toMatchObject({ valid: false, refusal: 'bad_signature' });
    expect(await verifyReceipt(jws, { jwks: { keys: [] } })).toMatchObject({ valid: false, refusal: 'unknown_key' });
    expect(await verifyReceipt('not a jws', { jwks })).toMatchObject({ valid: false, refusal: 'malformed' });
  });
});
