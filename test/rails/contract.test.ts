// The escrow contract on a real local chain (ganache via startSandboxChain): delta payouts, replays, signatures,
// deposits, and the payer's close with its grace period. Transactions are sent with viem, as the rail sends them.
import { keccak256, toHex, type Hex } from 'viem';
import { generatePrivateKey, privateKeyToAccount } from 'viem/accounts';
import { afterAll, beforeAll, describe, expect, it, vi } from 'vitest';
import { ESCROW_ABI, TOKEN_ABI } from '../../src/rails/escrow/artifacts.js';
import { startSandboxChain, type SandboxChain } from '../../src/rails/escrow/sandbox.js';
import { channelOf, escrowCall, expectRevert, highS, walletFor, withV } from '../helpers/escrow.js';

vi.setConfig({ testTimeout: 60_000, hookTimeout: 60_000 });

const GRACE = 3600;
let chain: SandboxChain;
let seq = 0;

beforeAll(async () => {
  chain = await startSandboxChain({ closeGrace: GRACE });
});
afterAll(async () => {
  await chain?.stop();
});

/** A fresh channel from the sandbox payer to the operator (payee). */
async function open(deposit = 1_000n) {
  const channel = await chain.openChannel({ id: `contract-${++seq}-${Date.now()}`, payee: chain.operator.address, deposit });
  const terms = { chainId: chain.chainId, escrow: chain.escrow, channel };
  return { channel, terms, sign: (amount: bigint, key?: Hex) => chain.signVoucher(terms, amount, key) };
}

const settle = (channel: Hex, amount: bigint, signature: Hex, key: Hex = chain.operator.key) => escrowCall(chain, key, 'settle', [channel, amount, signature]);
const simulateSettle = (channel: Hex, amount: bigint, signature: Hex) =>
  chain.client.simulateContract({ address: chain.escrow, abi: ESCROW_ABI, functionName: 'settle', args: [channel, amount, signature], account: chain.operator.address });
const timeTravel = (seconds: number) => chain.advanceTime(seconds);

describe('escrow contract on the sandbox chain', () => {
  it('is deployed with the configured grace, the EIP-712 domain the vouchers use, and a 6-decimal token', async () => {
    expect(await chain.client.readContract({ address: chain.escrow, abi: ESCROW_ABI, functionName: 'closeGrace' })).toBe(BigInt(GRACE));
    const [, name, version, chainId, verifyingContract] = (await chain.client.readContract({ address: chain.escrow, abi: ESCROW_ABI, functionName: 'eip712Domain' })) as readonly unknown[];
    expect([name, version, chainId, (verifyingContract as string).toLowerCase()]).toEqual(['node-svc escrow', '1', 1337n, chain.escrow.toLowerCase()]);
    expect(await chain.client.readContract({ address: chain.token, abi: TOKEN_ABI, functionName: 'decimals' })).toBe(6);
    expect(await chain.client.getChainId()).toBe(1337);
  });

  it('opening a channel moves the deposit into the escrow and records payer, payee and token', async () => {
    const before = await chain.balanceOf(chain.payer.address);
    const { channel } = await open(2_500n);
    expect(await chain.balanceOf(chain.payer.address)).toBe(before - 2_500n);
    const ch = await channelOf(chain, channel);
    expect(ch).toMatchObject({ deposit: 2_500n, settled: 0n, closeRequestedAt: 0n, closed: false });
    expect([ch.payer, ch.payee, ch.token].map((a) => a.toLowerCase())).toEqual([chain.payer.address, chain.operator.address, chain.token].map((a) => a.toLowerCase()));
    await expectRevert(escrowCall(chain, chain.payer.key, 'open', [channel, chain.operator.address, chain.token, 1n]), 'ChannelExists');
  });

  it('pays the delta: settling 100 then 250 pays 100 then 150 to the payee', async () => {
    const { channel, sign } = await open(1_000n);
    const payee0 = await chain.balanceOf(chain.operator.address);
    const escrow0 = await chain.balanceOf(chain.escrow);
    expect((await simulateSettle(channel, 100n, await sign(100n))).result).toBe(100n);
    await settle(channel, 100n, await sign(100n));
    expect(await chain.balanceOf(chain.operator.address)).toBe(payee0 + 100n);
    expect((await simulateSettle(channel, 250n, await sign(250n))).result).toBe(150n);
    const r = await settle(channel, 250n, await sign(250n));
    expect(await chain.balanceOf(chain.operator.address)).toBe(payee0 + 250n);
    expect(await chain.balanceOf(chain.escrow)).toBe(escrow0 - 250n);
    expect((await channelOf(chain, channel)).settled).toBe(250n);
    expect(r.logs.some((l) => l.address.toLowerCase() === chain.escrow.toLowerCase())).toBe(true);
  });

  it('anyone may submit a voucher, but the money only goes to the payee', async () => {
    const { channel, sign } = await open(1_000n);
    const payee0 = await chain.balanceOf(chain.operator.address);
    const payer0 = await chain.balanceOf(chain.payer.address);
    await settle(channel, 40n, await sign(40n), chain.payer.key); // submitted by the payer itself
    expect(await chain.balanceOf(chain.operator.address)).toBe(payee0 + 40n);
    expect(await chain.balanceOf(chain.payer.address)).toBe(payer0);
  });

  it('a replayed or lower voucher settles nothing: no revert, balances unchanged', async () => {
    const { channel, sign } = await open(1_000n);
    const s300 = await sign(300n);
    await settle(channel, 300n, s300);
    const payee = await chain.balanceOf(chain.operator.address);
    const escrow = await chain.balanceOf(chain.escrow);
    expect((await simulateSettle(channel, 300n, s300)).result).toBe(0n);
    const replay = await settle(channel, 300n, s300); // mined, successful, pays nothing
    expect(replay.logs.filter((l) => l.address.toLowerCase() === chain.token.toLowerCase())).toHaveLength(0);
    const lower = await sign(200n);
    expect((await simulateSettle(channel, 200n, lower)).result).toBe(0n);
    await settle(channel, 200n, lower);
    expect(await chain.balanceOf(chain.operator.address)).toBe(payee);
    expect(await chain.balanceOf(chain.escrow)).toBe(escrow);
    expect((await channelOf(chain, channel)).settled).toBe(300n);
  });

  it('a voucher signed by anyone but the payer reverts with BadSigner', async () => {
    const { channel, terms } = await open(1_000n);
    const stranger = generatePrivateKey();
    await expectRevert(settle(channel, 100n, await chain.signVoucher(terms, 100n, stranger)), 'BadSigner');
    await expectRevert(settle(channel, 100n, await chain.signVoucher(terms, 100n, chain.operator.key)), 'BadSigner'); // not even the payee
    // A payer voucher for another channel, or another amount, does not recover the payer either.
    const other = await open(1_000n);
    await expectRevert(settle(channel, 100n, await other.sign(100n)), 'BadSigner');
    await expectRevert(settle(channel, 101n, await chain.signVoucher(terms, 100n)), 'BadSigner');
    // …nor one for the right channel under another chain id.
    await expectRevert(settle(channel, 100n, await chain.signVoucher({ ...terms, chainId: 1 }, 100n)), 'BadSigner');
    expect((await channelOf(chain, channel)).settled).toBe(0n);
    expect(privateKeyToAccount(stranger).address).not.toBe(chain.payer.address);
  });

  it('a high-s signature (s → n − s, v flipped) reverts, though it is the payer\'s', async () => {
    const { channel, sign } = await open(1_000n);
    const sig = await sign(100n);
    await expectRevert(settle(channel, 100n, highS(sig)), 'ECDSAInvalidSignatureS');
    await settle(channel, 100n, sig); // the canonical one is fine
    expect((await channelOf(chain, channel)).settled).toBe(100n);
  });

  it('v other than 27/28 reverts (so the daemon must refuse such vouchers off chain too)', async () => {
    const { channel, sign } = await open(1_000n);
    const sig = await sign(100n);
    const v = parseInt(sig.slice(130), 16);
    await expectRevert(settle(channel, 100n, withV(sig, v - 27)), 'ECDSAInvalidSignature');
    await expectRevert(settle(channel, 100n, `${sig}00` as Hex), 'ECDSAInvalidSignatureLength');
  });

  it('a voucher above the deposit reverts with OverDeposit; a top-up makes it settle', async () => {
    const { channel, sign } = await open(1_000n);
    const over = await sign(1_001n);
    await expectRevert(settle(channel, 1_001n, over), 'OverDeposit');
    await settle(channel, 1_000n, await sign(1_000n)); // exactly the deposit is fine
    await walletFor(chain, chain.payer.key).writeContract({ address: chain.token, abi: TOKEN_ABI, functionName: 'approve', args: [chain.escrow, 10n] }).then((hash) => chain.client.waitForTransactionReceipt({ hash }));
    await escrowCall(chain, chain.payer.key, 'deposit', [channel, 10n]);
    const payee = await chain.balanceOf(chain.operator.address);
    await settle(channel, 1_001n, over);
    expect(await chain.balanceOf(chain.operator.address)).toBe(payee + 1n);
    expect(await channelOf(chain, channel)).toMatchObject({ deposit: 1_010n, settled: 1_001n });
  });

  it('unknown channels revert with UnknownChannel', async () => {
    const ghost = keccak256(toHex('never-opened'));
    await expectRevert(settle(ghost, 1n, await chain.signVoucher({ chainId: chain.chainId, escrow: chain.escrow, channel: ghost }, 1n)), 'UnknownChannel');
  });

  it('close: only the payer requests it; the payee settles inside the grace; withdraw waits for the grace; then the rest goes back and the channel is closed', async () => {
    const { channel, sign } = await open(1_000n);
    await settle(channel, 100n, await sign(100n));
    await expectRevert(escrowCall(chain, chain.payer.key, 'withdraw', [channel]), 'CloseNotRequested');
    await expectRevert(escrowCall(chain, chain.operator.key, 'requestClose', [channel]), 'NotPayer');

    const r = await escrowCall(chain, chain.payer.key, 'requestClose', [channel]);
    const block = await chain.client.getBlock({ blockNumber: r.blockNumber });
    const requested = (await channelOf(chain, channel)).closeRequestedAt;
    expect(requested).toBe(block.timestamp);

    // Inside the grace period the payee can still settle the latest voucher.
    const payee0 = await chain.balanceOf(chain.operator.address);
    await settle(channel, 400n, await sign(400n));
    expect(await chain.balanceOf(chain.operator.address)).toBe(payee0 + 300n);

    await expectRevert(escrowCall(chain, chain.payer.key, 'withdraw', [channel]), 'GracePending');
    await timeTravel(GRACE / 2);
    await expectRevert(escrowCall(chain, chain.payer.key, 'withdraw', [channel]), 'GracePending');
    await settle(channel, 450n, await sign(450n)); // still inside

    await timeTravel(GRACE / 2 + 5);
    await expectRevert(escrowCall(chain, chain.operator.key, 'withdraw', [channel]), 'NotPayer');
    const payer0 = await chain.balanceOf(chain.payer.address);
    const payee1 = await chain.balanceOf(chain.operator.address);
    await escrowCall(chain, chain.payer.key, 'withdraw', [channel]);
    expect(await chain.balanceOf(chain.payer.address)).toBe(payer0 + 550n);
    expect(await channelOf(chain, channel)).toMatchObject({ deposit: 1_000n, settled: 450n, closed: true });

    // Closed: no settlement (even of a fresh, higher voucher), no second withdraw, no deposit.
    await expectRevert(settle(channel, 500n, await sign(500n)), 'ChannelClosed');
    await expectRevert(settle(channel, 450n, await sign(450n)), 'ChannelClosed');
    await expectRevert(escrowCall(chain, chain.payer.key, 'withdraw', [channel]), 'ChannelClosed');
    await expectRevert(escrowCall(chain, chain.payer.key, 'requestClose', [channel]), 'ChannelClosed');
    expect(await chain.balanceOf(chain.operator.address)).toBe(payee1);
  });

  it('a sandbox with a short grace: withdraw after real time passes', async () => {
    const short = await startSandboxChain({ closeGrace: 1 });
    try {
      const channel = await short.openChannel({ id: 'short-grace', payee: short.operator.address, deposit: 500n });
      const terms = { chainId: short.chainId, escrow: short.escrow, channel };
      await escrowCall(short, short.operator.key, 'settle', [channel, 120n, await short.signVoucher(terms, 120n)]);
      await escrowCall(short, short.payer.key, 'requestClose', [channel]);
      await new Promise((r) => setTimeout(r, 2_100));
      await short.mine(1); // ganache simulates eth_call at the latest block's timestamp: let one carry the new time
      const payer0 = await short.balanceOf(short.payer.address);
      await escrowCall(short, short.payer.key, 'withdraw', [channel]);
      expect(await short.balanceOf(short.payer.address)).toBe(payer0 + 380n);
      expect((await channelOf(short, channel)).closed).toBe(true);
      await expectRevert(escrowCall(short, short.operator.key, 'settle', [channel, 200n, await short.signVoucher(terms, 200n)]), 'ChannelClosed');
    } finally {
      await short.stop();
    }
  });
});
