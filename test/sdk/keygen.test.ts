// Ed25519 keys made by node-svc itself (the receipt keys, the sandbox's issuer and payer): newEd25519KeyPair in
// src/sdk/jws.ts, not generateKeyPairSync, whose keys can hang a Node 20 process for good in a JWK export (a garbage
// collection inside the export destroys the generation job, which takes the mutex the export holds). The loops run in
// a child process with a time limit: a hang is a failure here, not a stuck test run.
// The generation itself: DER bytes from generateKeyPairSync, imported as a JWK (src/sdk/jws.ts says why).
import { spawnSync } from 'node:child_process';
import { createPublicKey, sign, verify } from 'node:crypto';
import { join } from 'node:path';
import { describe, expect, it } from 'vitest';
import { newEd25519KeyPair } from '../../src/sdk/jws.js';
import { REPO_ROOT } from '../helpers/cli.js';

const ROUNDS = 20_000;

/** `body` run ROUNDS times in a fresh node (ESM, from the built dist/), killed after 60 s. */
function loop(imports: string, body: string) {
  const src = `${imports}\nlet n = 0;\nfor (; n < ${ROUNDS}; n++) { ${body} }\nconsole.log(n);`;
  const r = spawnSync(process.execPath, ['--input-type=module', '-e', src], { cwd: REPO_ROOT, encoding: 'utf8', timeout: 60_000, killSignal: 'SIGKILL' });
  return { status: r.status, signal: r.signal, out: r.stdout.trim(), err: r.stderr.trim() };
}

describe('Ed25519 keys made by node-svc', () => {
  it('are sound: the JWK members are the key, a signature verifies, no two alike', () => {
    const a = newEd25519KeyPair();
    const b = newEd25519KeyPair();
    const jwk = a.privateKey.export({ format: 'jwk' });
    expect(jwk).toMatchObject({ kty: 'OKP', crv: 'Ed25519' });
    expect(Buffer.from(jwk.d!, 'base64url')).toHaveLength(32);
    expect(Buffer.from(jwk.x!, 'base64url')).toHaveLength(32);
    expect(a.publicKey.export({ format: 'jwk' })).toEqual({ kty: 'OKP', crv: 'Ed25519', x: jwk.x });
    expect(b.privateKey.export({ format: 'jwk' }).d).not.toBe(jwk.d);
    const data = Buffer.from('node-svc');
    const sig = sign(null, data, a.privateKey);
    expect(verify(null, data, a.publicKey, sig)).toBe(true);
    expect(verify(null, data, createPublicKey({ key: { kty: 'OKP', crv: 'Ed25519', x: jwk.x! }, format: 'jwk' }), sig)).toBe(true);
    expect(verify(null, data, b.publicKey, sig)).toBe(false);
  });

  // The receipt key's maker (newEd25519KeyPair, then both JWKs): with generateKeyPairSync's KeyObjects the same loop
  // hung after 836-9,699 rounds in six runs here (~4 s for these 20,000 rounds, each ~190 µs).
  it(`export as JWKs ${ROUNDS} times in a row without hanging (a receipt key, as the daemon makes it)`, () => {
    const r = loop(`import { newReceiptKey } from ${JSON.stringify(join(REPO_ROOT, 'dist/service/receipts.js'))};`,
      `const k = newReceiptKey('urn:t', 0); if (!JSON.parse(k.private_jwk).d || k.kid.length !== 43) throw new Error('bad key');`);
    expect(r, r.err).toMatchObject({ status: 0, signal: null, out: String(ROUNDS) });
  }, 90_000);
});
