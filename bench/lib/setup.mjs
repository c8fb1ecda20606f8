// Shared by the benches: a temp data dir prepared with the real CLI (one node,
// its token, one trusted Ed25519 issuer key), the real daemon as a child process, and fast signing with node:crypto.
import { execFileSync, spawn } from 'node:child_process';
import { sign } from 'node:crypto';
import { mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';

// Keys from newEd25519KeyPair, never generateKeyPairSync: a JWK export of those can hang node 20 for good (src/sdk/jws.ts).
import { newEd25519KeyPair } from '../../dist/sdk/jws.js';

export const BIN = fileURLToPath(new URL('../../bin/node-svc', import.meta.url));
export const ISSUER = 'https://issuer.bench';
export const NODE = 'node-a';

/** CPU seconds a process has used, all its threads: utime + stime of /proc/<pid>/stat (fields 14 and 15 of stat(5),
 *  counted after the comm field, which may hold spaces), in clock ticks of 1/100 s (USER_HZ). */
export function cpuSeconds(pid) {
  const stat = readFileSync(`/proc/${pid}/stat`, 'utf8');
  const f = stat.slice(stat.lastIndexOf(')') + 2).split(' ');
  return (Number(f[11]) + Number(f[12])) / 100;
}

/**
 * The main thread of a process (its event loop, for node): [ns on a CPU, ns runnable but waiting for one] since it
 * started, from /proc/PID/task/PID/schedstat; undefined where the kernel does not keep it.
 */
export function mainThreadSched(pid) {
  try {
    const [run, wait] = readFileSync(`/proc/${pid}/task/${pid}/schedstat`, 'utf8').split(' ').map(Number);
    return [run, wait];
  } catch {
    return undefined;
  }
}

export const median = (xs) => [...xs].sort((x, y) => x - y)[Math.floor(xs.length / 2)];
export const pct = (xs, p) => { const s = [...xs].sort((x, y) => x - y); return s[Math.min(s.length - 1, Math.floor((s.length * p) / 100))]; };
export const fmt = (n, d = 0) => Number(n).toLocaleString('en-US', { maximumFractionDigits: d, minimumFractionDigits: d });

const b64 = (o) => Buffer.from(JSON.stringify(o)).toString('base64url');
export function compact(header, claims, privateKey) {
  const input = `${b64(header)}.${b64(claims)}`;
  return `${input}.${sign(null, Buffer.from(input), privateKey).toString('base64url')}`;
}

/** A data dir with node-a, its token and a trusted issuer key; `daemon(args)` starts the real daemon on it. */
export function prepare(prefix) {
  const root = mkdtempSync(join(tmpdir(), `node-svc-bench-${prefix}-`));
  const dataDir = join(root, 'data');
  const env = Object.fromEntries(Object.entries(process.env).filter(([k]) => !k.startsWith('NODE_SVC_')));
  const cli = (...args) => execFileSync(process.execPath, [BIN, ...args, '--data-dir', dataDir], { env, encoding: 'utf8' });
  const issuer = newEd25519KeyPair();
  const payer = newEd25519KeyPair();
  const jwk = { ...issuer.publicKey.export({ format: 'jwk' }), kid: 'bench-k1', alg: 'EdDSA', use: 'sig' };
  const payerJwk = payer.publicKey.export({ format: 'jwk' });
  writeFileSync(join(root, 'jwks.json'), JSON.stringify({ keys: [jwk] }));
  cli('nodes', 'add', NODE);
  const { token } = JSON.parse(cli('tokens', 'issue', NODE));
  cli('keys', 'add', '--issuer', ISSUER, join(root, 'jwks.json'));
  const children = [];

  const now = () => Math.floor(Date.now() / 1000);
  const credential = (stream, claims = {}) =>
    compact({ alg: 'EdDSA', typ: 'allowance+jwt', kid: 'bench-k1' }, {
      iss: ISSUER, sub: 'payer-1', aud: NODE, jti: `cred-${stream}`, iat: now(), exp: now() + 7200,
      stream, budget: 'budget-1', cap: '1000000000000000', asset: 'USDC', unitPrice: '1', mode: 'escrow', cnf: { jwk: payerJwk }, ...claims,
    }, issuer.privateKey);
  const control = (claims) => compact({ alg: 'EdDSA', typ: 'control+jwt', kid: 'bench-k1' }, { iss: ISSUER, aud: NODE, iat: now(), ...claims }, issuer.privateKey);
  const voucher = (stream, amount) => compact({ alg: 'EdDSA', typ: 'voucher+jwt', kid: 'payer-1' }, { stream, amount: String(amount), units: String(amount), iat: now() }, payer.privateKey);

  /** Start the daemon (on `dir`: a copy of the data dir, for daemons side by side); resolves with { url, child, startedMs } once it prints `listening on`. */
  const daemon = (args = [], extraEnv = {}, dir = dataDir) =>
    new Promise((resolve, reject) => {
      const t0 = performance.now();
      const nodeArgs = process.env.BENCH_NODE_ARGS ? process.env.BENCH_NODE_ARGS.split(' ') : []; // e.g. --cpu-prof
      const child = spawn(process.execPath, [...nodeArgs, BIN, '--data-dir', dir, 'daemon', '--host', '127.0.0.1', '--port', '0', '--rate-limit', '0', ...args], { env: { ...env, ...extraEnv }, stdio: ['ignore', 'pipe', 'pipe'] });
      children.push(child);
      let out = '';
      let err = '';
      child.stderr.on('data', (b) => { err = (err + b).slice(-4096); });
      child.once('exit', (code) => reject(new Error(`daemon exited ${code} before listening\n${err}`)));
      child.stdout.on('data', (b) => {
        if (process.env.BENCH_DAEMON_STDOUT) process.stderr.write(b); // e.g. with BENCH_NODE_ARGS=--trace-gc
        out += b;
        const m = /listening on (http:\/\/\S+)/.exec(out);
        if (m) resolve({ url: m[1], child, startedMs: performance.now() - t0 });
      });
    });
  const stop = (child) => (child.exitCode !== null || child.signalCode !== null ? Promise.resolve() : new Promise((r) => { child.once('exit', r); child.kill('SIGTERM'); }));
  const stopAll = () => Promise.all(children.map(stop));
  const cleanup = async () => { await stopAll(); rmSync(root, { recursive: true, force: true }); };
  return { root, dataDir, token, cli, credential, voucher, control, daemon, stop, cleanup, auth: { authorization: `Bearer ${token}` } };
}
