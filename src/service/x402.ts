// The x402 facilitator (issue #24): verify, settle and supported with x402 v2's shapes, on this daemon's escrow chain,
// asset token and wallet. Settle claims the authorization in the store before it sends (one transaction per
// (chain, token, payer, nonce), whichever daemon got the request), answers `success: true` only once the transaction is
// mined, and the tracker records the product's finality: settlement.checkpointed when mined, settlement.final (with a
// signed receipt) at --confirmations, on the stream `x402-<payer>-<resource hash>` of the node that asked.
import { createHash } from 'node:crypto';
import type { Hex } from 'viem';
import { log } from '../log.js';
import { newId } from '../domain/ids.js';
import { recordEvent } from '../store/events.js';
import { lockKey, type Sql, type Store } from '../store/sql.js';
import { x402Payments, type X402PaymentRow } from '../store/x402.js';
import { X402_REASONS, X402_VERSION, type Checked, type PaymentPayload, type PaymentRequirements, type X402Exact } from '../rails/escrow/x402.js';
import { issueReceipt } from './receipts.js';
import { raiseAlert, recoverAlert } from '../ops/alerts.js';
import { iso } from '../domain/time.js';
import { metrics } from '../ops/metrics.js';
import type { EscrowRail } from '../rails/escrow/adapter.js';
import { LeaseLost } from '../rails/settler.js';

export interface VerifyRequest { x402Version: number; paymentPayload: PaymentPayload; paymentRequirements: PaymentRequirements }
export interface VerifyResponse { isValid: boolean; invalidReason?: string; invalidMessage?: string; payer?: string }
export interface SettleResponse { success: boolean; errorReason?: string; errorMessage?: string; payer?: string; transaction: string; network: string; amount?: string }
export interface SupportedResponse { kinds: Array<{ x402Version: number; scheme: string; network: string; extra?: Record<string, unknown> }>; extensions: string[]; signers: Record<string, string[]> }

/** The escrow rail's sends from the daemon's wallet: the first one in its serialised nonce sequence, then resends as settles get (#11). */
export type X402Sender = Pick<EscrowRail, 'sendCall' | 'resendCall' | 'waitingCall'>;

export interface X402Options {
  /** How long settle waits for the transaction to be mined before it answers pending (ms). */
  settleWaitMs?: number;
  /** Tracker tick (ms). */
  tickMs?: number;
  /** Sent and not mined this long: settlement.stuck is raised (--settle-stuck-after). */
  stuckAfterMs?: number;
  now?: () => number;
}

/** A claim not sent after this long is taken over by the next settle of the same authorization (its daemon died). */
const STALE_CLAIM_MS = 120_000;

/** The budget every x402 stream reports (there is no allowance credential behind an x402 payment). */
export const X402_BUDGET = 'x402';

/** The stream an x402 payment bills: one per node, payer and resource (the resource URL hashed: ids stay short). */
export function x402Stream(payer: string, resource: string): string {
  return `x402-${payer.toLowerCase()}-${createHash('sha256').update(resource).digest('hex').slice(0, 16)}`;
}

export class X402Facilitator {
  readonly #store: Store;
  readonly #exact: X402Exact;
  readonly #sender: X402Sender;
  readonly #o: Required<Omit<X402Options, 'now'>>;
  readonly #now: () => number;
  #timer: NodeJS.Timeout | undefined;
  #running: Promise<void> | undefined;
  #stopped = false;

  constructor(store: Store, exact: X402Exact, sender: X402Sender, o: X402Options = {}) {
    this.#store = store;
    this.#exact = exact;
    this.#sender = sender;
    this.#o = { settleWaitMs: o.settleWaitMs ?? 10_000, tickMs: o.tickMs ?? 1000, stuckAfterMs: o.stuckAfterMs ?? 60_000 };
    this.#now = o.now ?? Date.now;
  }

  /** The CAIP-19 name of the asset every x402 stream and receipt names. */
  get asset(): string {
    return `${this.#exact.network}/erc20:${this.#exact.config.assetToken.toLowerCase()}`;
  }

  supported(): SupportedResponse {
    return { kinds: [{ x402Version: X402_VERSION, scheme: 'exact', network: this.#exact.network }], extensions: [], signers: { 'eip155:*': [this.#exact.config.wallet] } };
  }

  async #check(body: VerifyRequest): Promise<Checked> {
    if (body.x402Version !== X402_VERSION) return { ok: false, reason: X402_REASONS.version, message: `x402Version ${body.x402Version} is not supported (only ${X402_VERSION})` };
    const offline = await this.#exact.checkOffline(body.paymentPayload, body.paymentRequirements);
    if (!offline.ok) return offline;
    // Claimed here already (sent or on its way): used, even before the chain says so.
    const { chainId, assetToken } = this.#exact.config;
    const known = await x402Payments.get(this.#store.q, chainId, assetToken, offline.auth.from, offline.auth.nonce);
    if (known && known.status !== 'failed')
      return { ok: false, reason: X402_REASONS.nonceUsed, message: `nonce ${offline.auth.nonce} of ${offline.auth.from} is already being settled by this facilitator (${known.status})`, payer: offline.payer };
    return this.#exact.checkOnChain(offline);
  }

  /** x402 verify, counted in node_svc_x402_verify_total{result} (valid, or the invalidReason). */
  async verify(body: VerifyRequest): Promise<VerifyResponse> {
    const r = await this.#verify(body);
    metrics.x402Verify.inc({ result: r.isValid ? 'valid' : r.invalidReason ?? 'invalid' });
    return r;
  }

  async #verify(body: VerifyRequest): Promise<VerifyResponse> {
    let c: Checked;
    try {
      c = await this.#check(body);
    } catch (err) {
      return { isValid: false, invalidReason: X402_REASONS.unexpectedVerify, invalidMessage: `the chain could not be read: ${(err as Error).name}` };
    }
    return c.ok ? { isValid: true, payer: c.payer } : { isValid: false, invalidReason: c.reason, invalidMessage: c.message, ...(c.payer ? { payer: c.payer } : {}) };
  }

  /** x402 settle, counted in node_svc_x402_settle_total{outcome, reason}: success (mined), pending (sent, not mined) or failed (the errorReason). */
  async settle(node: string, body: VerifyRequest): Promise<SettleResponse> {
    const r = await this.#settle(node, body);
    const pending = r.errorReason === X402_REASONS.pending;
    metrics.x402Settle.inc(r.success ? { outcome: 'success', reason: 'none' } : { outcome: pending ? 'pending' : 'failed', reason: r.errorReason ?? 'unknown' });
    return r;
  }

  async #settle(node: string, body: VerifyRequest): Promise<SettleResponse> {
    const network = this.#exact.network;
    const refused = (reason: string, message: string, payer?: string, transaction = ''): SettleResponse =>
      ({ success: false, errorReason: reason, errorMessage: message, ...(payer ? { payer } : {}), transaction, network });
    const offline = body.x402Version !== X402_VERSION
      ? ({ ok: false, reason: X402_REASONS.version, message: `x402Version ${body.x402Version} is not supported (only ${X402_VERSION})` } as Checked)
      : await this.#exact.checkOffline(body.paymentPayload, body.paymentRequirements);
    if (!offline.ok) return refused(offline.reason, offline.message, offline.payer);
    const { auth } = offline;
    const { chainId, assetToken } = this.#exact.config;
    // Already claimed (a retry, a concurrent request, another daemon): answer from its row, send nothing.
    const known = await x402Payments.get(this.#store.q, chainId, assetToken, auth.from, auth.nonce);
    const stale = known?.status === 'claimed' && Number(known.created_at) < this.#now() - STALE_CLAIM_MS;
    if (known && !stale) return this.#answerFor(node, known, offline.payer);
    let checked: Checked;
    try {
      checked = await this.#exact.checkOnChain(offline);
    } catch (err) {
      return refused(X402_REASONS.unexpectedSettle, `the chain could not be read: ${(err as Error).name}`, auth.from);
    }
    if (!checked.ok) return refused(checked.reason, checked.message, checked.payer);
    const resource = body.paymentPayload.resource?.url ?? '';
    const id = newId('x4p');
    const claim = {
      chainId, token: assetToken, payer: auth.from, nonce: auth.nonce, id, nodeId: node, resource, stream: x402Stream(auth.from, resource),
      payTo: auth.to, amount: auth.value, validBefore: auth.validBefore, now: this.#now(),
    };
    const claimed = await this.#store.write(async (tx) => (await x402Payments.claim(tx, claim)) || x402Payments.takeStale(tx, claim, claim.now - STALE_CLAIM_MS));
    if (!claimed) {
      const row = await x402Payments.get(this.#store.q, chainId, assetToken, auth.from, auth.nonce);
      return row ? this.#answerFor(node, row, auth.from) : refused(X402_REASONS.unexpectedSettle, 'the claim of this authorization vanished', auth.from);
    }
    try {
      await this.#sender.sendCall(assetToken, this.#exact.callData(checked), async (tx) => {
        // Durable before it leaves the process; refused (nothing sent) when the claim was taken over meanwhile.
        if (!(await this.#store.write((q) => x402Payments.submitted(q, id, tx.hash, tx.raw, tx.detail, this.#now())))) throw new Error('the claim of this authorization was taken over');
      });
    } catch (err) {
      const message = ((err as { shortMessage?: string }).shortMessage ?? (err as Error).message ?? 'error').split('\n')[0]!.slice(0, 200);
      const row = await x402Payments.byId(this.#store.q, id);
      if (row?.status === 'submitted') return this.#answerFor(node, row, auth.from); // sent; the answer was lost: the tracker finds out
      await this.#store.write((q) => x402Payments.unclaim(q, id)); // nothing left the process: the authorization may be settled again
      log.warn('x402 settle not sent', { payment: id, error: message });
      return refused(X402_REASONS.failed, `transferWithAuthorization was not sent: ${message}`, auth.from);
    }
    return this.#answerFor(node, (await x402Payments.byId(this.#store.q, id))!, auth.from);
  }

  /**
   * The answer for a claimed authorization: mined → success with the transaction; sent and not mined within the wait →
   * pending (success false, errorReason settlement_pending, the transaction); failed → its error. Another node's
   * payment is refused as a used nonce (a replay must not buy a second resource).
   */
  async #answerFor(node: string, row: X402PaymentRow, payer: string): Promise<SettleResponse> {
    const network = this.#exact.network;
    if (row.node_id !== node) return { success: false, errorReason: X402_REASONS.nonceUsed, errorMessage: 'this authorization was settled for another node', payer, transaction: '', network };
    let r: X402PaymentRow = row;
    // Bounded: at most settleWaitMs, polling the chain every 100 ms (ganache mines at once; a real chain takes a block).
    const until = Date.now() + this.#o.settleWaitMs;
    while ((r.status === 'submitted' || r.status === 'claimed') && Date.now() < until) {
      if (r.status === 'submitted') await this.#advance(r, false).catch((err) => log.warn('x402 payment status unavailable', { payment: r.id, error: (err as Error).message }));
      const now = await x402Payments.byId(this.#store.q, row.id);
      if (!now) return { success: false, errorReason: X402_REASONS.failed, errorMessage: 'transferWithAuthorization was not sent (the claim was dropped); settle again', payer, transaction: '', network };
      r = now;
      if (r.status === 'submitted' || r.status === 'claimed') await new Promise((res) => setTimeout(res, 100));
    }
    const tx = r.tx_hash ?? '';
    if (r.status === 'checkpointed' || r.status === 'final') return { success: true, payer, transaction: tx, network, amount: r.amount_micro.toString() };
    if (r.status === 'failed') return { success: false, errorReason: X402_REASONS.failed, errorMessage: r.error ?? 'failed', payer, transaction: tx, network };
    return { success: false, errorReason: X402_REASONS.pending, errorMessage: 'sent and not mined yet: not paid until it is (ask settle again with the same payload for its state)', payer, transaction: tx, network };
  }

  /** Read a sent payment's transaction and record what moved (one event per move: the updates are conditional). */
  async #advance(row: X402PaymentRow, resend = true): Promise<void> {
    const detail = row.detail ?? row.raw_tx;
    if (!detail) return;
    const st = await this.#exact.status(detail, row.payer, row.nonce, row.amount_micro);
    const now = this.#now();
    const stream = row.stream ?? x402Stream(row.payer, row.resource);
    const alert = { key: `x402:${row.id}`, ref: `stream:${stream}` };
    const subject = { node: row.node_id, stream, settlement: row.id, rail: 'escrow', asset: this.asset, amountMicro: row.amount_micro.toString() };
    // Resent (and stuck raised) by the tracker only: a settle request waiting for its answer just reads.
    if (st.state === 'unmined') return resend ? this.#unmined(row, now, alert, subject) : undefined;
    // Paid, it is not final while one of its own transactions waits at a nonce the chain has not reached (its first one,
    // above a gap fill that paid): it stays checkpointed, so that nonce stays held, and the rail sends that transaction
    // again, then replaces it, as a settlement's (EscrowRail.waitingCall). The tracker's call: a settle request waiting
    // for its answer records checkpointed, never final. (Failed: every nonce it held was mined by its own transactions.)
    const waiting = resend && st.state !== 'failed'
      ? await this.#sender.waitingCall({ id: row.id, detail, lastBroadcastAt: Number(row.last_broadcast_at ?? row.created_at), what: { payment: row.id } },
        (tx, next) => x402Payments.transactions(tx, row.id, next))
      : undefined;
    const final = st.state === 'final' && resend && waiting === undefined;
    await this.#store.write(async (tx) => {
      if (st.state === 'failed') {
        await x402Payments.failed(tx, row.id, st.error);
        return;
      }
      await lockKey(tx, `x402:${row.node_id}:${stream}`);
      // The transaction that paid is the reference (a fee-bumped replacement or a gap fill may have mined, not the first).
      if (row.status === 'submitted' && st.hash.toLowerCase() !== row.tx_hash?.toLowerCase()) await x402Payments.minedAs(tx, row.id, st.hash);
      if (row.status === 'submitted' && (await x402Payments.checkpointed(tx, row.id, st.block, now))) {
        await recordEvent(tx, row.node_id, 'settlement.checkpointed', `stream:${stream}`, await this.#data(tx, row, stream, st.hash, 'checkpointed'), now);
        await recoverAlert(tx, { ...alert, from: ['settlement.stuck'], kind: 'settlement.recovered', now,
          data: (was) => ({ ...subject, reference: st.hash, recovered: was.kind, since: iso(was.since), checkpointedAt: iso(now) }) });
      }
      if (final && (await x402Payments.final(tx, row.id, now))) {
        const data = await this.#data(tx, row, stream, st.hash, 'final');
        const receipt = await issueReceipt(tx, {
          jti: row.id, node: row.node_id, stream, asset: this.asset, amountMicro: BigInt(data.amountMicro), finalAt: now,
          reference: { rail: 'escrow', chainId: this.#exact.config.chainId, contract: this.#exact.config.assetToken.toLowerCase(), txHash: st.hash, blockNumber: Number(st.block) },
        }, now);
        await recordEvent(tx, row.node_id, 'settlement.final', `stream:${stream}`, { ...data, receipt }, now);
      }
    });
  }

  /**
   * Not mined: the escrow rail resends it as it does a settle (#11: resent when the chain lost it, rebroadcast every
   * --rebroadcast-after, then replaced at the same nonce with higher fees, re-signed into a nonce gap, never onto a nonce
   * another settlement or payment holds); its transactions are recorded here before they leave. Stuck raised once.
   */
  async #unmined(row: X402PaymentRow, now: number, alert: { key: string; ref: string }, subject: Record<string, unknown>): Promise<void> {
    if (row.status !== 'submitted') return;
    const r = await this.#sender.resendCall(
      { id: row.id, detail: (row.detail ?? row.raw_tx)!, attempts: Number(row.broadcasts), lastBroadcastAt: Number(row.last_broadcast_at ?? row.created_at), what: { payment: row.id } },
      (tx, detail) => x402Payments.transactions(tx, row.id, detail),
    );
    if (r.state === 'failed') {
      await this.#store.write((tx) => x402Payments.failed(tx, row.id, r.error));
      log.warn('x402 settlement failed', { payment: row.id, error: r.error });
      return;
    }
    if (r.state === 'submitted' && r.rebroadcast) {
      const { reference, detail, note } = r.rebroadcast;
      await this.#store.write((tx) => x402Payments.rebroadcast(tx, row.id, now, reference, detail, note));
      log.info('x402 settlement rebroadcast', { payment: row.id, reference, note });
      row = { ...row, broadcasts: row.broadcasts + 1n, tx_hash: reference };
    } else if (r.state === 'submitted' && r.note) log.debug('x402 settlement not resent', { payment: row.id, note: r.note });
    if (now - Number(row.created_at) > this.#o.stuckAfterMs) {
      await this.#store.write((tx) => raiseAlert(tx, { ...alert, kind: 'settlement.stuck', node: row.node_id, now, data: {
        ...subject, reference: row.tx_hash, sentAt: iso(Number(row.created_at)), stuckAfterSeconds: Math.round(this.#o.stuckAfterMs / 1000), broadcasts: Number(row.broadcasts),
      } }));
    }
  }

  /** Event data: amountMicro is the stream's cumulative amount at that finality (the sum of its payments there). */
  async #data(tx: Sql, row: X402PaymentRow, stream: string, reference: string, at: 'checkpointed' | 'final') {
    const statuses = at === 'final' ? "('final')" : "('checkpointed', 'final')";
    const total = (await tx.value<bigint | null>(`SELECT CAST(SUM(amount_micro) AS BIGINT) AS a FROM x402_payments WHERE node_id = ? AND stream = ? AND status IN ${statuses}`, [row.node_id, stream], true)) ?? 0n;
    return {
      stream, budget: X402_BUDGET, asset: this.asset, amountMicro: BigInt(total).toString(), reference,
      x402: { payment: row.id, payer: row.payer, resource: row.resource, paidMicro: row.amount_micro.toString() },
    };
  }

  /** One pass over the payments sent and not final. */
  async tick(): Promise<void> {
    for (const row of await x402Payments.open(this.#store.q)) {
      if (this.#stopped) return;
      try {
        await this.#advance(row);
      } catch (err) {
        // Another daemon holds the wallet's settlement lease: it replaces and re-signs this wallet's transactions.
        if (err instanceof LeaseLost) log.debug('x402 payment not resent here: another daemon holds the settlement lease', { payment: row.id });
        else log.warn('x402 payment status unavailable', { payment: row.id, error: (err as Error).message });
      }
    }
  }

  start(): void {
    const loop = () => {
      if (this.#stopped) return;
      this.#running = this.tick().catch((err) => log.warn('x402 tick failed', { error: (err as Error).message })).finally(() => {
        this.#running = undefined;
        if (!this.#stopped) this.#timer = setTimeout(loop, this.#o.tickMs);
      });
    };
    loop();
  }

  async stop(): Promise<void> {
    this.#stopped = true;
    if (this.#timer) clearTimeout(this.#timer);
    await this.#running;
  }
}
