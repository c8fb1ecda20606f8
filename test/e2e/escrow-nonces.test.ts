// Two settlements of one wallet stalled together (miner stopped), rebroadcast and replaced, with the answer to a
// replacement lost after the chain took it (a gateway error): the real daemon against a real local chain (ganache)
// behind a loopback RPC proxy that keeps every transaction the daemon sends.
// Before the fix the lost-answer replacement was never recorded: it mined, its settlement found its nonce used by a
// transaction it did not know, and the stream never became final (the next settlement of the same amount then mined
// without a Settled log, over and over). And after a gap fill, the next settlement was given the nonce the filler's
// first transaction still held: both on one nonce, the other's no-op mined there, the next settlement waited in vain.
// And once the gap fill had paid and turned final, that first transaction (still unmined: the node had dropped it, or
// kept it without mining it) no longer held its nonce: the next settlement, stalled above it, was re-signed into it.
import { type Hex } from 'viem';
import { afterAll, beforeAll, describe, expect, it, vi } from 'vitest';
import { startSandboxChain, type SandboxChain } from '../../src/rails/escrow/sandbox.js';
import { tempDataDir, type TempDataDir } from '../helpers/cli.js';
import { clientOf, setupNodes, type RunningDaemon } from '../helpers/daemon.js';
import { channelOf, escrowFlags, eventually, startEscrowDaemon, writeKeyFile } from '../helpers/escrow.js';
import { issuerKeyPair, mintCredential, type KeyPair } from '../helpers/issuer.js';
import { startRpcProxy, type RpcProxy } from '../helpers/rpc-proxy.js';

vi.setConfig({ testTimeout: 120_000, hookTimeout: 60_000 });

let chain: SandboxChain;
let issuer: KeyPair;
let proxy: RpcProxy;
let t: TempDataDir;
let daemon: RunningDaemon;
let A: ReturnType<typeof clientOf>;
let flags: string[];
let tokenA: string;
let seq = 0;
const same = (x: string | undefined, y: string) => x?.toLowerCase() === y.toLowerCase();

const rpc = (method: string, params: unknown[] = []) => chain.client.request({ method: method as never, params: params as never });

beforeAll(async () => {
  [chain, issuer] = await Promise.all([startSandboxChain({ closeGrace: 60 }), issuerKeyPair()]);
  proxy = await startRpcProxy(chain.rpcUrl);
  t = await tempDataDir('node-svc-escrow-nonces-');
  ({ tokenA } = await setupNodes(t.dataDir, issuer));
  flags = escrowFlags(chain, await writeKeyFile(t.root, chain.operator.key), {
    '--rpc-url': proxy.url, '--settle-threshold': '1', '--confirmations': '2', '--settle-interval': '2s', '--settle-stuck-after': '3s', '--rebroadcast-after': '1s',
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

async function stream(deposit: bigint) {
  const id = `nonce-${++seq}-${Math.random().toString(36).slice(2, 8)}`;
  const channel = await chain.openChannel({ id, payee: chain.operator.address, deposit });
  const credential = mintCredential({
    key: issuer,
    claims: { stream: id, budget: `b-${id}`, cap: deposit.toString(), asset: 'USDC', mode: 'escrow', cnf: { addr: chain.payer.address }, chainId: chain.chainId, escrow: chain.escrow, channel },
  });
  expect((await A.post('/v1/allowances/verify', { credential })).status).toBe(200);
  const sign = (amount: bigint) => chain.signVoucher({ chainId: chain.chainId, escrow: chain.escrow, channel }, amount);
  const pay = async (amount: bigint) => {
    const r = await A.post(`/v1/streams/${id}/vouchers`, { voucher: { stream: id, amount: amount.toString(), units: (amount / 100n).toString(), signature: await sign(amount) } });
    expect(r.body, r.text).toMatchObject({ accepted: true });
  };
  const finality = async () => (await A.get(`/v1/streams/${id}/finality`)).body;
  return { id, channel, pay, finality };
}

/** Each nonce carries transactions of one channel only: no settlement's transaction took another's nonce. */
function expectNoncesNotShared(sent: RpcProxy['sent']) {
  const byNonce = new Map<number, Set<string>>();
  for (const s of sent) if (s.channel) byNonce.set(s.nonce, (byNonce.get(s.nonce) ?? new Set()).add(s.channel.toLowerCase()));
  const shared = [...byNonce].filter(([, channels]) => channels.size > 1).map(([n, c]) => `${n}: ${[...c].join(', ')}`);
  expect(shared, 'nonces used by transactions of two settlements').toEqual([]);
}

/**
 * A fresh start (the daemon asks the chain for the wallet's next nonce again) and two streams; until a's first settle is
 * sent, the RPC counts one pending transaction of the wallet too many (one the chain never got): that settle goes one
 * nonce too high, and nothing of this wallet holds the nonce below it. `n`: the wallet's next nonce on the chain.
 */
async function restartWithOneTooMany() {
  await daemon.stop('SIGTERM');
  daemon = await startEscrowDaemon(t.dataDir, flags);
  A = clientOf(daemon.url, tokenA);
  const a = await stream(2_000_000n);
  const b = await stream(2_000_000n);
  const payee0 = await chain.balanceOf(chain.operator.address);
  const n = await chain.client.getTransactionCount({ address: chain.operator.address, blockTag: 'latest' });
  proxy.rewrite = (method, params, result) =>
    method === 'eth_getTransactionCount' && params[1] === 'pending' && !proxy.sent.some((x) => same(x.channel, a.channel)) ? `0x${(Number(result) + 1).toString(16)}` : result;
  return { a, b, payee0, n };
}

/** Blocks until a is final at `amountA` and b at `amountB`; then no nonce was shared and each paid once, exactly. */
async function bothFinalEachPaidOnce(a: Awaited<ReturnType<typeof stream>>, b: Awaited<ReturnType<typeof stream>>, payee0: bigint, what: string, amountA = 500_000n, amountB = 300_000n) {
  let seen: unknown;
  await eventually(async () => {
    await chain.mine(1);
    const [fa, fb] = [await a.finality(), await b.finality()];
    seen = [fa, fb];
    return fa.finality === 'final' && fa.finalMicro === String(amountA) && fb.finality === 'final' && fb.finalMicro === String(amountB);
  }, what, 45_000, 300)
    .catch((err) => { throw new Error(`${(err as Error).message}: ${JSON.stringify(seen)}\n${JSON.stringify(proxy.sent.slice(-12))}\n${daemon.stderr.slice(-4000)}`); });
  expectNoncesNotShared(proxy.sent);
  expect((await chain.balanceOf(chain.operator.address)) - payee0).toBe(amountA + amountB);
  expect((await channelOf(chain, a.channel as Hex)).settled).toBe(amountA);
  expect((await channelOf(chain, b.channel as Hex)).settled).toBe(amountB);
}

describe('two settlements stalled together', () => {
  it('a replacement whose answer was lost is still recognised: both streams pay exactly once and turn final; no nonce is shared', async () => {
    const a = await stream(2_000_000n);
    const b = await stream(2_000_000n);
    const payee0 = await chain.balanceOf(chain.operator.address);
    // The first replacement of each nonce (a second transaction at a nonce already sent) reaches the chain, but the
    // daemon gets a gateway error instead of its answer.
    const lostAt = new Set<number>();
    proxy.loseAnswer = (tx, earlier) => {
      if (!tx.channel || lostAt.has(tx.nonce) || !earlier.some((e) => e.nonce === tx.nonce && e.hash !== tx.hash)) return false;
      lostAt.add(tx.nonce);
      return true;
    };
    await rpc('miner_stop');
    try {
      await a.pay(700_000n);
      await b.pay(400_000n);
      // Both sent, rebroadcast and replaced, each with one replacement whose answer was lost, while nothing mines.
      await eventually(async () => {
        const channels = new Set(proxy.sent.filter((s) => s.answerLost).map((s) => s.channel!.toLowerCase()));
        const [fa, fb] = [await a.finality(), await b.finality()];
        return channels.size === 2 && fa.settlement?.stuck && fb.settlement?.stuck;
      }, 'both settlements replaced, one answer lost each, and stuck', 30_000, 200)
        .catch((err) => { throw new Error(`${(err as Error).message}: ${JSON.stringify(proxy.sent.slice(-12))}\n${daemon.stderr.slice(-3000)}`); });
    } finally {
      await rpc('miner_start');
    }
    // Paid exactly once each: the wallet received the two amounts, the channels settled exactly them; no nonce shared.
    await bothFinalEachPaidOnce(a, b, payee0, 'both final after the miner resumes', 700_000n, 400_000n);
    // The mined transaction each stream's receipt names is one the daemon sent for that stream's channel.
    for (const [s, amount] of [[a, '700000'], [b, '400000']] as const) {
      const f = await s.finality();
      expect(f.settlement).toBeNull();
      expect(f.frontier.reference, JSON.stringify(f)).toMatch(/^0x[0-9a-f]{64}$/i);
      expect(proxy.sent.some((x) => x.channel?.toLowerCase() === s.channel.toLowerCase() && x.hash.toLowerCase() === f.frontier.reference.toLowerCase()), `${amount}: ${JSON.stringify(f)}`).toBe(true);
    }
  });

  it('a nonce gap below a stalled settlement is filled by it; the next settlement skips the nonce its first transaction still holds; each pays once', async () => {
    proxy.loseAnswer = () => false;
    const { a, b, payee0, n } = await restartWithOneTooMany();
    await rpc('miner_stop');
    let first: RpcProxy['sent'][number];
    try {
      await a.pay(500_000n);
      first = await eventually(() => proxy.sent.find((x) => same(x.channel, a.channel)), 'the first settle sent', 20_000, 100);
      expect(first.nonce).toBe(n + 1);
      await eventually(() => proxy.sent.some((x) => same(x.channel, a.channel) && x.nonce === n), 'the gap filled by the stalled settlement', 20_000, 100);
      await eventually(() => daemon.stderr.includes(`nonce gap at ${n}: re-signed into it (was ${n + 1})`), 'the gap fill logged', 10_000, 100);
      // Its first transaction still waits at n + 1 in the chain's pool: the next settlement must not take that nonce.
      await b.pay(300_000n);
      await eventually(() => proxy.sent.some((x) => same(x.channel, b.channel)), 'the second settle sent', 20_000, 100);
    } finally {
      await rpc('miner_start');
    }
    await bothFinalEachPaidOnce(a, b, payee0, 'both final after the miner resumes');
    // Both of the first settlement's transactions mined: the one at the gap paid and is its reference; the first one,
    // mined after it, found the channel settled as much and paid nothing, which does not make the settlement fail.
    const fa = await a.finality();
    const paid = await chain.client.getTransactionReceipt({ hash: fa.frontier.reference as Hex });
    expect(proxy.sent.find((x) => same(x.hash, fa.frontier.reference))).toMatchObject({ nonce: n });
    expect(paid.blockNumber).toBeGreaterThan(0n);
    const noop = await chain.client.getTransactionReceipt({ hash: first!.hash });
    expect(noop.status).toBe('success');
    expect(noop.blockNumber > paid.blockNumber || (noop.blockNumber === paid.blockNumber && noop.transactionIndex > paid.transactionIndex)).toBe(true);
    expect(noop.logs.filter((l) => same(l.address, chain.escrow))).toEqual([]);
  });

  it('a settlement paid by its gap fill keeps the nonce of its unmined first transaction until that one mines: the settlement above it is never re-signed into it; each pays once', async () => {
    // The first settle goes to n + 1, and the node answers that send with its hash but drops it: nothing is at n,
    // nothing at n + 1. The miner runs.
    const { a, b, payee0, n } = await restartWithOneTooMany();
    proxy.drop = (tx, earlier) => same(tx.channel, a.channel) && !earlier.some((e) => same(e.channel, a.channel));
    try {
      await a.pay(500_000n);
      const first = await eventually(() => proxy.sent.find((x) => same(x.channel, a.channel)), 'the first settle sent', 20_000, 100);
      expect(first).toMatchObject({ nonce: n + 1, dropped: true });
      // The gap below it is filled by the same settlement, and that transaction mines at once: the stream is paid.
      await eventually(() => proxy.sent.some((x) => same(x.channel, a.channel) && x.nonce === n), 'the gap filled', 20_000, 100);
      await eventually(async () => (await a.finality()).checkpointedMicro === '500000', 'the gap fill mined', 20_000, 100);
      // The next settlement goes above every nonce the first holds; it cannot mine until something is mined at n + 1.
      await b.pay(300_000n);
      const second = await eventually(() => proxy.sent.find((x) => same(x.channel, b.channel)), 'the second settle sent', 20_000, 100);
      expect(second.nonce).toBe(n + 2);
      // Blocks: the gap fill's confirmations come. Before the fix the first settlement turned final here and released
      // n + 1 while nothing of the wallet was mined there: the second, stalled at n + 2, was re-signed into it.
      await bothFinalEachPaidOnce(a, b, payee0, 'both final');
      expect(proxy.sent.filter((x) => same(x.channel, b.channel)).map((x) => x.nonce).filter((x) => x !== n + 2)).toEqual([]);
      // The first settlement's reference is its gap fill; its first transaction was sent again and mined at n + 1 as a no-op.
      const fa = await a.finality();
      expect(proxy.sent.find((x) => same(x.hash, fa.frontier.reference))).toMatchObject({ nonce: n });
      const mined = await chain.client.getTransactionReceipt({ hash: first.hash });
      expect(mined.status).toBe('success');
      expect(mined.logs.filter((l) => same(l.address, chain.escrow))).toEqual([]);
      const fb = await b.finality();
      expect(proxy.sent.find((x) => same(x.hash, fb.frontier.reference))).toMatchObject({ nonce: n + 2 });
    } finally {
      proxy.drop = () => false;
    }
  });
  it('a gap fill that paid is recognised when the node answers its receipt late: the first transaction, mined above it without a Settled log, fails nothing; paid once, final', async () => {
    // Seen in a fresh-clone CI run (test/e2e/x402-nonces): right after miner_start ganache answered the receipt of a
    // settlement's first transaction (n + 1, mined after its gap fill: no Settled log) and not yet the gap fill's (n: the
    // payment). The settlement was failed on that one receipt, every retry then mined without a Settled log, and the
    // stream never turned final. Here, once the miner resumes, the proxy withholds the gap fill's receipts until the
    // daemon has read the first transaction's three times (30 s at most).
    const { a, payee0, n } = await restartWithOneTooMany();
    const ofA = (nonce: number) => (hash: unknown) => proxy.sent.some((x) => same(x.channel, a.channel) && x.nonce === nonce && same(x.hash, String(hash)));
    const [gapFill, first] = [ofA(n), ofA(n + 1)];
    const counted = proxy.rewrite;
    let hideUntil = Infinity; // set once the miner runs again
    let withheld = 0; // gap fill receipts answered null while the chain had them
    let firstAnswered = 0; // receipts of the first transaction answered meanwhile
    const reads: string[] = []; // receipt reads of a's transactions, for a failure's message
    proxy.rewrite = (method, params, result) => {
      if (method === 'eth_getTransactionReceipt') {
        const x = proxy.sent.find((y) => same(y.hash, String(params[0])));
        if (x && same(x.channel, a.channel)) reads.push(`${x.nonce}:${result === null ? 'none' : 'mined'}${firstAnswered < 3 && Date.now() < hideUntil && gapFill(params[0]) ? '(withheld)' : ''}@${Date.now() % 100_000}`);
      }
      if (method !== 'eth_getTransactionReceipt' || firstAnswered >= 3 || Date.now() >= hideUntil) return counted(method, params, result);
      if (gapFill(params[0])) return void (result !== null && withheld++), null;
      if (first(params[0]) && result !== null) firstAnswered++;
      return result;
    };
    let seen: { finality?: string; finalMicro?: string; frontier?: { reference: string } } = {};
    try {
      await rpc('miner_stop');
      try {
        await a.pay(500_000n);
        await eventually(() => proxy.sent.some((x) => same(x.channel, a.channel) && x.nonce === n + 1), 'the first settle sent', 20_000, 100);
        await eventually(() => proxy.sent.some((x) => same(x.channel, a.channel) && x.nonce === n), 'the gap filled', 20_000, 100);
      } finally {
        await rpc('miner_start');
        hideUntil = Date.now() + 30_000;
      }
      // The first transaction mines after the gap fill. (ganache sometimes lets go of it, queued above the gap while the
      // miner was stopped, once the gap fill mines, and the daemon resends it only after it has read the gap fill's
      // receipt: here the test sends it to the chain again, as a node that kept it would mine it.)
      await eventually(async () => {
        await chain.mine(1);
        const at = proxy.sent.filter((x) => same(x.channel, a.channel) && x.nonce === n + 1);
        for (const x of at) if (await chain.client.getTransactionReceipt({ hash: x.hash }).catch(() => null)) return true;
        await rpc('eth_sendRawTransaction', [at[at.length - 1]!.raw]).catch(() => undefined);
        return false;
      }, 'the first transaction mined', 20_000, 300);
      await eventually(async () => {
        await chain.mine(1);
        seen = await a.finality();
        return seen.finality === 'final' && seen.finalMicro === '500000';
      }, 'a final', 45_000, 300)
        .catch((err) => { throw new Error(`${(err as Error).message}: ${JSON.stringify(seen)}\n${JSON.stringify(proxy.sent.slice(-12))}\n${daemon.stderr.slice(-4000)}`); });
    } finally {
      proxy.rewrite = (_m, _p, result) => result;
    }
    // The daemon read the first transaction's receipt while the gap fill's was withheld, and sent nothing again for it
    // above n + 1: no retry. Paid once, by the gap fill.
    const why = `receipt reads (nonce:answer@ms): ${reads.join(' ')}\nminer resumed @${(hideUntil - 30_000) % 100_000}\n${JSON.stringify(proxy.sent.slice(-8))}\n${daemon.stderr.slice(-3000)}`;
    expect(withheld, `gap fill receipts withheld\n${why}`).toBeGreaterThan(0);
    expect(firstAnswered, `first transaction receipts answered meanwhile\n${why}`).toBeGreaterThanOrEqual(3);
    expect(proxy.sent.filter((x) => same(x.channel, a.channel)).map((x) => x.nonce).filter((x) => x > n + 1)).toEqual([]);
    expect(proxy.sent.find((x) => same(x.hash, seen.frontier!.reference))).toMatchObject({ nonce: n });
    expect((await chain.balanceOf(chain.operator.address)) - payee0).toBe(500_000n);
    expect((await channelOf(chain, a.channel as Hex)).settled).toBe(500_000n);
  });
});

