// Traces end to end: the REAL daemon (bin/node-svc daemon, a child process) exporting OTLP/HTTP to a receiver written
// here, on the card rail against the local processor. One voucher → its settlement → the settlement.final delivery:
// the span tree and its links, the traceparent the webhook receiver saw, and no secret in anything exported. Without
// OTEL_* variables the daemon loads no OpenTelemetry module at all (test/helpers/module-probe.mjs records what it loads).
import { randomBytes } from 'node:crypto';
import { readFile } from 'node:fs/promises';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { startLocalProcessor, type LocalProcessor } from '../../src/rails/card/processor.js';
import { cardCredential, cardFlags, controlMessage, eventually, newWebhookSecret, startCardDaemon, voucher, writeSecretFile } from '../helpers/card.js';
import { REPO_ROOT, tempDataDir, type TempDataDir } from '../helpers/cli.js';
import { clientOf, freePort, http, setupNodes, startDaemon, type RunningDaemon } from '../helpers/daemon.js';
import { issuerKeyPair, mintCredential, payerKeyPair, type KeyPair } from '../helpers/issuer.js';
import { SPAN_KIND, startOtlpReceiver, type OtlpReceiver, type ReceivedSpan } from '../helpers/otlp.js';
import { waitFor } from '../helpers/wait.js';
import { startReceiver, type Receiver } from '../helpers/receiver.js';

const PROBE = join(REPO_ROOT, 'test', 'helpers', 'module-probe.mjs');
const probeEnv = (log: string) => ({ NODE_OPTIONS: `--import=${PROBE}`, NODE_SVC_TEST_MODULE_LOG: log });
const otelEnv = (o: OtlpReceiver, extra: Record<string, string> = {}) => ({
  OTEL_EXPORTER_OTLP_ENDPOINT: o.url, OTEL_BSP_SCHEDULE_DELAY: '50', OTEL_SERVICE_NAME: 'node-svc-e2e', ...extra,
});
const loaded = async (log: string) => (await readFile(log, 'utf8').catch(() => '')).split('\n').filter(Boolean);

describe('traces over OTLP/HTTP (real daemon, card rail, local processor)', { timeout: 60_000 }, () => {
  let t: TempDataDir;
  let p: LocalProcessor;
  let otlp: OtlpReceiver;
  let hooks: Receiver;
  let daemon: RunningDaemon;
  let issuer: KeyPair;
  let payer: KeyPair;
  let tokenA: string;
  let tokenB: string;
  let acct: string;
  let subSecret: string;
  let moduleLog: string;
  const whsec = newWebhookSecret();
  const secrets: string[] = [];

  beforeAll(async () => {
    t = await tempDataDir('node-svc-tracing-e2e-');
    p = await startLocalProcessor();
    acct = p.createAccount().id;
    issuer = await issuerKeyPair();
    payer = await payerKeyPair();
    ({ tokenA, tokenB } = await setupNodes(t.dataDir, issuer));
    const keyFile = await writeSecretFile(t.root, 'card.key', p.testKey);
    const secretFile = await writeSecretFile(t.root, 'card-webhook.secret', whsec);
    otlp = await startOtlpReceiver();
    hooks = await startReceiver();
    moduleLog = join(t.root, 'modules-on.log');
    daemon = await startCardDaemon(t.dataDir, cardFlags(p, { key: keyFile, webhookSecret: secretFile }, acct), {
      env: { ...otelEnv(otlp, { OTEL_EXPORTER_OTLP_TRACES_PROTOCOL: 'http/json' }), ...probeEnv(moduleLog) },
    });
    const sub = await clientOf(daemon.url, tokenA).post('/v1/webhooks', { url: `${hooks.url}/hook` });
    expect(sub.status, sub.text).toBe(201);
    subSecret = sub.body.secret;
    secrets.push(tokenA, tokenB, subSecret, whsec, p.testKey);
  }, 60_000);

  afterAll(async () => {
    await daemon?.stop();
    await hooks?.close();
    await otlp?.close();
    await p?.close();
    await t?.cleanup();
  });

  const named = (name: string, pred: (s: ReceivedSpan) => boolean = () => true) => otlp.spans.filter((s) => s.name === name && pred(s));
  const waitSpan = (name: string, pred: (s: ReceivedSpan) => boolean, what: string) =>
    eventually(() => named(name, pred)[0], `${what} exported`, 20_000);
  const linked = (s: ReceivedSpan, to: ReceivedSpan) => s.links.some((l) => l.traceId === to.traceId && l.spanId === to.spanId);

  it('one voucher → settlement → settlement.final delivery: spans, links, and the traceparent the receiver saw', async () => {
    const c = clientOf(daemon.url, tokenA);
    const pi = p.createPaymentIntent({ amount: 500, destination: acct }) as { id: string };
    const stream = `trace-${randomBytes(4).toString('hex')}`;
    const credential = cardCredential(issuer, payer, stream, pi.id);
    const v1 = voucher(payer, stream, 1_000_000n);
    secrets.push(credential, v1, v1.split('.')[2]!);

    // The node calls with its own trace context: the daemon's server span continues it.
    const nodeTrace = randomBytes(16).toString('hex');
    const nodeSpan = randomBytes(8).toString('hex');
    const verified = await c.post('/v1/allowances/verify', { credential }, { headers: { traceparent: `00-${nodeTrace}-${nodeSpan}-01` } });
    expect(verified.status, verified.text).toBe(200);
    const accepted = await c.post(`/v1/streams/${stream}/vouchers`, { voucher: v1 });
    expect(accepted.status, accepted.text).toBe(200);
    expect(accepted.body.accepted).toBe(true);

    // checkpointed (capture), then final once the processor makes the funds available and says so
    const checkpointed = await hooks.waitFor((rs) => rs.some((r) => JSON.parse(r.body.toString()).type === 'settlement.checkpointed'), 20_000, 'settlement.checkpointed delivered');
    const reference = JSON.parse(checkpointed.find((r) => JSON.parse(r.body.toString()).type === 'settlement.checkpointed')!.body.toString()).data.reference as string;
    p.makeAvailable(reference);
    expect((await p.sendWebhook(`${daemon.url}/processor/webhook`, whsec, p.event('balance.available', { object: 'balance', livemode: false }))).status).toBe(200);
    const finals = await hooks.waitFor((rs) => rs.some((r) => JSON.parse(r.body.toString()).type === 'settlement.final'), 20_000, 'settlement.final delivered');
    const finalReq = finals.find((r) => JSON.parse(r.body.toString()).type === 'settlement.final')!;
    const finalEvent = finalReq.eventId;

    // The HTTP server span of the verify request: in the node's trace, under the node's span, per the conventions.
    const verifyServer = await waitSpan('POST /v1/allowances/verify', (s) => s.traceId === nodeTrace, 'verify server span');
    expect(verifyServer).toMatchObject({ kind: SPAN_KIND.server, parentSpanId: nodeSpan });
    expect(verifyServer.attributes).toMatchObject({
      'http.request.method': 'POST', 'http.route': '/v1/allowances/verify', 'url.path': '/v1/allowances/verify', 'http.response.status_code': 200, 'node_svc.node': 'node-a',
    });
    expect(verifyServer.resource['service.name']).toBe('node-svc-e2e');
    const credSpan = await waitSpan('credential.verify', (s) => s.parentSpanId === verifyServer.spanId, 'credential.verify span');
    expect(credSpan).toMatchObject({ kind: SPAN_KIND.internal, traceId: nodeTrace });
    expect(credSpan.attributes).toMatchObject({ 'node_svc.credential.valid': true, 'node_svc.stream': stream });

    // voucher.accept under its request's server span
    const voucherServer = await waitSpan('POST /v1/streams/:id/vouchers', (s) => s.attributes['url.path'] === `/v1/streams/${stream}/vouchers`, 'voucher server span');
    expect(voucherServer.attributes).toMatchObject({ 'http.route': '/v1/streams/:id/vouchers', 'http.response.status_code': 200 });
    const voucherSpan = await waitSpan('voucher.accept', (s) => s.parentSpanId === voucherServer.spanId, 'voucher.accept span');
    expect(voucherSpan).toMatchObject({ kind: SPAN_KIND.internal, traceId: voucherServer.traceId });
    expect(voucherSpan.attributes).toMatchObject({ 'node_svc.voucher.accepted': true, 'node_svc.stream': stream, 'node_svc.billed_micro': '1000000' });

    // settlement.submit: a CLIENT span to the processor, linked to the voucher it settles
    const submit = await waitSpan('settlement.submit', (s) => s.attributes['node_svc.stream'] === stream, 'settlement.submit span');
    expect(submit.kind).toBe(SPAN_KIND.client);
    expect(linked(submit, voucherSpan)).toBe(true);
    expect(submit.attributes).toMatchObject({ 'node_svc.rail': 'card', 'server.address': '127.0.0.1', 'server.port': Number(new URL(p.url).port), 'node_svc.settlement.reference': expect.any(String) });

    // settlement.confirm, checkpointed then final: CLIENT spans linked to the submit (and the voucher)
    const confirms = await eventually(() => {
      const cs = named('settlement.confirm', (s) => s.attributes['node_svc.stream'] === stream);
      return cs.length >= 2 ? cs : undefined;
    }, 'two settlement.confirm spans exported', 20_000);
    expect(confirms.map((s) => s.attributes['node_svc.settlement.state']).sort()).toEqual(['checkpointed', 'final']);
    for (const s of confirms) {
      expect(s.kind).toBe(SPAN_KIND.client);
      expect(linked(s, submit)).toBe(true);
      expect(linked(s, voucherSpan)).toBe(true);
    }
    const finalConfirm = confirms.find((s) => s.attributes['node_svc.settlement.state'] === 'final')!;

    // The delivery of settlement.final: an HTTP CLIENT span whose traceparent the receiver got, linked back
    const delivery = await waitSpan('POST', (s) => s.attributes['node_svc.event.id'] === finalEvent, 'settlement.final delivery span');
    expect(delivery.kind).toBe(SPAN_KIND.client);
    expect(delivery.attributes).toMatchObject({
      'http.request.method': 'POST', 'server.address': '127.0.0.1', 'server.port': hooks.port, 'http.response.status_code': 204, 'node_svc.node': 'node-a',
    });
    expect(finalReq.headers.traceparent).toBe(`00-${delivery.traceId}-${delivery.spanId}-01`);
    expect(linked(delivery, finalConfirm)).toBe(true);
    expect(linked(delivery, voucherSpan)).toBe(true);
    // Every delivery the receiver got carries the traceparent of its own attempt's span.
    for (const r of hooks.at('/hook')) {
      const m = /^00-([0-9a-f]{32})-([0-9a-f]{16})-01$/.exec(String(r.headers.traceparent));
      expect(m, `traceparent of ${r.eventId}`).not.toBeNull();
      await waitSpan('POST', (s) => s.traceId === m![1] && s.spanId === m![2] && s.attributes['node_svc.event.id'] === r.eventId, `delivery span of ${r.eventId}`);
    }
  });

  it('the direct stream reads and refusals have their spans too', async () => {
    const c = clientOf(daemon.url, tokenA);
    const pi = p.createPaymentIntent({ amount: 500, destination: acct }) as { id: string };
    const stream = `trace-read-${randomBytes(4).toString('hex')}`;
    const credential = cardCredential(issuer, payer, stream, pi.id);
    expect((await c.post('/v1/allowances/verify', { credential })).status).toBe(200);
    const nodeTrace = randomBytes(16).toString('hex');
    const nodeSpan = randomBytes(8).toString('hex');
    expect((await c.get(`/v1/streams/${stream}/headroom`, { headers: { traceparent: `00-${nodeTrace}-${nodeSpan}-01` } })).status).toBe(200);
    const forged = voucher(await payerKeyPair(), stream, 1_000n); // signed by a key that is not the credential's cnf
    secrets.push(forged);
    const refusedVoucher = await c.post(`/v1/streams/${stream}/vouchers`, { voucher: forged });
    expect(refusedVoucher.status).toBe(422);
    expect((await c.get('/v1/streams/no-such-stream/finality')).status).toBe(404);
    const wrongAud = mintCredential({ key: issuer, payer, claims: { aud: 'node-b', stream: `${stream}-b` } });
    secrets.push(credential, wrongAud);
    const refusedAnswer = await c.post('/v1/allowances/verify', { credential: wrongAud });
    expect(refusedAnswer.status).toBe(422);
    const badToken = await http(daemon.url, `/v1/streams/${stream}/verify`, { token: 'nsv_not-a-token' });
    expect(badToken.status).toBe(401);

    const headroom = await waitSpan('GET /v1/streams/:id/headroom', (s) => s.attributes['url.path'] === `/v1/streams/${stream}/headroom`, 'headroom span');
    expect(headroom).toMatchObject({ kind: SPAN_KIND.server, traceId: nodeTrace, parentSpanId: nodeSpan }); // the node's trace, continued
    expect(headroom.attributes).toMatchObject({ 'http.request.method': 'GET', 'http.route': '/v1/streams/:id/headroom', 'http.response.status_code': 200 });
    const missing = await waitSpan('GET /v1/streams/:id/finality', (s) => s.attributes['url.path'] === '/v1/streams/no-such-stream/finality', '404 span');
    expect(missing.attributes['http.response.status_code']).toBe(404);
    expect(missing.status.code).toBe(0); // a 4xx is the client's, not a server error
    const unauthorized = await waitSpan('GET /v1/streams/:id/verify', (s) => s.attributes['url.path'] === `/v1/streams/${stream}/verify`, '401 span');
    expect(unauthorized.attributes['http.response.status_code']).toBe(401);
    const refusal = await waitSpan('credential.verify', (s) => s.attributes['node_svc.refusal'] === 'wrong_audience', 'refused credential.verify span');
    expect(refusal.attributes['node_svc.credential.valid']).toBe(false);
    // A refused voucher: named on its span, an answer (422), not an error of the daemon.
    const voucherRefused = await waitSpan('voucher.accept', (s) => s.attributes['node_svc.stream'] === stream, 'refused voucher.accept span');
    expect(voucherRefused.attributes['node_svc.refusal']).toBe('bad_signature');
    expect(voucherRefused.status.code).toBe(0);
  });

  it('no secret in anything exported: tokens, webhook and processor secrets, credentials, vouchers, signatures', async () => {
    expect(otlp.spans.length).toBeGreaterThan(10);
    expect(secrets.length).toBeGreaterThan(8);
    const raw = otlp.bodies.map((b) => b.toString('utf8')).join('\n');
    for (const s of otlp.spans) {
      const values = [...Object.values(s.attributes), ...Object.values(s.resource), s.status.message].map(String);
      for (const secret of secrets) for (const v of values) expect(v.includes(secret), `${s.name}: an attribute holds a secret`).toBe(false);
    }
    for (const secret of secrets) expect(raw.includes(secret), 'an exported body holds a secret').toBe(false);
    expect(raw.includes('nsv_')).toBe(false);
    expect(raw.includes('whsec_')).toBe(false);
  });

  it('with tracing on, the daemon did load the SDK (the probe sees what it loads)', async () => {
    const lines = await loaded(moduleLog);
    expect(lines.some((l) => l.includes('@opentelemetry/sdk-trace-base'))).toBe(true);
    expect(lines.some((l) => l.includes('@opentelemetry/exporter-trace-otlp-http'))).toBe(true);
    expect(lines.some((l) => l.includes('/dist/ops/otlp-proto.js'))).toBe(false); // http/json chosen: the SDK's processor and JSON exporter
  });
});

describe('traces: off by default, protobuf by default when on, bad variables refused', { timeout: 60_000 }, () => {
  let t: TempDataDir;
  let issuer: KeyPair;
  let tokenA: string;

  beforeAll(async () => {
    t = await tempDataDir('node-svc-tracing-off-');
    issuer = await issuerKeyPair();
    ({ tokenA } = await setupNodes(t.dataDir, issuer));
  }, 60_000);
  afterAll(async () => { await t?.cleanup(); });

  it('without OTEL_* variables no OpenTelemetry module is loaded, and webhook POSTs carry no traceparent', async () => {
    const log = join(t.root, 'modules-off.log');
    const hooks = await startReceiver();
    const d = await startDaemon(t.dataDir, { env: probeEnv(log) });
    try {
      const c = clientOf(d.url, tokenA);
      expect((await c.post('/v1/webhooks', { url: `${hooks.url}/hook` })).status).toBe(201);
      const stream = `off-${randomBytes(4).toString('hex')}`;
      expect((await c.post('/v1/allowances/verify', { credential: mintCredential({ key: issuer, payer: await payerKeyPair(), claims: { stream } }) })).status).toBe(200);
      expect((await c.get(`/v1/streams/${stream}/headroom`)).status).toBe(200);
      expect((await c.post('/v1/control', { message: controlMessage(issuer, { kind: 'stream.revoked', stream }) })).status).toBe(200);
      const [req] = await hooks.waitForCount(1, 20_000);
      expect(JSON.parse(req!.body.toString()).type).toBe('stream.revoked');
      expect(req!.headers.traceparent).toBeUndefined();
    } finally {
      await d.stop();
      await hooks.close();
    }
    const lines = await loaded(log);
    // The probe was at work in the daemon (it saw the bundles require node's HTTP server; our modules and their
    // packages are compiled from dist/cli's bundles, where ops/otel.js is not: an import of it would have shown)…
    expect(lines).toContain('require node:http');
    // …and none of OpenTelemetry's, nor our module that imports them.
    expect(lines.filter((l) => l.includes('@opentelemetry') || l.includes('/dist/ops/otel.js'))).toEqual([]);
  });

  it('OTEL_SDK_DISABLED=true keeps it off even with an endpoint set', async () => {
    const log = join(t.root, 'modules-disabled.log');
    const d = await startDaemon(t.dataDir, { env: { ...probeEnv(log), OTEL_SDK_DISABLED: 'true', OTEL_EXPORTER_OTLP_ENDPOINT: 'http://127.0.0.1:9' } });
    await d.stop();
    const lines = await loaded(log);
    expect(lines).toContain('require node:http');
    expect(lines.filter((l) => l.includes('@opentelemetry') || l.includes('/dist/ops/otel.js'))).toEqual([]);
  });

  it('http/protobuf is the default protocol: the spans arrive as protobuf and decode', async () => {
    const otlp = await startOtlpReceiver();
    const d = await startDaemon(t.dataDir, { env: otelEnv(otlp, { OTEL_TRACES_SAMPLER: 'parentbased_traceidratio', OTEL_TRACES_SAMPLER_ARG: '1' }) });
    try {
      expect((await clientOf(d.url, tokenA).get('/v1/streams/nope/headroom')).status).toBe(404);
      const s = await eventually(() => otlp.spans.find((x) => x.name === 'GET /v1/streams/:id/headroom'), 'headroom span exported', 20_000);
      expect(s).toMatchObject({ kind: SPAN_KIND.server });
      expect(s.attributes).toMatchObject({ 'http.route': '/v1/streams/:id/headroom', 'http.response.status_code': 404, 'url.path': '/v1/streams/nope/headroom' });
      expect(s.resource['service.name']).toBe('node-svc-e2e');
      expect(otlp.contentTypes.every((c) => c === 'application/x-protobuf')).toBe(true);
    } finally {
      await d.stop();
      await otlp.close();
    }
  });

  it('a collector that is down costs spans and a warning, never an answer; the stop is not held up by it', { timeout: 90_000 }, async () => {
    const d = await startDaemon(t.dataDir, { env: { OTEL_EXPORTER_OTLP_ENDPOINT: `http://127.0.0.1:${await freePort()}`, OTEL_BSP_SCHEDULE_DELAY: '20', NODE_SVC_LOG_FORMAT: 'json' } });
    const c = clientOf(d.url, tokenA);
    for (let i = 0; i < 20; i++) expect((await c.get('/v1/streams/nope/headroom')).status).toBe(404);
    expect((await c.post('/v1/allowances/verify', { credential: 'not.a.jws' })).status).toBe(422);
    const warnings = () => d.stderr.split('\n').filter((l) => l.includes('"level":"warn"') && l.includes('traces'));
    // The exporter names the cause once it gives up on a batch (after its retries, ~30 s): the daemon answers meanwhile.
    await waitFor(() => warnings().some((l) => l.includes('ECONNREFUSED')), 'a warning naming ECONNREFUSED', 60_000, 200);
    expect((await c.get('/v1/streams/nope/headroom')).status).toBe(404);
    // The stop waits 5 s at most for the exporter, then the process ends (it lingered ~40 s, the exporter retrying).
    const t0 = Date.now();
    expect(await d.stop()).toBe(0);
    expect(Date.now() - t0).toBeLessThan(15_000);
    expect(warnings().join('\n')).not.toContain('"stack"');
  });

  it.each([
    [{ OTEL_EXPORTER_OTLP_ENDPOINT: 'http://127.0.0.1:9', OTEL_TRACES_SAMPLER: 'sometimes' }, 'OTEL_TRACES_SAMPLER'],
    [{ OTEL_EXPORTER_OTLP_ENDPOINT: 'http://127.0.0.1:9', OTEL_TRACES_SAMPLER: 'traceidratio', OTEL_TRACES_SAMPLER_ARG: '2' }, 'OTEL_TRACES_SAMPLER_ARG'],
    [{ OTEL_EXPORTER_OTLP_ENDPOINT: 'http://127.0.0.1:9', OTEL_EXPORTER_OTLP_PROTOCOL: 'grpc' }, 'OTEL_EXPORTER_OTLP_PROTOCOL'],
    [{ OTEL_EXPORTER_OTLP_TRACES_ENDPOINT: 'localhost:4318' }, 'OTEL_EXPORTER_OTLP_TRACES_ENDPOINT'],
    [{ OTEL_TRACES_EXPORTER: 'zipkin' }, 'OTEL_TRACES_EXPORTER'],
  ])('refuses to start on a variable it cannot honour (%o), naming it', async (env, name) => {
    const err = await startDaemon(t.dataDir, { env }).then(async (d) => { await d.stop(); return undefined; }, (e: Error) => e);
    expect(err?.message).toContain(name);
  });
});
