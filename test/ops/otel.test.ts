// ops/otel.ts without a daemon: node-svc's spans under the samplers OTEL_TRACES_SAMPLER names (the SDK's), the value
// length limit, and what reaches a collector (test/helpers/otlp.ts decodes it) when the tracer stops.
import { ProtobufTraceSerializer } from '@opentelemetry/otlp-transformer';
import type { ReadableSpan } from '@opentelemetry/sdk-trace-base';
import { randomBytes } from 'node:crypto';
import { afterEach, describe, expect, it } from 'vitest';
import { otelTracer } from '../../src/ops/otel.js';
import { endHttp } from '../../src/ops/tracing.js';
import { startOtlpReceiver, type OtlpReceiver } from '../helpers/otlp.js';

const saved = process.env.OTEL_EXPORTER_OTLP_TRACES_ENDPOINT;
let otlp: OtlpReceiver | undefined;
afterEach(async () => {
  if (saved === undefined) delete process.env.OTEL_EXPORTER_OTLP_TRACES_ENDPOINT;
  else process.env.OTEL_EXPORTER_OTLP_TRACES_ENDPOINT = saved;
  await otlp?.close();
});

async function tracerWith(env: Record<string, string>) {
  otlp = await startOtlpReceiver();
  process.env.OTEL_EXPORTER_OTLP_TRACES_ENDPOINT = `${otlp.url}/v1/traces`; // read by the official transport
  return otelTracer({ endpoint: `${otlp.url}/v1/traces`, protocol: 'http/protobuf' }, env);
}
const parent = (flags: '00' | '01') => ({ trace: randomBytes(16).toString('hex'), span: randomBytes(8).toString('hex'), flags });
const header = (p: ReturnType<typeof parent>) => `00-${p.trace}-${p.span}-${p.flags}`;

describe('otelTracer', () => {
  it('parentbased_always_on (the default): a node\'s sampled trace is continued and exported, a not-sampled one is continued and not exported', async () => {
    const t = await tracerWith({});
    const sampled = parent('01');
    const dropped = parent('00');
    const a = t.server('GET', '/v1/streams/:id/headroom', '/v1/streams/a/headroom', header(sampled));
    const b = t.server('GET', '/v1/streams/:id/headroom', '/v1/streams/b/headroom', header(dropped));
    const bChild = b.child('voucher.accept', { 'node_svc.stream': 'b' });
    const root = t.server('GET', '/v1/streams/:id/finality', '/v1/streams/c/finality', undefined);
    expect(a.traceparent).toMatch(new RegExp(`^00-${sampled.trace}-[0-9a-f]{16}-01$`));
    expect(b.traceparent).toMatch(new RegExp(`^00-${dropped.trace}-[0-9a-f]{16}-00$`));
    expect(bChild.traceparent).toMatch(new RegExp(`^00-${dropped.trace}-[0-9a-f]{16}-00$`));
    expect(root.traceparent).toMatch(/^00-[0-9a-f]{32}-[0-9a-f]{16}-01$/);
    for (const s of [bChild, a, b, root]) endHttp(s, 200);
    await t.shutdown();
    expect(otlp!.spans.map((s) => s.attributes['url.path']).sort()).toEqual(['/v1/streams/a/headroom', '/v1/streams/c/finality']);
    const got = otlp!.spans.find((s) => s.attributes['url.path'] === '/v1/streams/a/headroom')!;
    expect(got).toMatchObject({ traceId: sampled.trace, parentSpanId: sampled.span, name: 'GET /v1/streams/:id/headroom' });
    expect(got.attributes['http.response.status_code']).toBe(200);
    expect(got.resource['service.name']).toBe('node-svc');
  });

  it('exports the official serializer\'s bytes for its own spans: ids from the slab, a route\'s attributes encoded once, times in ms', async () => {
    const t = await tracerWith({ OTEL_TRACES_SAMPLER: 'always_on' });
    const remote = parent('01');
    const a = t.server('GET', '/v1/streams/:id/headroom', '/v1/streams/a/headroom', header(remote));
    const b = t.server('GET', '/v1/streams/:id/headroom', '/v1/streams/b/headroom', undefined);
    // The route's attributes set again after the start: the bytes encoded ahead no longer stand for them.
    const moved = t.server('GET', '/v1/streams/:id/headroom', '/v1/streams/c/headroom', undefined);
    moved.set({ 'http.route': '/v1/streams/:id/finality', 'http.request.method': 'GET' });
    const early = t.server('POST', '', '/v1/x', undefined); // route not known yet: nothing encoded ahead
    early.rename('POST /v1/x');
    const child = b.child('voucher.accept', { 'node_svc.stream': 'b' }); // a local parent: its id bytes from the slab
    const grandchild = child.child('voucher.judge');
    const linked = t.start('settlement.submit', { kind: 'client', links: [a.ref, child.ref], attributes: { 'server.port': 8545 } });
    const spans = [grandchild, child, a, b, moved, early, linked];
    for (const s of spans) endHttp(s, 200);
    expect(a.traceparent).toBe(`00-${remote.trace}-${a.ref.spanId}-01`);
    expect(child.traceparent.slice(3, 35)).toBe(b.ref.traceId);
    expect(new Set(spans.map((s) => s.ref.spanId)).size).toBe(spans.length);
    await t.shutdown();
    expect(otlp!.bodies).toHaveLength(1);
    const official = Buffer.from(ProtobufTraceSerializer.serializeRequest(spans as unknown as ReadableSpan[])!);
    expect(otlp!.bodies[0]!.toString('hex')).toBe(official.toString('hex'));
    expect(otlp!.spans.find((s) => s.attributes['url.path'] === '/v1/streams/c/headroom')!.attributes['http.route']).toBe('/v1/streams/:id/finality');
    expect(otlp!.spans.find((s) => s.name === 'voucher.judge')!.parentSpanId).toBe(child.ref.spanId);
  });

  it('traceidratio 0 samples nothing; always_on samples even under a not-sampled parent', async () => {
    const none = await tracerWith({ OTEL_TRACES_SAMPLER: 'traceidratio', OTEL_TRACES_SAMPLER_ARG: '0' });
    const s = none.server('GET', '/v1/streams/:id/verify', '/v1/streams/x/verify', undefined);
    expect(s.traceparent.endsWith('-00')).toBe(true);
    endHttp(s, 200);
    await none.shutdown();
    expect(otlp!.spans).toEqual([]);
    await otlp!.close();

    const all = await tracerWith({ OTEL_TRACES_SAMPLER: 'always_on' });
    const p = parent('00');
    const t = all.server('GET', '/v1/streams/:id/verify', '/v1/streams/y/verify', header(p));
    expect(t.traceparent.endsWith('-01')).toBe(true);
    endHttp(t, 503);
    await all.shutdown();
    expect(otlp!.spans).toHaveLength(1);
    expect(otlp!.spans[0]!.status.code).toBe(2); // a 5xx is the one ERROR
    expect(otlp!.spans[0]!.attributes['error.type']).toBe('503');
  });

  it('OTEL_ATTRIBUTE_VALUE_LENGTH_LIMIT cuts string values (OTEL_SPAN_ATTRIBUTE_VALUE_LENGTH_LIMIT wins over it)', async () => {
    const t = await tracerWith({ OTEL_ATTRIBUTE_VALUE_LENGTH_LIMIT: '100', OTEL_SPAN_ATTRIBUTE_VALUE_LENGTH_LIMIT: '12' });
    const s = t.server('GET', '/v1/streams/:id/headroom', `/v1/streams/${'z'.repeat(50)}/headroom`, undefined);
    s.set({ 'node_svc.stream': 'z'.repeat(50), 'node_svc.n': 123456789012345 });
    endHttp(s, 200);
    await t.shutdown();
    expect(otlp!.spans[0]!.attributes).toMatchObject({ 'url.path': '/v1/streams/', 'node_svc.stream': 'z'.repeat(12), 'node_svc.n': 123456789012345 });
  });
});
