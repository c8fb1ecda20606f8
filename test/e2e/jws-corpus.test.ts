// JWS attack corpus (issue #12, RFC 8725 classes): every hostile credential gets the same refusal name from the SDK
// (Verifier), the CLI (`node-svc verify`, offline) and HTTP (POST /v1/allowances/verify), and that name is the one
// this table expects.
import { sign as cryptoSign } from 'node:crypto';
import { afterAll, beforeAll, describe, expect, it, vi } from 'vitest';
import { KeySet } from '../../src/sdk/keys.js';
import { Verifier } from '../../src/sdk/verifier.js';
import { cliFor, json, tempDataDir, type TempDataDir } from '../helpers/cli.js';
import { clientOf, setupNodes, startDaemon, type RunningDaemon } from '../helpers/daemon.js';
import { CREDENTIAL_TYP, credentialClaims, keyPair, mintCredential, NODE, nowSeconds, signCompact, trusted, type KeyPair } from '../helpers/issuer.js';

vi.setConfig({ testTimeout: 120_000, hookTimeout: 60_000 });

const b64 = (s: string) => Buffer.from(s).toString('base64url');
/** Sign exact header and payload texts (to repeat a member name, which an object cannot). */
const signRaw = (headerText: string, payloadText: string, key: KeyPair) => {
  const input = `${b64(headerText)}.${b64(payloadText)}`;
  return `${input}.${cryptoSign(null, Buffer.from(input), key.privateKey).toString('base64url')}`;
};

let issuer: KeyPair;
let attacker: KeyPair;

/** [name, credential, expected refusal ('valid' for the control cases)] */
function corpus(): Array<[string, string, string]> {
  const k = issuer;
  const hdr = { alg: k.alg, typ: CREDENTIAL_TYP, kid: k.kid };
  const claims = credentialClaims();
  const mint = (o: Parameters<typeof mintCredential>[0]) => mintCredential(o);
  const good = mint({ key: k });
  const [h, p] = good.split('.') as [string, string];
  const pubBytes = Buffer.from(JSON.stringify(k.publicJwk));
  const headerText = JSON.stringify(hdr);
  const payloadText = JSON.stringify(claims);
  return [
    ['control: a valid credential', good, 'valid'],
    ['control: whitespace and a newline around it (trimmed everywhere)', ` ${good}\n`, 'valid'],
    ['alg none, empty signature', signCompact({ ...hdr, alg: 'none' }, claims), 'unsupported_algorithm'],
    ['alg "None"', signCompact({ ...hdr, alg: 'None' }, claims), 'unsupported_algorithm'],
    ['HS256 keyed with the public JWK', signCompact({ ...hdr, alg: 'HS256' }, claims, pubBytes), 'unsupported_algorithm'],
    ['HS256 keyed with the public x', signCompact({ ...hdr, alg: 'HS256' }, claims, Buffer.from(String(k.publicJwk.x), 'base64url')), 'unsupported_algorithm'],
    ['alg ES256 under an EdDSA kid', signCompact({ ...hdr, alg: 'ES256' }, claims, attacker.privateKey), 'unsupported_algorithm'],
    ['foreign key under the trusted kid', mint({ key: k, signWith: attacker.privateKey }), 'bad_signature'],
    ['embedded jwk of the signer', mint({ key: k, header: { jwk: attacker.publicJwk }, signWith: attacker.privateKey }), 'bad_signature'],
    ['jku to the attacker', mint({ key: k, header: { jku: 'https://attacker.test/jwks' }, signWith: attacker.privateKey }), 'bad_signature'],
    ['x5u to the attacker', mint({ key: k, header: { x5u: 'https://attacker.test/cert.pem' }, signWith: attacker.privateKey }), 'bad_signature'],
    ['x5c chain of the attacker', mint({ key: k, header: { x5c: ['MIIBfake'] }, signWith: attacker.privateKey }), 'bad_signature'],
    ['embedded jwk and an unknown kid', mint({ key: k, header: { kid: 'attacker', jwk: attacker.publicJwk }, signWith: attacker.privateKey }), 'unknown_key'],
    ['b64 false', mint({ key: k, header: { b64: false, crit: ['b64'] } }), 'malformed'],
    ['b64 false without crit', mint({ key: k, header: { b64: false } }), 'malformed'],
    ['unknown crit', mint({ key: k, header: { crit: ['exp-ext'], 'exp-ext': 1 } }), 'malformed'],
    ['empty crit', mint({ key: k, header: { crit: [] } }), 'malformed'],
    ['nested JWS as the payload', signCompact({ ...hdr, cty: 'JWT' }, good, k.privateKey), 'malformed'],
    ['duplicate alg in the header', signRaw(`{"alg":"EdDSA","typ":"${CREDENTIAL_TYP}","kid":"${k.kid}","alg":"EdDSA"}`, payloadText, k), 'malformed'],
    ['duplicate kid in the header, escaped', signRaw(`{"alg":"EdDSA","typ":"${CREDENTIAL_TYP}","kid":"other","\\u006bid":"${k.kid}"}`, payloadText, k), 'malformed'],
    ['duplicate aud in the payload', signRaw(headerText, payloadText.replace('{', '{"aud":"someone-else",'), k), 'malformed'],
    ['duplicate cap in the payload', signRaw(headerText, `${payloadText.slice(0, -1)},"cap":"999999999999"}`, k), 'malformed'],
    ['duplicate member inside cnf', signRaw(headerText, payloadText.replace('"cnf":{', '"cnf":{"jwk":1,'), k), 'malformed'],
    ['oversize (over 16 KiB)', mint({ key: k, claims: { pad: 'x'.repeat(17_000) } }), 'malformed'],
    ['cap beyond 2^64', mint({ key: k, claims: { cap: '18446744073709551617' } }), 'malformed'],
    ['cap beyond int64', mint({ key: k, claims: { cap: '9223372036854775808' } }), 'malformed'],
    ['cap with an exponent', mint({ key: k, claims: { cap: '5e6' } }), 'malformed'],
    ['cap as a JSON number', mint({ key: k, claims: { cap: 5000000 } }), 'malformed'],
    ['negative cap', mint({ key: k, claims: { cap: '-5000000' } }), 'malformed'],
    ['negative unitPrice', mint({ key: k, claims: { unitPrice: '-1' } }), 'malformed'],
    ['exp beyond 2^64', mint({ key: k, claims: { exp: 1e20 } }), 'malformed'],
    ['exp as an exponent string', mint({ key: k, claims: { exp: '1e10' } }), 'malformed'],
    ['fractional iat', mint({ key: k, claims: { iat: nowSeconds() + 0.5 } }), 'malformed'],
    ['two parts only', `${h}.${p}`, 'malformed'],
    ['four parts', `${good}.x`, 'malformed'],
    ['JWS JSON serialization', JSON.stringify({ payload: p, signatures: [] }), 'malformed'],
    ['whitespace inside', `${h}. ${p}.${good.split('.')[2]}`, 'malformed'],
    ['wrong typ', mint({ key: k, header: { typ: 'JWT' } }), 'wrong_type'],
    ['aimed at another node', mint({ key: k, claims: { aud: 'node-b' } }), 'wrong_audience'],
    ['expired', mint({ key: k, claims: { iat: nowSeconds() - 7200, exp: nowSeconds() - 3600 } }), 'expired'],
  ];
}

describe('JWS attack corpus: SDK, CLI and HTTP give the same refusal', () => {
  let tmp: TempDataDir;
  let daemon: RunningDaemon;
  let http: ReturnType<typeof clientOf>;
  let sdk: Verifier;
  let cases: Array<[string, string, string]>;

  beforeAll(async () => {
    tmp = await tempDataDir();
    issuer = await keyPair('EdDSA', 'issuer-key');
    attacker = await keyPair('EdDSA', 'attacker-key');
    const { tokenA } = await setupNodes(tmp.dataDir, issuer);
    daemon = await startDaemon(tmp.dataDir);
    http = clientOf(daemon.url, tokenA);
    sdk = new Verifier({ keys: new KeySet([trusted(issuer)]), cacheSize: 0 });
    cases = corpus();
  });
  afterAll(async () => {
    await daemon?.stop();
    await tmp?.cleanup();
  });

  const answer = (r: { valid: boolean; refusal?: string }) => (r.valid ? 'valid' : r.refusal);

  it('every case, three ways', async () => {
    const cli = cliFor(tmp.dataDir);
    const rows: string[] = [];
    // The CLI is a process per case: run a few at a time (bounded).
    const results = new Array<[string, string, string]>(cases.length);
    let next = 0;
    await Promise.all(Array.from({ length: 4 }, async () => {
      for (let i = next++; i < cases.length; i = next++) {
        const [, jws] = cases[i]!;
        const s = answer(sdk.verify(jws, { audience: NODE }));
        const c = await cli.with(['verify', jws, '--node', NODE, '--json']);
        const fromCli = answer(json(c.stdout));
        const h = await http.post('/v1/allowances/verify', { credential: jws });
        const fromHttp = h.status === 200 ? 'valid' : h.status === 422 ? h.body.refusal : `HTTP ${h.status}`;
        results[i] = [s, fromCli, fromHttp];
      }
    }));
    cases.forEach(([name, , expected], i) => {
      const [s, c, h] = results[i]!;
      if (s !== expected || c !== expected || h !== expected) rows.push(`${name}: expected ${expected}; SDK ${s}, CLI ${c}, HTTP ${h}`);
    });
    expect(rows, rows.join('\n')).toEqual([]);
    expect(cases.length).toBeGreaterThanOrEqual(40);
  });
});
