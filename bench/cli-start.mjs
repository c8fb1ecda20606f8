// bench/cli-start: wall time of a cold `node bin/node-svc verify <jws>` against `node -e 0`, alternated.
// Prints both medians and the median of the per-pair ratios (DESIGN §13: CLI verify cold start <= 1.6 x node -e 0).
import { execFileSync, spawnSync } from 'node:child_process';
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { exportJWK, generateKeyPair, SignJWT } from 'jose';
import { report, result } from './lib/report.mjs';

const RUNS = Math.max(15, Number(process.env.BENCH_RUNS ?? 21));
const WARMUP = Number(process.env.BENCH_WARMUP ?? 3);
const BIN = fileURLToPath(new URL('../bin/node-svc', import.meta.url));
const ISSUER = 'https://issuer.example';
const NODE = 'node-a';

// A store of our own, prepared with the CLI itself: one node, one trusted Ed25519 issuer key.
const root = mkdtempSync(join(tmpdir(), 'node-svc-bench-'));
const dataDir = join(root, 'data');
const env = Object.fromEntries(Object.entries(process.env).filter(([k]) => !k.startsWith('NODE_SVC_')));
const cli = (...args) => execFileSync(process.execPath, [BIN, ...args, '--data-dir', dataDir], { env, encoding: 'utf8' });
try {
  const { publicKey, privateKey } = await generateKeyPair('EdDSA');
  const jwk = { ...(await exportJWK(publicKey)), kid: 'bench-k1', alg: 'EdDSA', use: 'sig' };
  writeFileSync(join(root, 'jwks.json'), JSON.stringify({ keys: [jwk] }));
  cli('nodes', 'add', NODE);
  cli('keys', 'add', '--issuer', ISSUER, join(root, 'jwks.json'));
  const now = Math.floor(Date.now() / 1000);
  const jws = await new SignJWT({ stream: 'stream-1', budget: 'budget-1', cap: '5000000', asset: 'USDC', unitPrice: '25', mode: 'escrow', cnf: { jwk } })
    .setProtectedHeader({ alg: 'EdDSA', typ: 'allowance+jwt', kid: 'bench-k1' })
    .setIssuer(ISSUER).setSubject('payer-1').setAudience(NODE).setJti('cred-1')
    .setIssuedAt(now).setExpirationTime(now + 3600).sign(privateKey);

  const timed = (args) => {
    const t = performance.now();
    const r = spawnSync(process.execPath, args, { env, encoding: 'utf8' });
    const ms = performance.now() - t;
    if (r.status !== 0) throw new Error(`${args.join(' ')} exited ${r.status}: ${r.stderr || r.stdout}`);
    return { ms, stdout: r.stdout };
  };
  const baseline = () => timed(['-e', '0']).ms;
  const verify = () => {
    const r = timed([BIN, 'verify', jws, '--node', NODE, '--data-dir', dataDir]);
    if (!JSON.parse(r.stdout).valid) throw new Error(`verify did not answer valid: ${r.stdout}`);
    return r.ms;
  };

  for (let i = 0; i < WARMUP; i++) { baseline(); verify(); }
  const base = [];
  const subject = [];
  const ratios = [];
  for (let i = 0; i < RUNS; i++) {
    // Alternate (and swap the order every other pair) so machine noise hits both alike.
    let b, v;
    if (i % 2) { v = verify(); b = baseline(); } else { b = baseline(); v = verify(); }
    base.push(b); subject.push(v); ratios.push(v / b);
  }
  const median = (xs) => { const s = [...xs].sort((a, b) => a - b); const m = s.length >> 1; return s.length % 2 ? s[m] : (s[m - 1] + s[m]) / 2; };
  const fmt = (n) => n.toFixed(1);
  console.log(`bench/cli-start  verify EdDSA  runs=${RUNS} warm-up=${WARMUP} (medians)`);
  console.log(`  node -e 0                     ${fmt(median(base))} ms`);
  console.log(`  node-svc verify <jws>         ${fmt(median(subject))} ms   ratio ${median(ratios).toFixed(2)}  (target <= 1.6)`);
  report('cli-start', [result('verify cold start / node -e 0', median(ratios), 'ratio', ['<=', 1.6])]);
} finally {
  rmSync(root, { recursive: true, force: true });
}
