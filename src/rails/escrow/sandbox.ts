// The sandbox chain: ganache on 127.0.0.1 with the test token and the escrow deployed, an operator (payee)
// wallet and a funded payer. Used by tests, benches and `node-svc dev`. Production never loads this.
import { createRequire } from 'node:module';
import { createPublicClient, createWalletClient, http, keccak256, toHex, type Hex, type PublicClient } from 'viem';
import { privateKeyToAccount } from 'viem/accounts';
import { ESCROW_ABI, ESCROW_BYTECODE, TOKEN_ABI, TOKEN_BYTECODE } from './artifacts.js';
import { voucherDomain, VOUCHER_TYPES, type EscrowTerms } from './voucher.js';

export const SANDBOX_CHAIN_ID = 1337;

export interface SandboxChain {
  rpcUrl: string;
  chainId: number;
  escrow: Hex;
  token: Hex;
  operator: { address: Hex; key: Hex };
  payer: { address: Hex; key: Hex };
  client: PublicClient;
  /** Mine until the chain is `n` blocks further (ganache mines only on transactions unless a block time is set). */
  mine(n?: number): Promise<void>;
  /**
   * Move the chain's clock `seconds` forward and return once the latest block carries the new time. ganache's
   * `evm_mine` returns without mining when its miner is busy with another sender's transaction (it only marks a block
   * pending), so one `evm_mine` after `evm_increaseTime` can leave `latest` (and every eth_call) on the old time.
   */
  advanceTime(seconds: number): Promise<void>;
  /** Payer opens a channel to `payee` with `deposit` micro units; returns the channel id. */
  openChannel(opts: { id: string; payee: Hex; deposit: bigint; payerKey?: Hex }): Promise<Hex>;
  signVoucher(terms: EscrowTerms, cumulativeAmount: bigint, payerKey?: Hex): Promise<Hex>;
  balanceOf(address: Hex): Promise<bigint>;
  /** Refuses new JSON-RPC requests, waits (10 s at most) for those in flight, then closes; resolves with how many it found in flight. */
  stop(): Promise<{ inFlight: number }>;
}

export interface SandboxOptions {
  port?: number;
  /** Seconds between blocks (0: mine on each transaction). */
  blockTime?: number;
  /** Close grace of the escrow, seconds. */
  closeGrace?: number;
  dbPath?: string;
  /** Contracts deployed by an earlier run on the same dbPath: reused when their code is still there. */
  reuse?: { escrow: Hex; token: Hex };
}

export async function startSandboxChain(o: SandboxOptions = {}): Promise<SandboxChain> {
  const require = createRequire(import.meta.url);
  const ganache = require('ganache') as typeof import('ganache');
  const server = ganache.server({
    logging: { quiet: true },
    chain: { chainId: SANDBOX_CHAIN_ID, hardfork: 'shanghai' },
    wallet: { deterministic: true, totalAccounts: 4, defaultBalance: 1000 },
    miner: { blockTime: o.blockTime ?? 0 },
    ...(o.dbPath ? { database: { dbPath: o.dbPath } } : {}),
  } as never);
  const requests = countRequests(server.provider as unknown as RawProvider);
  await server.listen(o.port ?? 0, '127.0.0.1');
  const rpcUrl = `http://127.0.0.1:${(server.address() as { port: number }).port}`;
  const initial = (await server.provider.getInitialAccounts()) as Record<string, { secretKey: string }>;
  const [op, py] = Object.entries(initial);
  const operator = { address: op![0] as Hex, key: op![1].secretKey as Hex };
  const payer = { address: py![0] as Hex, key: py![1].secretKey as Hex };
  const chain = { id: SANDBOX_CHAIN_ID, name: 'sandbox', nativeCurrency: { name: 'Ether', symbol: 'ETH', decimals: 18 }, rpcUrls: { default: { http: [rpcUrl] } } };
  const client = createPublicClient({ chain, transport: http(rpcUrl) }) as PublicClient;
  const wallet = (key: Hex) => createWalletClient({ chain, transport: http(rpcUrl), account: privateKeyToAccount(key) });
  const deploy = async (abi: readonly unknown[], bytecode: Hex, args: unknown[]) => {
    const hash = await wallet(operator.key).deployContract({ abi: abi as never, bytecode, args: args as never });
    const r = await client.waitForTransactionReceipt({ hash, pollingInterval: 50 });
    return r.contractAddress as Hex;
  };
  const deployed = async (a?: Hex) => !!a && ((await client.getCode({ address: a })) ?? '0x') !== '0x';
  const reused = (await deployed(o.reuse?.escrow)) && (await deployed(o.reuse?.token));
  const token = reused ? o.reuse!.token : await deploy(TOKEN_ABI, TOKEN_BYTECODE, []);
  const escrow = reused ? o.reuse!.escrow : await deploy(ESCROW_ABI, ESCROW_BYTECODE, [BigInt(o.closeGrace ?? 3600)]);
  const send = async (key: Hex, address: Hex, abi: readonly unknown[], functionName: string, args: unknown[]) => {
    const hash = await wallet(key).writeContract({ address, abi: abi as never, functionName: functionName as never, args: args as never } as never);
    const r = await client.waitForTransactionReceipt({ hash, pollingInterval: 50 });
    if (r.status !== 'success') throw new Error(`${functionName} reverted`);
    return r;
  };
  const latest = () => client.getBlock({ blockTag: 'latest' });
  // evm_mine until the latest block passes `done`; a call that found the miner busy mined nothing, so it is repeated,
  // for 15 s at most (then an error naming what was not reached).
  const mineUntil = async (done: (b: { number: bigint; timestamp: bigint }) => boolean, what: string) => {
    const until = Date.now() + 15_000;
    for (let i = 0; ; i++) {
      await client.request({ method: 'evm_mine' as never, params: [] as never });
      if (done(await latest())) return;
      if (Date.now() > until) throw new Error(`the sandbox chain did not reach ${what} within 15 s of evm_mine calls (${i + 1})`);
      if (i > 0) await new Promise((r) => setTimeout(r, 10));
    }
  };
  // The payer gets 1,000,000 test USD (micro units: 6 decimals).
  if (!reused) await send(operator.key, token, TOKEN_ABI, 'mint', [payer.address, 1_000_000_000_000n]);
  return {
    rpcUrl, chainId: SANDBOX_CHAIN_ID, escrow, token, operator, payer, client,
    async mine(n = 1) {
      if (n <= 0) return;
      const target = (await latest()).number + BigInt(n);
      await mineUntil((b) => b.number >= target, `block ${target}`);
    },
    async advanceTime(seconds) {
      const target = (await latest()).timestamp + BigInt(seconds);
      await client.request({ method: 'evm_increaseTime' as never, params: [seconds] as never });
      await mineUntil((b) => b.timestamp >= target, `the time ${target}`);
    },
    async openChannel({ id, payee, deposit, payerKey = payer.key }) {
      const channel = keccak256(toHex(id));
      await send(payerKey, token, TOKEN_ABI, 'approve', [escrow, deposit]);
      await send(payerKey, escrow, ESCROW_ABI, 'open', [channel, payee, token, deposit]);
      return channel;
    },
    async signVoucher(terms, cumulativeAmount, payerKey = payer.key) {
      return privateKeyToAccount(payerKey).signTypedData({ domain: voucherDomain(terms), types: VOUCHER_TYPES, primaryType: 'Voucher', message: { channelId: terms.channel, cumulativeAmount } });
    },
    async balanceOf(address) {
      return (await client.readContract({ address: token, abi: TOKEN_ABI, functionName: 'balanceOf', args: [address] })) as bigint;
    },
    async stop() {
      const inFlight = await requests.drain(10_000);
      await server.close();
      return { inFlight };
    },
  };
}

interface RawProvider { _requestRaw(args: { method: string; params?: unknown }): Promise<{ value: Promise<unknown> }> }

/**
 * ganache's `server.close()` closes its database while a call it is still simulating (an `eth_call`, a gas estimate)
 * goes on and then writes to the closed database: an unhandled `WriteError: Database is not open` in the process that
 * hosts the chain, after the client that asked (a daemon killed by a test) is gone. Every JSON-RPC request of the
 * server goes through the provider's `_requestRaw` (ganache 7's connector); counting them there lets `stop()` refuse
 * new requests and wait for the ones in flight (bounded) before it closes.
 */
function countRequests(provider: RawProvider): { drain(ms: number): Promise<number> } {
  const raw = provider._requestRaw;
  if (typeof raw !== 'function') throw new Error('the sandbox chain: this ganache has no provider._requestRaw to count requests with');
  let inFlight = 0;
  let stopping = false;
  let idle: (() => void) | undefined;
  const done = () => { if (--inFlight === 0) idle?.(); };
  provider._requestRaw = async function (this: RawProvider, args) {
    if (stopping) throw new Error('the sandbox chain is stopping');
    inFlight++;
    let r: { value: Promise<unknown> };
    try {
      r = await raw.call(this, args);
    } catch (e) {
      done();
      throw e;
    }
    return { ...r, value: Promise.resolve(r.value).finally(done) };
  };
  return {
    /** Refuses what comes next and waits for what is in flight (`ms` at most); resolves with how many were. */
    async drain(ms) {
      stopping = true;
      const found = inFlight;
      if (found === 0) return 0;
      let timer: NodeJS.Timeout | undefined;
      await Promise.race([
        new Promise<void>((resolve) => { idle = resolve; }),
        new Promise<void>((resolve) => { timer = setTimeout(resolve, ms); }),
      ]);
      clearTimeout(timer);
      return found;
    },
  };
}
