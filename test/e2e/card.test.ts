// End to end on the card rail: the REAL daemon (bin/node-svc daemon --mode card --rail sandbox, a child process)
// against the local processor, and a webhook receiver subscribed to the node's events.
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { startLocalProcessor, type LocalProcessor } from '../../src/rails/card/processor.js';
import { cardCredential, cardFlags, controlMessage, eventually, newWebhookSecret, sleep, startCardDaemon, voucher, writeSecretFile } from '../helpers/card.js';
import { cliFor, tempDataDir, type TempDataDir } from '../helpers/cli.js';
import { clientOf, setupNodes, type RunningDaemon } from '../helpers/daemon.js';
import { issuerKeyPair, nowSeconds, payerKeyPair, type KeyPair } from '../helpers/issuer.js';
import { startReceiver, verifyServiceSignature, type Receiver } from '../helpers/receiver.js';

interface Envelope { id: string; type: string; externalRef: string; data: Record<string, string> }

describe('card rail end to end (real daemon, local processor)', { timeout: 30_000 }, () => {
  let t: TempDataDir;
  let p: LocalProcessor;
  let daemon: RunningDaemon;
  let receiver: Receiver;
  let issuer: KeyPair;
  let payer: KeyPair;
  let tokenA: string;
  let acct: string;
  let subSecret: string;
  let keyFile: string;
  let secretFile: string;
  const whsec = newWebhookSecret();

  beforeAll(async () => {
    t = await tempDataDir('node-svc-card-e2e-');
    p = await startLocalProcessor();
    acct = p.createAccount().id;
    issuer = await issuerKeyPair();
    payer = await payerKeyPair();
    ({ tokenA } = await setupNodes(t.dataDir, issuer));
    keyFile = await writeSecretFile(t.root, 'card.key', p.testKey);
    secretFile = await writeSecretFile(t.root, 'card-webhook.secret', whsec);
    daemon = await startCardDaemon(t.dataDir, cardFlags(p, { key: keyFile, webhookSecret: secretFile }, acct));
    receiver = await startReceiver();
    const sub = await clientOf(daemon.url, tokenA).post('/v1/webhooks', { url: `${receiver.url}/hook` });
    expect(sub.status, sub.text).toBe(201);
    subSecret = sub.body.secret;
  }, 60_000);

  afterAll(async () => {
    await daemon?.stop();
    await receiver?.close();
    await p?.close();
    await t?.cleanup();
  });

  /** Verified deliveries for a stream, oldest first, one per event id. */
  const delivered = (stream: string): Envelope[] => {
    const seen = new Set<string>();
    const out: Envelope[] = [];
    for (const r of receiver.at('/hook')) {
      expect(verifyServiceSignature(subSecret, r.body, r.headers['x-service-signature'])).toBe(true);
      const e = JSON.parse(r.body.toString('utf8')) as Envelope;
      if (e.externalRef !== `stream:${stream}` || seen.has(e.id)) continue;
      seen.add(e.id);
      out.push(e);
    }
    return out;
  };
  const ofType = (stream: string, type: string) => delivered(stream).filter((e) => e.type === type);

  async function open(pi: string, claims: Record<string, unknown> = {}) {
    const stream = `card-e2e-${Math.random().toString(36).slice(2, 8)}`;
    const c = clientOf(daemon.url, tokenA);
    const r = await c.post('/v1/allowances/verify', { credential: cardCredential(issuer, payer, stream, pi, claims) });
    if (r.status !== 200) console.log('DAEMON', daemon.stderr.slice(-3000));
    expect(r.status, r.text).toBe(200);
    expect(r.body).toMatchObject({ mode: 'card', stream });
    return {
      stream,
      bill: async (amount: bigint) => {
        const v = await c.post(`/v1/streams/${stream}/vouchers`, { voucher: voucher(payer, stream, amount) });
        expect(v.status, v.text).toBe(200);
        expect(v.body.accepted).toBe(true);
      },
      finality: async () => (await c.get(`/v1/streams/${stream}/finality`)).body,
    };
  }

  it('vouchers → capture → capture.created + settlement.checkpointed → funds available → settlement.final; amounts exact', async () => {
    const pi = p.createPaymentIntent({ amount: 500, destination: acct }) as { id: string; latest_charge: string };
    const s = await open(pi.id);
    await s.bill(1_234_567n); // 123.4567 cents: 123 cents captured, 4,567 micro stay unsettled

    await eventually(() => ofType(s.stream, 'settlement.checkpointed').length === 1, 'settlement.checkpointed delivered');
    const [capture] = ofType(s.stream, 'capture.created');
    const [cp] = ofType(s.stream, 'settlement.checkpointed');
    expect(capture!.data).toMatchObject({ stream: s.stream, budget: 'budget-1', asset: 'USD', amountMicro: '1230000' });
    expect(cp!.data).toMatchObject({ stream: s.stream, budget: 'budget-1', asset: 'USD', amountMicro: '1230000', reference: capture!.data.reference });
    expect(cp!.data.reference).toMatch(/^txn_/);
    expect(delivered(s.stream).map((e) => e.type).indexOf('capture.created')).toBeLessThan(delivered(s.stream).map((e) => e.type).indexOf('settlement.checkpointed'));
    expect(p.paymentIntent(pi.id)).toMatchObject({ amount_received: 123, status: 'requires_capture' });
    expect(await s.finality()).toMatchObject({ finality: 'checkpointed', checkpointedMicro: '1230000', finalMicro: '0', unsettledMicro: '4567' });
    expect(ofType(s.stream, 'settlement.final')).toEqual([]); // checkpointed is not money

    // the processor makes the funds available and tells the daemon (signed webhook): final now, not at the next poll
    p.makeAvailable(cp!.data.reference!);
    const hook = await p.sendWebhook(`${daemon.url}/processor/webhook`, whsec, p.event('balance.available', { object: 'balance', livemode: false }));
    expect(hook).toMatchObject({ status: 200 });
    expect(JSON.parse(hook.body)).toEqual({ received: true });
    await eventually(() => ofType(s.stream, 'settlement.final').length === 1, 'settlement.final delivered');
    expect(ofType(s.stream, 'settlement.final')[0]!.data).toMatchObject({ amountMicro: '1230000', asset: 'USD', reference: cp!.data.reference });
    expect(await s.finality()).toMatchObject({ finality: 'final', finalMicro: '1230000', unsettledMicro: '4567' });

    // more billing: the next capture is the delta, 250 − 123 = 127 cents
    await s.bill(2_500_000n);
    await eventually(() => ofType(s.stream, 'settlement.checkpointed').length === 2, 'second checkpoint');
    expect(ofType(s.stream, 'settlement.checkpointed').map((e) => e.data.amountMicro)).toEqual(['1230000', '2500000']);
    expect(ofType(s.stream, 'capture.created').map((e) => e.data.amountMicro)).toEqual(['1230000', '2500000']);
    expect(p.balanceTransactions(pi.latest_charge).map((b) => b.amount)).toEqual([123, 127]);
    expect(p.paymentIntent(pi.id)).toMatchObject({ amount_received: 250 });
  });

  it('refunds → refund.final with the cumulative refunded amount', async () => {
    const pi = p.createPaymentIntent({ amount: 1000, destination: acct }) as { id: string };
    const s = await open(pi.id, { cap: '10000000' });
    await s.bill(8_000_000n);
    await eventually(() => ofType(s.stream, 'settlement.checkpointed').length === 1, 'checkpointed');
    const hook = `${daemon.url}/processor/webhook`;
    const r1 = p.refund(pi.id, 100);
    expect((await p.sendWebhook(hook, whsec, p.event('charge.refunded', { id: 'ch_any', object: 'charge', payment_intent: pi.id }))).status).toBe(200);
    await eventually(() => ofType(s.stream, 'refund.final').length === 1, 'first refund.final');
    const r2 = p.refund(pi.id, 150);
    expect((await p.sendWebhook(hook, whsec, p.event('refund.created', r2))).status).toBe(200);
    await eventually(() => ofType(s.stream, 'refund.final').length === 2, 'second refund.final');
    const refunds = ofType(s.stream, 'refund.final').map((e) => e.data);
    expect(refunds).toEqual([
      { stream: s.stream, budget: 'budget-1', asset: 'USD', amountMicro: '1000000', reference: r1.id },
      { stream: s.stream, budget: 'budget-1', asset: 'USD', amountMicro: '2500000', reference: r2.id },
    ]);
  });

  it('a processor webhook with a bad signature answers 400 and changes nothing', async () => {
    const pi = p.createPaymentIntent({ amount: 500, destination: acct }) as { id: string };
    const s = await open(pi.id);
    await s.bill(1_000_000n);
    await eventually(() => ofType(s.stream, 'settlement.checkpointed').length === 1, 'checkpointed');
    p.refund(pi.id, 10);
    const before = receiver.requests.length;
    const hook = `${daemon.url}/processor/webhook`;
    const bad = await p.sendWebhook(hook, whsec, p.event('charge.refunded', { id: 'ch_any', object: 'charge', payment_intent: pi.id }), { badSignature: true });
    expect(bad.status).toBe(400);
    expect(JSON.parse(bad.body)).toMatchObject({ status: 400, code: 'invalid_request' });
    const stale = await p.sendWebhook(hook, whsec, p.event('charge.refunded', { id: 'ch_any', object: 'charge', payment_intent: pi.id }), { t: Math.floor(Date.now() / 1000) - 600 });
    expect(stale.status).toBe(400); // outside the 300 s tolerance
    await sleep(1500);
    expect(receiver.requests.length).toBe(before);
    expect(ofType(s.stream, 'refund.final')).toEqual([]);
    expect(await s.finality()).toMatchObject({ finality: 'checkpointed', checkpointedMicro: '1000000' });
  });

  // ---- every close path ends with the authorization released (issue #11, observation 3) ----

  /** The requests the daemon sent the processor about a PaymentIntent, by kind. */
  const calls = (pi: string) => ({
    captures: p.requests.filter((r) => r.method === 'POST' && r.path === `/v1/payment_intents/${pi}/capture`),
    cancels: p.requests.filter((r) => r.method === 'POST' && r.path === `/v1/payment_intents/${pi}/cancel`),
  });
  const pis = (pi: string) => p.paymentIntent(pi) as { status: string; amount_received: number; amount_capturable: number; cancellation_reason: string | null };
  const control = async (claims: Record<string, unknown>) => {
    const r = await clientOf(daemon.url, tokenA).post('/v1/control', { message: controlMessage(issuer, claims) });
    expect(r.status, r.text).toBe(200);
  };
  const uniq = (prefix: string) => `${prefix}-${Math.random().toString(36).slice(2, 8)}`;

  it('revoked with only a remainder under one cent uncaptured: the rest of the authorization is released, captured money stays and turns final', async () => {
    const pi = p.createPaymentIntent({ amount: 500, destination: acct }) as { id: string };
    const s = await open(pi.id);
    await s.bill(1_234_567n); // 123 cents captured (not final: the stream is open), 4,567 micro can never be captured
    const [cp] = await eventually(() => ofType(s.stream, 'settlement.checkpointed').length === 1 && ofType(s.stream, 'settlement.checkpointed'), 'checkpointed');
    expect(pis(pi.id)).toMatchObject({ status: 'requires_capture', amount_received: 123, amount_capturable: 377 });
    await control({ kind: 'stream.revoked', stream: s.stream, reason: 'payer left' });
    await eventually(() => pis(pi.id).amount_capturable === 0, 'authorization released');
    expect(pis(pi.id)).toMatchObject({ status: 'succeeded', amount_received: 123, amount_capturable: 0 });
    expect(calls(pi.id).captures).toHaveLength(1); // no second capture for the remainder
    expect(calls(pi.id).cancels).toHaveLength(1);
    // captured money still turns final, from its own balance transaction
    p.makeAvailable(cp!.data.reference!);
    await p.sendWebhook(`${daemon.url}/processor/webhook`, whsec, p.event('balance.available', { object: 'balance', livemode: false }));
    await eventually(() => ofType(s.stream, 'settlement.final').length === 1, 'settlement.final');
    expect(delivered(s.stream).map((e) => e.type).sort()).toEqual(['capture.created', 'settlement.checkpointed', 'settlement.final', 'stream.revoked']);
    expect(await s.finality()).toMatchObject({ finality: 'final', finalMicro: '1230000', unsettledMicro: '4567' });
    await sleep(1500);
    expect(calls(pi.id).cancels).toHaveLength(1); // released once, not on every tick
  });

  it('exhausted with nothing new to capture: released, never captured twice', async () => {
    const pi = p.createPaymentIntent({ amount: 500, destination: acct }) as { id: string };
    const s = await open(pi.id, { cap: '1005000' });
    await s.bill(1_000_000n);
    await eventually(() => ofType(s.stream, 'settlement.checkpointed').length === 1, 'checkpointed');
    await s.bill(1_005_000n); // the cap: exhausted; floored to cents nothing new (100 cents already captured)
    await eventually(() => ofType(s.stream, 'stream.exhausted').length === 1, 'stream.exhausted');
    await eventually(() => pis(pi.id).amount_capturable === 0, 'authorization released');
    expect(pis(pi.id)).toMatchObject({ status: 'succeeded', amount_received: 100 });
    expect(calls(pi.id).captures).toHaveLength(1);
    expect(ofType(s.stream, 'settlement.checkpointed').map((e) => e.data.amountMicro)).toEqual(['1000000']);
  });

  it('exhausted with something new to capture: one final capture takes it and releases the rest (no cancel needed)', async () => {
    const pi = p.createPaymentIntent({ amount: 500, destination: acct }) as { id: string };
    const s = await open(pi.id, { cap: '2000000' });
    await s.bill(2_000_000n);
    await eventually(() => ofType(s.stream, 'settlement.checkpointed').length === 1, 'checkpointed');
    await eventually(() => pis(pi.id).status === 'succeeded', 'final capture');
    expect(pis(pi.id)).toMatchObject({ amount_received: 200, amount_capturable: 0 });
    expect(calls(pi.id).captures).toHaveLength(1);
    await sleep(1500);
    expect(calls(pi.id).cancels).toHaveLength(0);
  });

  it('expired with nothing billed: the PaymentIntent is cancelled', async () => {
    const pi = p.createPaymentIntent({ amount: 500, destination: acct }) as { id: string };
    await open(pi.id, { exp: nowSeconds() + 3 });
    await eventually(() => pis(pi.id).status === 'canceled', 'cancelled after expiry', 20_000);
    expect(pis(pi.id)).toMatchObject({ amount_received: 0, amount_capturable: 0, cancellation_reason: 'abandoned' });
    expect(calls(pi.id).captures).toHaveLength(0);
  });

  it('budget halted after a capture: the rest is released', async () => {
    const budget = uniq('budget-h');
    const pi = p.createPaymentIntent({ amount: 500, destination: acct }) as { id: string };
    const s = await open(pi.id, { budget });
    await s.bill(1_000_000n);
    await eventually(() => ofType(s.stream, 'settlement.checkpointed').length === 1, 'checkpointed');
    await control({ kind: 'budget.halted', budget, reason: 'exposure' });
    await eventually(() => pis(pi.id).amount_capturable === 0, 'authorization released');
    expect(pis(pi.id)).toMatchObject({ status: 'succeeded', amount_received: 100 });
    expect(calls(pi.id).captures).toHaveLength(1);
    expect(calls(pi.id).cancels).toHaveLength(1);
  });

  it('budget released with nothing billed: the PaymentIntent is cancelled', async () => {
    const budget = uniq('budget-r');
    const pi = p.createPaymentIntent({ amount: 500, destination: acct }) as { id: string };
    await open(pi.id, { budget });
    await control({ kind: 'budget.released', budget });
    await eventually(() => pis(pi.id).status === 'canceled', 'cancelled');
    expect(calls(pi.id).captures).toHaveLength(0);
  });

  it('near its capture deadline: warned, closed to new vouchers, and released once nothing is left to capture', async () => {
    const c = clientOf(daemon.url, tokenA);
    // the deadline margin is 1 h: this authorization enters it ~4 s from now
    const pi = p.createPaymentIntent({ amount: 500, destination: acct, captureBefore: nowSeconds() + 3600 + 4 }) as { id: string };
    const s = await open(pi.id);
    await s.bill(1_234_567n);
    await eventually(() => ofType(s.stream, 'settlement.checkpointed').length === 1, 'checkpointed');
    await eventually(() => daemon.stderr.includes(pi.id) && /card authorization nears its capture deadline/.test(daemon.stderr), 'warned before the deadline');
    await eventually(() => pis(pi.id).amount_capturable === 0, 'released at the deadline margin', 20_000);
    expect(pis(pi.id)).toMatchObject({ status: 'succeeded', amount_received: 123 });
    expect(calls(pi.id).captures).toHaveLength(1);
    expect(calls(pi.id).cancels).toHaveLength(1);
    await eventually(() => /card authorization released at its capture deadline margin/.test(daemon.stderr), 'release logged');
    const v = await c.get(`/v1/streams/${s.stream}/verify`);
    expect(v.body).toMatchObject({ payable: false, status: 'unfunded' });
    expect(v.body.reason).toContain(`payment intent ${pi.id} reaches its capture deadline`);
    const more = await c.post(`/v1/streams/${s.stream}/vouchers`, { voucher: voucher(payer, s.stream, 2_000_000n) });
    expect(more.status).toBe(422);
    expect(more.body).toMatchObject({ code: 'voucher_refused', refusal: 'not_payable' });

    // an authorization already inside the margin when presented: refused, and released since nothing was captured
    const late = p.createPaymentIntent({ amount: 500, destination: acct, captureBefore: nowSeconds() + 1800 }) as { id: string };
    const stream = uniq('card-late');
    const r = await c.post('/v1/allowances/verify', { credential: cardCredential(issuer, payer, stream, late.id) });
    expect(r.status).toBe(422);
    expect(r.body).toMatchObject({ refusal: 'unfunded' });
    await eventually(() => pis(late.id).status === 'canceled', 'late authorization cancelled');
  });

  it('a stream that expires while the daemon is down is released by the next start', async () => {
    const pi = p.createPaymentIntent({ amount: 500, destination: acct }) as { id: string };
    const exp = nowSeconds() + 10;
    const s = await open(pi.id, { exp });
    await s.bill(1_000_000n);
    await eventually(() => ofType(s.stream, 'settlement.checkpointed').length === 1, 'checkpointed');
    expect(await daemon.stop()).toBe(0);
    expect(Date.now(), 'the daemon stopped before the stream expired (else it released it itself)').toBeLessThan(exp * 1000);
    await sleep(Math.max(0, exp * 1000 - Date.now()) + 500); // expired meanwhile
    expect(pis(pi.id)).toMatchObject({ status: 'requires_capture', amount_capturable: 400 });
    daemon = await startCardDaemon(t.dataDir, cardFlags(p, { key: keyFile, webhookSecret: secretFile }, acct));
    await eventually(() => pis(pi.id).amount_capturable === 0, 'released after the restart');
    expect(pis(pi.id)).toMatchObject({ status: 'succeeded', amount_received: 100 });
    expect(calls(pi.id).captures).toHaveLength(1);
    expect(calls(pi.id).cancels).toHaveLength(1);
  });

  // ---- funding: the authorization is read when the stream is registered ----

  /** Present a credential for a new stream; the answer as is. */
  async function present(pi: string, claims: Record<string, unknown> = {}) {
    const stream = uniq('card-fund');
    const r = await clientOf(daemon.url, tokenA).post('/v1/allowances/verify', { credential: cardCredential(issuer, payer, stream, pi, claims) });
    return { stream, r };
  }

  /** The stream is registered but not payable: unfunded with a reason matching `reason`, halted, vouchers refused. */
  async function expectUnfunded(stream: string, reason: RegExp | string) {
    const c = clientOf(daemon.url, tokenA);
    const v = await c.get(`/v1/streams/${stream}/verify`);
    expect(v.status, v.text).toBe(200);
    expect(v.body).toMatchObject({ stream, open: false, payable: false, status: 'unfunded' });
    if (typeof reason === 'string') expect(v.body.reason).toContain(reason);
    else expect(v.body.reason).toMatch(reason);
    const h = await c.get(`/v1/streams/${stream}/headroom`);
    expect(h.body).toMatchObject({ degradationStage: 'halted', status: 'unfunded' });
    const bill = await c.post(`/v1/streams/${stream}/vouchers`, { voucher: voucher(payer, stream, 1_000_000n) });
    expect(bill.status).toBe(422);
    expect(bill.body).toMatchObject({ code: 'voucher_refused', refusal: 'not_payable' });
  }

  it('refuses an authorization for another connected account, in another currency, in live mode, or unknown: unfunded, reason naming it, nothing captured', async () => {
    const other = p.createAccount().id;
    const cases: Array<[string, RegExp | string]> = [
      [(p.createPaymentIntent({ amount: 500, destination: other }) as { id: string }).id, `pays ${other}, not this node's connected account ${acct}`],
      [(p.createPaymentIntent({ amount: 500, currency: 'eur', destination: acct }) as { id: string }).id, /is in EUR, but the stream's asset is USD/],
      [(p.createPaymentIntent({ amount: 500, destination: acct, livemode: true }) as { id: string }).id, /not known to the processor in test mode \(unknown, or a live-mode object\)/],
      ['pi_doesnotexist000', /payment intent pi_doesnotexist000 is not known to the processor in test mode/],
    ];
    for (const [pi, reason] of cases) {
      const { stream, r } = await present(pi);
      expect(r.status, r.text).toBe(422);
      expect(r.body).toMatchObject({ valid: false, refusal: 'unfunded' });
      await expectUnfunded(stream, reason);
    }
    for (const [pi] of cases.slice(0, 2)) expect(p.paymentIntent(pi)).toMatchObject({ amount_received: 0, status: 'requires_capture' });
    expect(p.requests.filter((q) => q.method === 'POST' && cases.some(([pi]) => q.path.includes(pi)))).toEqual([]);
  });

  it('the effective cap is what the authorization can capture: headroom shows it, a voucher above it is over_cap', async () => {
    const c = clientOf(daemon.url, tokenA);
    const pi = p.createPaymentIntent({ amount: 300, destination: acct }) as { id: string }; // $3.00 authorized
    const s = await open(pi.id, { cap: '5000000' }); // the credential allows $5.00
    const h = await c.get(`/v1/streams/${s.stream}/headroom`);
    expect(h.body).toMatchObject({ capMicro: '5000000', effectiveCapMicro: '3000000', fundedMicro: '3000000', remainingCapMicro: '3000000', degradationStage: 'normal' });
    const over = await c.post(`/v1/streams/${s.stream}/vouchers`, { voucher: voucher(payer, s.stream, 3_000_001n) });
    expect(over.status).toBe(422);
    expect(over.body).toMatchObject({ refusal: 'over_cap', effectiveCapMicro: '3000000' });
    expect(over.body.detail).toMatch(/the authorization is 3000000/);
    await s.bill(3_000_000n);
    await eventually(() => pis(pi.id).status === 'succeeded', 'captured in full');
    expect(pis(pi.id)).toMatchObject({ amount_received: 300, amount_capturable: 0 });
    expect(calls(pi.id).captures).toHaveLength(1);
  });

  it('a processor that cannot be read at registration: 503 unavailable, nothing registered; fine once it answers again', async () => {
    const pi = p.createPaymentIntent({ amount: 500, destination: acct }) as { id: string };
    p.failNext(new RegExp(`^/v1/payment_intents/${pi.id}$`), 'error', 50);
    const stream = uniq('card-down');
    const c = clientOf(daemon.url, tokenA);
    const credential = cardCredential(issuer, payer, stream, pi.id);
    try {
      const r = await c.post('/v1/allowances/verify', { credential });
      expect(r.status, r.text).toBe(503);
      expect(r.body).toMatchObject({ status: 503, code: 'unavailable' });
      expect(r.headers.get('retry-after')).toMatch(/^\d+$/);
      expect(r.text).not.toContain(p.testKey);
      expect((await c.get(`/v1/streams/${stream}/verify`)).status).toBe(404);
    } finally {
      p.clearFaults();
    }
    const again = await c.post('/v1/allowances/verify', { credential });
    expect(again.status, again.text).toBe(200);
    expect((await c.get(`/v1/streams/${stream}/verify`)).body).toMatchObject({ payable: true, status: 'open' });
  });

  it('two streams naming one PaymentIntent: the second is unfunded, and closing it never releases the first one\'s authorization', async () => {
    const pi = p.createPaymentIntent({ amount: 500, destination: acct }) as { id: string };
    const first = await open(pi.id);
    const { stream: second, r } = await present(pi.id);
    expect(r.status).toBe(422);
    expect(r.body).toMatchObject({ refusal: 'unfunded' });
    await expectUnfunded(second, `card authorization ${pi.id} already backs stream ${first.stream} of this node`);
    await control({ kind: 'stream.revoked', stream: second });
    await sleep(2500); // several settler ticks
    expect(pis(pi.id)).toMatchObject({ status: 'requires_capture', amount_capturable: 500 });
    expect(calls(pi.id).cancels).toHaveLength(0);
    await first.bill(1_000_000n);
    await eventually(() => ofType(first.stream, 'settlement.checkpointed').length === 1, 'first stream still settles');
    expect(pis(pi.id)).toMatchObject({ amount_received: 100 });
  });

  it('a live key in sandbox refuses to start: exit 4, stderr names the problem, the key is not echoed', async () => {
    const live = 'sk_live_51NotARealKeyButLooksLikeOne0000000000';
    const liveFile = await writeSecretFile(t.root, 'live.key', live);
    const other = await tempDataDir('node-svc-card-live-');
    try {
      const r = await cliFor(other.dataDir)('daemon', '--port', '0', '--host', '127.0.0.1', ...cardFlags(p, { key: liveFile, webhookSecret: secretFile }, acct));
      expect(r.code).toBe(4);
      expect(r.stderr).toMatch(/--card-key-file holds a LIVE key/);
      expect(r.stderr).toMatch(/--rail sandbox takes only test keys/);
      expect(r.stderr + r.stdout).not.toContain(live);
      expect(r.stderr + r.stdout).not.toContain(live.slice(8));
      const env = await cliFor(other.dataDir)('daemon', '--port', '0', ...cardFlags(p, { key: liveFile }, acct, { '--card-key-file': undefined }));
      expect(env.code).toBe(4);
      expect(env.stderr).toMatch(/--card-key-file \(or NODE_SVC_CARD_KEY\) is required/);
    } finally {
      await other.cleanup();
    }
  });
});
