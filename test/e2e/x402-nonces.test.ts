// An x402 transfer and an escrow settlement of one wallet, sent concurrently on a stalled chain (issue #24 with #11):
// the real daemon against ganache behind a loopback RPC proxy that keeps every transaction the daemon sends. The RPC
// counts one pending transaction too many until the x402 transfer is sent, so the first of the two goes one nonce too
// high and leaves a gap below: both are stuck, and each would fill that gap (re-sign into it). Only one may: the x402
// transfer's nonces are held as a settlement's are. Then the miner resumes and both mine, each paying exactly once.
// And an x402 transfer re-signed into a gap and paid there was final (its nonces released) while its first transaction,
// one nonce above, was still unmined (dropped by the node): the settlement stalled above it was re-signed into that nonce.
import { randomBytes } from 'node:crypto';
import { type Hex } from 'viem';
import { afterAll, beforeAll, describe, expect, it, vi } from 'vitest';
import { startSandboxChain, type SandboxChain } from '../../src/rails/escrow/sandbox.js';
import { x402Stream } from '../../src/service/x402.js';
import { tempDataDir, type TempDataDir } from '../helpers/cli.js';
import { clientOf, setupNodes, type RunningDaemon } from '../helpers/daemon.js';
import { channelOf, escrowFlags, eventually, startEscrowDaemon, writeKeyFile } from '../helpers/escrow.js';
import { issuerKeyPair, mintCredential, type KeyPair } from '../helpers/issuer.js';
import { startRpcProxy, type RpcProxy } from '../helpers/rpc-proxy.js';
import { x402Payment } from '../helpers/x402.js';

vi.setConfig({ testTimeout: 120_000, hookTimeout: 60_000 });

const PRICE = 1000n;

let chain: SandboxChain;
let issuer: KeyPair;
let proxy: RpcProxy;
let t: TempDataDir;
let daemon: RunningDaemon;
let A: ReturnType<typeof clientOf>;
let flags: string[];
let tokenA: string;
const same = (x: string | undefined, y: string) => x?.toLowerCase() === y.toLowerCase();
const rpc = (method: string, params: unknown[] = []) => chain.client.request({ method: method as never, params: params as never });

beforeAll(async () => {
  [chain, issuer] = await Promise.all([startSandboxChain({ closeGrace: 60 }), issuerKeyPair()]);
  proxy = await startRpcProxy(chain.rpcUrl);
  t = await tempDataDir('node-svc-x402-nonces-');
  ({ tokenA } = await setupNodes(t.dataDir, issuer));
  flags = escrowFlags(chain, await writeKeyFile(t.root, chain.operator.key), {
    '--rpc-url': proxy.url, '--settle-threshold': '1', '--confirmations': '2', '--settle-interval': '1s', '--settle-stuck-after': '3s',
    '--rebroadcast-after': '1s', '--x402-settle-wait': '0s',
  });
  daemon = await startEscrowDaemon(t.dataDir, flags);
  A = clientOf(daemon.url, tokenA);
});
afterAll(async () => {
  await rpc('miner_start').catch(() => undefined);
  await daemon?.stop('SIGKILL');
  await proxy?.stop();
  await t?.cleanup();
  await chain?.stop();
});

/** An escrow stream of 2,000,000 on a channel of its own, verified by the daemon, and the payer's voucher for `voucherMicro`. */
async function escrowStream(prefix: string, voucherMicro: bigint) {
  const id = `${prefix}-${randomBytes(4).toString('hex')}`;
  const channel = await chain.openChannel({ id, payee: chain.operator.address, deposit: 2_000_000n });
  const credential = mintCredential({
    key: issuer,
    claims: { stream: id, budget: `b-${id}`, cap: '2000000', asset: 'USDC', mode: 'escrow', cnf: { addr: chain.payer.address }, chainId: chain.chainId, escrow: chain.escrow, channel },
  });
  expect((await A.post('/v1/allowances/verify', { credential })).status).toBe(200);
  return { id, channel, signature: await chain.signVoucher({ chainId: chain.chainId, escrow: chain.escrow, channel }, voucherMicro) };
}

describe('an x402 transfer and a settlement of one wallet, stalled together', () => {
  it('never share a nonce (one fills the gap, the other keeps its own); both mine, each paying exactly once', async () => {
    const token = chain.token.toLowerCase();
    const { id, channel, signature } = await escrowStream('x402n', 600_000n);
    const resource = `http://resource.test/nonces-${id}`;
    const body = await x402Payment(chain, { value: PRICE, resource });
    const payee0 = await chain.balanceOf(chain.operator.address);
    const n = await chain.client.getTransactionCount({ address: chain.operator.address, blockTag: 'latest' });
    // Until the x402 transfer is sent, the RPC counts one pending transaction of the wallet the chain never got.
    proxy.rewrite = (method, params, result) =>
      method === 'eth_getTransactionCount' && params[1] === 'pending' && !proxy.sent.some((x) => x.to === token) ? `0x${(Number(result) + 1).toString(16)}` : result;
    await rpc('miner_stop');
    const isX402 = (x: RpcProxy['sent'][number]) => x.to === token;
    const isSettle = (x: RpcProxy['sent'][number]) => same(x.channel, channel);
    let settled;
    try {
      // Both at once: the voucher makes the settler send a settle; the x402 settle sends the transfer.
      const [paid, voucher] = await Promise.all([
        A.post('/v1/x402/settle', body),
        A.post(`/v1/streams/${id}/vouchers`, { voucher: { stream: id, amount: '600000', units: '6000', signature } }),
      ]);
      expect(voucher.body, voucher.text).toMatchObject({ accepted: true });
      expect(paid.body, paid.text).toMatchObject({ success: false, errorReason: 'settlement_pending' });
      await eventually(() => proxy.sent.some(isSettle) && proxy.sent.some(isX402), 'both sent', 20_000);
      expect(Math.min(...proxy.sent.filter((x) => isSettle(x) || isX402(x)).map((x) => x.nonce))).toBe(n + 1); // the gap at n
      // Stuck together; the gap below them is filled by one of them, and both are resent (the x402 transfer fee-bumped too).
      await eventually(() => proxy.sent.some((x) => x.nonce === n), 'the gap filled', 20_000);
      await eventually(() => {
        const first = proxy.sent.find(isX402)!;
        return proxy.sent.some((x) => isX402(x) && x.hash !== first.hash && BigInt(x.maxFeePerGas!) > BigInt(first.maxFeePerGas!));
      }, 'the x402 transfer replaced with a higher fee', 20_000);
      await eventually(async () => (await A.get(`/v1/streams/${id}/finality`)).body.settlement?.stuck === true, 'the settlement stuck', 20_000);
      expect(proxy.sent.filter((x) => x.nonce === n).map((x) => (isX402(x) ? 'x402' : isSettle(x) ? 'settle' : 'other')).filter((k, i, a) => a.indexOf(k) === i), 'the gap filled by one of them only').toHaveLength(1);
    } finally {
      await rpc('miner_start');
      proxy.rewrite = (_m, _p, result) => result;
    }
    const stream = x402Stream(chain.payer.address, resource);
    let seen: unknown;
    await eventually(async () => {
      await chain.mine(1);
      const [fs, fx] = [(await A.get(`/v1/streams/${id}/finality`)).body, (await A.get(`/v1/streams/${stream}/finality`)).body];
      seen = [fs, fx];
      return fs.finality === 'final' && fs.finalMicro === '600000' && fx.finality === 'final' && fx.finalMicro === PRICE.toString();
    }, 'the settlement and the x402 payment final after the miner resumes', 45_000, 300)
      .catch((err) => { throw new Error(`${(err as Error).message}: ${JSON.stringify(seen)}\n${JSON.stringify(proxy.sent.slice(-16))}\n${daemon.stderr.slice(-4000)}`); });
    settled = await A.post('/v1/x402/settle', body);
    expect(settled.body).toMatchObject({ success: true });
    // No nonce carries transactions of both; each paid exactly once.
    const byNonce = new Map<number, Set<string>>();
    for (const x of proxy.sent) if (isX402(x) || isSettle(x)) byNonce.set(x.nonce, (byNonce.get(x.nonce) ?? new Set()).add(isX402(x) ? 'x402' : 'settle'));
    expect([...byNonce].filter(([, kinds]) => kinds.size > 1).map(([nonce]) => nonce), 'nonces used by both').toEqual([]);
    expect((await chain.balanceOf(chain.operator.address)) - payee0).toBe(600_000n + PRICE);
    expect((await channelOf(chain, channel as Hex)).settled).toBe(600_000n);
    const reference = (await A.get(`/v1/streams/${stream}/finality`)).body.frontier.reference as string;
    expect(settled.body.transaction).toBe(reference);
    expect(proxy.sent.some((x) => isX402(x) && same(x.hash, reference))).toBe(true);
  });

  it('an x402 transfer paid by its gap fill keeps the nonce of its unmined first transaction until that one mines: the settlement above it is never re-signed into it; each pays once', async () => {
    // A fresh start: the daemon asks the chain for the wallet's next nonce again.
    await daemon.stop('SIGTERM');
    daemon = await startEscrowDaemon(t.dataDir, flags);
    A = clientOf(daemon.url, tokenA);
    const token = chain.token.toLowerCase();
    // The channel first: opening it mines a block, which would confirm the x402 transfer too early.
    const { id, channel, signature } = await escrowStream('x402g', 300_000n);
    const resource = `http://resource.test/gap-${id}`;
    const body = await x402Payment(chain, { value: PRICE, resource });
    const stream = x402Stream(chain.payer.address, resource);
    const payee0 = await chain.balanceOf(chain.operator.address);
    const n = await chain.client.getTransactionCount({ address: chain.operator.address, blockTag: 'latest' });
    const before = proxy.sent.length; // the first test's sends
    const isX402 = (x: Omit<RpcProxy['sent'][number], 'answerLost'>) => x.to === token;
    const isSettle = (x: Omit<RpcProxy['sent'][number], 'answerLost'>) => same(x.channel, channel);
    const sent = () => proxy.sent.slice(before);
    // The RPC counts one pending transaction too many until the x402 transfer is sent (it goes to n + 1), and the node
    // answers every transfer at n + 1 with its hash but drops it until the settlement is sent: nothing is at n + 1.
    // The miner runs.
    proxy.rewrite = (method, params, result) =>
      method === 'eth_getTransactionCount' && params[1] === 'pending' && !sent().some(isX402) ? `0x${(Number(result) + 1).toString(16)}` : result;
    proxy.drop = (tx, earlier) => isX402(tx) && tx.nonce === n + 1 && !earlier.slice(before).some(isSettle);
    try {
      const paid = await A.post('/v1/x402/settle', body);
      expect(paid.body, paid.text).toMatchObject({ success: false, errorReason: 'settlement_pending' });
      const first = await eventually(() => sent().find(isX402), 'the x402 transfer sent', 20_000, 100);
      expect(first).toMatchObject({ nonce: n + 1, dropped: true });
      // The gap below it is filled by the same payment, and that transaction mines at once: the payment is paid.
      await eventually(() => sent().some((x) => isX402(x) && x.nonce === n), 'the gap filled', 20_000, 100);
      await eventually(async () => (await A.get(`/v1/streams/${stream}/finality`)).body.checkpointedMicro === PRICE.toString(), 'the gap fill mined', 20_000, 100);
      // The settlement goes above every nonce the payment holds; it cannot mine until something is mined at n + 1.
      expect((await A.post(`/v1/streams/${id}/vouchers`, { voucher: { stream: id, amount: '300000', units: '3000', signature } })).body).toMatchObject({ accepted: true });
      const settle = await eventually(() => sent().find(isSettle), 'the settle sent', 20_000, 100);
      expect(settle.nonce).toBe(n + 2);
      // Blocks: the gap fill's confirmations come. Before the fix the payment turned final here and released n + 1
      // while nothing of the wallet was mined there: the settlement, stalled at n + 2, was re-signed into it.
      let seen: unknown;
      await eventually(async () => {
        await chain.mine(1);
        const [fs, fx] = [(await A.get(`/v1/streams/${id}/finality`)).body, (await A.get(`/v1/streams/${stream}/finality`)).body];
        seen = [fs, fx];
        return fs.finality === 'final' && fs.finalMicro === '300000' && fx.finality === 'final' && fx.finalMicro === PRICE.toString();
      }, 'the settlement and the x402 payment final', 45_000, 300)
        .catch((err) => { throw new Error(`${(err as Error).message}: ${JSON.stringify(seen)}\n${JSON.stringify(sent().slice(-16))}\n${daemon.stderr.slice(-4000)}`); });
      const byNonce = new Map<number, Set<string>>();
      for (const x of sent()) if (isX402(x) || isSettle(x)) byNonce.set(x.nonce, (byNonce.get(x.nonce) ?? new Set()).add(isX402(x) ? 'x402' : 'settle'));
      expect([...byNonce].filter(([, kinds]) => kinds.size > 1).map(([nonce]) => nonce), 'nonces used by both').toEqual([]);
      expect(sent().filter(isSettle).map((x) => x.nonce).filter((x) => x !== n + 2)).toEqual([]);
      expect((await chain.balanceOf(chain.operator.address)) - payee0).toBe(300_000n + PRICE);
      expect((await channelOf(chain, channel as Hex)).settled).toBe(300_000n);
      // The payment's reference is its gap fill; a transaction of its own mined at n + 1 (reverted: the authorization was used).
      const settled = await A.post('/v1/x402/settle', body);
      expect(settled.body).toMatchObject({ success: true });
      expect(sent().find((x) => same(x.hash, settled.body.transaction))).toMatchObject({ nonce: n });
      // (by hash: a transaction not mined 1 s after it was sent is sent again as it was, the same hash, before any replacement)
      const atN1Hashes = [...new Set(sent().filter((x) => isX402(x) && x.nonce === n + 1).map((x) => x.hash.toLowerCase()))];
      const atN1 = (await Promise.all(atN1Hashes.map((hash) => chain.client.getTransactionReceipt({ hash: hash as Hex }).catch(() => null)))).filter((r) => r !== null);
      expect(atN1.map((r) => r.status)).toEqual(['reverted']);
      const fs = (await A.get(`/v1/streams/${id}/finality`)).body;
      expect(sent().find((x) => same(x.hash, fs.frontier.reference))).toMatchObject({ nonce: n + 2 });
    } finally {
      proxy.drop = () => false;
      proxy.rewrite = (_m, _p, result) => result;
    }
  });
});
