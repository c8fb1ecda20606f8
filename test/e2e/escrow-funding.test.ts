// Final means money on the escrow rail (issues #11, #17): a stream is payable only while its channel pays this daemon's
// wallet, in the configured token, from the credential's payer, within its deposit; one channel backs one stream;
// final only from the chain's Settled log; a settlement that does not progress is rebroadcast, replaced and visible.
// The real daemon (bin/node-svc daemon --mode escrow) against a real local chain (ganache) with its miner controls.
import { join } from 'node:path';
import { type Hex } from 'viem';
import { generatePrivateKey, privateKeyToAccount } from 'viem/accounts';
import { afterAll, beforeAll, describe, expect, it, vi } from 'vitest';
import { TOKEN_ABI, TOKEN_BYTECODE } from '../../src/rails/escrow/artifacts.js';
import { startSandboxChain, type SandboxChain } from '../../src/rails/escrow/sandbox.js';
import { cliFor, tempDataDir, type TempDataDir } from '../helpers/cli.js';
import { clientOf, http, setupNodes, type RunningDaemon } from '../helpers/daemon.js';
import { channelOf, escrowCall, escrowFlags, eventually, startEscrowDaemon, walletFor, writeKeyFile } from '../helpers/escrow.js';
import { readRows } from '../helpers/inspect.js';
import { issuerKeyPair, mintCredential, type KeyPair } from '../helpers/issuer.js';

vi.setConfig({ testTimeout: 90_000, hookTimeout: 60_000 });

let chain: SandboxChain;
let issuer: KeyPair;
let seq = 0;
const uid = (p: string) => `${p}-${++seq}-${Math.random().toString(36).slice(2, 8)}`;
type Client = ReturnType<typeof clientOf>;

beforeAll(async () => {
  [chain, issuer] = await Promise.all([startSandboxChain({ closeGrace: 60 }), issuerKeyPair()]);
});
afterAll(async () => {
  await chain?.stop();
});

interface Stream {
  id: string;
  channel: Hex;
  credential: string;
  sign(amount: bigint, key?: Hex): Promise<Hex>;
}

/** A credential naming `channel` (default: a new channel from the sandbox payer to `payee` with `deposit`). */
async function streamOn(o: { payee?: Hex; deposit?: bigint; cap?: string; channel?: Hex; payerAddress?: Hex; id?: string } = {}): Promise<Stream> {
  const id = o.id ?? uid('stream');
  const channel = o.channel ?? (await chain.openChannel({ id, payee: o.payee ?? chain.operator.address, deposit: o.deposit ?? 2_000_000n }));
  const credential = mintCredential({
    key: issuer,
    claims: { stream: id, budget: uid('budget'), cap: o.cap ?? '2000000', asset: 'USDC', mode: 'escrow', cnf: { addr: o.payerAddress ?? chain.payer.address }, chainId: chain.chainId, escrow: chain.escrow, channel },
  });
  const terms = { chainId: chain.chainId, escrow: chain.escrow, channel };
  return { id, channel, credential, sign: (amount, key) => chain.signVoucher(terms, amount, key) };
}

const voucher = (c: Client, s: Stream, amount: bigint, signature: Hex) =>
  c.post(`/v1/streams/${s.id}/vouchers`, { voucher: { stream: s.id, amount: amount.toString(), units: (amount / 100n).toString(), signature } });
const get = async (c: Client, s: Stream, view: 'verify' | 'headroom' | 'finality') => {
  const r = await c.get(`/v1/streams/${s.id}/${view}`);
  expect(r.status, r.text).toBe(200);
  return r.body;
};
const rpc = (method: string, params: unknown[] = []) => chain.client.request({ method: method as never, params: params as never });

/** Not payable, everywhere a node looks: credential refusal, stream verify, headroom, vouchers; nothing settles. */
async function expectUnfunded(c: Client, s: Stream, reason: RegExp, payerKey?: Hex) {
  const v = await c.post('/v1/allowances/verify', { credential: s.credential });
  expect(v.status, v.text).toBe(422);
  expect(v.body).toMatchObject({ valid: false, refusal: 'unfunded' });
  expect(v.body.detail).toMatch(reason);
  const sv = await get(c, s, 'verify');
  expect(sv).toMatchObject({ payable: false, status: 'unfunded' });
  expect(sv.reason).toMatch(reason);
  expect((await get(c, s, 'headroom')).degradationStage).toBe('halted');
  const vr = await voucher(c, s, 1_000n, await s.sign(1_000n, payerKey)); // signed by the credential's cnf.addr
  expect(vr.status, vr.text).toBe(422);
  expect(vr.body).toMatchObject({ code: 'voucher_refused', refusal: 'not_payable', streamStatus: 'unfunded' });
  const f = await get(c, s, 'finality');
  expect(f).toMatchObject({ finality: 'none', finalMicro: '0', billedTruth: { amountMicro: '0' }, funding: { status: 'unfunded' } });
}

/** Wait until no settlement of the node is on its way (failed ones retry with backoff and pay nothing), so the payee's balance moves only for the next one. */
async function quiesce(c: Client) {
  await eventually(async () => {
    await chain.mine(1);
    const list = (await c.get('/v1/streams?limit=500')).body.data as Array<{ stream: string }>;
    for (const x of list) {
      const f = (await c.get(`/v1/streams/${x.stream}/finality`)).body;
      if (f.settlement?.status === 'failed' || f.funding.status !== 'funded') continue;
      if (f.settlement || f.billedTruth.amountMicro !== f.finalMicro) return false;
    }
    return true;
  }, 'earlier settlements done', 30_000, 300);
}

describe('escrow funding, one channel per stream, final from the chain', () => {
  let t: TempDataDir;
  let daemon: RunningDaemon;
  let A: Client;
  let B: Client;
  let flags: string[];
  let tokenA: string;
  let tokenB: string;

  beforeAll(async () => {
    t = await tempDataDir('node-svc-escrow-funding-');
    ({ tokenA, tokenB } = await setupNodes(t.dataDir, issuer));
    flags = escrowFlags(chain, await writeKeyFile(t.root, chain.operator.key), { '--settle-threshold': '1', '--confirmations': '2', '--settle-interval': '2s', '--settle-stuck-after': '3s', '--rebroadcast-after': '1s' });
    daemon = await startEscrowDaemon(t.dataDir, flags);
    A = clientOf(daemon.url, tokenA);
    B = clientOf(daemon.url, tokenB);
  });
  afterAll(async () => {
    await rpc('miner_start').catch(() => undefined);
    await daemon?.stop('SIGKILL');
    await t?.cleanup();
  });

  it('a channel paying another address is not payable: nothing is billed, settled or reported final', async () => {
    const other = privateKeyToAccount(generatePrivateKey()).address;
    const s = await streamOn({ payee: other });
    const before = await chain.balanceOf(other);
    // A voucher that carries its credential (a gateway verified it offline): refused as not payable, the stream registered as unfunded.
    const first = await A.post(`/v1/streams/${s.id}/vouchers`, { voucher: { stream: s.id, amount: '1500000', units: '15000', signature: await s.sign(1_500_000n) }, credential: s.credential });
    expect(first.status, first.text).toBe(422);
    expect(first.body).toMatchObject({ code: 'voucher_refused', refusal: 'not_payable', streamStatus: 'unfunded' });
    await expectUnfunded(A, s, new RegExp(`pays ${other}, not this daemon's wallet`, 'i'));
    await new Promise((r) => setTimeout(r, 2500));
    expect(await chain.balanceOf(other)).toBe(before);
    expect((await channelOf(chain, s.channel)).settled).toBe(0n);
  });

  it("a channel funded by someone other than the credential's payer is not payable", async () => {
    const strangerKey = generatePrivateKey();
    const stranger = privateKeyToAccount(strangerKey).address;
    const s = await streamOn({ payerAddress: stranger });
    await expectUnfunded(A, s, new RegExp(`funded by ${chain.payer.address}, not the credential's payer ${stranger}`, 'i'), strangerKey);
  });

  it('a channel in another token with the same symbol and decimals is not payable', async () => {
    const hash = await walletFor(chain, chain.payer.key).deployContract({ abi: TOKEN_ABI as never, bytecode: TOKEN_BYTECODE as Hex, args: [] as never });
    const fake = (await chain.client.waitForTransactionReceipt({ hash, pollingInterval: 50 })).contractAddress as Hex;
    expect(await chain.client.readContract({ address: fake, abi: TOKEN_ABI, functionName: 'symbol' })).toBe('USDC');
    const payer = walletFor(chain, chain.payer.key);
    const send = async (address: Hex, abi: readonly unknown[], functionName: string, args: unknown[]) =>
      chain.client.waitForTransactionReceipt({ hash: await payer.writeContract({ address, abi: abi as never, functionName: functionName as never, args: args as never } as never), pollingInterval: 50 });
    await send(fake, TOKEN_ABI, 'mint', [chain.payer.address, 5_000_000n]);
    await send(fake, TOKEN_ABI, 'approve', [chain.escrow, 2_000_000n]);
    const channel = `0x${Buffer.from(uid('fake-token-channel').padEnd(32, '.')).subarray(0, 32).toString('hex')}` as Hex;
    await escrowCall(chain, chain.payer.key, 'open', [channel, chain.operator.address, fake, 2_000_000n]);
    const s = await streamOn({ channel });
    await expectUnfunded(A, s, new RegExp(`holds token ${fake}, not the configured asset token`, 'i'));
  });

  it('a channel that does not exist is not payable', async () => {
    const channel = `0x${'ab'.repeat(16)}${Buffer.from(uid('x')).toString('hex').padEnd(32, '0').slice(0, 32)}` as Hex;
    await expectUnfunded(A, await streamOn({ channel }), /does not exist on chain 1337/);
  });

  it('the effective cap is the deposit: over-deposit vouchers are refused naming it; a top-up raises it', async () => {
    const s = await streamOn({ deposit: 500_000n, cap: '2000000' });
    expect((await A.post('/v1/allowances/verify', { credential: s.credential })).status).toBe(200);
    const h = await get(A, s, 'headroom');
    expect(h).toMatchObject({ capMicro: '2000000', effectiveCapMicro: '500000', fundedMicro: '500000', remainingCapMicro: '500000' });
    const over = await voucher(A, s, 1_200_000n, await s.sign(1_200_000n));
    expect(over.status, over.text).toBe(422);
    expect(over.body).toMatchObject({ code: 'voucher_refused', refusal: 'over_cap', effectiveCapMicro: '500000' });
    expect(over.body.detail).toMatch(/channel deposit is 500000/);
    expect((await get(A, s, 'finality')).billedTruth.amountMicro).toBe('0');

    await walletFor(chain, chain.payer.key).writeContract({ address: chain.token, abi: TOKEN_ABI, functionName: 'approve', args: [chain.escrow, 1_000_000n] } as never)
      .then((hash) => chain.client.waitForTransactionReceipt({ hash, pollingInterval: 50 }));
    await escrowCall(chain, chain.payer.key, 'deposit', [s.channel, 1_000_000n]);
    const toppedAt = Date.now();
    await eventually(async () => (await get(A, s, 'headroom')).effectiveCapMicro === '1500000', 'top-up raises the effective cap', 20_000, 100);
    expect(Date.now() - toppedAt).toBeLessThan(2_000 + 1_500); // within one settle interval (2 s here) plus a tick: read from the Deposited log
    const ok = await voucher(A, s, 1_200_000n, await s.sign(1_200_000n));
    expect(ok.body, ok.text).toMatchObject({ accepted: true, remainingCapMicro: '300000' });
  });

  it('#17: one channel behind two streams — the second is refused, and final equals what the wallet received', async () => {
    await quiesce(A);
    const payee0 = await chain.balanceOf(chain.operator.address);
    const a = await streamOn({ deposit: 2_000_000n });
    const b = await streamOn({ channel: a.channel });
    expect((await A.post('/v1/allowances/verify', { credential: a.credential })).status).toBe(200);
    await expectUnfunded(A, b, new RegExp(`escrow channel ${a.channel} already backs stream ${a.id} of this node`, 'i'));
    // Another node naming the same channel: refused too, without the other node's stream id.
    const bb = await streamOn({ channel: a.channel });
    const rb = await B.post('/v1/allowances/verify', { credential: mintCredential({ key: issuer, claims: { ...JSON.parse(Buffer.from(bb.credential.split('.')[1]!, 'base64url').toString()), aud: 'node-b' } }) });
    expect(rb.status, rb.text).toBe(422);
    expect(rb.body.refusal).toBe('unfunded');
    expect(rb.body.detail).toMatch(/already backs a stream of another node/);
    expect(rb.body.detail).not.toContain(a.id);

    expect((await voucher(A, a, 1_000_000n, await a.sign(1_000_000n))).body).toMatchObject({ accepted: true });
    await eventually(async () => { await chain.mine(1); const f = await get(A, a, 'finality'); return f.finality === 'final' && f; }, 'a final', 30_000, 300);
    const fa = await get(A, a, 'finality');
    expect(BigInt(fa.finalMicro)).toBe((await chain.balanceOf(chain.operator.address)) - payee0);
    expect(fa.finalMicro).toBe('1000000');
    expect((await get(A, b, 'finality')).finalMicro).toBe('0');

    // The binding survives a restart.
    await daemon.stop('SIGTERM');
    daemon = await startEscrowDaemon(t.dataDir, flags);
    A = clientOf(daemon.url, tokenA);
    B = clientOf(daemon.url, tokenB);
    const after = await get(A, b, 'verify');
    expect(after).toMatchObject({ payable: false, status: 'unfunded' });
    expect(after.reason).toMatch(/already backs stream/);
    expect((await get(A, a, 'verify')).payable).toBe(true);
  });

  it('a settle that mines without a Settled log (the channel already settled as much) is a failed settlement, never final', async () => {
    const s = await streamOn({ deposit: 2_000_000n });
    expect((await A.post('/v1/allowances/verify', { credential: s.credential })).status).toBe(200);
    // The payer's higher voucher is redeemed on chain by someone else first: the channel has settled 1,500,000.
    await escrowCall(chain, chain.payer.key, 'settle', [s.channel, 1_500_000n, await s.sign(1_500_000n)]);
    const payee0 = await chain.balanceOf(chain.operator.address);
    expect((await voucher(A, s, 800_000n, await s.sign(800_000n))).body).toMatchObject({ accepted: true });
    const f = await eventually(async () => { await chain.mine(1); const v = await get(A, s, 'finality'); return v.settlement?.status === 'failed' && v; }, 'the settlement fails', 30_000, 300);
    expect(f.settlement.lastError).toMatch(/without a Settled log/);
    expect(f).toMatchObject({ finality: 'none', finalMicro: '0', checkpointedMicro: '0' });
    // /healthz while the settlement is failed: its retry comes 2 s after the failure (then 4, 8 …) and fails the same
    // way, so a read that the retry overtook is read again at the next failure (a busy machine can take longer than 2 s
    // between two reads).
    let lastHealth: unknown;
    await eventually(async () => {
      await chain.mine(1);
      if ((await get(A, s, 'finality')).settlement?.status !== 'failed') return false;
      const h = await http(daemon.url, '/healthz');
      lastHealth = h.body;
      return h.body.status === 'degraded' && /latest settlement failed/.test(h.body.reasons.join(' '));
    }, 'a failed settlement on /healthz', 30_000, 200).catch((err) => { throw new Error(`${(err as Error).message}: ${JSON.stringify(lastHealth)}`); });
    await chain.mine(3);
    await new Promise((r) => setTimeout(r, 1500));
    expect((await get(A, s, 'finality')).finalMicro).toBe('0');
    expect(await chain.balanceOf(chain.operator.address)).toBe(payee0); // nothing was paid by our transaction
  });

  it('a voucher the payer redeemed on chain first: the settle mines without paying, and the payer\'s Settled log of that amount is the proof (final, its transaction named, paid once, no retry)', async () => {
    // The contract lets anyone submit a voucher. Before, this daemon's settle mined as a no-op (the channel had settled
    // as much), the settlement failed, and every retry did the same for ever: gas spent each time, the stream never final.
    const s = await streamOn({ deposit: 2_000_000n });
    expect((await A.post('/v1/allowances/verify', { credential: s.credential })).status).toBe(200);
    const sig = await s.sign(900_000n);
    const byPayer = await escrowCall(chain, chain.payer.key, 'settle', [s.channel, 900_000n, sig]);
    // The same payer settles the same amount on another channel afterwards: a newer Settled log of that amount, which
    // is not this stream's payment (the lookup is by channel).
    const decoy = await streamOn({ deposit: 2_000_000n });
    const byDecoy = await escrowCall(chain, chain.payer.key, 'settle', [decoy.channel, 900_000n, await decoy.sign(900_000n)]);
    expect(byDecoy.blockNumber).toBeGreaterThan(byPayer.blockNumber);
    const payee0 = await chain.balanceOf(chain.operator.address);
    expect((await voucher(A, s, 900_000n, sig)).body).toMatchObject({ accepted: true, billedMicro: '900000' });
    const f = await eventually(async () => { await chain.mine(1); const v = await get(A, s, 'finality'); return v.finality === 'final' && v; }, 'final on the payer\'s transaction', 30_000, 300);
    expect(f).toMatchObject({ finalMicro: '900000', frontier: { amountMicro: '900000', finality: 'final', reference: byPayer.transactionHash } });
    // The daemon says which transaction paid; its own paid nothing (the wallet's balance did not move after the
    // payer's settles), and the channel settled once.
    const own = daemon.stderr.split('\n').find((l) => l.includes('settlement paid by an earlier transaction on the channel') && l.includes(s.id));
    expect(own, daemon.stderr.slice(-3000)).toBeDefined();
    expect(own).toContain(byPayer.transactionHash);
    expect(await chain.balanceOf(chain.operator.address)).toBe(payee0);
    expect((await channelOf(chain, s.channel)).settled).toBe(900_000n);
    // The signed receipt names the payer's transaction, which anyone can check on chain.
    const r = await A.get(`/v1/streams/${s.id}/receipt`);
    expect(r.status, r.text).toBe(200);
    const claims = JSON.parse(Buffer.from(String(r.body.receipt).split('.')[1]!, 'base64url').toString('utf8'));
    expect(claims).toMatchObject({ stream: s.id, amountMicro: '900000', rail: 'escrow', escrow: { txHash: byPayer.transactionHash, blockNumber: Number(byPayer.blockNumber), channel: s.channel.toLowerCase() } });
    // One settlement, never failed, never retried.
    await new Promise((res) => setTimeout(res, 1500));
    const after = await get(A, s, 'finality');
    expect(after).toMatchObject({ finality: 'final', finalMicro: '900000' });
    expect(after.settlement ?? null).toBeNull();
    const rows = await readRows<{ status: string; amount: unknown; reference: string }>(t.dataDir, 'SELECT status, amount_micro AS amount, reference FROM settlements WHERE stream = ?', [s.id]);
    expect(rows.map((x) => [x.status, String(x.amount)])).toEqual([['final', '900000']]);
    const mine = await chain.client.getTransactionReceipt({ hash: rows[0]!.reference as Hex });
    expect([mine.status, mine.from.toLowerCase(), mine.to?.toLowerCase(), mine.logs.length]).toEqual(['success', chain.operator.address.toLowerCase(), chain.escrow.toLowerCase(), 0]);
  });

  it('a stalled transaction (miner stopped) is visible, rebroadcast and replaced; it recovers and pays exactly once', async () => {
    const s = await streamOn({ deposit: 2_000_000n });
    expect((await A.post('/v1/allowances/verify', { credential: s.credential })).status).toBe(200);
    await quiesce(A);
    const payee0 = await chain.balanceOf(chain.operator.address);
    await rpc('miner_stop');
    try {
      expect((await voucher(A, s, 700_000n, await s.sign(700_000n))).body).toMatchObject({ accepted: true });
      let lastSeen: unknown;
      const stuck = await eventually(async () => { const v = await get(A, s, 'finality'); lastSeen = v.settlement; return v.settlement?.stuck && v.settlement.attempts >= 3 && v; }, 'stuck, rebroadcast and replaced', 30_000, 250)
        .catch((err) => { throw new Error(`${(err as Error).message}: ${JSON.stringify(lastSeen)}\n${daemon.stderr.slice(-3000)}`); });
      expect(stuck.settlement).toMatchObject({ amountMicro: '700000', status: 'submitted', stuck: true });
      expect(stuck.settlement.lastError).toMatch(/rebroadcast|replaced with higher fees/);
      expect(stuck.finality).not.toBe('final');
      const health = await http(daemon.url, '/healthz');
      expect(health.status).toBe(200);
      expect(health.body.status).toBe('degraded');
      expect(health.body.reasons.join(' ')).toMatch(/sent but not mined/);
      const metrics = await http(daemon.url, '/metrics');
      expect(metrics.text).toMatch(/node_svc_settlements\{state="stuck"\} [1-9]/);
      await eventually(async () => /settlement stuck/.test(daemon.stderr), 'a warning in the log', 10_000, 100);
    } finally {
      await rpc('miner_start');
    }
    let lastSeen: unknown;
    const fin = await eventually(async () => { await chain.mine(1); const v = await get(A, s, 'finality'); lastSeen = v; return v.finality === 'final' && v.finalMicro === '700000' && v; }, 'final after the miner resumes', 30_000, 300)
      .catch((err) => { throw new Error(`${(err as Error).message}: ${JSON.stringify(lastSeen)}\n${daemon.stderr.slice(-4000)}`); });
    expect(fin.settlement).toBeNull();
    expect((await chain.balanceOf(chain.operator.address)) - payee0).toBe(700_000n);
    expect((await channelOf(chain, s.channel)).settled).toBe(700_000n);
  });

  it('a settle that reverts (the payer closed and withdrew) is a visible failure, never final', async () => {
    const s = await streamOn({ deposit: 1_000_000n });
    expect((await A.post('/v1/allowances/verify', { credential: s.credential })).status).toBe(200);
    await escrowCall(chain, chain.payer.key, 'requestClose', [s.channel]);
    await chain.advanceTime(120); // past the grace of 60 s, even while the daemon's settler is sending
    await escrowCall(chain, chain.payer.key, 'withdraw', [s.channel]);
    // Still within the daemon's last funding reading (refreshed every few seconds): a voucher may land before it learns.
    await voucher(A, s, 300_000n, await s.sign(300_000n));
    await eventually(async () => (await get(A, s, 'verify')).status === 'unfunded', 'the closed channel is noticed', 20_000, 250);
    expect((await get(A, s, 'verify')).reason).toMatch(/is closed/);
    const f = await get(A, s, 'finality');
    expect(f.finalMicro).toBe('0');
    if (f.billedTruth.amountMicro !== '0') {
      const failed = await eventually(async () => { const v = await get(A, s, 'finality'); return v.settlement?.status === 'failed' && v; }, 'the settle fails', 20_000, 250);
      expect(failed.settlement.lastError).toBeTruthy();
    }
  });
});

describe('a chain that cannot be read: 503, never a payable answer', () => {
  it('registration of an escrow stream answers 503 unavailable while the RPC is down', async () => {
    const own = await startSandboxChain();
    const t = await tempDataDir('node-svc-escrow-down-');
    let d: RunningDaemon | undefined;
    try {
      const { tokenA } = await setupNodes(t.dataDir, issuer);
      d = await startEscrowDaemon(t.dataDir, escrowFlags(own, await writeKeyFile(t.root, own.operator.key)));
      const c = clientOf(d.url, tokenA);
      const id = uid('down');
      const channel = await own.openChannel({ id, payee: own.operator.address, deposit: 1_000_000n });
      await own.stop();
      const credential = mintCredential({ key: issuer, claims: { stream: id, budget: 'b', cap: '1000000', asset: 'USDC', mode: 'escrow', cnf: { addr: own.payer.address }, chainId: own.chainId, escrow: own.escrow, channel } });
      const r = await c.post('/v1/allowances/verify', { credential });
      expect(r.status, r.text).toBe(503);
      expect(r.headers.get('content-type')).toMatch(/problem\+json/);
      expect(r.body).toMatchObject({ code: 'unavailable' });
      expect(r.headers.get('retry-after')).toBeTruthy();
      expect((await c.get(`/v1/streams/${id}/verify`)).status).toBe(404); // nothing registered
    } finally {
      await d?.stop('SIGKILL');
      await own.stop().catch(() => undefined);
      await t.cleanup();
    }
  });
});

describe('escrow settings refused by name', () => {
  let t: TempDataDir;
  let keyFile: string;
  beforeAll(async () => {
    t = await tempDataDir('node-svc-escrow-settings-');
    await setupNodes(t.dataDir, issuer);
    keyFile = await writeKeyFile(t.root, chain.operator.key);
  });
  afterAll(async () => t?.cleanup());

  it('escrow mode without --asset-token', async () => {
    const r = await cliFor(t.dataDir).with(['daemon', '--port', '0', ...escrowFlags(chain, keyFile, { '--asset-token': undefined })], { timeoutMs: 20_000 });
    expect(r.code, r.stderr).toBe(4);
    expect(r.stderr).toMatch(/--asset-token is required in escrow mode/);
  });

  it('escrow mode with card settings (named, secrets never printed)', async () => {
    const secretFile = join(t.root, 'whsec.txt');
    await import('node:fs/promises').then((fs) => fs.writeFile(secretFile, 'whsec_supersecretvalue123'));
    const r = await cliFor(t.dataDir).with(['daemon', '--port', '0', ...escrowFlags(chain, keyFile), '--card-account', 'acct_123', '--card-webhook-secret-file', secretFile, '--card-api', 'http://127.0.0.1:9'], { timeoutMs: 20_000 });
    expect(r.code, r.stderr).toBe(4);
    expect(r.stderr).toMatch(/--card-account, --card-api, --card-webhook-secret-file: card settings, but escrow mode takes no card processor settings/);
    expect(r.stderr + r.stdout).not.toMatch(/supersecretvalue/);
  });

  it('card mode with escrow settings, --asset-token among them', async () => {
    const r = await cliFor(t.dataDir).with(['daemon', '--port', '0', '--mode', 'card', '--asset-token', chain.token, '--card-account', 'acct_123'], { timeoutMs: 20_000 });
    expect(r.code, r.stderr).toBe(4);
    expect(r.stderr).toMatch(/--asset-token: escrow settings, but card mode takes no chain or wallet settings/);
  });
});
