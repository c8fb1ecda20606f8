// Operational events to the operator (issue #23, part 1): alert endpoints registered with the CLI against the store,
// never with a node's bearer token; each kind emitted once per transition with its documented data, delivered through
// the outbox and signed both ways. The real daemon (escrow rail on the local chain), the real CLI, real receivers.
import { type Hex } from 'viem';
import { afterAll, beforeAll, describe, expect, it, vi } from 'vitest';
import { startLocalProcessor, type LocalProcessor } from '../../src/rails/card/processor.js';
import { startSandboxChain, type SandboxChain } from '../../src/rails/escrow/sandbox.js';
import { cardCredential, cardFlags, startCardDaemon, writeSecretFile } from '../helpers/card.js';
import { cliFor, json, tempDataDir, type TempDataDir } from '../helpers/cli.js';
import { clientOf, http, setupNodes, type RunningDaemon } from '../helpers/daemon.js';
import { escrowCall, escrowFlags, eventually, startEscrowDaemon, writeKeyFile } from '../helpers/escrow.js';
import { ISSUER, issuerKeyPair, mintCredential, nowSeconds, payerKeyPair, signCompact, type KeyPair } from '../helpers/issuer.js';
import { startReceiver, verifyServiceSignature, verifyStandardSignature, type Receiver, type ReceivedRequest } from '../helpers/receiver.js';

vi.setConfig({ testTimeout: 90_000, hookTimeout: 60_000 });

let chain: SandboxChain;
let issuer: KeyPair;
let seq = 0;
const uid = (p: string) => `${p}-${++seq}-${Math.random().toString(36).slice(2, 8)}`;
type Client = ReturnType<typeof clientOf>;
const rpc = (method: string, params: unknown[] = []) => chain.client.request({ method: method as never, params: params as never });
const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));

interface Envelope { id: string; type: string; schemaVersion: string; occurredAt: string; externalRef: string; data: Record<string, any> }

/** What each receiver path answers: 204 unless set. */
const answers = new Map<string, number>();
/** Paths whose requests hang (answered long after the daemon's 2 s attempt timeout). */
const hanging = new Set<string>();

describe('alert endpoints: operational events to the operator', () => {
  let t: TempDataDir;
  let daemon: RunningDaemon;
  let rx: Receiver;
  let A: Client;
  let B: Client;
  let tokenA: string;
  let tokenB: string;
  let deadSub: string;
  let recoveredStream: string;
  let flags: string[];
  let cli: ReturnType<typeof cliFor>;
  let alert: { id: string; secret: string };
  let filtered: { id: string; secret: string };

  /** The operational events received at `path`, each checked first: both signatures with the endpoint's secret. */
  const received = (path = '/alerts', secret = alert.secret): Envelope[] =>
    rx.at(path).map((r: ReceivedRequest) => {
      expect(verifyServiceSignature(secret, r.body, r.headers['x-service-signature']), `x-service-signature of ${r.eventId}`).toBe(true);
      expect(verifyStandardSignature(secret, r), `webhook-signature of ${r.eventId}`).toBe(true);
      expect(r.headers['webhook-id']).toBe(r.eventId);
      return JSON.parse(r.body.toString('utf8')) as Envelope;
    });
  /** Distinct events of `kind` (a redelivery of one is the same event id) matching `pred`. */
  const ofKind = (kind: string, pred: (e: Envelope) => boolean = () => true, path?: string) => {
    const seen = new Map<string, Envelope>();
    for (const e of received(path)) if (e.type === kind && pred(e)) seen.set(e.id, e);
    return [...seen.values()];
  };
  const waitKind = (kind: string, pred: (e: Envelope) => boolean = () => true, n = 1, timeoutMs = 30_000) =>
    eventually(async () => { const xs = ofKind(kind, pred); return xs.length >= n && xs; }, `${n} ${kind} alert(s)`, timeoutMs, 100)
      .catch((err) => { throw new Error(`${(err as Error).message}\nreceived: ${JSON.stringify(received().map((e) => [e.type, e.data]))}\n${daemon.stderr.slice(-3000)}`); });

  /** A control fact from the trusted issuer aimed at `aud`: one node event. */
  const emit = async (c: Client, aud: string) => {
    const message = signCompact({ alg: issuer.alg, typ: 'control+jwt', kid: issuer.kid }, { iss: ISSUER, aud, jti: uid('ctl'), iat: nowSeconds(), kind: 'budget.halted', budget: uid('b'), reason: 'anomaly' }, issuer.privateKey);
    const r = await c.post('/v1/control', { message });
    expect(r.status, r.text).toBe(200);
    return r.body.eventId as string;
  };
  const subscribe = async (c: Client, path: string) => {
    const r = await c.post('/v1/webhooks', { url: `${rx.url}${path}` });
    expect(r.status, r.text).toBe(201);
    return r.body as { id: string; secret: string };
  };

  /** An escrow stream of node-a on a fresh channel. */
  async function stream(deposit = 2_000_000n, cap = '2000000') {
    const id = uid('stream');
    const channel = await chain.openChannel({ id, payee: chain.operator.address, deposit });
    const credential = mintCredential({ key: issuer, claims: { stream: id, budget: uid('budget'), cap, asset: 'USDC', mode: 'escrow', cnf: { addr: chain.payer.address }, chainId: chain.chainId, escrow: chain.escrow, channel } });
    const terms = { chainId: chain.chainId, escrow: chain.escrow, channel };
    expect((await A.post('/v1/allowances/verify', { credential })).status).toBe(200);
    return { id, channel, sign: (amount: bigint) => chain.signVoucher(terms, amount) };
  }
  const voucher = async (s: { id: string; sign(a: bigint): Promise<Hex> }, amount: bigint) => {
    const r = await A.post(`/v1/streams/${s.id}/vouchers`, { voucher: { stream: s.id, amount: amount.toString(), units: (amount / 100n).toString(), signature: await s.sign(amount) } });
    expect(r.status, r.text).toBe(200);
    expect(r.body.accepted).toBe(true);
  };

  const start = () => startEscrowDaemon(t.dataDir, flags, { env: { NODE_SVC_ALERT_WATCH_MS: '200', NODE_SVC_RETRY_SCHEDULE: '1,1,1,1,1,1', NODE_SVC_DELIVERY_TIMEOUT: '2' } });

  beforeAll(async () => {
    [chain, issuer] = await Promise.all([startSandboxChain({ closeGrace: 60 }), issuerKeyPair()]);
    rx = await startReceiver((r) => ({ status: answers.get(r.path) ?? 204, ...(hanging.has(r.path) ? { delayMs: 30_000 } : {}) }));
    t = await tempDataDir('node-svc-alerts-');
    ({ tokenA, tokenB } = await setupNodes(t.dataDir, issuer));
    cli = cliFor(t.dataDir);
    // Piped: the endpoint as JSON, its secret shown this once.
    const add = await cli('alerts', 'add', `${rx.url}/alerts`, '--description', 'on-call');
    expect(add.code, add.stderr).toBe(0);
    alert = json(add.stdout);
    expect(alert).toMatchObject({ id: expect.stringMatching(/^alr_/), secret: expect.stringMatching(/^whsec_/), events: ['*'], status: 'active' });
    const f = await cli('alerts', 'add', `${rx.url}/filtered`, '--events', 'settlement.stuck');
    expect(f.code, f.stderr).toBe(0);
    filtered = json(f.stdout);
    flags = [
      ...escrowFlags(chain, await writeKeyFile(t.root, chain.operator.key), { '--settle-threshold': '1', '--confirmations': '2', '--settle-interval': '2s', '--settle-stuck-after': '3s', '--rebroadcast-after': '1s' }),
      '--alert-failing-after', '3',
      '--alert-wallet-min', `1${'0'.repeat(29)}`, // more gas than the sandbox wallet holds: wallet.low
    ];
    daemon = await start();
    A = clientOf(daemon.url, tokenA);
    B = clientOf(daemon.url, tokenB);
  });
  afterAll(async () => {
    await rpc('miner_start').catch(() => undefined);
    await daemon?.stop('SIGKILL');
    await rx?.close();
    await chain?.stop();
    await t?.cleanup();
  });

  it('the CLI manages alert endpoints: bad input named, the secret never listed', async () => {
    const list = await cli('alerts', 'list');
    expect(list.code, list.stderr).toBe(0);
    expect(list.stdout).not.toMatch(/whsec_/);
    const l = json(list.stdout);
    expect(l.data.map((e: { id: string }) => e.id)).toEqual([alert.id, filtered.id]);
    expect(l.data[0]).toMatchObject({ url: `${rx.url}/alerts`, events: ['*'], description: 'on-call', status: 'active' });
    expect(l.data[1].events).toEqual(['settlement.stuck']);
    const bad = await cli('alerts', 'add', `${rx.url}/x`, '--events', 'endpoint.failing,settlement.final');
    expect(bad.code).toBe(2);
    expect(json(bad.stderr).error.message).toMatch(/unknown alert kinds: settlement\.final/);
    const meta = await cli('alerts', 'add', 'http://169.254.169.254/latest');
    expect(meta.code).toBe(2);
    expect(json(meta.stderr).error.message).toMatch(/not an allowed webhook target/);
    expect((await cli('alerts', 'rm', 'alr_nope')).code).toBe(3);
    expect((await cli('alerts', 'test', 'alr_nope')).code).toBe(3);
    // The owner of alert endpoints is no node: not listed, and no token can be issued for it.
    expect(json((await cli('nodes', 'list')).stdout).data.map((n: { id: string }) => n.id)).toEqual(['node-a', 'node-b']);
    expect((await cli('tokens', 'issue', '@operator')).code).toBe(3);
  });

  it("a node's bearer token cannot read or manage alert endpoints or their events", async () => {
    const mine = await A.get('/v1/webhooks');
    expect(mine.status).toBe(200);
    expect(JSON.stringify(mine.body)).not.toContain(alert.id);
    for (const [method, path] of [['DELETE', `/v1/webhooks/${alert.id}`], ['GET', `/v1/webhooks/${alert.id}/deliveries`], ['POST', `/v1/webhooks/${alert.id}/rotate-secret`]] as const) {
      const r = await http(daemon.url, path, { method, token: tokenA, ...(method === 'POST' ? { body: {} } : {}) });
      expect(r.status, `${method} ${path}: ${r.text}`).toBe(404);
      expect(r.body.code).toBe('not_found');
      expect(r.text).not.toMatch(/whsec_/);
      const anon = await http(daemon.url, path, { method, ...(method === 'POST' ? { body: {} } : {}) });
      expect(anon.status).toBe(401);
    }
    const test = await cli('alerts', 'test', alert.id);
    expect(test.code, test.stderr).toBe(0);
    const ev = json(test.stdout).event as string;
    await waitKind('alert.test', (e) => e.id === ev);
    // Its event is the operator's: not among a node's events, not redeliverable with a node's token.
    const events = await A.get('/v1/events?limit=500');
    expect(JSON.stringify(events.body)).not.toContain(ev);
    expect((await A.post(`/v1/events/${ev}/redeliver`, {})).status).toBe(404);
    // Still listed, still active: nothing a node did touched it.
    expect(json((await cli('alerts', 'list')).stdout).data[0]).toMatchObject({ id: alert.id, status: 'active' });
  });

  it('alerts test reaches every active endpoint, signed both ways, on the operator schema', async () => {
    // --wait: the CLI reads the store until the daemon has delivered it to each endpoint.
    const r = await cli('alerts', 'test', '--wait', '30s');
    expect(r.code, r.stdout + r.stderr).toBe(0);
    const { event, endpoints, delivered, results } = json(r.stdout);
    expect(endpoints).toEqual([alert.id, filtered.id]);
    expect(delivered).toBe(true);
    expect(results).toEqual([alert.id, filtered.id].sort().map((endpoint) => ({ endpoint, outcome: 'delivered', lastStatus: 204, lastError: null })));
    const [e] = await waitKind('alert.test', (x) => x.id === event);
    expect(e).toMatchObject({ type: 'alert.test', schemaVersion: 'operator/1.0.0', externalRef: 'operator:test', data: { requestedAt: expect.any(String) } });
    // The filtered endpoint too (a test ignores its filter), signed with its own secret.
    await eventually(async () => received('/filtered', filtered.secret).some((x) => x.id === event), 'the test at the filtered endpoint');
  });

  it('a failing then healthy receiver: endpoint.failing then endpoint.recovered, once each', async () => {
    answers.set('/flaky', 500);
    const sub = await subscribe(A, '/flaky');
    await emit(A, 'node-a');
    const [failing] = await waitKind('endpoint.failing', (e) => e.data.subscription === sub.id);
    expect(failing).toMatchObject({ schemaVersion: 'operator/1.0.0', externalRef: `webhook:${sub.id}` });
    expect(failing!.data).toMatchObject({ node: 'node-a', subscription: sub.id, url: `${rx.url}/flaky`, consecutiveFailures: 3, lastStatus: 500, lastError: 'receiver answered HTTP 500' });
    // More failures (a second event) raise nothing more.
    await emit(A, 'node-a');
    await eventually(async () => rx.at('/flaky').length >= 6, 'more failed attempts');
    answers.delete('/flaky');
    const [recovered] = await waitKind('endpoint.recovered', (e) => e.data.subscription === sub.id);
    expect(recovered!.data).toMatchObject({ node: 'node-a', subscription: sub.id, failingSince: expect.any(String), recoveredAt: expect.any(String) });
    expect(Date.parse(recovered!.occurredAt)).toBeGreaterThanOrEqual(Date.parse(failing!.occurredAt));
    expect(ofKind('endpoint.failing', (e) => e.data.subscription === sub.id)).toHaveLength(1);
    expect(ofKind('endpoint.recovered', (e) => e.data.subscription === sub.id)).toHaveLength(1);
    // The log line and the metric of each kind.
    expect(daemon.stderr).toMatch(/alert endpoint\.failing/);
    const m = (await http(daemon.url, '/metrics')).text;
    expect(m).toMatch(/node_svc_alerts_emitted_total\{kind="endpoint\.failing"\} [1-9]/);
    expect(m).toMatch(/node_svc_alerts_emitted_total\{kind="endpoint\.recovered"\} [1-9]/);
    // Not to an endpoint that chose other kinds.
    expect(received('/filtered', filtered.secret).some((e) => e.type.startsWith('endpoint.'))).toBe(false);
  });

  it('a delivery out of retries: delivery.exhausted once, naming node, subscription and event', async () => {
    answers.set('/dead', 503);
    const sub = await subscribe(B, '/dead');
    deadSub = sub.id;
    const ev = await emit(B, 'node-b');
    const [x] = await waitKind('delivery.exhausted', (e) => e.data.subscription === sub.id);
    expect(x!.data).toMatchObject({ node: 'node-b', subscription: sub.id, event: ev, eventType: 'budget.halted', attempts: 7, lastStatus: 503, delivery: expect.stringMatching(/^dlv_/) });
    expect(ofKind('delivery.exhausted', (e) => e.data.subscription === sub.id)).toHaveLength(1);
    // It also failed 3 times in a row on the way: one endpoint.failing, and the secret of neither appears anywhere.
    expect(ofKind('endpoint.failing', (e) => e.data.subscription === sub.id)).toHaveLength(1);
    expect(JSON.stringify(received())).not.toMatch(/whsec_|nsv_/);
  });

  it('a receiver that answers 410 Gone: endpoint.disabled once', async () => {
    answers.set('/gone', 410);
    const sub = await subscribe(B, '/gone');
    await emit(B, 'node-b');
    await emit(B, 'node-b');
    const [d] = await waitKind('endpoint.disabled', (e) => e.data.subscription === sub.id);
    expect(d!.data).toMatchObject({ node: 'node-b', subscription: sub.id, reason: 'receiver answered 410 Gone' });
    const list = await B.get('/v1/webhooks');
    expect(list.body.data.find((s: { id: string }) => s.id === sub.id).status).toBe('disabled');
    expect(ofKind('endpoint.disabled', (e) => e.data.subscription === sub.id)).toHaveLength(1);
  });

  it('headroom.low as a stream enters low, then critical: once each', async () => {
    const s = await stream(2_000_000n, '2000000');
    await voucher(s, 1_000_000n); // 50 % left: normal
    await voucher(s, 1_700_000n); // 15 % left: low
    const [low] = await waitKind('headroom.low', (e) => e.data.stream === s.id);
    expect(low).toMatchObject({ externalRef: `stream:${s.id}` });
    expect(low!.data).toMatchObject({ node: 'node-a', stream: s.id, asset: 'USDC', stage: 'low', previousStage: 'normal', capMicro: '2000000', billedMicro: '1700000', remainingCapMicro: '300000' });
    await voucher(s, 1_750_000n); // still low: nothing
    await voucher(s, 1_950_000n); // 2.5 % left: critical
    const both = await waitKind('headroom.low', (e) => e.data.stream === s.id, 2);
    expect(both.map((e) => e.data.stage)).toEqual(['low', 'critical']);
    expect(both[1]!.data).toMatchObject({ previousStage: 'low', remainingCapMicro: '50000', remainingUnits: expect.any(String) });
    await voucher(s, 1_960_000n);
    expect(ofKind('headroom.low', (e) => e.data.stream === s.id)).toHaveLength(2);
    expect(JSON.stringify(both)).not.toMatch(/signature|voucher|credential/i);
  });

  it('a settlement whose receipt has no Settled log: settlement.failed once, however often it is retried', async () => {
    const s = await stream(2_000_000n);
    // The payer redeems a higher voucher first: this daemon's settle mines without a Settled log, and fails each retry.
    await escrowCall(chain, chain.payer.key, 'settle', [s.channel, 1_500_000n, await s.sign(1_500_000n)]);
    await voucher(s, 800_000n);
    const [f] = await waitKind('settlement.failed', (e) => e.data.stream === s.id);
    expect(f!.data).toMatchObject({ node: 'node-a', stream: s.id, rail: 'escrow', asset: 'USDC', amountMicro: '800000', settlement: expect.stringMatching(/^stl_/), error: expect.stringMatching(/Settled log/) });
    await eventually(async () => { await chain.mine(1); return (daemon.stderr.match(new RegExp(`settlement failed; will retry`, 'g')) ?? []).length >= 2; }, 'a retry that fails again', 30_000, 300);
    expect(ofKind('settlement.failed', (e) => e.data.stream === s.id)).toHaveLength(1);
  });

  it('a stuck settlement raises settlement.stuck, then settlement.recovered once it is mined', async () => {
    const s = await stream(2_000_000n);
    await rpc('miner_stop');
    try {
      await voucher(s, 600_000n);
      const [stuck] = await waitKind('settlement.stuck', (e) => e.data.stream === s.id);
      expect(stuck!.data).toMatchObject({ node: 'node-a', stream: s.id, rail: 'escrow', asset: 'USDC', amountMicro: '600000', stuckAfterSeconds: 3, sentAt: expect.any(String), reference: expect.stringMatching(/^0x/) });
      // The endpoint that chose settlement.stuck gets it too.
      await eventually(async () => received('/filtered', filtered.secret).some((e) => e.id === stuck!.id), 'settlement.stuck at the filtered endpoint');
    } finally {
      await rpc('miner_start');
    }
    const [rec] = await waitKind('settlement.recovered', (e) => e.data.stream === s.id);
    recoveredStream = s.id;
    expect(rec!.data).toMatchObject({ node: 'node-a', stream: s.id, amountMicro: '600000', recovered: 'settlement.stuck', since: expect.any(String), checkpointedAt: expect.any(String) });
    expect(ofKind('settlement.stuck', (e) => e.data.stream === s.id)).toHaveLength(1);
    expect(ofKind('settlement.recovered', (e) => e.data.stream === s.id)).toHaveLength(1);
    // Recoveries reach only endpoints that chose them.
    expect(received('/filtered', filtered.secret).some((e) => e.type === 'settlement.recovered')).toBe(false);
  });

  it('wallet.low once, and a restart emits nothing again', async () => {
    const [w] = await waitKind('wallet.low');
    expect(w!.data).toMatchObject({ minimumWei: `1${'0'.repeat(29)}`, balanceWei: expect.stringMatching(/^\d+$/) });
    expect(w!.data.address.toLowerCase()).toBe(chain.operator.address.toLowerCase());
    expect(BigInt(w!.data.balanceWei)).toBeLessThan(10n ** 29n);
    expect(w!.externalRef.toLowerCase()).toBe(`wallet:${chain.operator.address.toLowerCase()}`);
    // Conditions a later event ends are listed as open; one-way kinds (headroom.low) are not.
    const open = json((await cli('alerts', 'list')).stdout).open as Array<{ kind: string; subject: string; node: string | null }>;
    expect(open.map((o) => o.kind)).toEqual(expect.arrayContaining(['wallet.low', 'endpoint.failing']));
    // The stream whose settles fail for ever is open (failed, or stuck while a retry waited for the stopped miner).
    expect(open.some((o) => o.kind === 'settlement.failed' || o.kind === 'settlement.stuck')).toBe(true);
    expect(open.some((o) => o.kind === 'headroom.low' || o.subject.includes(JSON.stringify(recoveredStream)))).toBe(false);
    expect(daemon.stderr).toMatch(/"msg":"alert wallet\.low"/);
    // A failing subscription that is deleted closes its condition (nothing more is attempted).
    expect(open.some((o) => o.subject === `endpoint:${deadSub}`)).toBe(true);
    expect((await http(daemon.url, `/v1/webhooks/${deadSub}`, { method: 'DELETE', token: tokenB })).status).toBe(204);
    expect((json((await cli('alerts', 'list')).stdout).open as Array<{ subject: string }>).some((o) => o.subject === `endpoint:${deadSub}`)).toBe(false);
    const seen = received().length;
    const before = ofKind('wallet.low').length;
    await daemon.stop();
    daemon = await start();
    A = clientOf(daemon.url, tokenA);
    // After the restart the watch has looked at the wallet several times (200 ms apart) by the time a test event arrives.
    await sleep(1500);
    const r = await cli('alerts', 'test', alert.id);
    await waitKind('alert.test', (e) => e.id === json(r.stdout).event);
    expect(received().length).toBeGreaterThan(seen);
    expect(ofKind('wallet.low')).toHaveLength(before);
    expect(before).toBe(1);
  });

  it('an alert endpoint that hangs shows in status and /healthz, and node deliveries go on', async () => {
    hanging.add('/broken');
    const add = await cli('alerts', 'add', `${rx.url}/broken`);
    const broken = json(add.stdout) as { id: string };
    const sub = await subscribe(A, '/healthy');
    // Many alerts for the hanging endpoint (each test event one delivery), then a node event.
    for (let i = 0; i < 5; i++) expect((await cli('alerts', 'test', broken.id)).code).toBe(0);
    // Waiting for an endpoint that does not answer: exit 1, saying where the delivery stands.
    const waited = await cli('alerts', 'test', broken.id, '--wait', '1s');
    expect(waited.code, waited.stderr).toBe(1);
    expect(json(waited.stdout)).toMatchObject({ delivered: false, results: [{ endpoint: broken.id, outcome: expect.stringMatching(/^(pending|retrying)$/) }] });
    await eventually(async () => rx.at('/broken').length >= 2, 'the broken alert endpoint tried');
    const ok = await emit(A, 'node-a');
    await eventually(async () => rx.at('/healthy').some((r) => r.eventId === ok), 'the node delivery, while the alert endpoint hangs');
    expect(rx.at('/broken').some((r) => r.answered === undefined), 'an attempt to the alert endpoint still hanging').toBe(true);
    const h = await eventually(async () => { const r = await http(daemon.url, '/healthz'); return r.body.checks?.find((c: { name: string; status: string }) => c.name === 'alerts' && c.status === 'degraded') && r; }, 'alerts degraded in /healthz');
    expect(h.body.reasons.join(' ')).toMatch(/alert endpoint\(s\) failing/);
    const st = await cli('status', '--url', daemon.url);
    expect(st.code).toBe(1);
    expect(json(st.stdout).checks.find((c: { name: string }) => c.name === 'alerts')).toMatchObject({ status: 'degraded', figures: { failing: 1 } });
    // Alert endpoints' own failures raise no alert (they would be sent to themselves).
    expect(ofKind('endpoint.failing', (e) => e.data.subscription === broken.id)).toHaveLength(0);
    expect((await cli('alerts', 'rm', broken.id)).code).toBe(0);
    hanging.delete('/broken');
    expect(json((await cli('alerts', 'list')).stdout).data.map((e: { id: string }) => e.id)).not.toContain(broken.id);
    void sub;
  });
});

describe('authorization.expiring on the card rail (local processor)', () => {
  let t: TempDataDir;
  let p: LocalProcessor;
  let daemon: RunningDaemon;
  let rx: Receiver;
  let secret: string;
  let cardIssuer: KeyPair;
  let payer: KeyPair;
  let tokenA: string;
  let acct: string;

  beforeAll(async () => {
    t = await tempDataDir('node-svc-alerts-card-');
    p = await startLocalProcessor();
    acct = p.createAccount().id;
    [cardIssuer, payer] = await Promise.all([issuerKeyPair(), payerKeyPair()]);
    ({ tokenA } = await setupNodes(t.dataDir, cardIssuer));
    rx = await startReceiver();
    const add = await cliFor(t.dataDir)('alerts', 'add', `${rx.url}/alerts`, '--events', 'authorization.expiring');
    expect(add.code, add.stderr).toBe(0);
    secret = json(add.stdout).secret;
    const keyFile = await writeSecretFile(t.root, 'card.key', p.testKey);
    daemon = await startCardDaemon(t.dataDir, cardFlags(p, { key: keyFile }, acct), { env: { NODE_SVC_ALERT_WATCH_MS: '200' } });
  });
  afterAll(async () => {
    await daemon?.stop();
    await rx?.close();
    await p?.close();
    await t?.cleanup();
  });

  it('an authorization within 24 h of its capture deadline: authorization.expiring once, naming node and stream', async () => {
    const c = clientOf(daemon.url, tokenA);
    // 12 h from its deadline: inside the 24 h warning, outside the 1 h margin where it is captured and released.
    const pi = p.createPaymentIntent({ amount: 500, destination: acct, captureBefore: nowSeconds() + 12 * 3600 }) as { id: string };
    const stream = uid('card');
    const r = await c.post('/v1/allowances/verify', { credential: cardCredential(cardIssuer, payer, stream, pi.id) });
    expect(r.status, r.text).toBe(200);
    const envs = () => rx.at('/alerts').map((q) => {
      expect(verifyServiceSignature(secret, q.body, q.headers['x-service-signature'])).toBe(true);
      expect(verifyStandardSignature(secret, q)).toBe(true);
      return JSON.parse(q.body.toString('utf8')) as Envelope;
    });
    const [e] = await eventually(async () => { const xs = envs().filter((x) => x.type === 'authorization.expiring'); return xs.length > 0 && xs; }, 'authorization.expiring', 30_000);
    expect(e).toMatchObject({ schemaVersion: 'operator/1.0.0', externalRef: `stream:${stream}` });
    expect(e!.data).toMatchObject({ node: 'node-a', stream, paymentIntent: pi.id, deadline: expect.any(String), minutesLeft: expect.any(Number) });
    expect(e!.data.minutesLeft).toBeGreaterThan(11 * 60);
    // The settler looks at deadlines every tick (1 s): a few more ticks emit nothing more.
    await eventually(async () => (daemon.stderr.match(/card authorization nears its capture deadline/g) ?? []).length >= 1, 'the warning logged');
    await sleep(3000);
    expect(new Set(envs().filter((x) => x.type === 'authorization.expiring').map((x) => x.id)).size).toBe(1);
  });
});
