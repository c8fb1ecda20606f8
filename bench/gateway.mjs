// bench/gateway: per-request overhead of the Hono gateway (node-svc/gateway/hono) measured in process with
// app.fetch — the same app with and without the middleware, alternated rounds, medians — and the verify
// ratios of DESIGN §13 through the public SDK (verifyAllowance) against raw crypto.verify Ed25519.
import { sign, verify } from 'node:crypto';
import { Hono } from 'hono';
import { KeySet, verifyAllowance } from 'node-svc/sdk';
import { allowance } from 'node-svc/gateway/hono';
import { newEd25519KeyPair } from '../dist/sdk/jws.js';
import { report, result } from './lib/report.mjs';

const N = Number(process.env.BENCH_N ?? 20000); // requests per gateway round
const V = Number(process.env.BENCH_V ?? 3000); // credentials per verify round
const ROUNDS = Number(process.env.BENCH_ROUNDS ?? 7);

const ISS = 'https://issuer.example';
const AUD = 'node-a';
const { publicKey, privateKey } = newEd25519KeyPair(); // not generateKeyPairSync: see src/sdk/jws.ts
const jwk = { ...publicKey.export({ format: 'jwk' }), kid: 'bench-k1', alg: 'EdDSA', use: 'sig' };
const trustedKeys = [{ kid: 'bench-k1', issuer: ISS, alg: 'EdDSA', jwk }];
const b64 = (o) => Buffer.from(JSON.stringify(o)).toString('base64url');
const header = b64({ alg: 'EdDSA', typ: 'allowance+jwt', kid: 'bench-k1' });
const now = Math.floor(Date.now() / 1000);
let serial = 0;
function mint() {
  const i = serial++;
  const payload = b64({
    iss: ISS, sub: 'payer-1', aud: AUD, jti: `cred-${i}`, iat: now, exp: now + 3600, stream: `s-${i}`, budget: 'b-1',
    cap: '5000000', asset: 'USDC', unitPrice: '25', rate: '1000', mode: 'escrow', cnf: { jwk },
  });
  const input = `${header}.${payload}`;
  return `${input}.${sign(null, Buffer.from(input), privateKey).toString('base64url')}`;
}
const median = (xs) => [...xs].sort((a, b) => a - b)[Math.floor(xs.length / 2)];
const fmt = (n) => Math.round(n).toLocaleString('en-US');

// ---- gateway overhead, in process ----

const keys = new KeySet(trustedKeys);
const plain = new Hono();
plain.get('/paid', (c) => c.text('ok'));
const gated = new Hono();
gated.use('/paid', allowance({ keys, audience: AUD }));
gated.get('/paid', (c) => c.text(c.get('allowance').stream));

const repeated = `Allowance ${mint()}`;
async function run(app, auth) {
  const t = performance.now();
  for (let i = 0; i < N; i++) {
    const res = await app.fetch(new Request('http://node.test/paid', { headers: { authorization: auth(i) } }));
    if (res.status !== 200) throw new Error(`HTTP ${res.status}: ${await res.text()}`);
  }
  return ((performance.now() - t) * 1000) / N; // µs per request
}
// First sight: a fresh credential on every request (minted before the timed loop).
let fresh = [];
const freshAuth = (i) => fresh[i];
const refill = () => { fresh = Array.from({ length: N }, () => `Allowance ${mint()}`); };
const same = () => repeated;

refill();
await run(plain, same); await run(gated, same); await run(gated, freshAuth); // warm-up
const g = { plain: [], hot: [], cold: [], hotOver: [], coldOver: [], hotRatio: [], coldRatio: [] };
for (let k = 0; k < ROUNDS; k++) {
  refill();
  // Baseline before and after each subject, so drift hits both alike; per-round figures, then medians.
  const a = await run(plain, same);
  const h = await run(gated, same);
  const b = await run(plain, same);
  const c = await run(gated, freshAuth);
  const d = await run(plain, same);
  const base1 = (a + b) / 2;
  const base2 = (b + d) / 2;
  g.plain.push((a + b + d) / 3); g.hot.push(h); g.cold.push(c);
  g.hotOver.push(h - base1); g.coldOver.push(c - base2);
  g.hotRatio.push(h / base1); g.coldRatio.push(c / base2);
}

// ---- verify ratios (DESIGN §13), through the public SDK ----

const creds = Array.from({ length: V }, mint);
const rawInputs = creds.map((j) => { const i = j.lastIndexOf('.'); return [Buffer.from(j.slice(0, i)), Buffer.from(j.slice(i + 1), 'base64url')]; });
function raw() {
  const t = performance.now();
  for (const [data, sig] of rawInputs) if (!verify(null, data, publicKey, sig)) throw new Error('raw verify failed');
  return V / ((performance.now() - t) / 1000);
}
function firstSight() {
  // A new KeySet object gets a new verifier (and an empty cache) inside verifyAllowance: every credential is new to it.
  const ks = new KeySet(trustedKeys);
  const opts = { keys: ks, audience: AUD };
  const t = performance.now();
  for (const c of creds) if (!verifyAllowance(c, opts).valid) throw new Error('verify failed');
  return V / ((performance.now() - t) / 1000);
}
const hotOpts = { keys, audience: AUD };
function repeatedVerify() {
  const c = creds[0];
  const M = V * 20;
  const t = performance.now();
  for (let i = 0; i < M; i++) if (!verifyAllowance(c, hotOpts).valid) throw new Error('verify failed');
  return M / ((performance.now() - t) / 1000);
}
firstSight(); raw(); repeatedVerify(); // warm-up
const v = { raw: [], first: [], repeated: [], firstRatio: [], repeatedRatio: [] };
for (let k = 0; k < ROUNDS; k++) {
  const a = raw(); const f = firstSight(); const b = raw(); const p = repeatedVerify();
  const base = (a + b) / 2;
  v.raw.push(base); v.first.push(f); v.repeated.push(p);
  v.firstRatio.push(f / base); v.repeatedRatio.push(p / base);
}

const us = (n) => `${n.toFixed(2)} µs`;
console.log(`bench/gateway  Hono app.fetch in process  n=${N} rounds=${ROUNDS} (medians)`);
console.log(`  without gateway                     ${us(median(g.plain))}/request`);
console.log(`  with gateway, repeated credential   ${us(median(g.hot))}/request   overhead ${us(median(g.hotOver))}   ratio ${median(g.hotRatio).toFixed(2)}`);
console.log(`  with gateway, fresh credential      ${us(median(g.cold))}/request   overhead ${us(median(g.coldOver))}   ratio ${median(g.coldRatio).toFixed(2)}`);
console.log(`verifyAllowance (node-svc/sdk)  EdDSA  n=${V} rounds=${ROUNDS} (medians)`);
console.log(`  raw crypto.verify Ed25519     ${fmt(median(v.raw))}/s`);
console.log(`  first sight                   ${fmt(median(v.first))}/s   ratio ${median(v.firstRatio).toFixed(2)}  (target >= 0.55)`);
console.log(`  repeated credential           ${fmt(median(v.repeated))}/s   ratio ${median(v.repeatedRatio).toFixed(2)}  (target >= 5)`);
report('gateway', [
  result('gateway overhead, repeated credential', median(g.hotOver), 'µs'),
  result('gateway overhead, fresh credential', median(g.coldOver), 'µs'),
  result('sdk first sight / raw Ed25519', median(v.firstRatio), 'ratio', ['>=', 0.55]),
  result('sdk repeated credential / raw Ed25519', median(v.repeatedRatio), 'ratio', ['>=', 5]),
]);
