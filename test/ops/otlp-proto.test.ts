// ops/otlp-proto.ts: the spans node-svc encodes as they end are the bytes the official OTLP protobuf serializer
// (@opentelemetry/otlp-transformer) makes of the same spans, field for field; and a batch is one export request.
import { SpanKind, SpanStatusCode, TraceFlags, type Attributes, type HrTime, type Link, type SpanContext } from '@opentelemetry/api';
import { TraceState } from '@opentelemetry/core';
import { ProtobufTraceSerializer } from '@opentelemetry/otlp-transformer';
import { resourceFromAttributes } from '@opentelemetry/resources';
import type { ReadableSpan } from '@opentelemetry/sdk-trace-base';
import { createServer } from 'node:http';
import type { AddressInfo } from 'node:net';
import { afterEach, describe, expect, it } from 'vitest';
import { EncodedSpanBatches, encodeSpan, exportRequest, Writer } from '../../src/ops/otlp-proto.js';

const resource = resourceFromAttributes({ 'service.name': 'node-svc-test', 'service.version': '1.2.3', 'process.pid': 4242, 'process.command_args': ['node', 'daemon'] });
const scope = { name: 'node-svc', version: '1.2.3' };

let n = 0;
const hex = (bytes: number) => Array.from({ length: bytes }, () => ((n = (n * 7 + 13) % 251) + 1).toString(16).padStart(2, '0')).join('');

function span(o: { name: string; kind: SpanKind; attributes: Attributes; parent?: SpanContext; links?: Link[]; status?: { code: SpanStatusCode; message?: string }; start: HrTime; end: HrTime; traceState?: TraceState; flags?: number }): ReadableSpan {
  const ctx: SpanContext = { traceId: o.parent?.traceId ?? hex(16), spanId: hex(8), traceFlags: o.flags ?? TraceFlags.SAMPLED, ...(o.traceState ? { traceState: o.traceState } : {}) };
  return {
    name: o.name, kind: o.kind, spanContext: () => ctx, ...(o.parent ? { parentSpanContext: o.parent } : {}), startTime: o.start, endTime: o.end,
    status: o.status ?? { code: SpanStatusCode.UNSET }, attributes: o.attributes, links: o.links ?? [], events: [], duration: [0, 0], ended: true,
    resource, instrumentationScope: scope, droppedAttributesCount: 0, droppedEventsCount: 0, droppedLinksCount: 0,
  };
}

describe('encodeSpan + exportRequest', () => {
  it('make the official serializer\'s bytes: ids, parents (remote and local), trace state, kinds, times, every attribute type, links, status', () => {
    const remote: SpanContext = { traceId: hex(16), spanId: hex(8), traceFlags: TraceFlags.SAMPLED, isRemote: true };
    const server = span({
      name: 'GET /v1/streams/:id/headroom', kind: SpanKind.SERVER, parent: remote, start: [1_764_000_000, 123_456_789], end: [1_764_000_000, 999_999_999],
      attributes: { 'http.request.method': 'GET', 'url.path': `/v1/streams/${'s'.repeat(300)}/headroom`, 'url.scheme': 'http', 'http.route': '/v1/streams/:id/headroom', 'http.response.status_code': 200 },
    });
    const local: SpanContext = { ...server.spanContext(), isRemote: false };
    const child = span({
      name: 'voucher.accept', kind: SpanKind.INTERNAL, parent: local, start: [1_764_000_001, 0], end: [1_764_000_001, 5],
      attributes: { 'node_svc.stream': 'ström-ü', 'node_svc.voucher.accepted': true, 'node_svc.flag': false, 'node_svc.neg': -42, 'node_svc.big': 2 ** 53 + 2, 'node_svc.ratio': 0.25, 'node_svc.list': ['a', 'b'] },
      status: { code: SpanStatusCode.ERROR, message: 'bad_signature' },
      traceState: new TraceState('vendor=abc'),
    });
    const linked = span({
      name: 'settlement.submit', kind: SpanKind.CLIENT, start: [4_294_967_295, 1], end: [4_294_967_296, 0], attributes: { 'server.port': 8545 },
      links: [
        { context: { traceId: hex(16), spanId: hex(8), traceFlags: 1, isRemote: true } },
        { context: { traceId: hex(16), spanId: hex(8), traceFlags: 0, isRemote: false } },
      ],
    });
    const producer = span({ name: 'p', kind: SpanKind.PRODUCER, start: [0, 0], end: [0, 1], attributes: {}, flags: TraceFlags.SAMPLED });
    const spans = [server, child, linked, producer];

    const w = new Writer(64); // small: the buffer grows, and lengths over 127 bytes move content on
    for (const s of spans) encodeSpan(w, s);
    const ours = exportRequest(resource, scope, w.take());
    const official = Buffer.from(ProtobufTraceSerializer.serializeRequest(spans)!);
    expect(ours.length).toBeGreaterThan(600);
    expect(ours.toString('hex')).toBe(official.toString('hex'));
  });

  it('a span longer than 16 KiB (a three-byte length) and a 20 KiB attribute: the same bytes too', () => {
    const s = span({ name: 'GET', kind: SpanKind.SERVER, start: [5, 6], end: [7, 8], attributes: { 'url.path': `/${'x'.repeat(20_000)}` } });
    const w = new Writer(16);
    encodeSpan(w, s);
    expect(exportRequest(resource, scope, w.take()).toString('hex')).toBe(Buffer.from(ProtobufTraceSerializer.serializeRequest([s])!).toString('hex'));
  });

  it('one span: the same bytes as the official serializer too (the smallest batch)', () => {
    const s = span({ name: 'POST', kind: SpanKind.CLIENT, start: [1, 2], end: [3, 4], attributes: { 'http.request.method': 'POST' } });
    const w = new Writer();
    encodeSpan(w, s);
    expect(exportRequest(resource, scope, w.take()).toString('hex')).toBe(Buffer.from(ProtobufTraceSerializer.serializeRequest([s])!).toString('hex'));
  });
});

describe('EncodedSpanBatches', () => {
  const saved = process.env.OTEL_EXPORTER_OTLP_TRACES_ENDPOINT;
  afterEach(() => {
    if (saved === undefined) delete process.env.OTEL_EXPORTER_OTLP_TRACES_ENDPOINT;
    else process.env.OTEL_EXPORTER_OTLP_TRACES_ENDPOINT = saved;
  });

  it('sends full batches (OTEL_BSP_MAX_EXPORT_BATCH_SIZE) as export requests of those spans, drops beyond the queue, sends the rest at shutdown', async () => {
    const bodies: Buffer[] = [];
    let release: () => void = () => undefined;
    const held = new Promise<void>((r) => { release = r; });
    const server = createServer((req, res) => {
      const chunks: Buffer[] = [];
      req.on('data', (c: Buffer) => chunks.push(c));
      req.on('end', () => {
        bodies.push(Buffer.concat(chunks));
        void held.then(() => res.writeHead(200, { 'content-type': 'application/x-protobuf' }).end()); // answers wait: the queue fills
      });
    });
    await new Promise<void>((r) => server.listen(0, '127.0.0.1', r));
    process.env.OTEL_EXPORTER_OTLP_TRACES_ENDPOINT = `http://127.0.0.1:${(server.address() as AddressInfo).port}/v1/traces`;
    try {
      const b = new EncodedSpanBatches(resource, scope, { OTEL_BSP_MAX_EXPORT_BATCH_SIZE: '2', OTEL_BSP_MAX_QUEUE_SIZE: '4', OTEL_BSP_SCHEDULE_DELAY: '60000' });
      const spans = Array.from({ length: 7 }, (_, i) => span({ name: `s${i}`, kind: SpanKind.INTERNAL, start: [1, i], end: [2, i], attributes: { i } }));
      for (const s of spans) b.onEnd(s);
      expect(b.dropped).toBe(3); // 4 queued (the first batch in flight, the second ready), 3 over
      const notSampled = span({ name: 'x', kind: SpanKind.INTERNAL, start: [1, 0], end: [1, 0], attributes: {}, flags: TraceFlags.NONE });
      b.onEnd(notSampled);
      expect(b.dropped).toBe(3); // not sampled: not exported, not counted
      release();
      await b.shutdown();
      const official = (xs: ReadableSpan[]) => Buffer.from(ProtobufTraceSerializer.serializeRequest(xs)!).toString('hex');
      expect(bodies.map((x) => x.toString('hex'))).toEqual([official(spans.slice(0, 2)), official(spans.slice(2, 4))]);
    } finally {
      server.close();
    }
  });

  it('a batch buffer sent is filled again for a later batch; each request still the official bytes (with a schema URL)', async () => {
    const bodies: Buffer[] = [];
    const server = createServer((req, res) => {
      const chunks: Buffer[] = [];
      req.on('data', (c: Buffer) => chunks.push(c));
      req.on('end', () => { bodies.push(Buffer.concat(chunks)); res.writeHead(200, { 'content-type': 'application/x-protobuf' }).end(); });
    });
    await new Promise<void>((r) => server.listen(0, '127.0.0.1', r));
    process.env.OTEL_EXPORTER_OTLP_TRACES_ENDPOINT = `http://127.0.0.1:${(server.address() as AddressInfo).port}/v1/traces`;
    const withSchema = resourceFromAttributes({ 'service.name': 'node-svc-test' }, { schemaUrl: 'https://opentelemetry.io/schemas/1.30.0' });
    const scoped = (o: Parameters<typeof span>[0]) => ({ ...span(o), resource: withSchema });
    try {
      const b = new EncodedSpanBatches(withSchema, scope, { OTEL_BSP_MAX_EXPORT_BATCH_SIZE: '3', OTEL_BSP_SCHEDULE_DELAY: '60000' });
      const sent: ReadableSpan[][] = [];
      for (let k = 0; k < 4; k++) {
        // Batches of different lengths, so that a shorter one written over a longer one's buffer shows any leftover.
        const batch = Array.from({ length: 3 }, (_, i) => scoped({ name: `b${k}-${i}`, kind: SpanKind.SERVER, start: [10 + k, i], end: [11 + k, i], attributes: { 'url.path': `/${'p'.repeat(k % 2 ? 5 : 400)}`, i } }));
        for (const s of batch) b.onEnd(s);
        sent.push(batch);
        for (let t = 0; bodies.length < k + 1 && t < 200; t++) await new Promise((r) => setTimeout(r, 5));
        await new Promise((r) => setTimeout(r, 5)); // the export's answer read: its buffer free again
      }
      await b.shutdown();
      const official = (xs: ReadableSpan[]) => Buffer.from(ProtobufTraceSerializer.serializeRequest(xs)!).toString('hex');
      expect(bodies.map((x) => x.toString('hex'))).toEqual(sent.map(official));
      expect(bodies[0]!.includes('https://opentelemetry.io/schemas/1.30.0')).toBe(true);
    } finally {
      server.close();
    }
  });
});
