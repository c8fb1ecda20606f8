// The escrow rail on viem: settle = the payer's latest EIP-712 voucher submitted to the escrow contract.
//
// - Funding (DESIGN §14): a stream is payable only while its channel exists, is not closed (nor past its close grace),
//   pays this daemon's wallet, is funded by the credential's payer (cnf.addr) and holds the configured asset token
//   (--asset-token). What it can pay in all is its deposit: the effective cap.
// - Final comes from the chain's own facts: the mined receipt's `Settled` log for this channel with the settlement's
//   cumulative amount, and the token's `Transfer` of the paid delta from the escrow to this daemon's wallet. A settle
//   that mines without them paid nothing (a cumulative the channel had already settled): then the payment of exactly
//   that amount by another transaction (anyone may submit a voucher: the payer, or an earlier settlement of ours that
//   was failed) is looked up among the channel's Settled logs and, found, is the proof; else a failed settlement.
//   Checkpointed when mined; final when its block is at or below the chain's `finalized` block, or `confirmations`
//   deep where the chain does not report one meaningfully (a dev chain reports finalized = latest).
// - One signer, one nonce sequence: sends are serialised; a nonce that did not reach the chain is reused, never skipped.
//   A settle not mined within `rebroadcastMs` is sent again; from the second time it is replaced (same nonce) with
//   fees raised by at least 12.5 % (capped); a nonce gap below it (a transaction the chain lost) is filled by re-signing
//   the lowest stuck settlement at the missing nonce. The contract pays only the delta over what it already settled,
//   so no resend pays twice.
// - Every transaction is recorded on its settlement before it leaves the process (a send whose answer is lost may
//   still have reached the node: whichever mines is recognised), and no transaction ever takes a nonce that any
//   transaction of another open settlement holds. A settlement is paid when ANY of its mined transactions carries the
//   Settled log for its cumulative amount: a later one of its own that mined as a no-op does not hide it.
// - A settlement stays open (neither final nor failed) while one of its transactions waits at a nonce the chain has not
//   reached (its first one, when a gap fill below it mined): that transaction can still mine there, so the nonce stays
//   held, and it is sent again (then replaced) until the chain passes it. Closing earlier released the nonce to the next
//   settlement while the node still had, or had dropped, the first one: two settlements' transactions on one nonce.
import { BaseError, createPublicClient, decodeEventLog, HttpRequestError, TimeoutError, encodeFunctionData, http, keccak256, parseAbiItem, parseTransaction, type Hex, type PublicClient, type TransactionReceipt } from 'viem';
import { privateKeyToAccount, type PrivateKeyAccount } from 'viem/accounts';
import { configError } from '../../domain/errors.js';
import { log } from '../../log.js';
import { FundingUnavailable, type FundingCheck, type FundingSubject } from '../../domain/funding.js';
import type { Sql, Store } from '../../store/sql.js';
import { settlements, type SettlementRow } from '../../store/settlements.js';
import { x402Payments } from '../../store/x402.js';
import { streams, type StreamRow } from '../../store/streams.js';
import type { Rail, RailEnv, RailProbe, SettlementState } from '../rail.js';
import type { RailReference } from '../../domain/receipts.js';
import { ESCROW_ABI, TOKEN_ABI } from './artifacts.js';

/** Chain ids of local development chains (ganache 1337, hardhat 31337): the only ones a sandbox rail accepts. */
export const LOCAL_CHAIN_IDS = new Set([1337, 31337]);

export interface EscrowConfig {
  env: RailEnv;
  rpcUrl: string;
  chainId: number;
  contract: Hex;
  /** The ERC-20 the operator accepts (6 decimals): a channel in any other token is not payable. */
  assetToken: Hex;
  walletKey: Hex;
  /** Blocks deep for final where `finalized` is not meaningful; 0 uses the `finalized` tag. */
  confirmations: number;
  /** A settle transaction not mined this long after it was last sent is sent again (then replaced with higher fees). */
  rebroadcastMs?: number;
  /** Ceiling for a replacement's max fee per gas (wei); default 10x the first estimate. */
  maxFeePerGasCap?: bigint;
  now?: () => number;
}

/** What a settlement row keeps of its transactions: the nonce and every signed transaction sent for it, newest last. */
export interface TxDetail {
  nonce: number;
  txs: Array<{ hash: Hex; raw: Hex }>;
}

const ZERO = '0x0000000000000000000000000000000000000000';
/** How long a mined nonce may lack a receipt of ours before the settlement is failed (receipts can lag the count). */
const NONCE_USED_GRACE_MS = 60_000;
/**
 * How many blocks, up to the one where this settlement's own transaction mined without paying, are searched for the
 * escrow's `Settled` log of the channel for the settlement's amount (the contract lets anyone submit a voucher), in
 * ranges of LOG_RANGE blocks as RPCs require: about 33 hours of 12 s blocks, 5.5 hours of 2 s blocks.
 */
const SETTLED_LOOKBACK_BLOCKS = 10_000n;
const LOG_RANGE = 2_000n;
const SETTLED_EVENT = parseAbiItem('event Settled(bytes32 indexed channelId, uint128 cumulativeAmount, uint128 paid)');
const same = (a: string | undefined, b: string | undefined) => !!a && !!b && a.toLowerCase() === b.toLowerCase();
const short = (err: unknown) => ((err as { shortMessage?: string }).shortMessage ?? (err as Error).message ?? String(err)).split('\n')[0]!.slice(0, 200);
/** The error's text with the node's own words (viem keeps them in `details`). */
const said = (err: unknown) => `${short(err)} ${String((err as { details?: unknown }).details ?? '')}`;
const isNonceTooLow = (err: unknown) => /nonce too low|nonce has already been used|already known.*nonce|NONCE_EXPIRED|doesn't have the correct nonce/i.test(said(err));
const isKnown = (err: unknown) => /already known|already imported|known transaction|AlreadyKnown/i.test(said(err));
/** No answer came (a timeout, a dropped connection, a gateway error): the node may or may not have the transaction. */
const unanswered = (err: unknown) => err instanceof BaseError && !!err.walk((e) => e instanceof TimeoutError || e instanceof HttpRequestError);
/** The nonce of a signed transaction. */
const nonceOf = (raw: Hex) => parseTransaction(raw).nonce ?? 0;
export { nonceOf as txNonce };

/** The transactions sent for a settlement or an x402 payment: JSON {nonce, txs}, or (rows from before 0060) one raw transaction. */
export function parseTxDetail(detail: string | null): TxDetail | undefined {
  if (!detail) return undefined;
  if (detail.startsWith('0x')) return { nonce: parseTransaction(detail as Hex).nonce ?? 0, txs: [{ hash: keccak256(detail as Hex), raw: detail as Hex }] }; // rows from before 0060
  try {
    return JSON.parse(detail) as TxDetail;
  } catch {
    return undefined;
  }
}

export class EscrowRail implements Rail {
  readonly mode = 'escrow' as const;
  readonly env: RailEnv;
  readonly #c: EscrowConfig;
  readonly #client: PublicClient;
  readonly #account: PrivateKeyAccount;
  readonly #now: () => number;
  #store: Store | undefined;
  /** A fenced settlement write (the settler's): what a rebroadcast is about to send is recorded with it first. */
  #write: (<T>(fn: (tx: Sql) => Promise<T>) => Promise<T>) | undefined;
  #closeGrace: bigint | undefined;
  /** The next nonce this wallet uses; undefined: ask the chain (and our own unmined transactions) again. */
  #nextNonce: number | undefined;
  /** The first block whose escrow logs changedSources() has not read yet (undefined before the first call). */
  #logsFrom: bigint | undefined;
  /** Settlements whose nonce was seen mined without a receipt of theirs, since when. */
  /** Settlements found paid by another transaction (#paidElsewhere), by id, until final. */
  readonly #paidBy = new Map<string, Hex>();
  readonly #nonceUsedSince = new Map<string, number>();
  /** Settlements with a transaction waiting above the nonce that mined: when this process last sent it, and how often. */
  readonly #waitingSent = new Map<string, { at: number; sends: number }>();
  /** Sends of this wallet, one at a time (nonce order is the chain's only order). */
  #sending: Promise<unknown> = Promise.resolve();

  /** The chain RPC, as settlement spans name it (JSON-RPC; host and port only). */
  readonly peer: Readonly<Record<string, string | number>>;

  constructor(c: EscrowConfig) {
    this.#c = c;
    const u = new URL(c.rpcUrl);
    this.peer = { 'rpc.system': 'jsonrpc', 'server.address': u.hostname.replace(/^\[|\]$/g, ''), 'server.port': Number(u.port || (u.protocol === 'https:' ? 443 : 80)) };
    this.env = c.env;
    this.#now = c.now ?? Date.now;
    // Short attempts, retried: an RPC that leaves one call unanswered (seen with ganache's eth_estimateGas under 1 s
    // blocks) must not hold the settler for 15 s; a retried send of the same signed transaction is harmless.
    this.#client = createPublicClient({ transport: http(c.rpcUrl, { timeout: 5_000, retryCount: 2, retryDelay: 100 }) }) as PublicClient;
    try {
      this.#account = privateKeyToAccount(c.walletKey);
    } catch {
      throw configError('the wallet key is not a valid secp256k1 private key (0x + 64 hex)'); // never echo it
    }
  }

  get address(): Hex {
    return this.#account.address;
  }

  /** One settler per wallet (one nonce sequence), whichever daemons share the store. */
  get account(): string {
    return `${this.#c.chainId}:${this.#account.address.toLowerCase()}`;
  }

  /** The lease came to this daemon: another may have sent from the wallet meanwhile, so the next nonce is read again. */
  takeover(): void {
    this.#nextNonce = undefined;
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
    const tokenCode = await this.#client.getCode({ address: this.#c.assetToken });
    if (!tokenCode || tokenCode === '0x') throw configError(`no token contract at --asset-token ${this.#c.assetToken} on chain ${chainId}`, 'check --asset-token');
    let decimals: number;
    try {
      decimals = Number(await this.#client.readContract({ address: this.#c.assetToken, abi: TOKEN_ABI, functionName: 'decimals' }));
    } catch {
      throw configError(`--asset-token ${this.#c.assetToken} does not answer decimals(): not an ERC-20`);
    }
    // Micro units map one to one onto a 6-decimal token; anything else would need a conversion we refuse to guess.
    if (decimals !== 6) throw configError(`--asset-token ${this.#c.assetToken} has ${decimals} decimals; node-svc settles micro units, so the token must have 6`);
  }

  attach(ctx: { store: Store; settlementWrite?: <T>(fn: (tx: Sql) => Promise<T>) => Promise<T> }): void {
    this.#store = ctx.store;
    this.#write = ctx.settlementWrite;
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
      this.#terms(JSON.parse(stream.claims) as Record<string, unknown>);
      return true;
    } catch {
      return false;
    }
  }

  #terms(claims: Record<string, unknown>): { channel: Hex } {
    const { chainId, escrow, channel } = claims as { chainId?: number; escrow?: string; channel?: Hex };
    if (chainId !== this.#c.chainId || !same(escrow, this.#c.contract) || typeof channel !== 'string')
      throw new Error(`the credential's channel is on chain ${String(chainId)} contract ${String(escrow)}; this daemon settles chain ${this.#c.chainId} contract ${this.#c.contract}`);
    return { channel };
  }

  /** The channel as the contract holds it. */
  async readChannel(channel: Hex) {
    const ch = (await this.#client.readContract({ address: this.#c.contract, abi: ESCROW_ABI, functionName: 'channels', args: [channel] })) as readonly [Hex, Hex, Hex, bigint, bigint, bigint, boolean];
    const [payer, payee, token, deposit, settled, closeRequestedAt, closed] = ch;
    return { payer, payee, token, deposit: BigInt(deposit), settled: BigInt(settled), closeRequestedAt: BigInt(closeRequestedAt), closed };
  }

  async fund(subject: FundingSubject): Promise<FundingCheck> {
    let channel: Hex;
    try {
      ({ channel } = this.#terms(subject.claims));
    } catch (err) {
      return { funded: false, reason: (err as Error).message };
    }
    let ch: Awaited<ReturnType<typeof this.readChannel>>;
    try {
      ch = await this.readChannel(channel);
      this.#closeGrace ??= BigInt(await this.#client.readContract({ address: this.#c.contract, abi: ESCROW_ABI, functionName: 'closeGrace' }) as bigint);
    } catch (err) {
      throw new FundingUnavailable(`cannot read channel ${channel} on chain ${this.#c.chainId}: ${short(err)}`);
    }
    const payerAddress = (subject.claims.cnf as { addr?: string } | undefined)?.addr;
    const c = `channel ${channel}`;
    if (same(ch.payer, ZERO)) return { funded: false, reason: `${c} does not exist on chain ${this.#c.chainId} contract ${this.#c.contract}` };
    if (ch.closed) return { funded: false, reason: `${c} is closed` };
    if (ch.closeRequestedAt > 0n && BigInt(Math.floor(this.#now() / 1000)) >= ch.closeRequestedAt + this.#closeGrace)
      return { funded: false, reason: `${c}: the payer requested its close at ${new Date(Number(ch.closeRequestedAt) * 1000).toISOString()} and the grace has ended` };
    if (!same(ch.payee, this.#account.address)) return { funded: false, reason: `${c} pays ${ch.payee}, not this daemon's wallet ${this.#account.address}` };
    if (!same(ch.payer, payerAddress)) return { funded: false, reason: `${c} is funded by ${ch.payer}, not the credential's payer ${String(payerAddress)}` };
    if (!same(ch.token, this.#c.assetToken)) return { funded: false, reason: `${c} holds token ${ch.token}, not the configured asset token ${this.#c.assetToken}` };
    return { funded: true, limitMicro: ch.deposit, detail: `deposit ${ch.deposit}, settled ${ch.settled}` };
  }

  /** Channels the escrow logged anything about (opened, deposited, settled, close requested, withdrawn) since the last call. */
  async changedSources(): Promise<string[] | undefined> {
    const latest = await this.#client.getBlockNumber({ cacheTime: 0 });
    if (this.#logsFrom === undefined) {
      this.#logsFrom = latest + 1n;
      return undefined; // nothing known of the time before: re-read by age this once
    }
    if (latest < this.#logsFrom) return [];
    const to = latest - this.#logsFrom > 2_000n ? this.#logsFrom + 2_000n : latest; // bounded ranges, as RPCs require
    const logs = await this.#client.getLogs({ address: this.#c.contract, fromBlock: this.#logsFrom, toBlock: to });
    this.#logsFrom = to + 1n;
    const prefix = `escrow:${this.#c.chainId}:${this.#c.contract.toLowerCase()}:`;
    return [...new Set(logs.map((l) => l.topics[1]).filter((t): t is Hex => typeof t === 'string').map((t) => prefix + t.toLowerCase()))];
  }

  /** Run `fn` after every earlier send of this wallet: one nonce sequence, no races. */
  #serial<T>(fn: () => Promise<T>): Promise<T> {
    const run = this.#sending.then(fn, fn);
    this.#sending = run.catch(() => undefined);
    return run;
  }

  /**
   * Nonces held by open settlements and x402 payments (sent, or mined and not yet final) other than `except`: the nonce of every
   * transaction each has sent, not only its newest (one re-signed into a gap still has its first one in a node's pool).
   * From the store: they survive a restart.
   */
  async #heldNonces(except?: string): Promise<Set<number>> {
    const held = new Set<number>();
    if (!this.#store) return held;
    const open = [
      ...(await settlements.open(this.#store.q, 'escrow')).map((s) => ({ id: s.id, detail: s.detail })),
      // x402 transfers (sendCall) are sent from the same wallet: their nonces are held alike (issue #24).
      ...(await x402Payments.sent(this.#store.q)).map((p) => ({ id: p.id, detail: p.detail ?? p.raw_tx })),
    ];
    for (const s of open) {
      const d = s.id === except ? undefined : parseTxDetail(s.detail);
      if (!d) continue;
      held.add(d.nonce);
      for (const tx of d.txs) held.add(nonceOf(tx.raw));
    }
    return held;
  }

  /** The next nonce: past the chain's count and past every nonce an open settlement holds (a cached value never undercuts them). */
  async #takeNonce(): Promise<number> {
    this.#nextNonce ??= await this.#client.getTransactionCount({ address: this.#account.address, blockTag: 'pending' });
    return Math.max(this.#nextNonce, ...[...(await this.#heldNonces())].map((n) => n + 1));
  }

  /**
   * Send a signed transaction. It counts as sent when the node took it, says it already has it, or — after an error
   * (a retried send whose first answer was lost is refused as a duplicate, e.g. "underpriced") — knows its hash.
   * Otherwise the error is thrown.
   */
  async #send(tx: { hash: Hex; raw: Hex }, what: Record<string, unknown>): Promise<void> {
    try {
      await this.#client.sendRawTransaction({ serializedTransaction: tx.raw });
    } catch (err) {
      if (!isKnown(err) && !(await this.#client.getTransaction({ hash: tx.hash }).then(() => true, () => false))) {
        log.debug('settle transaction refused', { ...what, nonce: nonceOf(tx.raw), hash: tx.hash, error: short(err) });
        throw err;
      }
    }
    log.debug('settle transaction sent', { ...what, nonce: nonceOf(tx.raw), hash: tx.hash });
  }

  async #sign(data: Hex, nonce: number, gas: bigint, fees: { maxFeePerGas: bigint; maxPriorityFeePerGas: bigint }, to: Hex = this.#c.contract): Promise<{ hash: Hex; raw: Hex }> {
    const raw = await this.#account.signTransaction({ to, data, nonce, gas, chainId: this.#c.chainId, type: 'eip1559', ...fees });
    return { hash: keccak256(raw), raw };
  }

  /**
   * A first transaction of `data` to `to` at the wallet's next nonce, in the serialised send order: estimated before
   * (a revert throws before anything is sent), `record`ed durably before it leaves the process, sent by #send. A
   * nonce that did not reach the chain is reused, never skipped.
   */
  async #sendFirst(to: Hex, data: Hex, record: (tx: { hash: Hex; raw: Hex; nonce: number }) => Promise<void>, what: Record<string, unknown>): Promise<Hex> {
    const gas = await this.#client.estimateGas({ account: this.#account, to, data });
    const fees = await this.#client.estimateFeesPerGas();
    return this.#serial(async () => {
      const nonce = await this.#takeNonce();
      const tx = await this.#sign(data, nonce, (gas * 12n) / 10n, { maxFeePerGas: fees.maxFeePerGas!, maxPriorityFeePerGas: fees.maxPriorityFeePerGas! }, to);
      await record({ ...tx, nonce });
      try {
        await this.#send(tx, what);
      } catch (err) {
        this.#nextNonce = undefined;
        throw err;
      }
      this.#nextNonce = nonce + 1;
      return tx.hash;
    });
  }

  async submit(stream: StreamRow, amount: bigint, record: (reference: string, detail: string | null) => void): Promise<void> {
    const { channel } = this.#terms(JSON.parse(stream.claims) as Record<string, unknown>);
    const voucher = JSON.parse(stream.billed_voucher ?? 'null') as { amount?: string; signature?: Hex } | null;
    if (!voucher?.signature || voucher.amount !== amount.toString()) throw new Error('no EIP-712 voucher for the billed amount');
    const ch = await this.readChannel(channel);
    if (!same(ch.payee, this.#account.address) || !same(ch.token, this.#c.assetToken))
      throw new Error(`channel ${channel} does not pay this daemon's wallet in the configured token; nothing sent`);
    const data = encodeFunctionData({ abi: ESCROW_ABI, functionName: 'settle', args: [channel, amount, voucher.signature] });
    await this.#sendFirst(this.#c.contract, data, async (tx) => { await record(tx.hash, JSON.stringify({ nonce: tx.nonce, txs: [{ hash: tx.hash, raw: tx.raw }] } satisfies TxDetail)); }, { stream: stream.id, kind: 'first' });
  }

  /**
   * Send one call to `to` (x402: the asset token's transferWithAuthorization) from this wallet, in the same serialised
   * nonce sequence as settles. Estimated first (a revert throws before anything is sent); `record` runs with the signed
   * transaction and its detail (what resendCall and the held nonces read) before it leaves the process.
   */
  async sendCall(to: Hex, data: Hex, record: (tx: { hash: Hex; raw: Hex; nonce: number; detail: string }) => Promise<void>): Promise<Hex> {
    return this.#sendFirst(to, data, (tx) => record({ ...tx, detail: JSON.stringify({ nonce: tx.nonce, txs: [{ hash: tx.hash, raw: tx.raw }] } satisfies TxDetail) }), { kind: 'call', to });
  }

  /**
   * A call sent by sendCall that none of its transactions has mined yet: handled as a settle is (#unmined): resent when
   * the chain lost it, rebroadcast every `rebroadcastMs`, from the second time replaced at the same nonce with higher
   * fees, re-signed into a nonce gap below it, never onto a nonce another open settlement or call holds. `record` stores
   * the new detail before anything leaves the process, in the settler's fenced write: only the daemon that holds the
   * wallet's settlement lease replaces or re-signs (elsewhere it throws LeaseLost, and nothing new is sent); `failed`
   * when another transaction of the wallet took its nonce.
   */
  async resendCall(c: { id: string; detail: string; attempts: number; lastBroadcastAt: number; what: Record<string, unknown> },
    record: (tx: Sql, detail: string) => Promise<unknown>): Promise<SettlementState> {
    const d = parseTxDetail(c.detail);
    if (!d || d.txs.length === 0) return { state: 'failed', error: 'no transaction recorded for this call' };
    const save = this.#callRecord(record);
    const latestCount = await this.#client.getTransactionCount({ address: this.#account.address, blockTag: 'latest' });
    return this.#unmined({ id: c.id, attempts: c.attempts, lastBroadcastAt: c.lastBroadcastAt, what: c.what }, d, latestCount, save);
  }

  /**
   * A call sent by sendCall whose payment mined: the lowest nonce one of its transactions still waits at (its first one,
   * one nonce above a gap fill that paid), or undefined. Handled as a settlement's (#waiting): while one waits the payment
   * is not final, so its nonces stay held, and that transaction is sent again, then replaced (`record`ed first, as in
   * resendCall).
   */
  async waitingCall(c: { id: string; detail: string; lastBroadcastAt: number; what: Record<string, unknown> },
    record: (tx: Sql, detail: string) => Promise<unknown>): Promise<number | undefined> {
    const d = parseTxDetail(c.detail);
    if (!d || d.txs.length === 0) return undefined;
    const save = this.#callRecord(record);
    const latestCount = await this.#client.getTransactionCount({ address: this.#account.address, blockTag: 'latest' });
    return this.#waiting({ id: c.id, lastBroadcastAt: c.lastBroadcastAt, what: c.what }, d, latestCount, save);
  }

  /** A call's transactions are recorded in the settler's fenced write: only the daemon that holds the wallet's settlement lease records (and sends) new ones. */
  #callRecord(record: (tx: Sql, detail: string) => Promise<unknown>): (d: TxDetail) => Promise<void> {
    const write = this.#write ?? this.#store?.write.bind(this.#store);
    if (!write) throw new Error('the escrow rail is not attached to a store');
    return async (next) => { await write((tx) => record(tx, JSON.stringify(next))); };
  }

  /** The receipts of every transaction of the settlement that mined (more than one can: each at its own nonce), newest sent first. */
  async #receiptsOf(d: TxDetail): Promise<TransactionReceipt[]> {
    const found: TransactionReceipt[] = [];
    for (const tx of [...d.txs].reverse()) {
      const r = await this.#client.getTransactionReceipt({ hash: tx.hash }).catch(() => null);
      if (r) found.push(r);
    }
    return found;
  }

  /**
   * A mined nonce of `id` still has no answered receipt of its own: false while that has lasted less than
   * NONCE_USED_GRACE_MS (the first call starts the clock); true once it has (the clock cleared, and the wallet's next
   * nonce read from the chain again: another transaction took the nonce).
   */
  #receiptWaitOver(id: string): boolean {
    const since = this.#nonceUsedSince.get(id) ?? this.#now();
    this.#nonceUsedSince.set(id, since);
    if (this.#now() - since < NONCE_USED_GRACE_MS) return false;
    this.#nonceUsedSince.delete(id);
    this.#nextNonce = undefined;
    return true;
  }

  /** The nonces at which none of this settlement's transactions has an answered receipt. */
  #unansweredNonces(d: TxDetail, receipts: TransactionReceipt[]): number[] {
    const answered = new Set(receipts.map((r) => r.transactionHash.toLowerCase()));
    const byNonce = new Map<number, boolean>();
    for (const t of d.txs) {
      const n = nonceOf(t.raw);
      byNonce.set(n, (byNonce.get(n) ?? false) || answered.has(t.hash.toLowerCase()));
    }
    return [...byNonce].filter(([, has]) => !has).map(([n]) => n).sort((x, y) => x - y);
  }

  /**
   * Which mined transaction paid: the one whose receipt proves the payment (any of them: one of this settlement's own
   * transactions that mined after it found the channel already settled this far and paid nothing). None: why not.
   */
  async #payingReceipt(s: SettlementRow, receipts: TransactionReceipt[], channel: Hex | undefined): Promise<TransactionReceipt | { error: string }> {
    let why: string | undefined;
    for (const r of receipts) {
      const proof = r.status === 'success' ? this.#paid(s, r, channel) : `settle transaction ${r.transactionHash} reverted in block ${r.blockNumber}`;
      if (proof === true) return r;
      why ??= proof;
    }
    return { error: why! };
  }

  async status(s: SettlementRow): Promise<SettlementState> {
    const d = parseTxDetail(s.detail);
    if (!d || d.txs.length === 0) return { state: 'failed', error: 'no transaction recorded for this settlement' };
    // The nonce count first, then the receipts: a transaction of ours mined in between then shows its receipt, so a
    // count past our nonce with no receipt really means another transaction took the nonce.
    const latestCount = await this.#client.getTransactionCount({ address: this.#account.address, blockTag: 'latest' });
    const receipts = await this.#receiptsOf(d);
    const own = { id: s.id, lastBroadcastAt: Number(s.last_broadcast_at ?? s.submitted_at ?? s.created_at), what: { settlement: s.id, stream: s.stream } };
    const record = (next: TxDetail) => this.#record(s.id, next);
    if (receipts.length === 0) return this.#unmined({ ...own, attempts: Number(s.attempts) }, d, latestCount, record);
    const channel = await this.#channelOf(s); // read once per poll: every proof below is about this channel
    let receipt = await this.#payingReceipt(s, receipts, channel);
    // One of its transactions may wait at a nonce the chain has not reached: it holds that nonce until the chain passes it.
    const waiting = await this.#waiting(own, d, latestCount, record);
    if ('error' in receipt && this.#paidBy.has(s.id)) {
      // A payment by another transaction, found at an earlier poll: its receipt read again (a reorg may have dropped it).
      const r = await this.#client.getTransactionReceipt({ hash: this.#paidBy.get(s.id)! }).catch(() => null);
      if (r && r.status === 'success' && this.#paid(s, r, channel) === true) receipt = r;
      else this.#paidBy.delete(s.id);
    }
    if ('error' in receipt) {
      if (waiting !== undefined) return { state: 'submitted', note: `${receipt.error}; its transaction at nonce ${waiting} is not mined yet` };
      // A nonce of its own the chain has passed with no receipt answered for any of its transactions there: the one
      // mined at it may be the one that paid (a gap fill at n pays, the first transaction at n + 1 mines after it with no
      // Settled log, and a node answered the second's receipt before the first's: seen with ganache right after
      // miner_start). Failing now would retry a paid settlement for ever without a Settled log; so this is a failure
      // only once that lasts NONCE_USED_GRACE_MS, as in #unmined.
      // (#waiting found every nonce it holds below the chain's count: each one is mined.)
      const unanswered = this.#unansweredNonces(d, receipts);
      const at = `nonce ${unanswered.join(', ')}`;
      if (unanswered.length > 0 && !this.#receiptWaitOver(s.id))
        return { state: 'submitted', note: `${at} is mined and no receipt of this settlement's transaction there is answered yet (it may be the payment; ${receipt.error}): waiting up to ${NONCE_USED_GRACE_MS / 1000} s` };
      this.#nonceUsedSince.delete(s.id);
      // Its own transactions mined without paying because the channel had already settled this amount: the payer
      // submitted this voucher, or an earlier settlement of this daemon that was failed paid it. That payment is the proof.
      const elsewhere = await this.#paidElsewhere(s, receipts, channel);
      if ('error' in elsewhere) {
        const why = `${receipt.error}${elsewhere.error ? `; ${elsewhere.error}` : ''}`;
        return { state: 'failed', error: unanswered.length === 0 ? why : `${why}; ${at} was used by another transaction of this wallet (no receipt of this settlement's there for ${NONCE_USED_GRACE_MS / 1000} s)` };
      }
      log.info('settlement paid by an earlier transaction on the channel', { settlement: s.id, stream: s.stream, paidBy: elsewhere.transactionHash, block: Number(elsewhere.blockNumber) });
      this.#paidBy.set(s.id, elsewhere.transactionHash); // not searched (nor waited for) again while its block deepens
      receipt = elsewhere;
    }
    this.#nonceUsedSince.delete(s.id);
    // A node answers receipts only for transactions in its canonical chain: a reorged-out settle has none (handled above,
    // as not mined). The block must still be there at that height (the receipt's block hash is not compared: ganache
    // reports hashes of blocks mined after miner_start that getBlock does not return).
    const block = await this.#client.getBlock({ blockNumber: receipt.blockNumber }).catch(() => null);
    if (!block) return { state: 'submitted', note: 'reorged out' };
    // Paid, but not final while a transaction of its own still holds a nonce above (it stays open, the nonce held).
    if (waiting !== undefined) return { state: 'checkpointed', block: receipt.blockNumber };
    const final = async (): Promise<SettlementState> => {
      this.#paidBy.delete(s.id);
      return { state: 'final', proof: this.#proof(receipt, channel) };
    };
    if (this.#c.confirmations > 0) {
      const latest = await this.#client.getBlockNumber({ cacheTime: 0 });
      return latest - receipt.blockNumber + 1n >= BigInt(this.#c.confirmations) ? final() : { state: 'checkpointed', block: receipt.blockNumber };
    }
    const finalized = await this.#client.getBlock({ blockTag: 'finalized' });
    return finalized.number !== null && finalized.number >= receipt.blockNumber ? final() : { state: 'checkpointed', block: receipt.blockNumber };
  }

  /**
   * The lowest nonce a transaction of this mined settlement (or x402 call: waitingCall) holds that the chain has not reached, or undefined: its
   * first transaction, one nonce above a gap fill that mined, may still be in a node's pool (or dropped from it). The
   * count is read again after the receipts (one mined in between is not waiting). While it waits and the chain's next
   * nonce is its own (nothing of the wallet below it is pending, so it is what holds the wallet up), it is sent again
   * every `rebroadcastMs` (a node that dropped it gets it back) and from the second time replaced at that nonce with
   * higher fees, `record`ed first, as #unmined does. It is the settlement's own call: mined after the payment, a no-op
   * (an x402 transfer reverts there: its authorization is used).
   */
  async #waiting(s: { id: string; lastBroadcastAt: number; what: Record<string, unknown> }, d: TxDetail, latestCount: number,
    record: (d: TxDetail) => Promise<void>): Promise<number | undefined> {
    const above = (count: number) => d.txs.map((t) => nonceOf(t.raw)).filter((n) => n >= count);
    let count = latestCount;
    if (above(count).length > 0) count = await this.#client.getTransactionCount({ address: this.#account.address, blockTag: 'latest' });
    if (above(count).length === 0) {
      this.#waitingSent.delete(s.id);
      return undefined;
    }
    const nonce = Math.min(...above(count));
    const sent = this.#waitingSent.get(s.id);
    const last = sent?.at ?? s.lastBroadcastAt;
    if (nonce !== count || this.#now() - last < (this.#c.rebroadcastMs ?? 30_000)) return nonce;
    await this.#serial(async () => {
      // Inside the send queue, on a fresh count: it may have mined meanwhile.
      if ((await this.#client.getTransactionCount({ address: this.#account.address, blockTag: 'latest' })) > nonce) return;
      const sends = (sent?.sends ?? 0) + 1;
      this.#waitingSent.set(s.id, { at: this.#now(), sends });
      const newest = [...d.txs].reverse().find((t) => nonceOf(t.raw) === nonce)!;
      const what = { ...s.what, kind: sends < 2 ? 'waiting' : 'waiting replacement' };
      const refused = (err: unknown) => log.debug('waiting transaction not sent', { ...what, nonce, error: short(err) });
      if (sends < 2) return void (await this.#send(newest, what).catch(refused));
      const r = await this.#replaceRecorded(newest, nonce, d.nonce, d, record, what);
      if ('refused' in r) refused(r.refused);
    });
    return nonce;
  }

  /** What the settlement's receipt names: the mined transaction, its block, this chain, the contract and the channel. */
  #proof(receipt: TransactionReceipt, channel: Hex | undefined): RailReference {
    return {
      rail: 'escrow', chainId: this.#c.chainId, contract: this.#c.contract.toLowerCase(), txHash: receipt.transactionHash,
      blockNumber: Number(receipt.blockNumber), ...(channel ? { channel: channel.toLowerCase() } : {}),
    };
  }

  /** The channel of the settlement's stream, from its credential's claims (undefined without a store or the stream). */
  async #channelOf(s: SettlementRow): Promise<Hex | undefined> {
    const stream = this.#store ? await streams.get(this.#store.q, s.node_id, s.stream) : undefined;
    return stream ? (JSON.parse(stream.claims) as { channel?: Hex }).channel : undefined;
  }

  /**
   * A settlement whose own transactions mined without a Settled log: the payment of its amount made by another
   * transaction, at or below the block of its own newest mined one (which found the channel settled that far). The
   * contract lets anyone submit a voucher (the payer may, and so may an earlier settlement of this daemon that was
   * failed while its payment's receipt was unanswered). Looked up by the channel's `Settled` logs over
   * SETTLED_LOOKBACK_BLOCKS, newest first; a log counts only with this settlement's cumulative amount and, in its
   * receipt, the Transfer of what it paid to this wallet (#paid). A channel settled past the amount by a voucher this
   * daemon never billed is not this settlement's payment (that stays failed). `error: ''` when none of its own mined.
   * A read the node does not answer throws (the settler polls again: a refused read must not fail a settlement and
   * send another no-op).
   */
  async #paidElsewhere(s: SettlementRow, receipts: TransactionReceipt[], channel: Hex | undefined): Promise<TransactionReceipt | { error: string }> {
    const mined = receipts.filter((r) => r.status === 'success').map((r) => r.blockNumber);
    if (mined.length === 0) return { error: '' };
    if (!channel) return { error: '' };
    const top = mined.reduce((a, b) => (a > b ? a : b));
    const floor = top >= SETTLED_LOOKBACK_BLOCKS ? top - SETTLED_LOOKBACK_BLOCKS + 1n : 0n;
    for (let hi = top; hi >= floor; hi -= LOG_RANGE) {
      const lo = hi - floor >= LOG_RANGE ? hi - LOG_RANGE + 1n : floor;
      const logs = await this.#client.getLogs({ address: this.#c.contract, event: SETTLED_EVENT, args: { channelId: channel }, fromBlock: lo, toBlock: hi });
      for (const l of logs.reverse()) {
        if (l.args.cumulativeAmount !== s.amount_micro || !l.transactionHash) continue;
        const r = await this.#client.getTransactionReceipt({ hash: l.transactionHash });
        if (r.status === 'success' && this.#paid(s, r, channel) === true) return r;
      }
      if (lo === floor) break;
    }
    return { error: `no Settled log of channel ${channel} for ${s.amount_micro} in blocks ${floor} to ${top}` };
  }

  /**
   * The chain's proof that this settlement paid this daemon: a `Settled` log of the escrow for the stream's channel with
   * the settlement's cumulative amount, and the token's `Transfer` of the paid delta from the escrow to the wallet.
   * A string says what is missing.
   */
  #paid(s: SettlementRow, receipt: TransactionReceipt, channel: Hex | undefined): true | string {
    let paid: bigint | undefined;
    let other: string | undefined; // a Settled log of the channel for another amount (one transaction can settle twice)
    for (const l of receipt.logs) {
      if (!same(l.address, this.#c.contract)) continue;
      try {
        const ev = decodeEventLog({ abi: ESCROW_ABI, data: l.data, topics: l.topics });
        if (ev.eventName !== 'Settled' || !same(ev.args.channelId, channel)) continue;
        if (BigInt(ev.args.cumulativeAmount) !== s.amount_micro) {
          other ??= `the Settled log of ${receipt.transactionHash} names cumulative ${ev.args.cumulativeAmount}, not this settlement's ${s.amount_micro}`;
          continue;
        }
        paid = BigInt(ev.args.paid);
      } catch {
        continue;
      }
    }
    if (paid === undefined && other) return other;
    if (paid === undefined)
      return `settle transaction ${receipt.transactionHash} mined without a Settled log for channel ${channel}: nothing was paid (the channel had already settled as much)`;
    const transfer = receipt.logs.some((l) => {
      if (!same(l.address, this.#c.assetToken)) return false;
      try {
        const ev = decodeEventLog({ abi: TOKEN_ABI, data: l.data, topics: l.topics });
        return ev.eventName === 'Transfer' && same(ev.args.from, this.#c.contract) && same(ev.args.to, this.#account.address) && BigInt(ev.args.value) === paid;
      } catch {
        return false;
      }
    });
    if (!transfer) return `settle transaction ${receipt.transactionHash} did not transfer ${paid} of the asset token to this daemon's wallet`;
    return true;
  }

  /**
   * Not mined (yet): lost → resent; stuck → rebroadcast, then replaced with higher fees; below a nonce gap → re-signed
   * into it. `s` is a settlement or an x402 call (resendCall); `record` stores its transactions before a new one is sent.
   */
  async #unmined(s: { id: string; attempts: number; lastBroadcastAt: number; what: Record<string, unknown> }, d: TxDetail, latestCount: number,
    record: (d: TxDetail) => Promise<void>): Promise<SettlementState> {
    // Every nonce it holds is mined (one re-signed into a gap may still have its first transaction at a higher one).
    if (latestCount > Math.max(d.nonce, ...d.txs.map((t) => nonceOf(t.raw)))) {
      // Our nonce is mined but none of our hashes has a receipt. A node can count a block before it answers its
      // receipts (seen with ganache right after miner_start), and failing a settle that did pay would retry it for
      // ever without a Settled log: so this is a failure only when it lasts NONCE_USED_GRACE_MS.
      if (!this.#receiptWaitOver(s.id)) return { state: 'submitted', note: `nonce ${d.nonce} is mined; waiting for the receipt of one of this settlement's transactions` };
      return { state: 'failed', error: `nonce ${d.nonce} was used by another transaction of this wallet; this settle was never mined` };
    }
    this.#nonceUsedSince.delete(s.id);
    const newest = d.txs[d.txs.length - 1]!;
    const known = await this.#client.getTransaction({ hash: newest.hash }).then(() => true, () => false);
    const due = this.#now() - s.lastBroadcastAt >= (this.#c.rebroadcastMs ?? 30_000);
    if (known && !due) return { state: 'submitted' };
    return this.#serial(async () => {
      // Decided on fresh reads (the count read before may be stale by now), inside the one send queue.
      const count = await this.#client.getTransactionCount({ address: this.#account.address, blockTag: 'latest' });
      if (count > d.nonce) return { state: 'submitted' as const, note: `nonce ${d.nonce} is mined; waiting for the receipt of one of this settlement's transactions` };
      const held = await this.#heldNonces(s.id);
      // A gap below us (a lower nonce no transaction of an open settlement holds): fill it with this settlement.
      const gap = d.nonce > count && !held.has(count) && !d.txs.some((t) => nonceOf(t.raw) === count);
      // From the second time, replace it (a node may have dropped it as underpriced: the same bytes would be refused again).
      if (gap || Number(s.attempts) >= 2) {
        const nonce = gap ? count : d.nonce;
        // Never a nonce another open settlement holds (two settlements' transactions on one nonce: one replaces the other).
        if (held.has(nonce)) return { state: 'submitted' as const, note: `nonce ${nonce} is held by another settlement of this wallet: not replaced` };
        const r = await this.#replaceRecorded(newest, nonce, nonce, d, record, { ...s.what, kind: gap ? 'gap' : 'replacement' });
        if ('refused' in r) return { state: 'submitted' as const, note: `replacement refused: ${short(r.refused)}` };
        const { tx, next } = r;
        if (gap) this.#nextNonce = undefined;
        const note = gap ? `nonce gap at ${count}: re-signed into it (was ${d.nonce})` : `not mined after ${s.attempts} broadcasts: replaced with higher fees`;
        return { state: 'submitted' as const, rebroadcast: { reference: tx.hash, detail: JSON.stringify(next), note } };
      }
      try {
        await this.#send(newest, { ...s.what, kind: 'rebroadcast' });
      } catch (err) {
        if (isNonceTooLow(err)) return { state: 'submitted' as const, note: 'nonce already used; waiting for its receipt' };
        // A node that holds the very same transaction may answer "already known" (geth) or "underpriced" (ganache): it has it.
        if (!known) return { state: 'submitted' as const, note: `rebroadcast refused: ${short(err)}` };
      }
      const note = known ? `not mined within ${Math.round((this.#c.rebroadcastMs ?? 30_000) / 1000)} s: rebroadcast` : 'transaction was not known to the chain: resent';
      return { state: 'submitted' as const, rebroadcast: { reference: newest.hash, detail: JSON.stringify(d), note } };
    });
  }

  /**
   * `newest` replaced at `nonce` with higher fees and sent (#unmined, #waiting). Recorded before it leaves the process
   * (`detailNonce` the settlement's nonce in the record): a send whose answer is lost may still be mined, and must be
   * recognised. A node that refused it and does not have it puts the record back to `d` (an unanswered send stays
   * recorded). The new transaction and record, or the refusal.
   */
  async #replaceRecorded(newest: { raw: Hex }, nonce: number, detailNonce: number, d: TxDetail, record: (d: TxDetail) => Promise<void>,
    what: Record<string, unknown>): Promise<{ tx: { hash: Hex; raw: Hex }; next: TxDetail } | { refused: unknown }> {
    const tx = await this.#replacement(newest.raw, nonce);
    const next: TxDetail = { nonce: detailNonce, txs: [...d.txs, tx] };
    await record(next);
    try {
      await this.#send(tx, what);
    } catch (err) {
      if (!unanswered(err)) await record(d);
      return { refused: err };
    }
    return { tx, next };
  }

  /** Record the settlement's transactions (fenced: a daemon that lost the settlement lease records and sends nothing). */
  async #record(id: string, d: TxDetail): Promise<void> {
    if (!this.#write) return;
    await this.#write((tx) => settlements.transactions(tx, id, JSON.stringify(d)));
  }

  /** The same call (settle or x402 transfer) at `nonce` with fees raised ≥ 12.5 % over the last transaction and the current estimate, capped. */
  async #replacement(lastRaw: Hex, nonce: number): Promise<{ hash: Hex; raw: Hex }> {
    const prev = parseTransaction(lastRaw);
    const est = await this.#client.estimateFeesPerGas();
    const bump = (x: bigint | undefined) => ((x ?? 0n) * 1125n) / 1000n + 1n;
    const cap = this.#c.maxFeePerGasCap ?? (est.maxFeePerGas! * 10n);
    let maxPriorityFeePerGas = [bump(prev.maxPriorityFeePerGas), est.maxPriorityFeePerGas!].reduce((a, b) => (a > b ? a : b));
    let maxFeePerGas = [bump(prev.maxFeePerGas), est.maxFeePerGas!].reduce((a, b) => (a > b ? a : b));
    if (maxFeePerGas > cap) maxFeePerGas = cap;
    if (maxPriorityFeePerGas > maxFeePerGas) maxPriorityFeePerGas = maxFeePerGas;
    return this.#sign(prev.data!, nonce, prev.gas!, { maxFeePerGas, maxPriorityFeePerGas }, prev.to ?? this.#c.contract); // the same call: a settle, or an x402 transfer to the token
  }

  async closeRequested(stream: StreamRow): Promise<boolean> {
    const { channel } = this.#terms(JSON.parse(stream.claims) as Record<string, unknown>);
    return (await this.readChannel(channel)).closeRequestedAt > 0n;
  }

  async close(): Promise<void> {}
}
