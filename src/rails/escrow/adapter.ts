// The escrow rail on viem: settle = the payer's latest EIP-712 voucher submitted to the escrow contract.
// Checkpointed when the settle transaction is mined (tx hash as reference); final when its block is at or
// below the chain's `finalized` block, or `confirmations` deep where the chain does not report one
// meaningfully (a dev chain reports finalized = latest). A reorged or lost transaction is resent; a reverted
// one fails and is retried with a new settlement. The contract pays only the delta over what it already
// settled, so a resend never pays twice.
import { createPublicClient, encodeFunctionData, http, keccak256, type Hex, type PublicClient } from 'viem';
import { privateKeyToAccount, type PrivateKeyAccount } from 'viem/accounts';
import { configError } from '../../domain/errors.js';
import type { SettlementRow } from '../../store/settlements.js';
import type { StreamRow } from '../../store/streams.js';
import type { Rail, RailEnv, RailProbe, SettlementState } from '../rail.js';
import { ESCROW_ABI, TOKEN_ABI } from './artifacts.js';

/** Chain ids of local development chains (ganache 1337, hardhat 31337): the only ones a sandbox rail accepts. */
export const LOCAL_CHAIN_IDS = new Set([1337, 31337]);

export interface EscrowConfig {
  env: RailEnv;
  rpcUrl: string;
  chainId: number;
  contract: Hex;
  walletKey: Hex;
  /** Blocks deep for final where `finalized` is not meaningful; 0 uses the `finalized` tag. */
  confirmations: number;
}

export class EscrowRail implements Rail {
  readonly mode = 'escrow' as const;
  readonly env: RailEnv;
  readonly #c: EscrowConfig;
  readonly #client: PublicClient;
  readonly #account: PrivateKeyAccount;
  readonly #decimalsOk = new Map<string, boolean>();
  /** The next nonce to use: dev chains with a block time do not count pool transactions in `pending`. */
  #nextNonce: number | undefined;

  constructor(c: EscrowConfig) {
    this.#c = c;
    this.env = c.env;
    this.#client = createPublicClient({ transport: http(c.rpcUrl, { timeout: 15_000, retryCount: 1 }) }) as PublicClient;
    try {
      this.#account = privateKeyToAccount(c.walletKey);
    } catch {
      throw configError('the wallet key is not a valid secp256k1 private key (0x + 64 hex)'); // never echo it
    }
  }

  get address(): Hex {
    return this.#account.address;
  }

  async preflight(): Promise<void> {
    let chainId: number;
    try {
      chainId = await this.#client.getChainId();
    } catch (err) {
      throw configError(`cannot reach the chain RPC (${(err as Error).name})`, 'check --rpc-url');
    }
    if (chainId !== this.#c.chainId) throw configError(`the RPC serves chain id ${chainId}, not the configured ${this.#c.chainId}`, 'fix --chain-id or --rpc-url');
    const local = LOCAL_CHAIN_IDS.has(chainId);
    if (this.env === 'sandbox' && !local) throw configError(`a sandbox rail refuses public chain id ${chainId}`, 'use --rail production for a public chain');
    if (this.env === 'production' && local) throw configError(`a production rail refuses local development chain id ${chainId}`, 'use --rail sandbox for a dev chain');
    const code = await this.#client.getCode({ address: this.#c.contract });
    if (!code || code === '0x') throw configError(`no contract at ${this.#c.contract} on chain ${chainId}`, 'check --contract');
  }

  async probe(): Promise<RailProbe> {
    const network = `chain ${this.#c.chainId}`;
    try {
      const [chainId, balance] = await Promise.all([this.#client.getChainId(), this.#client.getBalance({ address: this.#account.address })]);
      const wallet = { address: this.#account.address, balanceWei: balance.toString() };
      if (chainId !== this.#c.chainId) return { network, reachable: true, error: `the RPC now serves chain id ${chainId}`, wallet };
      return { network, reachable: true, wallet };
    } catch (err) {
      return { network, reachable: false, error: `chain RPC unreachable (${(err as Error).name})` };
    }
  }

  accepts(stream: StreamRow): boolean {
    try {
      this.#terms(stream);
      return true;
    } catch {
      return false;
    }
  }

  #terms(stream: StreamRow) {
    const claims = JSON.parse(stream.claims) as { chainId?: number; escrow?: string; channel?: Hex };
    if (claims.chainId !== this.#c.chainId || claims.escrow?.toLowerCase() !== this.#c.contract.toLowerCase() || !claims.channel)
      throw new Error(`stream ${stream.id} names chain ${claims.chainId} contract ${claims.escrow}, not this rail's ${this.#c.chainId} ${this.#c.contract}`);
    return { channel: claims.channel };
  }

  async #checkToken(channel: Hex): Promise<void> {
    const ch = (await this.#client.readContract({ address: this.#c.contract, abi: ESCROW_ABI, functionName: 'channels', args: [channel] })) as readonly unknown[];
    const token = ch[2] as Hex;
    if (this.#decimalsOk.get(token) === undefined) {
      const decimals = await this.#client.readContract({ address: token, abi: TOKEN_ABI, functionName: 'decimals' });
      this.#decimalsOk.set(token, Number(decimals) === 6);
    }
    // Micro units map one to one onto a 6-decimal token; anything else would need a conversion we refuse to guess.
    if (!this.#decimalsOk.get(token)) throw new Error(`token ${token} does not have 6 decimals`);
  }

  async submit(stream: StreamRow, amount: bigint, record: (reference: string, detail: string | null) => void): Promise<void> {
    const { channel } = this.#terms(stream);
    const voucher = JSON.parse(stream.billed_voucher ?? 'null') as { amount?: string; signature?: Hex } | null;
    if (!voucher?.signature || voucher.amount !== amount.toString()) throw new Error('no EIP-712 voucher for the billed amount');
    await this.#checkToken(channel);
    const data = encodeFunctionData({ abi: ESCROW_ABI, functionName: 'settle', args: [channel, amount, voucher.signature] });
    const request = { account: this.#account, to: this.#c.contract, data } as const;
    const gas = await this.#client.estimateGas(request); // a revert (over deposit, bad signer) fails here, before anything is sent
    const chainNonce = await this.#client.getTransactionCount({ address: this.#account.address, blockTag: 'pending' });
    const nonce = Math.max(chainNonce, this.#nextNonce ?? 0);
    const fees = await this.#client.estimateFeesPerGas();
    const serialized = await this.#account.signTransaction({
      to: this.#c.contract, data, nonce, gas: (gas * 12n) / 10n, chainId: this.#c.chainId, type: 'eip1559',
      maxFeePerGas: fees.maxFeePerGas!, maxPriorityFeePerGas: fees.maxPriorityFeePerGas!,
    });
    record(keccak256(serialized), serialized); // durable before it leaves the process
    try {
      await this.#client.sendRawTransaction({ serializedTransaction: serialized });
      this.#nextNonce = nonce + 1;
    } catch (err) {
      this.#nextNonce = undefined; // ask the chain again next time
      throw err;
    }
  }

  async status(s: SettlementRow): Promise<SettlementState> {
    const hash = s.reference as Hex;
    const receipt = await this.#client.getTransactionReceipt({ hash }).catch(() => null);
    if (!receipt) {
      const tx = await this.#client.getTransaction({ hash }).catch(() => null);
      if (tx) return { state: 'submitted' };
      if (!s.detail) return { state: 'failed', error: 'transaction lost and nothing to resend' };
      try {
        await this.#client.sendRawTransaction({ serializedTransaction: s.detail as Hex });
        return { state: 'submitted', note: 'transaction was not known to the chain; resent' };
      } catch (err) {
        this.#nextNonce = undefined;
        return { state: 'failed', error: `resend refused: ${((err as { shortMessage?: string }).shortMessage ?? (err as Error).message).split('\n')[0]!.slice(0, 200)}` };
      }
    }
    if (receipt.status !== 'success') return { state: 'failed', error: 'settle transaction reverted' };
    const block = await this.#client.getBlock({ blockNumber: receipt.blockNumber }).catch(() => null);
    if (!block || block.hash !== receipt.blockHash) return { state: 'submitted', note: 'reorged out' };
    if (this.#c.confirmations > 0) {
      const latest = await this.#client.getBlockNumber({ cacheTime: 0 });
      return latest - receipt.blockNumber + 1n >= BigInt(this.#c.confirmations) ? { state: 'final' } : { state: 'checkpointed', block: receipt.blockNumber };
    }
    const finalized = await this.#client.getBlock({ blockTag: 'finalized' });
    return finalized.number !== null && finalized.number >= receipt.blockNumber ? { state: 'final' } : { state: 'checkpointed', block: receipt.blockNumber };
  }

  async closeRequested(stream: StreamRow): Promise<boolean> {
    const { channel } = this.#terms(stream);
    const ch = (await this.#client.readContract({ address: this.#c.contract, abi: ESCROW_ABI, functionName: 'channels', args: [channel] })) as readonly unknown[];
    return BigInt(ch[5] as bigint | number) > 0n;
  }

  async close(): Promise<void> {}
}

