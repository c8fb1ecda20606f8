import { generateKeyPairSync, verify } from 'node:crypto';
import { SignJWT, exportJWK } from 'jose';
import { KeySet } from '../dist/sdk/keys.js';
import { Verifier } from '../dist/sdk/verifier.js';
const N = 3000;
const { publicKey, privateKey } = generateKeyPairSync('ed25519');
const jwk = { ...(await exportJWK(publicKey)), kid: 'bench-k1', alg: 'EdDSA', use: 'sig' };
const keys = new KeySet([{ kid: 'bench-k1', issuer: 'https://issuer.example', alg: 'EdDSA', jwk }]);
const now = Math.floor(Date.now() / 1000);
const creds = [];
for (let i = 0; i < N; i++) creds.push(await new SignJWT({ stream: `s-${i}`, budget: 'b-1', cap: '5000000', asset: 'USDC', unitPrice: '25', mode: 'escrow', cnf: { jwk } })
  .setProtectedHeader({ alg: 'EdDSA', typ: 'allowance+jwt', kid: 'bench-k1' }).setIssuer('https://issuer.example').setSubject('payer-1').setAudience('node-a').setJti(`cred-${i}`)
  .setIssuedAt(now).setExpirationTime(now + 3600).sign(privateKey));
const rawInputs = creds.map((j) => { const i = j.lastIndexOf('.'); return [Buffer.from(j.slice(0, i)), Buffer.from(j.slice(i + 1), 'base64url')]; });
const raw = () => { const t = performance.now(); for (const [d, s] of rawInputs) verify(null, d, publicKey, s); return (performance.now() - t) * 1000 / N; };
const first = (cacheSize) => { const v = new Verifier({ keys, cacheSize }); const t = performance.now(); for (const c of creds) v.verify(c, { audience: 'node-a' }); return (performance.now() - t) * 1000 / N; };
const med = (xs) => xs.sort((a, b) => a - b)[xs.length >> 1];
first(); raw(); first(0);
const r = { raw: [], c: [], n: [] };
for (let k = 0; k < 9; k++) { r.raw.push(raw()); r.c.push(first(10000)); r.raw.push(raw()); r.n.push(first(0)); }
console.log(`raw ${med(r.raw).toFixed(1)} µs, first sight cached ${med(r.c).toFixed(1)} µs (ratio ${(med(r.raw) / med(r.c)).toFixed(3)}), no cache ${med(r.n).toFixed(1)} µs (ratio ${(med(r.raw) / med(r.n)).toFixed(3)})`);
const hot = new Verifier({ keys });
const repeated = () => { for (let i = 0; i < N * 20; i++) hot.verify(creds[0], { audience: 'node-a' }); };
const r2 = { raw: [], c: [] };
for (let k = 0; k < 9; k++) { const a = raw(); r2.c.push(first(10000)); const b = raw(); r2.raw.push((a + b) / 2); repeated(); }
console.log(`with repeated between: raw ${med(r2.raw).toFixed(1)} µs, first sight ${med(r2.c).toFixed(1)} µs (ratio ${(med(r2.raw) / med(r2.c)).toFixed(3)})`);
