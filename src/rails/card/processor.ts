// A LOCAL card processor for tests and `node-svc dev --mode card`: node:http on 127.0.0.1 speaking the subset of
// the processor's REST API (v1, form-encoded requests as the official SDK sends them) that the card rail uses, with
// bodies shaped like the processor's documented objects (account, balance, payment_intent, charge,
// balance_transaction, refund, event, list) and its error body `{error: {type, code, message, param}}`.
// Idempotency keys are honoured (same key + same request → the saved answer; different request → 400).
// Test controls (JS methods, and the same under `/__control/*` as JSON over HTTP) create accounts and authorized
// PaymentIntents, make a capture's funds available, refund, and sign + send processor webhooks.
// Money is integers (minor units) throughout, as on the real API.
import { createHmac, randomBytes } from 'node:crypto';
import { createServer, type IncomingMessage, type Server, type ServerResponse } from 'node:http';
import type { AddressInfo } from 'node:net';

const API_VERSION = '2026-10-28.endive';
const DAY = 86_400;

type Obj = Record<string, unknown>;

export interface LocalAccount { id: string; object: 'account'; livemode: boolean; [k: string]: unknown }

interface PI {
  id: string; livemode: boolean; amount: number; amount_capturable: number; amount_received: number; currency: string;
  status: string; created: number; capture_method: string; multicapture: boolean; destination: string; charge: string; metadata: Obj;
  canceled_at: number | null; cancellation_reason: string | null;
}
interface Charge {
  id: string; livemode: boolean; amount: number; amount_captured: number; amount_refunded: number; currency: string; created: number;
  payment_intent: string; captured: boolean; status: string; destination: string; capture_before: number | null; multicapture: boolean; bts: string[];
}
interface BT { id: string; livemode: boolean; amount: number; currency: string; created: number; available_on: number; source: string; status: 'pending' | 'available'; type: string }
interface Refund { id: string; livemode: boolean; amount: number; currency: string; created: number; charge: string; payment_intent: string; status: string; balance_transaction: string | null }

export interface CreatePaymentIntentOptions {
  amount: number;
  currency?: string;
  /** The connected account (transfer_data.destination). */
  destination: string;
  livemode?: boolean;
  captureMethod?: 'manual' | 'automatic';
  /** request_multicapture: if_available (default true). */
  multicapture?: boolean;
  /** Unix seconds; default now. */
  created?: number;
  /** Unix seconds: the card's capture deadline (payment_method_details.card.capture_before); default created + 7 d. */
  captureBefore?: number | null;
}

export interface LocalProcessor {
  /** `http://127.0.0.1:PORT` (give it to the rail as --card-api). */
  url: string;
  port: number;
  /** A fresh test-mode secret key (any sk_test_/rk_test_ key is accepted; sk_live_/rk_live_ keys see live mode). */
  testKey: string;
  createAccount(id?: string, opts?: { livemode?: boolean }): LocalAccount;
  /** An authorized PaymentIntent (status requires_capture) with its uncaptured charge, as a payer would leave it. */
  createPaymentIntent(o: CreatePaymentIntentOptions): Obj;
  paymentIntent(id: string): Obj | undefined;
  charge(id: string): Obj | undefined;
  balanceTransactions(source?: string): Obj[];
  /** Move a balance transaction's funds to `available` (what the processor does on its availability date). */
  makeAvailable(balanceTransactionId: string): Obj;
  /** Refund `amount` minor units of a PaymentIntent's captured funds (status `succeeded` unless given). */
  refund(paymentIntent: string, amount: number, status?: 'succeeded' | 'pending'): Obj;
  setRefundStatus(refundId: string, status: 'succeeded' | 'failed' | 'canceled'): Obj;
  /** The processor's Event for `type` about `object`. */
  event(type: string, object: Obj, livemode?: boolean): Obj;
  /** The `Stripe-Signature` header value for `payload` (t=…,v1=HMAC-SHA256(secret, `${t}.${payload}`)). */
  sign(payload: string, secret: string, t?: number): string;
  /** POST a signed event to `url`; `badSignature` signs with another secret. Resolves with the HTTP status and body. */
  sendWebhook(url: string, secret: string, event: Obj, opts?: { badSignature?: boolean; t?: number }): Promise<{ status: number; body: string }>;
  /** Every API request seen (method, path, idempotency key), oldest first. */
  readonly requests: Array<{ method: string; path: string; idempotencyKey?: string }>;
  /** Fail the next `n` requests whose path matches with a 500 after doing nothing, or drop the answer after doing the work. */
  failNext(match: RegExp, how: 'error' | 'lose-answer', n?: number): void;
  /** Drop every fault not yet used. */
  clearFaults(): void;
  close(): Promise<void>;
}

class ApiError extends Error {
  constructor(readonly status: number, readonly type: string, message: string, readonly code?: string, readonly param?: string) {
    super(message);
  }
}

const rid = (prefix: string) => `${prefix}_${randomBytes(12).toString('base64url').replace(/[-_]/g, 'x')}`;
const now = () => Math.floor(Date.now() / 1000);

/** Parse a form-encoded (or query) string into a nested object: `a[b]=1`, `expand[0]=x` / `expand[]=x` → arrays. */
export function parseForm(text: string): Obj {
  const out: Obj = {};
  for (const [rawKey, value] of new URLSearchParams(text)) {
    const parts = rawKey.replace(/\]/g, '').split('[');
    let cur: Obj = out;
    for (let i = 0; i < parts.length; i++) {
      const k = parts[i]!;
      const last = i === parts.length - 1;
      const nextIsIndex = !last && /^\d*$/.test(parts[i + 1]!);
      if (Array.isArray(cur)) {
        if (last) (cur as unknown[]).push(value);
        else {
          const child = nextIsIndex ? [] : {};
          (cur as unknown[]).push(child);
          cur = child as Obj;
        }
        continue;
      }
      if (last) cur[k] = value;
      else cur = (cur[k] ??= nextIsIndex ? [] : {}) as Obj;
    }
  }
  return out;
}

export async function startLocalProcessor(opts: { port?: number } = {}): Promise<LocalProcessor> {
  const accounts = new Map<string, LocalAccount>();
  const pis = new Map<string, PI>();
  const charges = new Map<string, Charge>();
  const bts = new Map<string, BT>();
  const refunds = new Map<string, Refund>();
  const idem = new Map<string, { fingerprint: string; status: number; body: string }>();
  const requests: LocalProcessor['requests'] = [];
  const faults: Array<{ match: RegExp; how: 'error' | 'lose-answer'; n: number }> = [];

  // ---- object renderers (the documented shapes) ----
  const btObj = (b: BT): Obj => ({
    id: b.id, object: 'balance_transaction', amount: b.amount, available_on: b.available_on, balance_type: 'payments', created: b.created, currency: b.currency,
    description: null, exchange_rate: null, fee: 0, fee_details: [], net: b.amount, reporting_category: b.type === 'refund' ? 'refund' : 'charge',
    source: b.source, status: b.status, type: b.type,
  });
  const chargeObj = (c: Charge, expand: string[] = []): Obj => ({
    id: c.id, object: 'charge', amount: c.amount, amount_captured: c.amount_captured, amount_refunded: c.amount_refunded, application: null,
    application_fee: null, application_fee_amount: null,
    balance_transaction: c.bts[0] ? (expand.includes('balance_transaction') ? btObj(bts.get(c.bts[0])!) : c.bts[0]) : null,
    billing_details: { address: null, email: null, name: null, phone: null }, calculated_statement_descriptor: 'NODE-SVC', captured: c.captured,
    created: c.created, currency: c.currency, customer: null, description: null, destination: c.destination, disputed: false, failure_code: null,
    failure_message: null, livemode: c.livemode, metadata: {}, on_behalf_of: null, outcome: { network_status: 'approved_by_network', type: 'authorized' },
    paid: true, payment_intent: c.payment_intent, payment_method: `pm_${c.id.slice(3)}`,
    payment_method_details: {
      type: 'card',
      card: {
        brand: 'visa', country: 'US', exp_month: 12, exp_year: 2034, funding: 'credit', last4: '4242', network: 'visa',
        ...(c.capture_before !== null ? { capture_before: c.capture_before } : {}),
        multicapture: { status: c.multicapture ? 'available' : 'unavailable' },
      },
    },
    refunded: c.amount_captured > 0 && c.amount_refunded >= c.amount_captured, status: c.status, transfer_data: { amount: null, destination: c.destination },
    transfer_group: `group_${c.payment_intent}`,
  });
  const piObj = (p: PI, expand: string[] = []): Obj => ({
    id: p.id, object: 'payment_intent', amount: p.amount, amount_capturable: p.amount_capturable, amount_received: p.amount_received,
    application: null, application_fee_amount: null, canceled_at: p.canceled_at, cancellation_reason: p.cancellation_reason, capture_method: p.capture_method,
    client_secret: `${p.id}_secret_local`, confirmation_method: 'automatic', created: p.created, currency: p.currency, customer: null,
    description: null, last_payment_error: null,
    latest_charge: expand.includes('latest_charge') ? chargeObj(charges.get(p.charge)!, expand.filter((e) => e.startsWith('latest_charge.')).map((e) => e.slice(14))) : p.charge,
    livemode: p.livemode, metadata: p.metadata, next_action: null, on_behalf_of: null, payment_method: `pm_${p.charge.slice(3)}`,
    payment_method_options: { card: { capture_method: null, request_multicapture: p.multicapture ? 'if_available' : 'never', request_three_d_secure: 'automatic' } },
    payment_method_types: ['card'], status: p.status, transfer_data: { destination: p.destination }, transfer_group: `group_${p.id}`,
  });
  const refundObj = (r: Refund): Obj => ({
    id: r.id, object: 'refund', amount: r.amount, balance_transaction: r.balance_transaction, charge: r.charge, created: r.created, currency: r.currency,
    destination_details: { type: 'card', card: { type: 'refund' } }, metadata: {}, payment_intent: r.payment_intent, reason: null, receipt_number: null,
    source_transfer_reversal: null, status: r.status, transfer_reversal: null,
  });
  const list = (url: string, items: Obj[], limit: number, startingAfter?: string): Obj => {
    let from = 0;
    if (startingAfter) from = items.findIndex((i) => i.id === startingAfter) + 1;
    const page = items.slice(from, from + limit);
    return { object: 'list', data: page, has_more: from + limit < items.length, url };
  };

  const missing = (kind: string, id: string, param = 'id') => new ApiError(404, 'invalid_request_error', `No such ${kind}: '${id}'`, 'resource_missing', param);
  const visible = <T extends { livemode: boolean }>(o: T | undefined, live: boolean, kind: string, id: string): T => {
    if (!o || o.livemode !== live) throw missing(kind, id); // test objects are invisible to live keys and vice versa
    return o;
  };
  const int = (v: unknown, param: string, min = 1): number => {
    if (typeof v !== 'string' || !/^\d{1,15}$/.test(v) || Number(v) < min) throw new ApiError(400, 'invalid_request_error', `Invalid integer: ${String(v)}`, 'parameter_invalid_integer', param);
    return Number(v);
  };
  const bool = (v: unknown, param: string, dflt: boolean): boolean => {
    if (v === undefined) return dflt;
    if (v === 'true' || v === 'false') return v === 'true';
    throw new ApiError(400, 'invalid_request_error', `Invalid boolean: ${String(v)}`, 'parameter_invalid_boolean', param);
  };
  const expandOf = (p: Obj): string[] => (Array.isArray(p.expand) ? (p.expand as string[]) : typeof p.expand === 'string' ? [p.expand] : []);

  // ---- state changes (shared by the API and the test controls) ----
  function capture(p: PI, amountToCapture: number | undefined, finalCapture: boolean): void {
    if (p.status !== 'requires_capture')
      throw new ApiError(400, 'invalid_request_error', `This PaymentIntent could not be captured because it has a status of ${p.status}. Only a PaymentIntent with one of the following statuses may be captured: requires_capture.`, 'payment_intent_unexpected_state');
    const amount = amountToCapture ?? p.amount_capturable;
    if (amount > p.amount_capturable)
      throw new ApiError(400, 'invalid_request_error', `The amount_to_capture (${amount}) must be less than or equal to the amount_capturable (${p.amount_capturable}).`, 'amount_too_large', 'amount_to_capture');
    if (!finalCapture && !p.multicapture)
      throw new ApiError(400, 'invalid_request_error', 'final_capture=false is only allowed for PaymentIntents with multicapture available.', 'parameter_invalid', 'final_capture');
    const c = charges.get(p.charge)!;
    const t = now();
    const bt: BT = { id: rid('txn'), livemode: p.livemode, amount, currency: p.currency, created: t, available_on: t + 2 * DAY, source: c.id, status: 'pending', type: 'charge' };
    bts.set(bt.id, bt);
    c.bts.push(bt.id);
    c.amount_captured += amount;
    c.captured = true;
    p.amount_received += amount;
    p.amount_capturable -= amount;
    if (finalCapture || p.amount_capturable === 0) {
      p.amount_capturable = 0; // the rest of the authorization is released
      p.status = 'succeeded';
    }
  }

  // Cancel (POST /v1/payment_intents/:id/cancel): allowed in these statuses only. On a `requires_capture` intent the
  // remaining amount_capturable is released (the processor's API reference: "automatically refunded"). An intent with
  // nothing captured ends `canceled`; a multicapture intent already partly captured keeps its captures and ends
  // `succeeded` with nothing left to capture (its charge stays captured for what was captured).
  const CANCELABLE = ['requires_payment_method', 'requires_capture', 'requires_confirmation', 'requires_action', 'processing'];
  const CANCELLATION_REASONS = ['duplicate', 'fraudulent', 'requested_by_customer', 'abandoned'];
  function cancel(p: PI, reason: string | undefined): void {
    if (reason !== undefined && !CANCELLATION_REASONS.includes(reason))
      throw new ApiError(400, 'invalid_request_error', `Invalid cancellation_reason: must be one of ${CANCELLATION_REASONS.join(', ')}`, 'parameter_invalid_string', 'cancellation_reason');
    if (!CANCELABLE.includes(p.status))
      throw new ApiError(400, 'invalid_request_error', `You cannot cancel this PaymentIntent because it has a status of ${p.status}. Only a PaymentIntent with one of the following statuses may be canceled: ${CANCELABLE.join(', ')}.`, 'payment_intent_unexpected_state');
    p.amount_capturable = 0;
    if (p.amount_received > 0) p.status = 'succeeded';
    else {
      p.status = 'canceled';
      p.canceled_at = now();
      p.cancellation_reason = reason ?? null;
    }
  }

  function createRefund(p: PI, amount: number | undefined, status: string): Refund {
    const c = charges.get(p.charge)!;
    const refundable = c.amount_captured - c.amount_refunded;
    const amt = amount ?? refundable;
    if (amt <= 0 || amt > refundable)
      throw new ApiError(400, 'invalid_request_error', `Refund amount (${amt}) is greater than unrefunded amount on charge (${refundable})`, 'amount_too_large', 'amount');
    const t = now();
    const bt: BT = { id: rid('txn'), livemode: p.livemode, amount: -amt, currency: p.currency, created: t, available_on: t, source: '', status: 'available', type: 'refund' };
    const r: Refund = { id: rid('re'), livemode: p.livemode, amount: amt, currency: p.currency, created: t, charge: c.id, payment_intent: p.id, status, balance_transaction: bt.id };
    bt.source = r.id;
    bts.set(bt.id, bt);
    refunds.set(r.id, r);
    c.amount_refunded += amt;
    return r;
  }

  // ---- the REST API ----
  async function api(method: string, path: string, params: Obj, live: boolean): Promise<{ status: number; body: Obj }> {
    const seg = path.split('/').filter(Boolean); // ['v1', ...]
    const expand = expandOf(params);
    const limit = params.limit === undefined ? 10 : Math.min(100, int(params.limit, 'limit'));
    const after = typeof params.starting_after === 'string' ? params.starting_after : undefined;
    const ok = (body: Obj) => ({ status: 200, body });
    if (method === 'GET' && seg[1] === 'accounts' && seg.length === 3) {
      const a = accounts.get(seg[2]!);
      if (!a || a.livemode !== live) throw new ApiError(404, 'invalid_request_error', `No such account: '${seg[2]}'`, 'account_invalid', 'account');
      const { livemode: _l, ...rest } = a;
      return ok(rest);
    }
    if (method === 'GET' && seg[1] === 'balance' && seg.length === 2) {
      const sum = (status: BT['status']) => {
        const by = new Map<string, number>();
        for (const b of bts.values()) if (b.livemode === live && b.status === status) by.set(b.currency, (by.get(b.currency) ?? 0) + b.amount);
        return [...by].map(([currency, amount]) => ({ amount, currency, source_types: { card: amount } }));
      };
      return ok({ object: 'balance', available: sum('available'), livemode: live, pending: sum('pending') });
    }
    if (seg[1] === 'payment_intents' && seg[2]) {
      const p = visible(pis.get(seg[2]), live, 'payment_intent', seg[2]);
      if (method === 'GET' && seg.length === 3) return ok(piObj(p, expand));
      if (method === 'POST' && seg[3] === 'capture' && seg.length === 4) {
        const amt = params.amount_to_capture === undefined ? undefined : int(params.amount_to_capture, 'amount_to_capture');
        capture(p, amt, bool(params.final_capture, 'final_capture', true));
        return ok(piObj(p, expand));
      }
      if (method === 'POST' && seg[3] === 'cancel' && seg.length === 4) {
        cancel(p, typeof params.cancellation_reason === 'string' ? params.cancellation_reason : undefined);
        return ok(piObj(p, expand));
      }
    }
    if (method === 'GET' && seg[1] === 'charges' && seg.length === 3) return ok(chargeObj(visible(charges.get(seg[2]!), live, 'charge', seg[2]!), expand));
    if (method === 'GET' && seg[1] === 'balance_transactions') {
      if (seg.length === 3) return ok(btObj(visible(bts.get(seg[2]!), live, 'balance_transaction', seg[2]!)));
      const items = [...bts.values()].filter((b) => b.livemode === live && (params.source === undefined || b.source === params.source)).reverse(); // newest first
      return ok(list('/v1/balance_transactions', items.map(btObj), limit, after));
    }
    if (seg[1] === 'refunds') {
      if (method === 'GET' && seg.length === 3) return ok(refundObj(visible(refunds.get(seg[2]!), live, 'refund', seg[2]!)));
      if (method === 'GET' && seg.length === 2) {
        const items = [...refunds.values()].filter((r) => r.livemode === live && (params.payment_intent === undefined || r.payment_intent === params.payment_intent)
          && (params.charge === undefined || r.charge === params.charge)).reverse();
        return ok(list('/v1/refunds', items.map(refundObj), limit, after));
      }
      if (method === 'POST' && seg.length === 2) {
        if (typeof params.payment_intent !== 'string') throw new ApiError(400, 'invalid_request_error', 'One of `charge` or `payment_intent` is required.', 'parameter_missing', 'payment_intent');
        const p = visible(pis.get(params.payment_intent), live, 'payment_intent', params.payment_intent);
        return ok(refundObj(createRefund(p, params.amount === undefined ? undefined : int(params.amount, 'amount'), 'succeeded')));
      }
    }
    throw new ApiError(404, 'invalid_request_error', `Unrecognized request URL (${method}: ${path}).`);
  }

  function controls(method: string, seg: string[], body: Obj): unknown {
    const [, what, id, action] = seg;
    if (method === 'POST' && what === 'accounts') return ctl.createAccount(body.id as string | undefined, { livemode: !!body.livemode });
    if (method === 'POST' && what === 'payment_intents') return ctl.createPaymentIntent(body as unknown as CreatePaymentIntentOptions);
    if (method === 'POST' && what === 'balance_transactions' && id && action === 'available') return ctl.makeAvailable(id);
    if (method === 'POST' && what === 'refunds' && !id) return ctl.refund(String(body.payment_intent), Number(body.amount), (body.status as 'pending') ?? 'succeeded');
    if (method === 'POST' && what === 'refunds' && id && action === 'status') return ctl.setRefundStatus(id, body.status as 'succeeded');
    if (method === 'POST' && what === 'webhooks') {
      return ctl.sendWebhook(String(body.url), String(body.secret), ctl.event(String(body.type), (body.object as Obj) ?? {}, !!body.livemode), { badSignature: !!body.badSignature });
    }
    throw new ApiError(404, 'invalid_request_error', `no such control: ${method} /${seg.join('/')}`);
  }

  const send = (res: ServerResponse, status: number, body: string, headers: Record<string, string> = {}) => {
    res.writeHead(status, { 'content-type': 'application/json', 'request-id': rid('req'), 'stripe-version': API_VERSION, ...headers });
    res.end(body);
  };
  const errorBody = (e: ApiError) => JSON.stringify({ error: { type: e.type, message: e.message, ...(e.code ? { code: e.code } : {}), ...(e.param ? { param: e.param } : {}) } });

  async function handle(req: IncomingMessage, res: ServerResponse): Promise<void> {
    const chunks: Buffer[] = [];
    for await (const c of req) chunks.push(c as Buffer);
    const raw = Buffer.concat(chunks).toString('utf8');
    const url = new URL(req.url ?? '/', 'http://local');
    const method = req.method ?? 'GET';
    const seg = url.pathname.split('/').filter(Boolean);
    if (seg[0] === '__control') {
      try {
        const result = await controls(method, seg, raw ? (JSON.parse(raw) as Obj) : {});
        return send(res, 200, JSON.stringify(result ?? {}));
      } catch (e) {
        const err = e instanceof ApiError ? e : new ApiError(400, 'invalid_request_error', (e as Error).message);
        return send(res, err.status, errorBody(err));
      }
    }
    const idempotencyKey = (req.headers['idempotency-key'] as string | undefined) || undefined;
    requests.push({ method, path: url.pathname, ...(idempotencyKey ? { idempotencyKey } : {}) });
    const auth = /^Bearer ((?:sk|rk)_(test|live)_[A-Za-z0-9_]+)$/.exec(req.headers.authorization ?? '');
    if (!auth) {
      return send(res, 401, errorBody(new ApiError(401, 'invalid_request_error', 'Invalid API Key provided.', 'api_key_invalid')));
    }
    const live = auth[2] === 'live';
    const fault = faults.find((f) => f.n > 0 && f.match.test(url.pathname));
    if (fault) fault.n--;
    if (fault?.how === 'error') return send(res, 500, errorBody(new ApiError(500, 'api_error', 'An unknown error occurred (injected).')));
    const params = method === 'GET' || method === 'DELETE' ? parseForm(url.search.slice(1)) : parseForm(raw);
    const fingerprint = `${method} ${url.pathname} ${raw}`;
    const idemKey = idempotencyKey && method === 'POST' ? `${live}:${idempotencyKey}` : undefined;
    let status: number;
    let body: string;
    const saved = idemKey ? idem.get(idemKey) : undefined;
    if (saved && saved.fingerprint !== fingerprint) {
      status = 400;
      body = errorBody(new ApiError(400, 'idempotency_error', `Keys for idempotent requests can only be used with the same parameters they were first used with. Try using a key other than '${idempotencyKey}' if you meant to execute a different request.`));
    } else if (saved) {
      ({ status, body } = saved);
      if (fault?.how === 'lose-answer') return void res.destroy();
      return send(res, status, body, { 'idempotent-replayed': 'true', 'idempotency-key': idempotencyKey! });
    } else {
      try {
        const r = await api(method, url.pathname, params, live);
        status = r.status;
        body = JSON.stringify(r.body);
      } catch (e) {
        const err = e instanceof ApiError ? e : new ApiError(500, 'api_error', 'An unknown error occurred.');
        status = err.status;
        body = errorBody(err);
      }
      if (idemKey && status < 500) idem.set(idemKey, { fingerprint, status, body });
    }
    if (fault?.how === 'lose-answer') return void res.destroy(); // the work is done, the answer never arrives
    send(res, status, body, idempotencyKey ? { 'idempotency-key': idempotencyKey } : {});
  }

  const server: Server = createServer((req, res) => {
    handle(req, res).catch(() => {
      if (!res.headersSent) send(res, 500, errorBody(new ApiError(500, 'api_error', 'An unknown error occurred.')));
    });
  });
  server.keepAliveTimeout = 1000;
  await new Promise<void>((resolve, reject) => {
    server.once('error', reject);
    server.listen(opts.port ?? 0, '127.0.0.1', () => resolve());
  });
  const port = (server.address() as AddressInfo).port;

  const ctl: LocalProcessor = {
    url: `http://127.0.0.1:${port}`,
    port,
    testKey: `sk_test_local${randomBytes(18).toString('hex')}`,
    requests,
    createAccount(id = rid('acct'), o = {}) {
      const a: LocalAccount = {
        id, object: 'account', livemode: !!o.livemode, business_type: 'individual', capabilities: { card_payments: 'active', transfers: 'active' },
        charges_enabled: true, country: 'US', created: now(), default_currency: 'usd', details_submitted: true, email: null, metadata: {},
        payouts_enabled: true, type: 'express',
      };
      accounts.set(id, a);
      return a;
    },
    createPaymentIntent(o) {
      const created = o.created ?? now();
      const p: PI = {
        id: rid('pi'), livemode: !!o.livemode, amount: o.amount, amount_capturable: o.amount, amount_received: 0, currency: o.currency ?? 'usd',
        status: 'requires_capture', created, capture_method: o.captureMethod ?? 'manual', multicapture: o.multicapture ?? true,
        destination: o.destination, charge: rid('ch'), metadata: {}, canceled_at: null, cancellation_reason: null,
      };
      const c: Charge = {
        id: p.charge, livemode: p.livemode, amount: o.amount, amount_captured: 0, amount_refunded: 0, currency: p.currency, created,
        payment_intent: p.id, captured: false, status: 'succeeded', destination: o.destination,
        capture_before: o.captureBefore === undefined ? created + 7 * DAY : o.captureBefore, multicapture: p.multicapture, bts: [],
      };
      pis.set(p.id, p);
      charges.set(c.id, c);
      return piObj(p);
    },
    paymentIntent: (id) => (pis.get(id) ? piObj(pis.get(id)!) : undefined),
    charge: (id) => (charges.get(id) ? chargeObj(charges.get(id)!) : undefined),
    balanceTransactions: (source) => [...bts.values()].filter((b) => source === undefined || b.source === source).map(btObj),
    makeAvailable(id) {
      const b = bts.get(id);
      if (!b) throw missing('balance_transaction', id);
      b.status = 'available';
      b.available_on = Math.min(b.available_on, now());
      return btObj(b);
    },
    refund(pi, amount, status = 'succeeded') {
      const p = pis.get(pi);
      if (!p) throw missing('payment_intent', pi, 'payment_intent');
      return refundObj(createRefund(p, amount, status));
    },
    setRefundStatus(id, status) {
      const r = refunds.get(id);
      if (!r) throw missing('refund', id);
      if (status !== 'succeeded' && r.status !== status) {
        const c = charges.get(r.charge)!;
        c.amount_refunded -= r.amount; // a failed or canceled refund gives the funds back to the charge
      }
      r.status = status;
      return refundObj(r);
    },
    event(type, object, livemode = false) {
      return { id: rid('evt'), object: 'event', api_version: API_VERSION, created: now(), data: { object }, livemode, pending_webhooks: 1, request: { id: null, idempotency_key: null }, type };
    },
    sign(payload, secret, t = now()) {
      return `t=${t},v1=${createHmac('sha256', secret).update(`${t}.${payload}`, 'utf8').digest('hex')}`;
    },
    async sendWebhook(url, secret, event, o = {}) {
      const payload = JSON.stringify(event, null, 2);
      const header = ctl.sign(payload, o.badSignature ? `whsec_${randomBytes(24).toString('base64')}` : secret, o.t);
      const res = await fetch(url, { method: 'POST', headers: { 'content-type': 'application/json; charset=utf-8', 'stripe-signature': header, 'user-agent': 'Stripe/1.0 (+https://stripe.com/docs/webhooks)' }, body: payload });
      return { status: res.status, body: await res.text() };
    },
    failNext(match, how, n = 1) {
      faults.push({ match, how, n });
    },
    clearFaults() {
      faults.length = 0;
    },
    close: () => new Promise<void>((resolve) => {
      server.close(() => resolve());
      server.closeAllConnections();
    }),
  };
  return ctl;
}
