// Two settlements of one wallet stalled together (miner stopped), rebroadcast and replaced, with the answer to a
// replacement lost after the chain took it (a gateway error): the real daemon against a real local chain (ganache)
// behind a loopback RPC proxy that keeps every transaction the daemon sends.
// Before the fix the lost-answer replacement was never recorded: it mined, its settlement found its nonce used by a
// transaction it did not know, and the stream never became final (the next settlement of the same amount then mined
// without a Settled log, over and over).
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
let seq = 0;

const rpc = (method: string, params: unknown[] = []) => chain.client.request({ method: method as never, params: params as never });

beforeAll(async () => {
  [chain, issuer] = await Promise.all([startSandboxChain({ closeGrace: 60 }), issuerKeyPair()]);
  proxy = await startRpcProxy(chain.rpcUrl);
  t = await tempDataDir('node-svc-escrow-nonces-');
  const { tokenA } = await setupNodes(t.dataDir, issuer);
  const flags = escrowFlags(chain, await writeKeyFile(t.root, chain.operator.key), {
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
    let seen: unknown;
    await eventually(async () => {
      await chain.mine(1);
      const [fa, fb] = [await a.finality(), await b.finality()];
      seen = [fa, fb];
      return fa.finality === 'final' && fa.finalMicro === '700000' && fb.finality === 'final' && fb.finalMicro === '400000';
    }, 'both final after the miner resumes', 45_000, 300)
      .catch((err) => { throw new Error(`${(err as Error).message}: ${JSON.stringify(seen)}\n${JSON.stringify(proxy.sent.slice(-12))}\n${daemon.stderr.slice(-4000)}`); });
    // Paid exactly once each: the wallet received the two amounts, the channels settled exactly them.
    expect((await chain.balanceOf(chain.operator.address)) - payee0).toBe(1_100_000n);
    expect((await channelOf(chain, a.channel as Hex)).settled).toBe(700_000n);
    expect((await channelOf(chain, b.channel as Hex)).settled).toBe(400_000n);
    // The mined transaction each stream's receipt names is one the daemon sent for that stream's channel.
    for (const [s, amount] of [[a, '700000'], [b, '400000']] as const) {
      const f = await s.finality();
      expect(f.settlement).toBeNull();
      expect(f.frontier.reference, JSON.stringify(f)).toMatch(/^0x[0-9a-f]{64}$/i);
      expect(proxy.sent.some((x) => x.channel?.toLowerCase() === s.channel.toLowerCase() && x.hash.toLowerCase() === f.frontier.reference.toLowerCase()), `${amount}: ${JSON.stringify(f)}`).toBe(true);
    }
    expectNoncesNotShared(proxy.sent);
  });
});
