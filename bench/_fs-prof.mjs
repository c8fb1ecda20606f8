import { generateKeyPairSync } from 'node:crypto';
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
for (let k = 0; k < 15; k++) { const v = new Verifier({ keys }); for (const c of creds) if (!v.verify(c, { audience: 'node-a' }).valid) throw 1; }
