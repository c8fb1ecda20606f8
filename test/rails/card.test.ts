// The card rail against the local processor, through the official SDK, with the real settlement engine and store
// (the daemon in process, a short settler tick). The processor is the one test double: a boundary we cannot reach.
import { storeUrlFor } from '../helpers/postgres.js';
import { mkdtemp, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import Stripe from 'stripe';
import { afterAll, afterEach, beforeAll, describe, expect, it } from 'vitest';
import { startDaemon, type Daemon } from '../../src/daemon.js';
import { CardRail } from '../../src/rails/card/adapter.js';
import { cardRailFromFlags } from '../../src/rails/card/config.js';
import { currencyOfAsset, floorToMinor, microPerMinor, toMinor } from '../../src/rails/card/currency.js';
import { parseForm, startLocalProcessor, type LocalProcessor } from '../../src/rails/card/processor.js';
import { DEFAULT_POLICY } from '../../src/rails/settler.js';
import { FundingUnavailable, type FundingSubject } from '../../src/domain/funding.js';
import { addKeys, addNode, issueToken } from '../../src/service/admin.js';
import { events } from '../../src/store/events.js';
import { settlements } from '../../src/store/settlements.js';
import { streams } from '../../src/store/streams.js';
import { cardCredential, eventually, newWebhookSecret, sleep, voucher } from '../helpers/card.js';
import { clientOf } from '../helpers/daemon.js';
import { ISSUER, issuerKeyPair, payerKeyPair, publicJwks, type KeyPair } from '../helpers/issuer.js';

describe('card amounts', () => {
  it('converts micro units to minor units exactly, flooring to a minor-unit boundary', () => {
    expect(currencyOfAsset('USD')).toBe('usd');
    expect(currencyOfAsset('USDC')).toBeUndefined();
    expect(microPerMinor('usd')).toBe(10_000n);
    expect(microPerMinor('jpy')).toBe(1_000_000n);
    expect(microPerMinor('kwd')).toBe(1_000n);
    expect(toMinor(1_234_567n, 'usd')).toBe(123n);
    expect(floorToMinor(1_234_567n, 'usd')).toBe(1_230_000n);
    expect(floorToMinor(9_999n, 'usd')).toBe(0n);
    expect(floorToMinor(9_223_372_036_854_775_807n, 'usd')).toBe(9_223_372_036_854_770_000n); // int64 max, no float anywhere
  });

  it('parses form bodies the way the SDK encodes them', () => {
    expect(parseForm('amount_to_capture=123&final_capture=false&expand[0]=latest_charge&transfer_data[destination]=acct_1')).toEqual({
      amount_to_capture: '123', final_capture: 'false', expand: ['latest_charge'], transfer_data: { destination: 'acct_1' },
    });
  });
});

describe('card configuration', () => {
  let dir: string;
  beforeAll(async () => { dir = await mkdtemp(join(tmpdir(), 'node-svc-card-cfg-')); });
  afterAll(async () => { await rm(dir, { recursive: true, force: true }); });

  const refuse = async (f: Record<string, string | undefined>, env: NodeJS.ProcessEnv = {}, railEnv: 'sandbox' | 'production' = 'sandbox') => {
    const err = await cardRailFromFlags(f, env, { env: railEnv, policy: DEFAULT_POLICY, problems: [] }).then(() => undefined, (e: Error) => e);
    expect(err, 'refused').toBeInstanceOf(Error);
    return err!.message;
  };

  it('refuses a live key in sandbox and a test key in production, without echoing the key', async () => {
    const live = 'sk_live_51SecretLiveKeyValue000000000';
    const m = await refuse({ cardAccount: 'acct_1' }, { NODE_SVC_CARD_KEY: live });
    expect(m).toMatch(/NODE_SVC_CARD_KEY holds a LIVE key/);
    expect(m).not.toContain(live);
    const test = 'rk_test_51SecretTestKeyValue000000000';
    const m2 = await refuse({ cardAccount: 'acct_1' }, { NODE_SVC_CARD_KEY: test }, 'production');
    expect(m2).toMatch(/test key .*--rail production takes only live keys/);
    expect(m2).not.toContain(test);
  });

  it('reports every problem at once, naming the option', async () => {
    const m = await refuse({ rpcUrl: 'http://x', walletKeyFile: '/nope', cardApi: 'ftp://x/y', cardWebhookSecretFile: join(dir, 'missing') }, {});
    expect(m).toContain('--rpc-url, --wallet-key-file');
    expect(m).toContain('--card-key-file (or NODE_SVC_CARD_KEY) is required');
    expect(m).toContain('--card-account is required');
    expect(m).toContain('--card-api must be an http(s) base URL');
    expect(m).toContain('--card-webhook-secret-file');
    const p = await refuse({ cardAccount: 'acct_1', cardApi: 'http://127.0.0.1:1' }, { NODE_SVC_CARD_KEY: 'sk_live_abcdefghijkl' }, 'production');
    expect(p).toContain('--card-api is only accepted with --rail sandbox');
  });

  it('preflight refuses an unknown connected account and an unreachable processor', async () => {
    const p = await startLocalProcessor();
    try {
      const m = await refuse({ cardAccount: 'acct_unknown', cardApi: p.url }, { NODE_SVC_CARD_KEY: p.testKey });
      expect(m).toMatch(/connected account acct_unknown is not known/);
      expect(m).not.toContain(p.testKey);
    } finally {
      await p.close();
    }
    const m = await refuse({ cardAccount: 'acct_1', cardApi: 'http://127.0.0.1:9' }, { NODE_SVC_CARD_KEY: 'sk_test_abcdefghijkl' });
    expect(m).toMatch(/cannot reach the card processor API/);
  });
});

describe('local processor through the official SDK', () => {
  let p: LocalProcessor;
  let stripe: Stripe;
  beforeAll(async () => {
    p = await startLocalProcessor();
    stripe = new Stripe(p.testKey, { host: '127.0.0.1', port: p.port, protocol: 'http', maxNetworkRetries: 0, telemetry: false });
  });
  afterAll(async () => { await p.close(); });

  it('captures in parts with an idempotency key honoured, and answers Stripe-shaped errors', async () => {
    const acct = p.createAccount();
    const pi = p.createPaymentIntent({ amount: 1000, destination: acct.id }) as { id: string };
    const a = await stripe.paymentIntents.capture(pi.id, { amount_to_capture: 100, final_capture: false }, { idempotencyKey: 'k1' });
    const b = await stripe.paymentIntents.capture(pi.id, { amount_to_capture: 100, final_capture: false }, { idempotencyKey: 'k1' });
    expect(a.amount_received).toBe(100);
    expect(b.amount_received).toBe(100); // replayed, not captured twice
    expect(a.status).toBe('requires_capture');
    const err = await stripe.paymentIntents.capture(pi.id, { amount_to_capture: 200 }, { idempotencyKey: 'k1' }).catch((e: unknown) => e as Stripe.errors.StripeError);
    expect((err as Stripe.errors.StripeError).type).toBe('StripeIdempotencyError');
    const missing = await stripe.paymentIntents.retrieve('pi_nope').catch((e: unknown) => e as Stripe.errors.StripeError);
    expect(missing).toMatchObject({ statusCode: 404, code: 'resource_missing', type: 'StripeInvalidRequestError' });
    const full = await stripe.paymentIntents.retrieve(pi.id, { expand: ['latest_charge'] });
    expect(full).toMatchObject({ object: 'payment_intent', livemode: false, currency: 'usd', amount_capturable: 900, transfer_data: { destination: acct.id } });
    expect(full.latest_charge).toMatchObject({ object: 'charge', captured: true, amount_captured: 100 });
    const live = new Stripe('sk_live_abcdefghijklmnop', { host: '127.0.0.1', port: p.port, protocol: 'http', maxNetworkRetries: 0 });
    await expect(live.paymentIntents.retrieve(pi.id)).rejects.toMatchObject({ statusCode: 404 }); // test objects are invisible to live keys
    const bts = await stripe.balanceTransactions.list({ source: (full.latest_charge as Stripe.Charge).id });
    expect(bts.data.map((t) => [t.object, t.amount, t.status])).toEqual([['balance_transaction', 100, 'pending']]);
    const final = await stripe.paymentIntents.capture(pi.id, { amount_to_capture: 50 });
    expect(final).toMatchObject({ status: 'succeeded', amount_received: 150, amount_capturable: 0 });
  });

  it('signs webhooks so that the SDK verifies them', () => {
    const secret = newWebhookSecret();
    const payload = JSON.stringify(p.event('charge.refunded', { id: 'ch_1', object: 'charge' }));
    const e = stripe.webhooks.constructEvent(payload, p.sign(payload, secret), secret, 300);
    expect(e.type).toBe('charge.refunded');
    expect(() => stripe.webhooks.constructEvent(payload, p.sign(payload, newWebhookSecret()), secret, 300)).toThrow();
  });
});

describe('card rail with the settlement engine', () => {
  let dir: string;
  let p: LocalProcessor;
  let d: Daemon;
  let rail: CardRail;
  let issuer: KeyPair;
  let payer: KeyPair;
  let token: string;
  let acct: string;
  const secret = newWebhookSecret();
  let n = 0;

  beforeAll(async () => {
    dir = await mkdtemp(join(tmpdir(), 'node-svc-card-'));
    p = await startLocalProcessor();
    acct = p.createAccount().id;
    issuer = await issuerKeyPair();
    payer = await payerKeyPair();
    rail = new CardRail({ env: 'sandbox', key: p.testKey, account: acct, api: p.url, webhookSecret: secret, refundScanMs: 60_000, maxNetworkRetries: 0 });
    await rail.preflight();
    d = await startDaemon({ dataDir: join(dir, 'data'), store: await storeUrlFor(join(dir, 'data')), host: '127.0.0.1', port: 0, rateLimit: 0, rail: { rail, policy: { ...DEFAULT_POLICY, thresholdMicro: 1n } }, settleTickMs: 30 });
    await addNode(d.deps.store, 'node-a');
    token = (await issueToken(d.deps.store, 'node-a')).token;
    await addKeys(d.deps.store, ISSUER, publicJwks(issuer), 'test');
  });
  afterAll(async () => {
    await d?.stop();
    await p?.close();
    await rm(dir, { recursive: true, force: true });
  });
  afterEach(() => { n++; });

  const db = () => d.deps.store.q;
  const evts = async (stream: string) => (await events.forRef(db(), 'node-a', `stream:${stream}`)).map((e) => ({ type: e.type, data: JSON.parse(e.body).data as Record<string, string> }));
  async function open(pi: string, claims: Record<string, unknown> = {}) {
    const stream = `card-${n}-${Date.now()}`;
    const c = clientOf(d.url, token);
    const r = await c.post('/v1/allowances/verify', { credential: cardCredential(issuer, payer, stream, pi, claims) });
    expect(r.status, r.text).toBe(200);
    const bill = async (amount: bigint) => {
      const v = await c.post(`/v1/streams/${stream}/vouchers`, { voucher: voucher(payer, stream, amount) });
      expect(v.status, v.text).toBe(200);
    };
    return { stream, bill, finality: async () => (await c.get(`/v1/streams/${stream}/finality`)).body };
  }

  it('captures the floored billed truth in parts, checkpoints, then finalizes when funds are available', async () => {
    const pi = p.createPaymentIntent({ amount: 500, destination: acct }) as { id: string; latest_charge: string };
    const s = await open(pi.id);
    await s.bill(1_234_567n);
    const cp = await eventually(async () => (await evts(s.stream)).find((e) => e.type === 'settlement.checkpointed'), 'checkpointed');
    expect(cp.data).toMatchObject({ stream: s.stream, asset: 'USD', amountMicro: '1230000' });
    expect(cp.data.reference).toMatch(/^txn_/);
    expect((await evts(s.stream)).map((e) => e.type)).toEqual(['capture.created', 'settlement.checkpointed']);
    expect((await evts(s.stream))[0]!.data).toMatchObject({ amountMicro: '1230000', reference: cp.data.reference });
    expect(p.paymentIntent(pi.id)).toMatchObject({ amount_received: 123, amount_capturable: 377, status: 'requires_capture' });
    expect(await s.finality()).toMatchObject({ finality: 'checkpointed', checkpointedMicro: '1230000', finalMicro: '0', unsettledMicro: '4567' });
    // the remainder below one cent is not settleable: no settlement is started for it, nothing retried every tick
    await sleep(300);
    expect(p.paymentIntent(pi.id)).toMatchObject({ amount_received: 123 });
    const rows = await settlements.forStream(db(), 'node-a', s.stream);
    expect(rows.filter((r) => r.status === 'failed')).toHaveLength(0);
    expect(rows.map((r) => r.amount_micro)).toEqual([1_230_000n]);

    p.makeAvailable(cp.data.reference!);
    const fin = await eventually(async () => (await evts(s.stream)).find((e) => e.type === 'settlement.final'), 'final');
    expect(fin.data).toMatchObject({ amountMicro: '1230000', reference: cp.data.reference });
    expect(await s.finality()).toMatchObject({ finality: 'final', finalMicro: '1230000' });

    await s.bill(2_500_000n); // the next capture is the delta 250 - 123 = 127 cents
    await eventually(async () => (await evts(s.stream)).filter((e) => e.type === 'settlement.checkpointed').length === 2, 'second checkpoint');
    expect(p.paymentIntent(pi.id)).toMatchObject({ amount_received: 250 });
    const cps = (await evts(s.stream)).filter((e) => e.type === 'settlement.checkpointed').map((e) => e.data.amountMicro);
    expect(cps).toEqual(['1230000', '2500000']);
    const bts = p.balanceTransactions(pi.latest_charge).map((t) => t.amount);
    expect(bts).toEqual([123, 127]);
  });

  it('records refund.final with the cumulative refunded amount, once per amount, woken by a verified processor webhook', async () => {
    const pi = p.createPaymentIntent({ amount: 500, destination: acct }) as { id: string };
    const s = await open(pi.id);
    await s.bill(3_000_000n);
    await eventually(async () => (await evts(s.stream)).find((e) => e.type === 'settlement.checkpointed'), 'checkpointed');
    const r1 = p.refund(pi.id, 50);
    const hook = `${d.url}/processor/webhook`;
    expect((await p.sendWebhook(hook, secret, p.event('charge.refunded', { id: 'ch_x', object: 'charge', payment_intent: pi.id }))).status).toBe(200);
    const first = await eventually(async () => (await evts(s.stream)).find((e) => e.type === 'refund.final'), 'refund.final');
    expect(first.data).toMatchObject({ amountMicro: '500000', reference: r1.id, asset: 'USD' });
    const r2 = p.refund(pi.id, 25, 'pending');
    await p.sendWebhook(hook, secret, p.event('refund.created', r2));
    await sleep(200);
    expect((await evts(s.stream)).filter((e) => e.type === 'refund.final')).toHaveLength(1); // pending is not final
    p.setRefundStatus(r2.id as string, 'succeeded');
    await p.sendWebhook(hook, secret, p.event('refund.updated', { ...r2, status: 'succeeded' }));
    await eventually(async () => (await evts(s.stream)).filter((e) => e.type === 'refund.final').length === 2, 'second refund.final');
    await p.sendWebhook(hook, secret, p.event('refund.updated', { ...r2, status: 'succeeded' })); // again: nothing new
    await sleep(200);
    expect((await evts(s.stream)).filter((e) => e.type === 'refund.final').map((e) => e.data.amountMicro)).toEqual(['500000', '750000']);
  });

  it('a processor webhook with a bad signature or the wrong mode is refused and changes nothing', async () => {
    const before = await db().get<{ c: number }>('SELECT COUNT(*) AS c FROM events');
    const hook = `${d.url}/processor/webhook`;
    const bad = await p.sendWebhook(hook, secret, p.event('charge.refunded', { id: 'ch_1', object: 'charge' }), { badSignature: true });
    expect(bad.status).toBe(400);
    expect(JSON.parse(bad.body)).toMatchObject({ code: 'invalid_request', status: 400 });
    const res = await fetch(hook, { method: 'POST', body: '{}', headers: { 'content-type': 'application/json' } });
    expect(res.status).toBe(400);
    expect(res.headers.get('content-type')).toMatch(/problem\+json/);
    const live = await p.sendWebhook(hook, secret, p.event('charge.refunded', { id: 'ch_1', object: 'charge' }, true));
    expect(live.status).toBe(400);
    expect(await db().get('SELECT COUNT(*) AS c FROM events')).toEqual(before);
  });

  it('fund() reads the authorization: funded with captured + capturable; unfunded naming what differs; unreadable is FundingUnavailable', async () => {
    const subject = (pi: unknown, o: Partial<FundingSubject> = {}): FundingSubject =>
      ({ nodeId: 'node-a', stream: `fund-${n}-${Math.random()}`, payer: 'payer-1', asset: 'USD', mode: 'card', claims: { paymentIntent: pi }, ...o });
    const pi = p.createPaymentIntent({ amount: 1234, destination: acct }) as { id: string };
    const ok = await rail.fund(subject(pi.id));
    expect(ok).toMatchObject({ funded: true, limitMicro: 12_340_000n });
    expect(ok.funded && ok.detail).toMatch(/1234 usd minor units capturable, 0 captured, capture deadline /);
    const jpy = p.createPaymentIntent({ amount: 700, currency: 'jpy', destination: acct }) as { id: string };
    expect(await rail.fund(subject(jpy.id, { asset: 'JPY' }))).toMatchObject({ funded: true, limitMicro: 700_000_000n }); // 0-decimal: exact

    const other = p.createAccount().id;
    const reasons: Array<[unknown, RegExp, Partial<FundingSubject>?]> = [
      [(p.createPaymentIntent({ amount: 500, destination: other }) as { id: string }).id, new RegExp(`pays ${other}, not this node's connected account ${acct}`)],
      [(p.createPaymentIntent({ amount: 500, currency: 'eur', destination: acct }) as { id: string }).id, /is in EUR, but the stream's asset is USD/],
      [(p.createPaymentIntent({ amount: 500, destination: acct, livemode: true }) as { id: string }).id, /not known to the processor in test mode \(unknown, or a live-mode object\)/],
      ['pi_unknown123', /payment intent pi_unknown123 is not known to the processor/],
      ['not-a-pi', /paymentIntent claim is not a PaymentIntent id/],
      [undefined, /paymentIntent claim is not a PaymentIntent id/],
      [pi.id, /asset USDC is not a card currency/, { asset: 'USDC' }],
      [(p.createPaymentIntent({ amount: 500, destination: acct, captureMethod: 'automatic' }) as { id: string }).id, /capture_method automatic, not manual/],
      [(p.createPaymentIntent({ amount: 500, destination: acct, captureBefore: Math.floor(Date.now() / 1000) + 600 }) as { id: string }).id, /reaches its capture deadline at /],
    ];
    for (const [id, reason, o] of reasons) {
      const r = await rail.fund(subject(id, o));
      expect(r.funded, String(id)).toBe(false);
      expect(!r.funded && r.reason).toMatch(reason);
    }
    // cancelled, captured in full, or captured by someone else before the stream was registered
    const stripe = new Stripe(p.testKey, { host: '127.0.0.1', port: p.port, protocol: 'http', maxNetworkRetries: 0, telemetry: false });
    const cancelled = p.createPaymentIntent({ amount: 500, destination: acct }) as { id: string };
    await stripe.paymentIntents.cancel(cancelled.id, { cancellation_reason: 'requested_by_customer' });
    expect(await rail.fund(subject(cancelled.id))).toEqual({ funded: false, reason: `payment intent ${cancelled.id} is canceled (requested_by_customer): its authorization was released` });
    const full = p.createPaymentIntent({ amount: 500, destination: acct }) as { id: string };
    await stripe.paymentIntents.capture(full.id);
    expect(await rail.fund(subject(full.id))).toMatchObject({ funded: false, reason: expect.stringMatching(/is succeeded: captured in full or released/) });
    const outside = p.createPaymentIntent({ amount: 500, destination: acct }) as { id: string };
    await stripe.paymentIntents.capture(outside.id, { amount_to_capture: 100, final_capture: false });
    expect(await rail.fund(subject(outside.id))).toMatchObject({ funded: false, reason: `payment intent ${outside.id} already has 100 usd minor units captured outside node-svc` });

    // the processor failing or unreachable: never a yes, never the key
    p.failNext(new RegExp(`^/v1/payment_intents/${pi.id}$`), 'error', 10);
    const down = await rail.fund(subject(pi.id)).then(() => undefined, (e: Error) => e);
    p.clearFaults();
    expect(down).toBeInstanceOf(FundingUnavailable);
    expect(down!.message).toMatch(/the card processor cannot be read: .*HTTP 500/);
    const gone = new CardRail({ env: 'sandbox', key: p.testKey, account: acct, api: 'http://127.0.0.1:9', maxNetworkRetries: 0 });
    const e2 = await gone.fund(subject(pi.id)).then(() => undefined, (e: Error) => e);
    expect(e2).toBeInstanceOf(FundingUnavailable);
    expect(e2!.message).not.toContain(p.testKey);
  });

  it('funding refreshes reuse a funded reading (the processor rate-limits reads); a verified processor webhook makes the next read fresh', async () => {
    const pi = p.createPaymentIntent({ amount: 500, destination: acct }) as { id: string };
    const s = await open(pi.id);
    const reads = () => p.requests.filter((r) => r.method === 'GET' && r.path === `/v1/payment_intents/${pi.id}`).length;
    expect(reads()).toBe(1); // registration always reads
    const subject: FundingSubject = { nodeId: 'node-a', stream: s.stream, payer: 'payer-1', asset: 'USD', mode: 'card', claims: { paymentIntent: pi.id } };
    expect(await rail.fund(subject)).toMatchObject({ funded: true, limitMicro: 5_000_000n });
    expect(reads()).toBe(1);
    // once a read fails, no cached yes: the next refresh reads (and sees the processor again)
    const other = p.createPaymentIntent({ amount: 500, destination: acct }) as { id: string };
    p.failNext(new RegExp(`^/v1/payment_intents/${other.id}$`), 'error', 10);
    await expect(rail.fund({ ...subject, stream: 'not-registered', claims: { paymentIntent: other.id } })).rejects.toBeInstanceOf(FundingUnavailable);
    p.clearFaults();
    expect(await rail.fund(subject)).toMatchObject({ funded: true });
    expect(reads()).toBe(2);
    expect(await rail.fund(subject)).toMatchObject({ funded: true });
    expect(reads()).toBe(2);
    const stripe = new Stripe(p.testKey, { host: '127.0.0.1', port: p.port, protocol: 'http', maxNetworkRetries: 0, telemetry: false });
    const cancelled = await stripe.paymentIntents.cancel(pi.id);
    expect((await p.sendWebhook(`${d.url}/processor/webhook`, secret, p.event('payment_intent.canceled', cancelled as never))).status).toBe(200);
    expect(await rail.fund(subject)).toMatchObject({ funded: false, reason: expect.stringMatching(/is canceled: its authorization was released/) });
    expect(reads()).toBe(3);
  });

  it('release() cancels only what this stream holds, for this account: nothing captured → canceled, partly captured → the rest released', async () => {
    const pi = p.createPaymentIntent({ amount: 500, destination: acct }) as { id: string };
    const s = await open(pi.id);
    const row = async () => (await streams.get(db(), 'node-a', s.stream))!;
    expect(await rail.release(await row())).toMatch(new RegExp(`cancelled payment intent ${pi.id}: nothing captured, 500 usd minor units released`));
    expect(p.paymentIntent(pi.id)).toMatchObject({ status: 'canceled', amount_capturable: 0, cancellation_reason: 'abandoned' });
    expect(await rail.release(await row())).toBeUndefined(); // nothing held any more: no second cancel
    expect(p.requests.filter((r) => r.path === `/v1/payment_intents/${pi.id}/cancel`)).toHaveLength(1);

    const pi2 = p.createPaymentIntent({ amount: 500, destination: acct }) as { id: string };
    const s2 = await open(pi2.id);
    await s2.bill(1_000_000n);
    await eventually(async () => (await evts(s2.stream)).find((e) => e.type === 'settlement.checkpointed'), 'checkpointed');
    expect(await rail.release((await streams.get(db(), 'node-a', s2.stream))!)).toBe(`released the remaining 400 usd minor units of payment intent ${pi2.id} (100 captured)`);
    expect(p.paymentIntent(pi2.id)).toMatchObject({ status: 'succeeded', amount_received: 100, amount_capturable: 0 });

    // a second stream naming the first one's authorization does not hold it: never cancelled through it
    const pi3 = p.createPaymentIntent({ amount: 500, destination: acct }) as { id: string };
    await open(pi3.id);
    const stream = `card-second-${n}-${Date.now()}`;
    const r = await clientOf(d.url, token).post('/v1/allowances/verify', { credential: cardCredential(issuer, payer, stream, pi3.id) });
    expect(r.body).toMatchObject({ refusal: 'unfunded' });
    expect(await rail.release((await streams.get(db(), 'node-a', stream))!)).toBeUndefined();
    expect(p.paymentIntent(pi3.id)).toMatchObject({ status: 'requires_capture', amount_capturable: 500 });
  });

  it('finds a capture whose answer was lost, and never captures twice', async () => {
    const pi = p.createPaymentIntent({ amount: 500, destination: acct }) as { id: string; latest_charge: string };
    const s = await open(pi.id);
    p.failNext(/\/capture$/, 'lose-answer', 3);
    await s.bill(2_000_000n);
    const cp = await eventually(async () => (await evts(s.stream)).find((e) => e.type === 'settlement.checkpointed'), 'checkpointed after a lost answer');
    expect(cp.data).toMatchObject({ amountMicro: '2000000' });
    expect(cp.data.reference).toMatch(/^txn_/);
    expect(p.balanceTransactions(pi.latest_charge).map((t) => t.amount)).toEqual([200]);
    // every answer to the capture was lost (the SDK's retries too): status() found it among the charge's captures
    const captures = p.requests.filter((r) => r.path === `/v1/payment_intents/${pi.id}/capture`);
    expect(new Set(captures.map((r) => r.idempotencyKey)).size).toBe(1);
    expect((await settlements.forStream(db(), 'node-a', s.stream)).map((r) => r.status)).toEqual(['checkpointed']);    expect(p.paymentIntent(pi.id)).toMatchObject({ amount_received: 200 });
  });

  it('closeRequested() answers true near the capture deadline only', async () => {
    const soon = p.createPaymentIntent({ amount: 500, destination: acct, captureBefore: Math.floor(Date.now() / 1000) + 1800 }) as { id: string };
    const fresh = p.createPaymentIntent({ amount: 500, destination: acct }) as { id: string };
    const s2 = await open(fresh.id);
    const late = `card-late-${n}-${Date.now()}`;
    await clientOf(d.url, token).post('/v1/allowances/verify', { credential: cardCredential(issuer, payer, late, soon.id) });
    expect(await rail.closeRequested((await streams.get(db(), 'node-a', late))!)).toBe(true);
    expect(await rail.closeRequested((await streams.get(db(), 'node-a', s2.stream))!)).toBe(false);
  });
});

describe('card rail at the capture deadline, with a policy that would wait', () => {
  let dir: string;
  let p: LocalProcessor;
  let d: Daemon;
  let issuer: KeyPair;
  let payer: KeyPair;
  let token: string;
  let acct: string;

  beforeAll(async () => {
    dir = await mkdtemp(join(tmpdir(), 'node-svc-card-deadline-'));
    p = await startLocalProcessor();
    acct = p.createAccount().id;
    issuer = await issuerKeyPair();
    payer = await payerKeyPair();
    const rail = new CardRail({ env: 'sandbox', key: p.testKey, account: acct, api: p.url, maxNetworkRetries: 0 });
    await rail.preflight();
    // Nothing reaches the threshold or the age limit: only the deadline makes the engine capture.
    const policy = { ...DEFAULT_POLICY, thresholdMicro: 10n ** 15n, maxAgeMs: 3_600_000 };
    d = await startDaemon({ dataDir: join(dir, 'data'), store: await storeUrlFor(join(dir, 'data')), host: '127.0.0.1', port: 0, rateLimit: 0, rail: { rail, policy }, settleTickMs: 30 });
    await addNode(d.deps.store, 'node-a');
    token = (await issueToken(d.deps.store, 'node-a')).token;
    await addKeys(d.deps.store, ISSUER, publicJwks(issuer), 'test');
  });
  afterAll(async () => {
    await d?.stop();
    await p?.close();
    await rm(dir, { recursive: true, force: true });
  });

  it('captures what is billed as final at the deadline margin, then takes no more vouchers and holds nothing', async () => {
    const c = clientOf(d.url, token);
    const pi = p.createPaymentIntent({ amount: 500, destination: acct, captureBefore: Math.floor(Date.now() / 1000) + 3600 + 5 }) as { id: string }; // 4-5 s before the margin: time for the verify, the voucher and the check that nothing was captured yet, on a loaded machine too
    const stream = `deadline-${Date.now()}`;
    expect((await c.post('/v1/allowances/verify', { credential: cardCredential(issuer, payer, stream, pi.id) })).status).toBe(200);
    expect((await c.post(`/v1/streams/${stream}/vouchers`, { voucher: voucher(payer, stream, 2_000_000n) })).status).toBe(200);
    await sleep(300);
    expect(p.paymentIntent(pi.id)).toMatchObject({ amount_received: 0 }); // the policy waits
    await eventually(() => (p.paymentIntent(pi.id) as { status: string }).status === 'succeeded', 'final capture at the margin', 15_000);
    expect(p.paymentIntent(pi.id)).toMatchObject({ amount_received: 200, amount_capturable: 0 });
    const captures = p.requests.filter((r) => r.path === `/v1/payment_intents/${pi.id}/capture`);
    expect(captures).toHaveLength(1);
    expect(p.requests.filter((r) => r.path === `/v1/payment_intents/${pi.id}/cancel`)).toHaveLength(0);
    const evts = async () => (await events.forRef(d.deps.store.q, 'node-a', `stream:${stream}`)).map((e) => [e.type, (JSON.parse(e.body).data as { amountMicro?: string }).amountMicro]);
    await eventually(async () => (await evts()).length >= 2, 'checkpointed');
    expect((await evts())).toEqual([['capture.created', '2000000'], ['settlement.checkpointed', '2000000']]);
    const more = await c.post(`/v1/streams/${stream}/vouchers`, { voucher: voucher(payer, stream, 2_500_000n) });
    expect(more.status).toBe(422);
    expect(more.body).toMatchObject({ refusal: 'not_payable' });
    expect(more.body.detail).toContain('reaches its capture deadline');
    await eventually(async () => (await streams.get(d.deps.store.q, 'node-a', stream))!.funding_released_at !== null, 'marked released');
  }, 60_000);
});
