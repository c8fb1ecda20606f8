// x402 `exact` on EVM (issue #24): the facilitator's checks of an EIP-3009 authorization against this daemon's chain,
// asset token and wallet, and the transferWithAuthorization call that settles it. Followed: the x402 v2 specification
// (specs/x402-specification-v2.md, specs/schemes/exact/scheme_exact_evm.md) and the @x402/core 2.27.0 types; the
// invalidReason names are x402's own (@x402/evm exact facilitator errors, spec §9).
import { createPublicClient, decodeEventLog, encodeFunctionData, http, isAddress, isHex, verifyTypedData, type Hex, type PublicClient, type TransactionReceipt } from 'viem';
import { TOKEN_ABI } from './artifacts.js';
import { parseTxDetail, txNonce } from './adapter.js';

export const X402_VERSION = 2;

/** x402's named reasons this facilitator answers with (invalidReason / errorReason). */
export const X402_REASONS = {
  version: 'invalid_x402_version',
  scheme: 'unsupported_scheme',
  network: 'invalid_network',
  networkMismatch: 'invalid_exact_evm_network_mismatch',
  requirements: 'invalid_payment_requirements',
  payload: 'invalid_payload',
  domain: 'invalid_exact_evm_missing_eip712_domain',
  recipient: 'invalid_exact_evm_recipient_mismatch',
  signature: 'invalid_exact_evm_signature',
  expired: 'invalid_exact_evm_payload_authorization_valid_before',
  notYetValid: 'invalid_exact_evm_payload_authorization_valid_after',
  value: 'invalid_exact_evm_authorization_value',
  nonceUsed: 'invalid_exact_evm_nonce_already_used',
  balance: 'invalid_exact_evm_insufficient_balance',
  simulation: 'invalid_exact_evm_transaction_simulation_failed',
  failed: 'invalid_exact_evm_transaction_failed',
  /** Not x402's: sent and not mined yet, or mined and not yet answered; never `success: true` before it is mined. */
  pending: 'settlement_pending',
  unexpectedVerify: 'unexpected_verify_error',
  unexpectedSettle: 'unexpected_settle_error',
} as const;
export type X402Reason = (typeof X402_REASONS)[keyof typeof X402_REASONS];

/** EIP-3009 TransferWithAuthorization, as the token's EIP-712 domain signs it. */
export const AUTHORIZATION_TYPES = {
  TransferWithAuthorization: [
    { name: 'from', type: 'address' }, { name: 'to', type: 'address' }, { name: 'value', type: 'uint256' },
    { name: 'validAfter', type: 'uint256' }, { name: 'validBefore', type: 'uint256' }, { name: 'nonce', type: 'bytes32' },
  ],
} as const;

export interface PaymentRequirements {
  scheme: string;
  network: string;
  amount: string;
  asset: string;
  payTo: string;
  maxTimeoutSeconds: number;
  extra?: Record<string, unknown>;
}
export interface PaymentPayload {
  x402Version: number;
  resource?: { url: string; description?: string; mimeType?: string };
  accepted: PaymentRequirements;
  payload: Record<string, unknown>;
  extensions?: Record<string, unknown>;
}
export interface Authorization { from: Hex; to: Hex; value: bigint; validAfter: bigint; validBefore: bigint; nonce: Hex }

export interface X402ChainConfig {
  rpcUrl: string;
  chainId: number;
  /** --asset-token: the only asset accepted. */
  assetToken: Hex;
  /** The daemon's wallet: the only payTo accepted, and the one that sends (and pays gas for) settlements. */
  wallet: Hex;
  confirmations: number;
}

/** A checked authorization (isValid), or the reason it is refused. */
export type Checked =
  | { ok: true; payer: Hex; auth: Authorization; signature: Hex; requirements: PaymentRequirements }
  | { ok: false; reason: X402Reason; message: string; payer?: Hex };

const same = (a: string, b: string) => a.toLowerCase() === b.toLowerCase();
const refuse = (reason: X402Reason, message: string, payer?: Hex): Checked => ({ ok: false, reason, message, ...(payer ? { payer } : {}) });
const uint = (v: unknown): bigint | undefined => (typeof v === 'string' && /^\d{1,78}$/.test(v) ? BigInt(v) : undefined);

export class X402Exact {
  readonly network: string;
  readonly #c: X402ChainConfig;
  readonly #client: PublicClient;
  readonly #now: () => number;

  constructor(c: X402ChainConfig, now: () => number = Date.now) {
    this.#c = c;
    this.network = `eip155:${c.chainId}`;
    this.#now = now;
    this.#client = createPublicClient({ transport: http(c.rpcUrl, { timeout: 5_000, retryCount: 2, retryDelay: 100 }) }) as PublicClient;
  }

  get config(): Readonly<X402ChainConfig> {
    return this.#c;
  }

  /** The checks that need no chain: shapes, this daemon's network / asset / wallet, the time window, the signature. */
  async checkOffline(payload: PaymentPayload, req: PaymentRequirements): Promise<Checked> {
    const p = payload.payload as { signature?: unknown; authorization?: Record<string, unknown> };
    const a = p.authorization;
    const from = typeof a?.from === 'string' && isAddress(a.from, { strict: false }) ? (a.from as Hex) : undefined;
    if (payload.x402Version !== X402_VERSION) return refuse(X402_REASONS.version, `x402Version ${payload.x402Version} is not supported (only ${X402_VERSION})`, from);
    if (req.scheme !== 'exact' || payload.accepted.scheme !== 'exact') return refuse(X402_REASONS.scheme, `scheme ${req.scheme} is not supported (only exact)`, from);
    if (req.network !== this.network) return refuse(X402_REASONS.network, `network ${req.network} is not this facilitator's chain ${this.network}`, from);
    if (payload.accepted.network !== req.network) return refuse(X402_REASONS.networkMismatch, `the payload was made for ${payload.accepted.network}, the requirements name ${req.network}`, from);
    if (!same(req.asset, this.#c.assetToken)) return refuse(X402_REASONS.requirements, `asset ${req.asset} is not the configured asset token ${this.#c.assetToken}`, from);
    if (!same(req.payTo, this.#c.wallet)) return refuse(X402_REASONS.recipient, `payTo ${req.payTo} is not this daemon's wallet ${this.#c.wallet}`, from);
    const name = req.extra?.name;
    const version = req.extra?.version;
    if (typeof name !== 'string' || typeof version !== 'string') return refuse(X402_REASONS.domain, 'the requirements carry no EIP-712 domain (extra.name and extra.version)', from);
    if (payload.accepted.asset && !same(payload.accepted.asset, req.asset)) return refuse(X402_REASONS.requirements, 'the payload was made for another asset than the requirements name', from);
    const value = uint(a?.value);
    const validAfter = uint(a?.validAfter);
    const validBefore = uint(a?.validBefore);
    const nonce = typeof a?.nonce === 'string' && /^0x[0-9a-fA-F]{64}$/.test(a.nonce) ? (a.nonce as Hex) : undefined;
    const to = typeof a?.to === 'string' && isAddress(a.to, { strict: false }) ? (a.to as Hex) : undefined;
    const signature = typeof p.signature === 'string' && isHex(p.signature) ? (p.signature as Hex) : undefined;
    if (!from || !to || value === undefined || validAfter === undefined || validBefore === undefined || !nonce || !signature)
      return refuse(X402_REASONS.payload, 'payload.authorization needs from, to (addresses), value, validAfter, validBefore (decimal strings), nonce (32 bytes hex) and payload.signature (hex)', from);
    if (!same(to, this.#c.wallet)) return refuse(X402_REASONS.recipient, `the authorization pays ${to}, not this daemon's wallet ${this.#c.wallet}`, from);
    const amount = uint(req.amount);
    if (amount === undefined || amount <= 0n) return refuse(X402_REASONS.requirements, 'requirements.amount must be a positive decimal string of atomic units', from);
    if (value !== amount) return refuse(X402_REASONS.value, `the authorization is for ${value}, the requirements ask ${amount}`, from);
    const now = BigInt(Math.floor(this.#now() / 1000));
    // 6 s of margin for the block that mines it, as x402's own facilitator.
    if (validBefore < now + 6n) return refuse(X402_REASONS.expired, `the authorization expired (validBefore ${validBefore})`, from);
    if (validAfter > now) return refuse(X402_REASONS.notYetValid, `the authorization is not valid before ${validAfter}`, from);
    const auth: Authorization = { from, to, value, validAfter, validBefore, nonce };
    let good = false;
    try {
      good = await verifyTypedData({
        address: from, domain: { name, version, chainId: this.#c.chainId, verifyingContract: this.#c.assetToken },
        types: AUTHORIZATION_TYPES, primaryType: 'TransferWithAuthorization', message: auth, signature,
      });
    } catch {
      good = false;
    }
    if (!good) return refuse(X402_REASONS.signature, `the signature is not ${from}'s over this authorization in the token's EIP-712 domain (${name}, ${version})`, from);
    return { ok: true, payer: from, auth, signature, requirements: req };
  }

  /** The chain's word: the nonce unused, the balance enough, and the call simulates. */
  async checkOnChain(c: Extract<Checked, { ok: true }>): Promise<Checked> {
    const { auth } = c;
    const token = this.#c.assetToken;
    const used = (await this.#client.readContract({ address: token, abi: TOKEN_ABI, functionName: 'authorizationState', args: [auth.from, auth.nonce] })) as boolean;
    if (used) return refuse(X402_REASONS.nonceUsed, `nonce ${auth.nonce} of ${auth.from} is already used on chain`, auth.from);
    const balance = (await this.#client.readContract({ address: token, abi: TOKEN_ABI, functionName: 'balanceOf', args: [auth.from] })) as bigint;
    if (balance < auth.value) return refuse(X402_REASONS.balance, `${auth.from} holds ${balance}, less than ${auth.value}`, auth.from);
    try {
      await this.#client.call({ account: this.#c.wallet, to: token, data: this.callData(c) });
    } catch (err) {
      return refuse(X402_REASONS.simulation, `transferWithAuthorization would revert: ${((err as { shortMessage?: string }).shortMessage ?? (err as Error).message).split('\n')[0]!.slice(0, 200)}`, auth.from);
    }
    return c;
  }

  callData(c: Extract<Checked, { ok: true }>): Hex {
    const a = c.auth;
    return encodeFunctionData({ abi: TOKEN_ABI, functionName: 'transferWithAuthorization', args: [a.from, a.to, a.value, a.validAfter, a.validBefore, a.nonce, c.signature] });
  }

  /**
   * Where a sent payment is, judged on every transaction sent for it (`detail`: {nonce, txs}; a fee-bumped replacement
   * or a re-sign into a nonce gap makes several): mined with the token's AuthorizationUsed and Transfer of exactly the
   * amount to the wallet (`hash` the one that paid; `final` once `confirmations` deep, 0: at the `finalized` block);
   * failed when every nonce it held is taken by a transaction of its own that did not pay (reverted: e.g. expired while
   * stuck); otherwise not mined.
   */
  async status(detail: string, payer: string, nonce: string, amount: bigint):
    Promise<{ state: 'unmined' } | { state: 'failed'; error: string } | { state: 'mined' | 'final'; block: bigint; hash: Hex }> {
    const d = parseTxDetail(detail);
    if (!d || d.txs.length === 0) return { state: 'failed', error: 'no transaction recorded for this payment' };
    const mined: Array<{ tx: { hash: Hex; raw: Hex }; receipt: TransactionReceipt }> = [];
    for (const tx of [...d.txs].reverse()) {
      const receipt = await this.#client.getTransactionReceipt({ hash: tx.hash }).catch(() => null);
      if (receipt) mined.push({ tx, receipt });
    }
    const paying = mined.find((m) => m.receipt.status === 'success' && this.#paid(m.receipt, payer, nonce, amount));
    if (!paying) {
      if (mined.length === 0) return { state: 'unmined' };
      const taken = new Set(mined.map((m) => txNonce(m.tx.raw)));
      if (d.txs.some((t) => !taken.has(txNonce(t.raw)))) return { state: 'unmined' }; // another of its nonces may still pay
      const r = mined[0]!.receipt;
      return { state: 'failed', error: r.status !== 'success'
        ? `transferWithAuthorization ${r.transactionHash} reverted in block ${r.blockNumber}`
        : `transaction ${r.transactionHash} mined without the authorization's transfer of ${amount} to ${this.#c.wallet}` };
    }
    const block = paying.receipt.blockNumber;
    const hash = paying.receipt.transactionHash;
    if (this.#c.confirmations > 0) {
      const latest = await this.#client.getBlockNumber({ cacheTime: 0 });
      return { state: latest - block + 1n >= BigInt(this.#c.confirmations) ? 'final' : 'mined', block, hash };
    }
    const finalized = await this.#client.getBlock({ blockTag: 'finalized' });
    return { state: finalized.number !== null && finalized.number >= block ? 'final' : 'mined', block, hash };
  }

  #paid(receipt: TransactionReceipt, payer: string, nonce: string, amount: bigint): boolean {
    let used = false;
    let moved = false;
    for (const l of receipt.logs) {
      if (!same(l.address, this.#c.assetToken)) continue;
      try {
        const ev = decodeEventLog({ abi: TOKEN_ABI, data: l.data, topics: l.topics });
        if (ev.eventName === 'AuthorizationUsed' && same(ev.args.authorizer, payer) && same(ev.args.nonce, nonce)) used = true;
        if (ev.eventName === 'Transfer' && same(ev.args.from, payer) && same(ev.args.to, this.#c.wallet) && ev.args.value === amount) moved = true;
      } catch {
        continue;
      }
    }
    return used && moved;
  }
}
