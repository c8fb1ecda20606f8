// bench/settlement: the escrow rail on a sandbox chain (ganache on 127.0.0.1, startSandboxChain from dist/).
//  1. adapter: EscrowRail.submit straight, back to back for BENCH_N channels (one voucher each), until every settle
//     transaction has a successful receipt: settlements/s the adapter sustains (ganache mines each tx at once).
//  2. daemon: the real daemon (bin/node-svc daemon --mode escrow, --settle-threshold 1, 1 s settlement tick),
//     BENCH_STREAMS streams each with one voucher posted back to back; settlements/s = streams / (first voucher →
//     every settlement checkpointed), read from the daemon's store through a read-only connection.
//  3. latency: a chain mining one block per BENCH_BLOCK_S seconds, the daemon with the default policy (threshold
//     1,000,000 micro / 60 s, sandbox confirmations 2); BENCH_LAT_N vouchers of 1,000,000 micro, one stream each,
//     one at a time: time from the voucher's POST to GET finality showing `final` (polled every 25 ms).
// No target in DESIGN §13 for these; the figures are for the record. The data dirs are prepared with the CLI.
import { execFileSync, spawn } from 'node:child_process';
import { generateKeyPairSync } from 'node:crypto';
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import Database from 'better-sqlite3';
import { exportJWK, SignJWT } from 'jose';
import { EscrowRail } from '../dist/rails/escrow/adapter.js';
import { startSandboxChain } from '../dist/rails/escrow/sandbox.js';

const N = Number(process.env.BENCH_N ?? 200);
const STREAMS = Number(process.env.BENCH_STREAMS ?? 100);
const LAT_N = Number(process.env.BENCH_LAT_N ?? 5);
const BLOCK_S = Number(process.env.BENCH_BLOCK_S ?? 1);
const BIN = fileURLToPath(new URL('../bin/node-svc', import.meta.url));
const ISSUER = 'https://issuer.bench';
const NODE = 'bench-node';

const now = () => performance.timeOrigin + performance.now();
const sleep = (ms) => new Promise((r) => setTimeout(r, ms));
const median = (xs) => [...xs].sort((a, b) => a - b)[Math.floor(xs.length / 2)];
const fmt = (n) => Math.round(n).toLocaleString('en-US');
const sec = (ms) => `${(ms / 1000).toFixed(2)} s`;
const env = Object.fromEntries(Object.entries(process.env).filter(([k]) => !k.startsWith('NODE_SVC_')));
const roots = [];
const cleanups = [];

async function openChannels(chain, prefix, n, deposit) {
  const out = [];
  for (let i = 0; i < n; i++) out.push(await chain.openChannel({ id: `${prefix}-${i}-${Date.now()}`, payee: chain.operator.address, deposit }));
  return out;
}

// ---- 1. the adapter alone ----
async function adapterRate() {
  const chain = await startSandboxChain();
  cleanups.push(() => chain.stop());
  const channels = await openChannels(chain, 'adapter', N, 10_000n);
  const rail = new EscrowRail({ env: 'sandbox', rpcUrl: chain.rpcUrl, chainId: chain.chainId, contract: chain.escrow, walletKey: chain.operator.key, confirmations: 2 });
  await rail.preflight();
  const rows = [];
  for (const [i, channel] of channels.entries()) {
    const amount = 1_000n + BigInt(i);
    const signature = await chain.signVoucher({ chainId: chain.chainId, escrow: chain.escrow, channel }, amount);
    rows.push({ row: { id: `s-${i}`, claims: JSON.stringify({ chainId: chain.chainId, escrow: chain.escrow, channel }), billed_voucher: JSON.stringify({ amount: amount.toString(), signature }) }, amount });
  }
  const payee0 = await chain.balanceOf(chain.operator.address);
  const hashes = [];
  const t0 = now();
  for (const { row, amount } of rows) await rail.submit(row, amount, (reference) => hashes.push(reference));
  const sent = now();
  for (const hash of hashes) {
    const r = await chain.client.waitForTransactionReceipt({ hash, pollingInterval: 20 });
    if (r.status !== 'success') throw new Error(`settle ${hash} reverted`);
  }
  const t1 = now();
  const paid = (await chain.balanceOf(chain.operator.address)) - payee0;
  const expected = rows.reduce((a, r) => a + r.amount, 0n);
  if (paid !== expected) throw new Error(`payee got ${paid}, expected ${expected}`);
  return { rate: N / ((t1 - t0) / 1000), submitMs: (sent - t0) / N, totalMs: t1 - t0 };
}

// ---- the real daemon ----
const issuerKeys = generateKeyPairSync('ed25519');
const issuerJwk = { ...(await exportJWK(issuerKeys.publicKey)), kid: 'bench-issuer', alg: 'EdDSA', use: 'sig' };

function prepareDataDir(tag) {
  const root = mkdtempSync(join(tmpdir(), `node-svc-bench-settlement-${tag}-`));
  roots.push(root);
  const dataDir = join(root, 'data');
  const cli = (...args) => execFileSync(process.execPath, [BIN, ...args, '--data-dir', dataDir], { env, encoding: 'utf8' });
  cli('nodes', 'add', NODE);
  const token = JSON.parse(cli('tokens', 'issue', NODE)).token;
  const jwks = join(root, 'jwks.json');
  writeFileSync(jwks, JSON.stringify({ keys: [issuerJwk] }));
  cli('keys', 'add', '--issuer', ISSUER, jwks);
  return { root, dataDir, token };
}

function startDaemon(dataDir, chain, keyFile, extra = []) {
  const args = [BIN, '--data-dir', dataDir, 'daemon', '--port', '0', '--host', '127.0.0.1', '--rate-limit', '0', '--mode', 'escrow', '--rail', 'sandbox',
    '--rpc-url', chain.rpcUrl, '--chain-id', String(chain.chainId), '--contract', chain.escrow, '--wallet-key-file', keyFile, ...extra];
  const child = spawn(process.execPath, args, { env: { ...env, NODE_SVC_LOG_LEVEL: 'warn' }, stdio: ['ignore', 'pipe', 'inherit'] });
  cleanups.push(() => { if (child.exitCode === null) child.kill('SIGKILL'); });
  return new Promise((resolve, reject) => {
    let out = '';
    child.stdout.setEncoding('utf8');
    child.stdout.on('data', (s) => {
      out += s;
      const m = /listening on (http:\/\/\S+)/.exec(out);
      if (m) resolve({ url: m[1], child });
    });
    child.once('exit', (code) => reject(new Error(`daemon exited ${code}: ${out}`)));
  });
}

async function credentialFor(chain, stream, channel) {
  const t = Math.floor(Date.now() / 1000);
  return new SignJWT({ stream, budget: 'bench-budget', cap: '100000000', asset: 'USDC', unitPrice: '25', mode: 'escrow', cnf: { addr: chain.payer.address }, chainId: chain.chainId, escrow: chain.escrow, channel })
    .setProtectedHeader({ alg: 'EdDSA', typ: 'allowance+jwt', kid: 'bench-issuer' })
    .setIssuer(ISSUER).setSubject('payer-1').setAudience(NODE).setJti(`cred-${stream}`).setIssuedAt(t).setExpirationTime(t + 3600)
    .sign(issuerKeys.privateKey);
}

const api = (url, token) => async (method, path, body) => {
  const res = await fetch(`${url}${path}`, { method, headers: { authorization: `Bearer ${token}`, ...(body ? { 'content-type': 'application/json' } : {}) }, ...(body ? { body: JSON.stringify(body) } : {}) });
  const json = await res.json();
  if (res.status !== 200) throw new Error(`${method} ${path} → ${res.status} ${JSON.stringify(json)}`);
  return json;
};

/** Streams registered (credential verified) on the daemon, one channel each, ready for a voucher. */
async function registerStreams(chain, call, tag, n) {
  const channels = await openChannels(chain, tag, n, 100_000_000n);
  const out = [];
  for (const [i, channel] of channels.entries()) {
    const stream = `${tag}-${i}`;
    await call('POST', '/v1/allowances/verify', { credential: await credentialFor(chain, stream, channel) });
    out.push({ stream, channel });
  }
  return out;
}

const voucher = async (chain, call, s, amount) =>
  call('POST', `/v1/streams/${s.stream}/vouchers`, {
    voucher: { stream: s.stream, amount: amount.toString(), units: '1', signature: await chain.signVoucher({ chainId: chain.chainId, escrow: chain.escrow, channel: s.channel }, amount) },
  });

// ---- 2. the daemon, threshold 1 ----
async function daemonRate() {
  const chain = await startSandboxChain();
  cleanups.push(() => chain.stop());
  const { root, dataDir, token } = prepareDataDir('rate');
  const keyFile = join(root, 'wallet.key');
  writeFileSync(keyFile, chain.operator.key, { mode: 0o600 });
  const d = await startDaemon(dataDir, chain, keyFile, ['--settle-threshold', '1']);
  const call = api(d.url, token);
  const streams = await registerStreams(chain, call, 'rate', STREAMS);
  // Sign first so the timed part is the daemon's, not the payer's.
  const signed = [];
  for (const s of streams) signed.push({ s, signature: await chain.signVoucher({ chainId: chain.chainId, escrow: chain.escrow, channel: s.channel }, 5_000n) });
  const db = new Database(join(dataDir, 'node-svc.db'), { readonly: true, fileMustExist: true });
  const count = db.prepare("SELECT COUNT(*) AS n FROM settlements WHERE status IN ('checkpointed', 'final')");
  const t0 = now();
  for (const { s, signature } of signed) await call('POST', `/v1/streams/${s.stream}/vouchers`, { voucher: { stream: s.stream, amount: '5000', units: '1', signature } });
  const posted = now();
  let firstAt;
  for (;;) {
    const n = count.get().n;
    if (n > 0 && firstAt === undefined) firstAt = now();
    if (n >= STREAMS) break;
    if (now() - t0 > 300_000) throw new Error(`only ${n} of ${STREAMS} settled in 300 s`);
    await sleep(20);
  }
  const t1 = now();
  db.close();
  d.child.kill('SIGTERM');
  return { rate: STREAMS / ((t1 - t0) / 1000), postMs: posted - t0, firstMs: firstAt - t0, totalMs: t1 - t0, steady: (STREAMS - 1) / ((t1 - firstAt) / 1000) };
}

// ---- 3. voucher → final, default policy, blocks every BLOCK_S ----
async function latency() {
  const chain = await startSandboxChain({ blockTime: BLOCK_S });
  cleanups.push(() => chain.stop());
  const { root, dataDir, token } = prepareDataDir('latency');
  const keyFile = join(root, 'wallet.key');
  writeFileSync(keyFile, chain.operator.key, { mode: 0o600 });
  const d = await startDaemon(dataDir, chain, keyFile); // default policy: 1,000,000 micro / 60 s; confirmations 2
  const call = api(d.url, token);
  const streams = await registerStreams(chain, call, 'latency', LAT_N);
  const out = [];
  for (const s of streams) {
    await sleep(Math.random() * 1000); // not in phase with the tick or the blocks
    const t0 = now();
    await voucher(chain, call, s, 1_000_000n);
    let checkpointedAt;
    for (;;) {
      const f = await call('GET', `/v1/streams/${s.stream}/finality`);
      if (f.finality !== 'none' && checkpointedAt === undefined) checkpointedAt = now();
      if (f.finality === 'final') {
        if (f.finalMicro !== '1000000') throw new Error(`final ${f.finalMicro}`);
        break;
      }
      if (now() - t0 > 60_000) throw new Error('not final within 60 s');
      await sleep(25);
    }
    out.push({ checkpointed: checkpointedAt - t0, final: now() - t0 });
  }
  d.child.kill('SIGTERM');
  return out;
}

try {
  const a = await adapterRate();
  const b = await daemonRate();
  const c = await latency();
  console.log(`bench/settlement  escrow rail, ganache sandbox (chain 1337), one operator wallet`);
  console.log(`  adapter, EscrowRail.submit back to back   ${fmt(a.rate)} settlements/s   n=${N}  (${a.submitMs.toFixed(1)} ms per submit, all receipts in ${sec(a.totalMs)})`);
  console.log(`  daemon, threshold 1, 1 s tick              ${fmt(b.rate)} settlements/s   streams=${STREAMS}  (vouchers posted in ${sec(b.postMs)}, first checkpointed ${sec(b.firstMs)}, all ${sec(b.totalMs)}; ${fmt(b.steady)}/s after the first)`);
  const cp = c.map((x) => x.checkpointed);
  const fin = c.map((x) => x.final);
  console.log(`  voucher -> checkpointed, default policy    median ${sec(median(cp))}  max ${sec(Math.max(...cp))}   n=${LAT_N}, blocks every ${BLOCK_S} s`);
  console.log(`  voucher -> final, default policy           median ${sec(median(fin))}  max ${sec(Math.max(...fin))}   (threshold 1,000,000 micro, confirmations 2)`);
} finally {
  for (const f of cleanups.reverse()) await Promise.resolve().then(f).catch(() => {});
  for (const r of roots) rmSync(r, { recursive: true, force: true });
}
