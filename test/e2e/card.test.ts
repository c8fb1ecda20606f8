// End to end on the card rail: the REAL daemon (bin/node-svc daemon --mode card --rail sandbox, a child process)
// against the local processor, and a webhook receiver subscribed to the node's events.
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { startLocalProcessor, type LocalProcessor } from '../../src/rails/card/processor.js';
import { cardCredential, cardFlags, eventually, newWebhookSecret, sleep, startCardDaemon, voucher, writeSecretFile } from '../helpers/card.js';
import { cliFor, tempDataDir, type TempDataDir } from '../helpers/cli.js';
import { clientOf, setupNodes, type RunningDaemon } from '../helpers/daemon.js';
import { issuerKeyPair, payerKeyPair, type KeyPair } from '../helpers/issuer.js';
import { startReceiver, verifyServiceSignature, type Receiver } from '../helpers/receiver.js';

interface Envelope { id: string; type: string; externalRef: string; data: Record<string, string> }

describe('card rail end to end (real daemon, local processor)', () => {
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

  it('refuses a currency mismatch: the settlement fails with a clear error, nothing is captured', async () => {
    const pi = p.createPaymentIntent({ amount: 500, currency: 'eur', destination: acct }) as { id: string };
    const s = await open(pi.id); // asset USD
    await s.bill(1_000_000n);
    await eventually(() => /currency mismatch: stream card-e2e-\w+ is in USD, payment intent pi_\w+ is in EUR; nothing captured/.test(daemon.stderr), 'refusal logged');
    expect(p.paymentIntent(pi.id)).toMatchObject({ amount_received: 0, status: 'requires_capture' });
    expect(delivered(s.stream).filter((e) => e.type !== 'stream.exhausted')).toEqual([]);
    expect(await s.finality()).toMatchObject({ finality: 'none', checkpointedMicro: '0' });
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
