// bench/settlement: the escrow rail on a sandbox chain (ganache on 127.0.0.1, startSandboxChain from dist/), the real
// daemon (bin/node-svc daemon --mode escrow ... --asset-token <the chain's token>), data dirs prepared with the CLI.
//
//  1. adapter (for the record): EscrowRail.submit straight, back to back for BENCH_N channels (one voucher each), on a
//     chain that mines each transaction at once, until every settle has a successful receipt: settlements/s.
//  2. daemon rate (for the record): the daemon with --settle-threshold 1 and its 1 s settlement tick on that instamine
//     chain, BENCH_STREAMS streams with one voucher each posted back to back; settlements/s = streams / (first voucher
//     → every settlement checkpointed or final, read from the daemon's store through a read-only connection).
//  3. stall (the DESIGN §14 row "escrow settlement with a stalled transaction injected"): a chain mining one block
//     every BLOCK_S = 1 s; the daemon with --settle-threshold 1, --confirmations 2, --rebroadcast-after REBROADCAST_S
//     (3 s), --settle-stuck-after STUCK_S (5 s). BENCH_STREAMS streams (100), one channel and one voucher each (amounts
//     differ per stream), one voucher POSTed every POST_EVERY_MS (400 ms, below what the daemon settles per second
//     here, so the figures are the stall's and not a queue of our own making). Right after the first half's vouchers
//     the miner is stopped (ganache `miner_stop`; the posts go on at the same pace); STALL_S (10 s: more than 3
//     rebroadcast intervals, so a settlement sent at the stop is rebroadcast once and then replaced with higher fees)
//     later it is started again (`miner_start`), or once a finality view shows a settlement replaced, STALL_MAX_S (20 s)
//     at most, when none has been by then (the stall's length is printed). Each stream's GET finality is polled every POLL_MS (200 ms) until final.
//     Figures:
//     - voucher → final: per stream, from just before the voucher's POST to the first GET /v1/streams/{id}/finality
//       answer with `finality: final` and `finalMicro` equal to that voucher's amount (resolution POLL_MS); p50 and p95
//       over all streams, and split by when the voucher was posted (before / during / after the stall). No target in
//       DESIGN: recorded.
//     - share of billed money final at the end: Σ finalMicro / Σ billedTruth.amountMicro over all streams, read once
//       every stream is final or END_WAIT_S after miner_start, whichever comes first. Target 100 %. Cross-checked on
//       chain at one block: the payee wallet's token balance grew by exactly Σ finalMicro, Σ of the channels' `settled`
//       equals it, and every final stream's channel settled exactly its finalMicro (nothing paid twice, nothing final
//       that was not paid).
//     - recovery: the settlements the stall held are those sent before miner_start (the finality view's
//       settlement.submittedAt) and not mined when the miner stopped. Recovery = time from the `miner_start` call
//       returning until every held settlement's stream shows final for its amount AND /healthz answers `ok` (no
//       settlement stuck or failing). Target, DESIGN §14 "recovered within 2 rebroadcast intervals", made precise:
//       ≤ 2 × REBROADCAST_S + CONFIRMATIONS × BLOCK_S (6 s + 2 s = 8 s): two intervals for the stuck transactions to
//       be resent or replaced and mined, plus the blocks final needs on top of mined. Printed beside it for the record:
//       held settlements all mined, /healthz ok, and every stream (also those sent after the stall) final.
//     - transactions ganache held after miner_start (record): the wallet's transactions it accepted and, the miner
//       running, had not mined two blocks later, and of those the ones mined right after the daemon sent them again
//       (poolHolds). Seen in one run of 2026-11-29 (recovery 15.4 s): 34 of 61, each mined only after the daemon's
//       resend 3 s later, with empty blocks meanwhile. A node that mines what is pending would not hold them: when this
//       line is not 0, that much of the recovery figure measures ganache's pool.
//     - the stall must be real and seen, or the run proves nothing: no block mined while stopped (counted from one block
//       time after miner_stop: a block ganache was mining at that moment still lands); while it is stopped
//       at least one settlement sent again and one replaced with higher fees (the daemon's "settlement rebroadcast"
//       log lines before miner_start); just before miner_start a settlement shown `stuck` in its finality view,
//       node_svc_settlements{state="stuck"} > 0 and /healthz `degraded`.
//     The daemon reaches ganache through a loopback JSON-RPC proxy of this script (see rpcProxy: it re-sends a read
//     request ganache left unanswered for RPC_RETRY_MS and counts them; BENCH_RPC_RETRY_MS=0 turns that off,
//     BENCH_RPC_TRACE=1 prints and keeps every call, and lists the chain's blocks with the wallet's nonces in each;
//     both are printed too when a target is missed).
// Each figure prints with its target and PASS / MISS ("record" when DESIGN sets none); exit 1 when any target misses.
// The daemon's log (JSON, info) is kept in a file whose path is printed when anything misses. BENCH_PARTS=stall runs
// only part 3.
import { execFileSync, spawn } from 'node:child_process';
import { createServer } from 'node:http';
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import Database from 'better-sqlite3';
import { exportJWK, SignJWT } from 'jose';
import { encodeFunctionData, keccak256, parseTransaction, toHex } from 'viem';
import { privateKeyToAccount } from 'viem/accounts';
import { EscrowRail } from '../dist/rails/escrow/adapter.js';
import { newEd25519KeyPair } from '../dist/sdk/jws.js';
import { ESCROW_ABI, TOKEN_ABI } from '../dist/rails/escrow/artifacts.js';
import { startSandboxChain } from '../dist/rails/escrow/sandbox.js';
import { report, result } from './lib/report.mjs';

const N = Number(process.env.BENCH_N ?? 100);
const STREAMS = Number(process.env.BENCH_STREAMS ?? 100);
const BLOCK_S = 1;
const CONFIRMATIONS = 2;
const REBROADCAST_S = Number(process.env.BENCH_REBROADCAST_S ?? 3);
const STUCK_S = Number(process.env.BENCH_STUCK_S ?? 5);
const STALL_S = Number(process.env.BENCH_STALL_S ?? 10);
const STALL_MAX_S = Number(process.env.BENCH_STALL_MAX_S ?? STALL_S + 10);
const POST_EVERY_MS = Number(process.env.BENCH_POST_MS ?? 400);
const POLL_MS = 200;
const END_WAIT_S = 60;
const PARTS = (process.env.BENCH_PARTS ?? 'adapter,daemon,stall').split(',');
const RPC_TRACE = process.env.BENCH_RPC_TRACE === '1';
const RPC_RETRY_MS = Number(process.env.BENCH_RPC_RETRY_MS ?? 1000);
const RECOVERY_TARGET_S = 2 * REBROADCAST_S + CONFIRMATIONS * BLOCK_S;
const BIN = fileURLToPath(new URL('../bin/node-svc', import.meta.url));
const ISSUER = 'https://issuer.bench';
const NODE = 'bench-node';

const started = performance.now();
const now = () => performance.now();
const sleep = (ms) => new Promise((r) => setTimeout(r, ms));
const quantile = (xs, q) => { const s = [...xs].sort((a, b) => a - b); return s[Math.min(s.length - 1, Math.ceil(q * s.length) - 1)]; };
const fmt = (n) => Math.round(n).toLocaleString('en-US');
const sec = (ms) => `${(ms / 1000).toFixed(2)} s`;
const env = Object.fromEntries(Object.entries(process.env).filter(([k]) => !k.startsWith('NODE_SVC_')));
const roots = [];
const cleanups = [];

/** Channels from the sandbox payer to the operator, `deposit` each: one approve, then the opens pipelined (explicit nonces). */
async function openChannels(chain, prefix, n, deposit) {
  const payer = privateKeyToAccount(chain.payer.key);
  const send = async (to, data, nonce, gas, fees) => {
    const raw = await payer.signTransaction({ to, data, nonce, gas, chainId: chain.chainId, type: 'eip1559', ...fees });
    return chain.client.sendRawTransaction({ serializedTransaction: raw });
  };
  const receipt = async (hash) => {
    const r = await chain.client.waitForTransactionReceipt({ hash, pollingInterval: 50, timeout: 60_000 });
    if (r.status !== 'success') throw new Error(`${hash} reverted`);
  };
  const fees = await chain.client.estimateFeesPerGas();
  const f = { maxFeePerGas: fees.maxFeePerGas, maxPriorityFeePerGas: fees.maxPriorityFeePerGas };
  let nonce = await chain.client.getTransactionCount({ address: payer.address, blockTag: 'pending' });
  await receipt(await send(chain.token, encodeFunctionData({ abi: TOKEN_ABI, functionName: 'approve', args: [chain.escrow, deposit * BigInt(n)] }), nonce++, 100_000n, f));
  const ids = Array.from({ length: n }, (_, i) => keccak256(toHex(`${prefix}-${i}-${Date.now()}-${Math.random()}`)));
  const data = (id) => encodeFunctionData({ abi: ESCROW_ABI, functionName: 'open', args: [id, chain.operator.address, chain.token, deposit] });
  const gas = ((await chain.client.estimateGas({ account: payer.address, to: chain.escrow, data: data(ids[0]) })) * 15n) / 10n;
  const hashes = [];
  for (const id of ids) hashes.push(await send(chain.escrow, data(id), nonce++, gas, f));
  for (const h of hashes) await receipt(h);
  return ids;
}

/**
 * The stall run's daemon talks to ganache through this loopback proxy: it records each JSON-RPC call (method, duration,
 * error) and, with RPC_RETRY_MS > 0, re-sends a read-only request ganache has not answered within RPC_RETRY_MS
 * (ganache 7 with interval mining now and then never answers an eth_estimateGas: seen here, one in tens). Without it the
 * daemon waits its own RPC timeout (15 s, then one retry) with every settlement behind it, and the run measures
 * ganache's lost request rather than the rebroadcast path. eth_sendRawTransaction is never re-sent by the proxy.
 */
async function rpcProxy(target) {
  const calls = [];
  const server = createServer((req, res) => {
    let body = '';
    req.setEncoding('utf8');
    req.on('data', (c) => { body += c; });
    req.on('end', async () => {
      const call = { at: now(), method: '?', ms: undefined };
      calls.push(call);
      try {
        const j = JSON.parse(body);
        call.method = (Array.isArray(j) ? j : [j]).map((x) => `${x.method}${x.method === 'eth_getTransactionCount' || x.method === 'eth_getBlockByNumber' ? `(${JSON.stringify(x.params?.[1] === undefined ? x.params?.[0] : x.params[1])})` : ''}`).join('+');
        call.params = JSON.stringify((Array.isArray(j) ? j[0] : j).params, (k, v) => (k === 'data' && typeof v === 'string' ? `${v.slice(0, 10)}…(${v.length})` : v)).slice(0, 400);
        // A transaction's nonce, for poolHolds (which sends of it ganache accepted, and when it was mined).
        const first = Array.isArray(j) ? j[0] : j;
        if (first?.method === 'eth_sendRawTransaction') call.nonce = Number(parseTransaction(first.params[0]).nonce);
      } catch { /* not JSON: forwarded as it is */ }
      try {
        const retryable = RPC_RETRY_MS > 0 && !/eth_sendRawTransaction|\?/.test(call.method);
        let r;
        for (let attempt = 1; ; attempt++) {
          const last = !retryable || attempt >= 4;
          try {
            r = await fetch(target, { method: 'POST', headers: { 'content-type': 'application/json' }, body, ...(last ? {} : { signal: AbortSignal.timeout(RPC_RETRY_MS) }) });
            break;
          } catch (err) {
            if (last || err.name !== 'TimeoutError') throw err;
            call.resent = attempt;
          }
        }
        const text = await r.text();
        call.ms = now() - call.at;
        if (/"error"/.test(text)) call.error = (/"message":"([^"]*)"/.exec(text)?.[1] ?? text).slice(0, 160);
        res.writeHead(r.status, { 'content-type': 'application/json' }).end(text);
      } catch (err) {
        call.ms = now() - call.at;
        call.error = String(err);
        res.writeHead(502).end();
      }
    });
  });
  await new Promise((r) => server.listen(0, '127.0.0.1', r));
  cleanups.push(() => new Promise((r) => server.close(r)));
  return { url: `http://127.0.0.1:${server.address().port}`, calls };
}

/**
 * The operator's transactions that ganache held: accepted by it (eth_sendRawTransaction answered without an error),
 * the miner running (after miner_start, one block every BLOCK_S), and still not mined more than two blocks later; and of
 * those, the ones mined within two blocks of the daemon sending the same nonce again (its rebroadcast). A node that
 * mines what is pending takes such a transaction into its next block. ganache 7 can leave one it accepted outside the
 * set it mines: its transaction pool (transaction-pool.js) moves a transaction from its future queue to the pending
 * ones only when another transaction of the same account is added, never when a block is mined, and ganache issue
 * #4522 (open; ganache is archived) reports transactions of one account stuck that way. The daemon's resend after
 * --rebroadcast-after is what releases them (an identical resend that ganache accepts without "underpriced" or
 * "already known" was not among its pending ones). The time until then is ganache's, and part of the recovery
 * figure when it happens after miner_start. Block timestamps have 1 s resolution.
 */
function poolHolds(c) {
  const minedAt = new Map();
  for (const b of c.blocks ?? []) for (const n of b.nonces) minedAt.set(n, b.t * 1000);
  const sends = new Map();
  for (const x of c.tracer.calls) {
    if (x.nonce === undefined || x.error || x.ms === undefined) continue;
    const list = sends.get(x.nonce) ?? [];
    list.push(c.stopWall + (x.at - c.stopAt));
    sends.set(x.nonce, list);
  }
  const window = 2 * BLOCK_S * 1000;
  const held = [];
  let counted = 0;
  for (const [nonce, at] of sends) {
    const mined = minedAt.get(nonce);
    if (mined === undefined) continue;
    const from = Math.max(at[0], c.minerStartWall); // could be mined from then on
    if (mined + 1000 < c.minerStartWall) continue; // mined before the stall: not this run's question
    counted++;
    if (mined - from <= window) continue; // the block's timestamp is at most 1 s early: this is > 2 blocks
    held.push({ nonce, waitedMs: mined - from, again: at.some((t) => t > from && t <= mined + 1000 && t >= mined - window) });
  }
  return { counted, held: held.sort((a, b) => a.nonce - b.nonce) };
}

// ---- 1. the adapter alone ----
async function adapterRate() {
  const chain = await startSandboxChain();
  cleanups.push(() => chain.stop());
  const channels = await openChannels(chain, 'adapter', N, 10_000n);
  const rail = new EscrowRail({ env: 'sandbox', rpcUrl: chain.rpcUrl, chainId: chain.chainId, contract: chain.escrow, assetToken: chain.token, walletKey: chain.operator.key, confirmations: 2 });
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
  if (paid !== expected) throw new Error(`adapter: payee got ${paid}, expected ${expected}`);
  await chain.stop();
  return { rate: N / ((t1 - t0) / 1000), submitMs: (sent - t0) / N, totalMs: t1 - t0 };
}

// ---- the real daemon ----
const issuerKeys = newEd25519KeyPair(); // not generateKeyPairSync: see src/sdk/jws.ts
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

function startDaemon(dataDir, chain, keyFile, extra = [], rpcUrl = chain.rpcUrl) {
  const args = [BIN, '--data-dir', dataDir, 'daemon', '--port', '0', '--host', '127.0.0.1', '--rate-limit', '0', '--mode', 'escrow', '--rail', 'sandbox',
    '--rpc-url', rpcUrl, '--chain-id', String(chain.chainId), '--contract', chain.escrow, '--asset-token', chain.token, '--wallet-key-file', keyFile, ...extra];
  const child = spawn(process.execPath, args, { env: { ...env, NODE_SVC_LOG_LEVEL: 'info', NODE_SVC_LOG_FORMAT: 'json' }, stdio: ['ignore', 'pipe', 'pipe'] });
  cleanups.push(() => { if (child.exitCode === null) child.kill('SIGKILL'); });
  const d = { child, log: '' };
  child.stderr.setEncoding('utf8');
  child.stderr.on('data', (s) => { d.log += s; });
  return new Promise((resolve, reject) => {
    let out = '';
    child.stdout.setEncoding('utf8');
    child.stdout.on('data', (s) => {
      out += s;
      const m = /listening on (http:\/\/\S+)/.exec(out);
      if (m) resolve(Object.assign(d, { url: m[1] }));
    });
    child.once('exit', (code) => reject(new Error(`daemon exited ${code}: ${out}\n${d.log.slice(-2000)}`)));
  });
}

async function stopDaemon(d) {
  const exited = new Promise((r) => d.child.once('exit', r));
  d.child.kill('SIGTERM');
  await Promise.race([exited, sleep(10_000)]);
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
const getText = async (url) => (await fetch(url)).text();
const gauge = (text, re) => Number(re.exec(text)?.[1] ?? 0);

/** Streams registered (credential verified, channel read on chain as funded) on the daemon, one channel each. */
async function registerStreams(chain, call, tag, n, deposit) {
  const channels = await openChannels(chain, tag, n, deposit);
  const out = [];
  for (const [i, channel] of channels.entries()) {
    const stream = `${tag}-${i}`;
    const v = await call('POST', '/v1/allowances/verify', { credential: await credentialFor(chain, stream, channel) });
    if (v.valid !== true) throw new Error(`${stream} not accepted: ${JSON.stringify(v)}`);
    out.push({ stream, channel });
  }
  return out;
}

const voucherBody = (s, amount, signature) => ({ voucher: { stream: s.stream, amount: amount.toString(), units: '1', signature } });

// ---- 2. the daemon, threshold 1, instamine ----
async function daemonRate() {
  const chain = await startSandboxChain();
  cleanups.push(() => chain.stop());
  const { root, dataDir, token } = prepareDataDir('rate');
  const keyFile = join(root, 'wallet.key');
  writeFileSync(keyFile, chain.operator.key, { mode: 0o600 });
  const d = await startDaemon(dataDir, chain, keyFile, ['--settle-threshold', '1']);
  const call = api(d.url, token);
  const streams = await registerStreams(chain, call, 'rate', STREAMS, 100_000_000n);
  // Sign first so the timed part is the daemon's, not the payer's.
  const signed = [];
  for (const s of streams) signed.push({ s, signature: await chain.signVoucher({ chainId: chain.chainId, escrow: chain.escrow, channel: s.channel }, 5_000n) });
  const db = new Database(join(dataDir, 'node-svc.db'), { readonly: true, fileMustExist: true });
  const count = db.prepare("SELECT COUNT(*) AS n FROM settlements WHERE status IN ('checkpointed', 'final')");
  const t0 = now();
  for (const { s, signature } of signed) await call('POST', `/v1/streams/${s.stream}/vouchers`, voucherBody(s, 5_000n, signature));
  const posted = now();
  let firstAt;
  for (;;) {
    const n = count.get().n;
    if (n > 0 && firstAt === undefined) firstAt = now();
    if (n >= STREAMS) break;
    if (now() - t0 > 120_000) throw new Error(`daemon rate: only ${n} of ${STREAMS} settled in 120 s`);
    await sleep(20);
  }
  const t1 = now();
  db.close();
  await stopDaemon(d);
  await chain.stop();
  return { rate: STREAMS / ((t1 - t0) / 1000), postMs: posted - t0, firstMs: firstAt - t0, totalMs: t1 - t0, steady: (STREAMS - 1) / ((t1 - firstAt) / 1000) };
}

// ---- 3. blocks every second, a stall injected halfway ----
async function stall() {
  const chain = await startSandboxChain({ blockTime: BLOCK_S });
  cleanups.push(() => chain.stop());
  const rpc = (method, params = []) => chain.client.request({ method, params });
  const { root, dataDir, token } = prepareDataDir('stall');
  const keyFile = join(root, 'wallet.key');
  writeFileSync(keyFile, chain.operator.key, { mode: 0o600 });
  const tracer = await rpcProxy(chain.rpcUrl);
  const d = await startDaemon(dataDir, chain, keyFile, ['--settle-threshold', '1', '--confirmations', String(CONFIRMATIONS),
    '--rebroadcast-after', `${REBROADCAST_S}s`, '--settle-stuck-after', `${STUCK_S}s`], tracer.url);
  const call = api(d.url, token);
  const list = await registerStreams(chain, call, 'stall', STREAMS, 10_000_000n);
  const streams = [];
  for (const [i, s] of list.entries()) {
    const amount = 1_000_000n + BigInt(i) * 7_919n; // differ per stream, so a settlement credited to the wrong stream shows
    streams.push({ ...s, i, amount, signature: await chain.signVoucher({ chainId: chain.chainId, escrow: chain.escrow, channel: s.channel }, amount), maxAttempts: 0, errors: new Set() });
  }
  const payee0 = await chain.balanceOf(chain.operator.address); // no settlement sent yet: nothing billed
  const seen = { stuckView: 0, healthDegraded: false, stuckGauge: 0, healthOkAt: undefined };
  let minerStartAt;
  let minerStartWall;
  let polling = true;
  const poller = (async () => {
    while (polling) {
      const due = streams.filter((s) => s.postedAt !== undefined && s.finalAt === undefined);
      await Promise.all(due.map(async (s) => {
        const f = await call('GET', `/v1/streams/${s.stream}/finality`);
        const at = now();
        if (s.minedAt === undefined && BigInt(f.checkpointedMicro) >= s.amount) s.minedAt = at;
        if (BigInt(f.finalMicro) === s.amount && f.finality === 'final') { s.finalAt = at; s.minedAt ??= at; }
        if (f.settlement) {
          s.maxAttempts = Math.max(s.maxAttempts, f.settlement.attempts);
          if (f.settlement.stuck) s.sawStuck = true;
          if (/replaced with higher fees/.test(f.settlement.lastError ?? '')) s.sawReplaced = true;
          if (f.settlement.submittedAt) s.submittedWall ??= Date.parse(f.settlement.submittedAt);
          if (f.settlement.lastError) s.errors.add(f.settlement.lastError.replace(/0x[0-9a-f]{8,}/gi, '0x…').replace(/\d+ s\b/g, 'N s'));
        }
      }));
      if (minerStartAt !== undefined && seen.healthOkAt === undefined) {
        const h = JSON.parse(await getText(`${d.url}/healthz`));
        if (h.status === 'ok') seen.healthOkAt = now();
      }
      await sleep(POLL_MS);
    }
  })();
  const post = async (s) => {
    s.postedAt = now();
    const r = await call('POST', `/v1/streams/${s.stream}/vouchers`, voucherBody(s, s.amount, s.signature));
    if (r.accepted !== true) throw new Error(`voucher of ${s.stream} not accepted: ${JSON.stringify(r)}`);
  };
  const half = Math.floor(STREAMS / 2);
  let stopAt;
  let blockAtStop;
  let blockAtStart;
  // The stall: the miner stops right after the first half's vouchers; the posts go on at the same pace meanwhile.
  const stallDone = (async () => {
    while (streams[half - 1].posted === undefined) await sleep(5);
    await rpc('miner_stop');
    stopAt = now();
    try {
      // A block being mined when the miner stops still lands (ganache finishes it): the stall's height is read after it.
      await sleep(BLOCK_S * 1000);
      blockAtStop = await chain.client.getBlockNumber({ cacheTime: 0 });
      await sleep(Math.max(0, stopAt + STALL_S * 1000 - now() - 300));
      // STALL_S is long enough for a settlement sent at the stop to be rebroadcast and then replaced, but when that is
      // only just (the daemon's tick, a loaded machine: seen once, 16 rebroadcasts and no replacement yet), the stall
      // goes on until a finality view shows a replacement, STALL_MAX_S at most: the check below is then of the daemon,
      // not of the race (its length is printed).
      while (!streams.some((s) => s.sawReplaced) && now() - stopAt < STALL_MAX_S * 1000 - 300) await sleep(POLL_MS);
      const endAt = now() + 300;
      // What an operator sees just before the chain resumes.
      const h = JSON.parse(await getText(`${d.url}/healthz`));
      seen.healthDegraded = h.status === 'degraded';
      const m = await getText(`${d.url}/metrics`);
      seen.stuckGauge = gauge(m, /node_svc_settlements\{state="stuck"\} (\d+)/);
      seen.inFlightGauge = gauge(m, /node_svc_settlements\{state="in_flight"\} (\d+)/);
      seen.stuckView = streams.filter((s) => s.sawStuck).length;
      seen.unminedAtStart = streams.filter((s) => s.posted !== undefined && s.minedAt === undefined).length;
      await sleep(Math.max(0, endAt - now()));
      blockAtStart = await chain.client.getBlockNumber({ cacheTime: 0 });
    } finally {
      await rpc('miner_start');
    }
    minerStartAt = now();
    minerStartWall = Date.now();
  })();
  const t0 = now();
  for (const s of streams) {
    const t = now();
    await post(s);
    s.posted = now();
    await sleep(Math.max(0, POST_EVERY_MS - (now() - t)));
  }
  await stallDone;
  const stallMs = minerStartAt - stopAt;
  // The settlements the stall held: sent before miner_start and not mined when the miner stopped.
  const held = () => streams.filter((s) => s.submittedWall !== undefined && s.submittedWall < minerStartWall && !(s.minedAt < stopAt));
  const recovered = () => held().every((s) => s.finalAt !== undefined) && seen.healthOkAt !== undefined;
  while (now() - minerStartAt < END_WAIT_S * 1000 && !recovered()) await sleep(50);
  const recoveredAt = recovered() ? Math.max(...held().map((s) => s.finalAt), seen.healthOkAt) : undefined;
  while (now() - minerStartAt < END_WAIT_S * 1000 && streams.some((s) => s.finalAt === undefined)) await sleep(50);
  polling = false;
  await poller;
  const endAt = now();
  // The end state: one sweep of every stream's finality, the chain's balances and channels.
  let billed = 0n;
  let final = 0n;
  let channelSettled = 0n;
  const wrong = [];
  const views = [];
  for (const s of streams) views.push(await call('GET', `/v1/streams/${s.stream}/finality`));
  // The chain read at one block, so the balance and the channels agree with each other.
  const blockNumber = await chain.client.getBlockNumber({ cacheTime: 0 });
  for (const [i, s] of streams.entries()) {
    const f = views[i];
    billed += BigInt(f.billedTruth.amountMicro);
    final += BigInt(f.finalMicro);
    if (f.billedTruth.amountMicro !== s.amount.toString()) wrong.push(`${s.stream}: billed ${f.billedTruth.amountMicro}, posted ${s.amount}`);
    const ch = await chain.client.readContract({ address: chain.escrow, abi: ESCROW_ABI, functionName: 'channels', args: [s.channel], blockNumber });
    const settled = BigInt(ch[4]);
    channelSettled += settled;
    if (f.finality !== 'final') wrong.push(`${s.stream}: ${f.finality}, finalMicro ${f.finalMicro} of ${f.billedTruth.amountMicro}, channel settled ${settled} on chain; settlement ${JSON.stringify(f.settlement)}`);
    else if (settled !== BigInt(f.finalMicro)) wrong.push(`${s.stream}: final ${f.finalMicro} but the channel settled ${settled} on chain`);
  }
  const paid = (await chain.client.readContract({ address: chain.token, abi: TOKEN_ABI, functionName: 'balanceOf', args: [chain.operator.address], blockNumber })) - payee0;
  const m = await getText(`${d.url}/metrics`);
  const counters = Object.fromEntries([...m.matchAll(/node_svc_settlements_total\{[^}]*state="(\w+)"[^}]*\} (\d+)/g)].map((x) => [x[1], Number(x[2])]));
  const health = JSON.parse(await getText(`${d.url}/healthz`));
  await stopDaemon(d);
  const logs = d.log.split('\n').filter(Boolean).map((l) => { try { return JSON.parse(l); } catch { return { msg: l }; } });
  const logCount = (re) => logs.filter((l) => re.test(l.msg ?? '')).length;
  const warnings = logs.filter((l) => l.level === 'warn' || l.level === 'error');
  const beforeStart = (l) => Date.parse(l.time) < minerStartWall;
  const finals = streams.filter((s) => s.finalAt !== undefined);
  const lat = (xs) => xs.map((s) => s.finalAt - s.postedAt);
  const allFinal = finals.length === streams.length;
  const heldSet = held();
  const r = {
    t0, stallMs, blockAtStop, blockAtStart, seen, counters, health, wrong, billed, final, paid, channelSettled, warnings,
    lastFinalMs: allFinal ? Math.max(...finals.map((s) => s.finalAt)) - t0 : undefined,
    latAll: lat(finals), latBefore: lat(finals.filter((s) => s.postedAt < stopAt)), latDuring: lat(finals.filter((s) => s.postedAt >= stopAt && s.postedAt < minerStartAt)),
    latAfter: lat(finals.filter((s) => s.postedAt >= minerStartAt)), held: heldSet.length,
    heldMinedMs: heldSet.every((s) => s.minedAt !== undefined) ? Math.max(0, ...heldSet.map((s) => s.minedAt - minerStartAt)) : undefined,
    recoveryMs: recoveredAt === undefined ? undefined : recoveredAt - minerStartAt,
    finalAfterMs: allFinal ? Math.max(0, Math.max(...finals.map((s) => s.finalAt)) - minerStartAt) : undefined,
    healthOkMs: seen.healthOkAt === undefined ? undefined : seen.healthOkAt - minerStartAt,
    endMs: endAt - minerStartAt,
    // Sent again / replaced while the miner was stopped (the daemon's "settlement rebroadcast" log lines before miner_start).
    rebroadcastsBefore: logs.filter((l) => beforeStart(l) && /settlement rebroadcast/.test(l.msg ?? '') && !/transaction was not known/.test(l.note ?? '')).length,
    replacedBefore: logs.filter((l) => beforeStart(l) && /settlement rebroadcast/.test(l.msg ?? '') && /replaced with higher fees/.test(l.note ?? '')).length,
    stuckLogs: logCount(/settlement stuck/),
    maxAttempts: Math.max(...streams.map((s) => s.maxAttempts)),
    errors: [...new Set(streams.flatMap((s) => [...s.errors]))],
    logText: d.log,
    tracer, stopAt, minerStartAt, minerStartWall, stopWall: Date.now() - (now() - stopAt),
  };
  {
    // The chain's side (printed with the RPC trace: BENCH_RPC_TRACE=1, or when a target is missed): every block since the first voucher, with the operator wallet's nonces in it.
    r.blocks = [];
    const last = await chain.client.getBlockNumber({ cacheTime: 0 });
    for (let n = 1n; n <= last; n++) {
      const b = await chain.client.getBlock({ blockNumber: n, includeTransactions: true });
      const ours = b.transactions.filter((t) => t.from.toLowerCase() === chain.operator.address.toLowerCase());
      if (Number(b.timestamp) * 1000 >= r.stopWall - 60_000) r.blocks.push({ n: Number(n), t: Number(b.timestamp), txs: b.transactions.length, baseFee: Number(b.baseFeePerGas ?? 0), nonces: ours.map((t) => t.nonce) });
    }
  }
  await chain.stop();
  return r;
}

let misses = 0;
const results = []; // for bench/run.mjs: the last stdout line (bench/README.md)
const verdict = (ok) => { if (!ok) misses++; return ok ? 'PASS' : 'MISS'; };
const pct = (a, b) => (b === 0n ? 'n/a' : `${(a * 100_000n / b / 1000n).toString()}.${(a * 100_000n / b % 1000n).toString().padStart(3, '0')} %`);

try {
  const a = PARTS.includes('adapter') ? await adapterRate() : undefined;
  const b = PARTS.includes('daemon') ? await daemonRate() : undefined;
  const c = await stall();
  const line = (label, figure, target, v) => console.log(`  ${label.padEnd(44)} ${figure}   target: ${target}   ${v}`);
  console.log(`bench/settlement  escrow rail, ganache sandbox (chain 1337), one operator wallet, ${STREAMS} streams`);
  if (a) line('adapter, EscrowRail.submit back to back', `${fmt(a.rate)} settlements/s (n=${N}, ${a.submitMs.toFixed(1)} ms per submit, all receipts in ${sec(a.totalMs)})`, 'none in DESIGN', 'record');
  if (b) line('daemon, threshold 1, 1 s tick, instamine', `${fmt(b.rate)} settlements/s (vouchers posted in ${sec(b.postMs)}, first mined ${sec(b.firstMs)}, all ${sec(b.totalMs)}; ${fmt(b.steady)}/s after the first)`, 'none in DESIGN', 'record');
  console.log(`  stall run: blocks every ${BLOCK_S} s, confirmations ${CONFIRMATIONS}, --rebroadcast-after ${REBROADCAST_S}s, --settle-stuck-after ${STUCK_S}s; one voucher per stream every ${POST_EVERY_MS} ms; miner stopped after ${Math.floor(STREAMS / 2)} vouchers for ${sec(c.stallMs)} (${STALL_S} s, longer until a finality view shows a replacement, ${STALL_MAX_S} s at most; posts go on)`);
  line('settlements final/s, whole stall run', `${(STREAMS / (c.lastFinalMs / 1000 || Infinity)).toFixed(1)} settlements/s (first voucher → last final ${c.lastFinalMs === undefined ? 'never' : sec(c.lastFinalMs)})`, 'none in DESIGN (paced by the posts and the stall)', 'record');
  const p = (xs) => (xs.length ? `p50 ${sec(quantile(xs, 0.5))}  p95 ${sec(quantile(xs, 0.95))}  (n=${xs.length})` : 'none final');
  line('voucher → final, all streams', p(c.latAll), 'none in DESIGN', 'record');
  line('voucher → final, posted before the stall', p(c.latBefore), 'none in DESIGN', 'record');
  line('voucher → final, posted during the stall', p(c.latDuring), 'none in DESIGN', 'record');
  line('voucher → final, posted after the stall', p(c.latAfter), 'none in DESIGN', 'record');
  const stallReal = c.blockAtStart === c.blockAtStop && c.rebroadcastsBefore > 0 && c.replacedBefore > 0 && c.seen.stuckView > 0 && c.seen.stuckGauge > 0 && c.seen.healthDegraded;
  line('stall injected and seen', `chain height ${c.blockAtStop} → ${c.blockAtStart} from 1 block time after miner_stop to miner_start; before miner_start: ${c.seen.unminedAtStart} streams unmined, stuck gauge ${c.seen.stuckGauge}, in_flight gauge ${c.seen.inFlightGauge}, /healthz ${c.seen.healthDegraded ? 'degraded' : 'ok'}, ${c.seen.stuckView} streams shown stuck, ${c.rebroadcastsBefore} rebroadcasts of which ${c.replacedBefore} replaced with higher fees; whole run: ${c.counters.rebroadcast ?? 0} rebroadcasts, max attempts ${c.maxAttempts}, stuck warnings ${c.stuckLogs}`,
    'no block while stopped; ≥1 rebroadcast and ≥1 replacement; stuck shown in finality, gauge and /healthz', verdict(stallReal));
  line('share of billed money final at the end', `${pct(c.final, c.billed)} (${c.final} of ${c.billed} micro, ${sec(c.endMs)} after miner_start)`, '100 %', verdict(c.billed > 0n && c.final === c.billed));
  line('cross-check on chain', `payee wallet +${c.paid} micro; Σ channel settled ${c.channelSettled}; Σ finalMicro ${c.final}`, 'all three equal', verdict(c.paid === c.final && c.channelSettled === c.final && c.wrong.length === 0));
  line('recovery: miner_start → held settlements final, /healthz ok', `${c.recoveryMs === undefined ? `not within ${END_WAIT_S} s` : sec(c.recoveryMs)} (${c.held} settlements held by the stall: all mined after ${c.heldMinedMs === undefined ? '—' : sec(c.heldMinedMs)}; /healthz ok after ${c.healthOkMs === undefined ? '—' : sec(c.healthOkMs)}; every stream final after ${c.finalAfterMs === undefined ? '—' : sec(c.finalAfterMs)})`,
    `≤ ${RECOVERY_TARGET_S} s (2 × ${REBROADCAST_S} s rebroadcast + ${CONFIRMATIONS} × ${BLOCK_S} s blocks)`, verdict(c.recoveryMs !== undefined && c.recoveryMs <= RECOVERY_TARGET_S * 1000));
  const holds = poolHolds(c);
  const released = holds.held.filter((h) => h.again);
  line('transactions ganache held after miner_start', `${holds.held.length} of ${holds.counted} of the wallet's transactions mined after miner_start waited more than ${2 * BLOCK_S} blocks once they could be mined (accepted, miner running); ${released.length} of those were mined within ${2 * BLOCK_S} blocks of the daemon sending them again${holds.held.length ? ` (nonces ${holds.held.map((h) => `${h.nonce}${h.again ? '' : '*'}`).join(',')}; longest ${sec(Math.max(...holds.held.map((h) => h.waitedMs)))}; * not sent again)` : ''}`,
    'none: ganache\'s pool, not the daemon (poolHolds); when not 0, that much of the recovery figure is ganache\'s', 'record');
  if (a) results.push(result('adapter settlements/s (instamine)', a.rate, '/s'));
  if (b) results.push(result('daemon settlements/s (instamine, threshold 1)', b.rate, '/s'));
  if (c.latAll.length) {
    results.push(result('voucher -> final p50 (1 s blocks, stall halfway)', quantile(c.latAll, 0.5) / 1000, 's'));
    results.push(result('voucher -> final p95 (1 s blocks, stall halfway)', quantile(c.latAll, 0.95) / 1000, 's'));
  }
  results.push(result('stall real and seen (rebroadcast, replaced, stuck, degraded)', stallReal ? 1 : 0, 'bool', ['>=', 1]));
  // A display figure only: the verdict above compares the integer sums.
  results.push({ ...result('billed money final at the end', c.billed > 0n ? Number((c.final * 100_000n) / c.billed) / 1000 : 0, '%'), target: '>= 100', pass: c.billed > 0n && c.final === c.billed });
  results.push(result('on-chain cross-check (payee balance = channels settled = final)', c.paid === c.final && c.channelSettled === c.final && c.wrong.length === 0 ? 1 : 0, 'bool', ['>=', 1]));
  results.push(result('recovery after the stall (held settlements final, /healthz ok)', c.recoveryMs === undefined ? Infinity : c.recoveryMs / 1000, 's', ['<=', RECOVERY_TARGET_S]));
  results.push(result('transactions ganache held after miner_start until sent again', released.length, 'tx'));
  console.log(`  settlement transitions (node_svc_settlements_total): ${Object.entries(c.counters).map(([k, v]) => `${k} ${v}`).join(', ')}; /healthz at the end ${c.health.status}${c.health.reasons?.length ? ` (${c.health.reasons.join('; ')})` : ''}`);
  if (c.errors.length) console.log(`  lastError values seen in finality views: ${c.errors.slice(0, 8).map((e) => JSON.stringify(e)).join(' | ')}`);
  const odd = c.warnings.filter((w) => !/settlement stuck/.test(w.msg ?? ''));
  if (odd.length) console.log(`  daemon warnings other than "settlement stuck": ${odd.length}; first: ${odd.slice(0, 3).map((w) => JSON.stringify(w)).join(' | ')}`);
  for (const w of c.wrong.slice(0, 10)) console.log(`  ! ${w}`);
  const resent = c.tracer.calls.filter((x) => x.resent);
  const unanswered = c.tracer.calls.filter((x) => x.ms === undefined);
  console.log(`  chain RPC via the bench's proxy: ${c.tracer.calls.length} daemon calls; ${RPC_RETRY_MS > 0 ? `${resent.length} not answered by ganache within ${RPC_RETRY_MS} ms and re-sent (${[...new Set(resent.map((x) => x.method))].join(', ') || '-'})` : 're-send off'}; ${unanswered.length} never answered`);
  if (RPC_TRACE || misses) {
    const rel = (t) => `${((t - c.stopAt) / 1000).toFixed(1)} s`;
    const slow = c.tracer.calls.filter((x) => x.ms === undefined || x.ms > 1000);
    console.log(`  RPC trace: ${c.tracer.calls.length} calls by the daemon; ${slow.length} took > 1 s or never answered (times from miner_stop; miner_start at ${rel(c.minerStartAt)})`);
    for (const x of slow.slice(0, 20)) console.log(`    ${rel(x.at)}  ${x.method}  ${x.ms === undefined ? 'no answer' : sec(x.ms)}${x.error ? `  ${x.error}` : ''}  ${x.params ?? ''}`);
    const traceFile = join(tmpdir(), `node-svc-bench-settlement-rpc-${Date.now()}.json`);
    writeFileSync(traceFile, JSON.stringify(c.tracer.calls.map((x) => ({ ...x, at: +((x.at - c.stopAt) / 1000).toFixed(3) }))));
    console.log(`    trace kept in ${traceFile}`);
    const errs = c.tracer.calls.filter((x) => x.error);
    const byErr = {};
    for (const x of errs) byErr[`${x.method}: ${x.error.replace(/0x[0-9a-f]{8,}/gi, '0x…')}`] = (byErr[`${x.method}: ${x.error.replace(/0x[0-9a-f]{8,}/gi, '0x…')}`] ?? 0) + 1;
    for (const [k, v] of Object.entries(byErr).slice(0, 10)) console.log(`    ${v}× ${k}`);
    console.log(`  blocks (t from miner_stop, s; block timestamps have 1 s resolution):`);
    for (const b of c.blocks ?? []) console.log(`    #${b.n} t=${(b.t - c.stopWall / 1000).toFixed(0)} txs=${b.txs} baseFee=${b.baseFee} operator nonces ${b.nonces.join(',') || '-'}`);
  }
  if (misses || RPC_TRACE) {
    const keepLog = join(tmpdir(), `node-svc-bench-settlement-${Date.now()}.log`);
    writeFileSync(keepLog, c.logText);
    console.log(`  daemon log of the stall run kept in ${keepLog}`);
  }
  console.log(`  run time ${sec(performance.now() - started)}; ${misses ? `${misses} target(s) missed` : 'all targets met'}`);
} catch (err) {
  misses++;
  console.error(`bench/settlement failed: ${err.stack ?? err}`);
} finally {
  for (const f of cleanups.reverse()) await Promise.resolve().then(f).catch(() => {});
  for (const r of roots) rmSync(r, { recursive: true, force: true });
}
if (results.length) report('settlement', results);
process.exit(misses ? 1 : 0);
