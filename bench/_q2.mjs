import { generateKeyPairSync, sign, verify, createPublicKey } from 'node:crypto';
import { SignJWT, exportJWK, compactVerify, importJWK, createLocalJWKSet, jwtVerify } from 'jose';
const { publicKey, privateKey } = generateKeyPairSync('ed25519');
const jwk = { ...(await exportJWK(publicKey)), kid: 'k1', alg: 'EdDSA' };
const ck = await importJWK(jwk, 'EdDSA');
const now = Math.floor(Date.now()/1000);
const jws = []; for (let i=0;i<3000;i++) jws.push(await new SignJWT({ stream: 's'+i, budget: 'b1', cap: '1000000', asset: 'USDC', unitPrice: '10', mode: 'escrow', cnf: { jwk } })
  .setProtectedHeader({ alg: 'EdDSA', typ: 'allowance+jwt', kid: 'k1' }).setIssuer('iss1').setSubject('payer').setAudience('node-a').setJti('j'+i).setIssuedAt(now).setExpirationTime(now+3600).sign(privateKey));
async function rate(fn){ const t=performance.now(); for (const j of jws) await fn(j); return jws.length/(performance.now()-t)*1000; }
const [h,p,s] = jws[0].split('.');
const raw = await rate(j => { const i=j.lastIndexOf('.'); verify(null, Buffer.from(j.slice(0,i)), publicKey, Buffer.from(j.slice(i+1),'base64url')); });
const jc = await rate(j => compactVerify(j, ck));
const JW = createLocalJWKSet({keys:[jwk]});
const jv = await rate(j => jwtVerify(j, JW, {audience:'node-a', issuer:'iss1'}));
const raw2 = await rate(j => { const i=j.lastIndexOf('.'); verify(null, Buffer.from(j.slice(0,i)), publicKey, Buffer.from(j.slice(i+1),'base64url')); });
console.log({raw, raw2, jc: jc/raw, jv: jv/raw});
