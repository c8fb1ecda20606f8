// OTLP/HTTP protobuf export of node-svc's spans, imported by ops/otel.ts only (tracing on, http/protobuf): each span is
// encoded when it ends, into the batch being filled, so no ended span is kept as an object until its export (a CPU
// profile of bench/tracing showed the official path's cost in keeping every span until its batch left, then walking it
// twice: a size pass and a write pass, hex ids turned into new byte arrays in each). The bytes are the official
// serializer's (test/ops/otlp-proto.test.ts compares them with @opentelemetry/otlp-transformer's, byte for byte), and
// they are sent by the official OTLP/HTTP transport (@opentelemetry/otlp-exporter-base: endpoint, headers, timeout,
// compression, retries from the OTEL_EXPORTER_OTLP_* variables). Batching follows the batch span processor's
// OTEL_BSP_* variables: a batch leaves when it is full or after the schedule delay, one export at a time, and spans
// beyond the queue are dropped, never waited for.
import type { Attributes, AttributeValue, HrTime, Link, SpanContext, SpanStatus } from '@opentelemetry/api';
import { ExportResultCode, getNumberFromEnv, globalErrorHandler, type ExportResult } from '@opentelemetry/core';
import { OTLPExporterBase } from '@opentelemetry/otlp-exporter-base';
import { convertLegacyHttpOptions, createOtlpHttpExportDelegate } from '@opentelemetry/otlp-exporter-base/node-http';
import { ProtobufTraceSerializer } from '@opentelemetry/otlp-transformer';
import type { Resource } from '@opentelemetry/resources';

/** What the encoder reads of a span (node-svc's RecordedSpan, an SDK ReadableSpan alike). */
export interface EncodableSpan {
  readonly name: string;
  readonly kind: number;
  spanContext(): SpanContext;
  readonly parentSpanContext?: SpanContext | undefined;
  readonly startTime: HrTime;
  readonly endTime: HrTime;
  readonly attributes: Attributes;
  readonly links: Link[];
  readonly status: SpanStatus;
  /** The same times as ms since the epoch, when the span has them (read instead: no [s, ns] arrays made). */
  readonly startMs?: number;
  readonly endMs?: number;
  /** Its first attributes encoded ahead (encodeAttributes): used while they are still its first ones, with those values. */
  readonly encodedAttributes?: EncodedAttributes | undefined;
}

/** A span context whose ids are bytes already: trace id at `at`, span id at `at + 16` (ops/otel.ts SlabContext). */
interface IdBytes {
  readonly slab?: Buffer;
  readonly at?: number;
}

/** Attributes encoded once (a route's fixed ones), with the keys and values they stand for, in order. */
export interface EncodedAttributes {
  readonly bytes: Buffer;
  readonly keys: readonly string[];
  readonly values: readonly AttributeValue[];
}

/** `attrs` (string, number or boolean values) as the `attributes` entries of a span (field 9). */
export function encodeAttributes(attrs: Attributes): EncodedAttributes {
  const w = new Writer(256);
  attributes(w, attrs, 9);
  const keys = Object.keys(attrs);
  return { bytes: Buffer.from(w.take()), keys, values: keys.map((k) => attrs[k]!) };
}

const HAS_IS_REMOTE = 0x100;
const IS_REMOTE = 0x200;
const flagsOf = (traceFlags: number, isRemote: boolean | undefined) => (traceFlags & 0xff) | HAS_IS_REMOTE | (isRemote ? IS_REMOTE : 0);
/** Hex digit → its value (0-9, a-f, A-F). */
const NIBBLE = new Uint8Array(128);
for (let i = 0; i < 10; i++) NIBBLE[0x30 + i] = i;
for (let i = 0; i < 6; i++) NIBBLE[0x61 + i] = NIBBLE[0x41 + i] = 10 + i;
const varintSize = (v: number) => (v < 0x80 ? 1 : v < 0x4000 ? 2 : v < 0x200000 ? 3 : v < 0x10000000 ? 4 : 5);

/** A protobuf writer over a growing Buffer: strings and hex ids written natively, lengths fixed up in place. */
export class Writer {
  buf: Buffer;
  pos = 0;
  /** A new buffer of `size` bytes, or `buf` to write over (a batch buffer used again). */
  constructor(size: number | Buffer = 256 * 1024) {
    this.buf = typeof size === 'number' ? Buffer.allocUnsafe(size) : size;
  }
  ensure(n: number): void {
    if (this.pos + n <= this.buf.length) return;
    let size = this.buf.length * 2;
    while (size < this.pos + n) size *= 2;
    const next = Buffer.allocUnsafe(size);
    this.buf.copy(next, 0, 0, this.pos);
    this.buf = next;
  }
  /** A non-negative integer below 2^32 (tags, lengths, counts, enums). */
  uvarint(v: number): void {
    this.ensure(5);
    while (v > 0x7f) {
      this.buf[this.pos++] = (v & 0x7f) | 0x80;
      v >>>= 7;
    }
    this.buf[this.pos++] = v;
  }
  /** An int64 (two's complement for a negative one, 10 bytes then). */
  int64(v: number): void {
    if (v >= 0 && v <= 0xffffffff) return this.uvarint(v);
    let low: number;
    let high: number;
    const abs = Math.abs(v);
    low = abs >>> 0;
    high = Math.floor(abs / 0x100000000) >>> 0;
    if (v < 0) {
      low = ~low >>> 0;
      high = ~high >>> 0;
      low = (low + 1) >>> 0;
      if (low === 0) high = (high + 1) >>> 0;
    }
    this.ensure(10);
    while (high > 0 || low > 0x7f) {
      this.buf[this.pos++] = (low & 0x7f) | 0x80;
      low = ((low >>> 7) | (high << 25)) >>> 0;
      high >>>= 7;
    }
    this.buf[this.pos++] = low & 0x7f;
  }
  tag(field: number, wire: number): void {
    this.uvarint((field << 3) | wire);
  }
  string(s: string): void {
    const len = s.length;
    if (len < 0x80) {
      // Short ASCII (names, keys, routes): byte by byte beats a call into Buffer.write; anything else goes there.
      this.ensure(len + 1);
      const b = this.buf;
      let p = this.pos + 1;
      let i = 0;
      for (; i < len; i++) {
        const c = s.charCodeAt(i);
        if (c > 0x7f) break;
        b[p++] = c;
      }
      if (i === len) {
        b[this.pos] = len;
        this.pos = p;
        return;
      }
    }
    const n = Buffer.byteLength(s, 'utf8');
    this.uvarint(n);
    this.ensure(n);
    this.pos += this.buf.write(s, this.pos, n, 'utf8');
  }
  /** A trace or span id given in (lowercase) hex, as its bytes. */
  hex(id: string): void {
    const n = id.length >>> 1;
    this.ensure(n + 1);
    const b = this.buf;
    b[this.pos++] = n;
    let p = this.pos;
    for (let i = 0; i < id.length; i += 2) b[p++] = (NIBBLE[id.charCodeAt(i) & 0x7f]! << 4) | NIBBLE[id.charCodeAt(i + 1) & 0x7f]!;
    this.pos = p;
  }
  fixed32(v: number): void {
    this.ensure(4);
    this.pos = this.buf.writeUInt32LE(v >>> 0, this.pos);
  }
  /** Bytes as they are. */
  bytes(b: Uint8Array, from = 0, to = b.length): void {
    this.ensure(to - from);
    if (from === 0 && to === b.length) this.buf.set(b, this.pos);
    else for (let i = from, p = this.pos; i < to; i++) this.buf[p++] = b[i]!; // a few bytes (ids): no subarray object
    this.pos += to - from;
  }
  /** [s, ns] as fixed64 nanoseconds. */
  time(t: HrTime): void {
    this.timeOf(t[0], t[1]);
  }
  /** ms since the epoch as fixed64 nanoseconds, rounded as the SDK's HrTime is ([s, ns], ns rounded). */
  timeMs(ms: number): void {
    let s = Math.floor(ms / 1000);
    let ns = Math.round((ms - s * 1000) * 1e6);
    if (ns >= 1e9) {
      s += 1;
      ns -= 1e9;
    }
    this.timeOf(s, ns);
  }
  /** s, ns as fixed64 nanoseconds, exactly (s × 1e9 exceeds 2^53: split at 2^16 seconds). */
  timeOf(s: number, ns: number): void {
    const lo = (s % 0x10000) * 1e9 + ns; // < 2^47
    const hi = Math.floor(s / 0x10000) * 1e9; // × 2^16, < 2^47 before the shift
    const low = ((hi % 0x10000) * 0x10000 + (lo % 0x100000000));
    this.ensure(8);
    const a = low >>> 0;
    const b = (Math.floor(hi / 0x10000) + Math.floor(lo / 0x100000000) + Math.floor(low / 0x100000000)) >>> 0;
    const buf = this.buf;
    const p = this.pos;
    buf[p] = a;
    buf[p + 1] = a >>> 8;
    buf[p + 2] = a >>> 16;
    buf[p + 3] = a >>> 24;
    buf[p + 4] = b;
    buf[p + 5] = b >>> 8;
    buf[p + 6] = b >>> 16;
    buf[p + 7] = b >>> 24;
    this.pos = p + 8;
  }
  double(v: number): void {
    this.ensure(8);
    this.pos = this.buf.writeDoubleLE(v, this.pos);
  }
  /** begin() for a field that is usually 128 bytes to 16 KiB long (a span): two bytes kept. */
  begin2(): number {
    this.ensure(2);
    const at = this.pos;
    this.pos += 2;
    return at;
  }
  end2(at: number): void {
    const len = this.pos - at - 2;
    if (len >= 0x80 && len < 0x4000) {
      this.buf[at] = (len & 0x7f) | 0x80;
      this.buf[at + 1] = len >>> 7;
      return;
    }
    // Shorter or longer than two bytes of length: move the content to where its length ends.
    const size = varintSize(len);
    this.ensure(size);
    this.buf.copy(this.buf, at + size, at + 2, this.pos);
    this.pos = at;
    this.uvarint(len);
    this.pos += len;
  }
  /** Start a length-delimited field (its tag already written): one byte kept for the length. */
  begin(): number {
    this.ensure(1);
    return this.pos++;
  }
  /** End it: the length written where begin() kept room, the content moved on when it needs more than one byte. */
  end(at: number): void {
    const len = this.pos - at - 1;
    if (len < 0x80) {
      this.buf[at] = len;
      return;
    }
    const extra = varintSize(len) - 1;
    this.ensure(extra);
    this.buf.copy(this.buf, at + 1 + extra, at + 1, this.pos);
    const end = this.pos + extra;
    this.pos = at;
    this.uvarint(len);
    this.pos = end;
  }
  take(): Buffer {
    return this.buf.subarray(0, this.pos);
  }
}

function anyValue(w: Writer, v: AttributeValue | undefined | null): void {
  if (typeof v === 'string') {
    w.tag(1, 2);
    w.string(v);
  } else if (typeof v === 'boolean') {
    w.tag(2, 0);
    w.uvarint(v ? 1 : 0);
  } else if (typeof v === 'number') {
    if (Number.isInteger(v) && v >= -(2 ** 63) && v < 2 ** 63) {
      w.tag(3, 0);
      w.int64(v);
    } else {
      w.tag(4, 1);
      w.double(v);
    }
  } else if (Array.isArray(v)) {
    w.tag(5, 2);
    const a = w.begin();
    for (const item of v) {
      w.tag(1, 2);
      const i = w.begin();
      anyValue(w, item);
      w.end(i);
    }
    w.end(a);
  }
}

function attributes(w: Writer, attrs: Attributes, field: number, ahead?: EncodedAttributes): void {
  let skip = 0;
  if (ahead && leads(attrs, ahead)) {
    w.bytes(ahead.bytes);
    skip = ahead.keys.length;
  }
  for (const k in attrs) {
    if (!Object.prototype.hasOwnProperty.call(attrs, k)) continue;
    if (skip > 0) {
      skip--;
      continue;
    }
    w.tag(field, 2);
    const kv = w.begin();
    w.tag(1, 2);
    w.string(k);
    w.tag(2, 2);
    const v = w.begin();
    anyValue(w, attrs[k]);
    w.end(v);
    w.end(kv);
  }
}

/** Whether `attrs` begins with exactly the keys and values encoded ahead (then those bytes stand for them). */
function leads(attrs: Attributes, ahead: EncodedAttributes): boolean {
  const n = ahead.keys.length;
  let i = 0;
  for (const k in attrs) {
    if (i === n) break;
    if (!Object.prototype.hasOwnProperty.call(attrs, k) || k !== ahead.keys[i] || attrs[k] !== ahead.values[i]) return false;
    i++;
  }
  return i === n;
}

/** One span as the `spans` entry of a ScopeSpans (tag included), the official serializer's fields in its order. */
export function encodeSpan(w: Writer, span: EncodableSpan): void {
  w.tag(2, 2);
  const at = w.begin2();
  const ctx = span.spanContext();
  const ids = ctx as IdBytes;
  if (ids.slab !== undefined && ids.at !== undefined) {
    w.ensure(28);
    w.buf[w.pos++] = 0x0a; // field 1 (trace id), 16 bytes
    w.buf[w.pos++] = 16;
    w.bytes(ids.slab, ids.at, ids.at + 16);
    w.buf[w.pos++] = 0x12; // field 2 (span id), 8 bytes
    w.buf[w.pos++] = 8;
    w.bytes(ids.slab, ids.at + 16, ids.at + 24);
  } else {
    w.tag(1, 2);
    w.hex(ctx.traceId);
    w.tag(2, 2);
    w.hex(ctx.spanId);
  }
  const state = ctx.traceState?.serialize();
  if (state) {
    w.tag(3, 2);
    w.string(state);
  }
  const parent = span.parentSpanContext;
  const parentIds = parent as IdBytes | undefined;
  if (parentIds?.slab !== undefined && parentIds.at !== undefined) {
    w.tag(4, 2);
    w.uvarint(8);
    w.bytes(parentIds.slab, parentIds.at + 16, parentIds.at + 24);
  } else if (parent?.spanId) {
    w.tag(4, 2);
    w.hex(parent.spanId);
  }
  w.tag(5, 2);
  w.string(span.name);
  w.tag(6, 0);
  w.uvarint(span.kind + 1);
  w.tag(7, 1);
  if (span.startMs !== undefined) w.timeMs(span.startMs);
  else w.time(span.startTime);
  w.tag(8, 1);
  if (span.endMs !== undefined) w.timeMs(span.endMs);
  else w.time(span.endTime);
  attributes(w, span.attributes, 9, span.encodedAttributes);
  w.tag(10, 0);
  w.uvarint(0);
  w.tag(12, 0); // no events
  w.uvarint(0);
  for (const l of span.links) {
    w.tag(13, 2);
    const lt = w.begin();
    w.tag(1, 2);
    w.hex(l.context.traceId);
    w.tag(2, 2);
    w.hex(l.context.spanId);
    const ls = l.context.traceState?.serialize();
    if (ls) {
      w.tag(3, 2);
      w.string(ls);
    }
    if (l.attributes) attributes(w, l.attributes, 4);
    w.tag(5, 0);
    w.uvarint(l.droppedAttributesCount ?? 0);
    w.tag(6, 5);
    w.fixed32(flagsOf(l.context.traceFlags, l.context.isRemote));
    w.end(lt);
  }
  w.tag(14, 0);
  w.uvarint(0);
  w.tag(15, 2);
  const st = w.begin();
  if (span.status.message) {
    w.tag(2, 2);
    w.string(span.status.message);
  }
  w.tag(3, 0);
  w.uvarint(span.status.code);
  w.end(st);
  w.tag(16, 5);
  w.fixed32(flagsOf(ctx.traceFlags, parent?.isRemote));
  w.end2(at);
}

/** The ResourceSpans head (resource) and the ScopeSpans head (scope), each as its field with tag and length. */
function heads(resource: Resource, scope: { name: string; version?: string }): { resource: Buffer; scope: Buffer } {
  const r = new Writer(4096);
  r.tag(1, 2);
  const ra = r.begin();
  attributes(r, resource.attributes, 1);
  r.tag(2, 0);
  r.uvarint(0);
  r.end(ra);
  const s = new Writer(256);
  s.tag(1, 2);
  const sa = s.begin();
  s.tag(1, 2);
  s.string(scope.name);
  if (scope.version) {
    s.tag(2, 2);
    s.string(scope.version);
  }
  s.end(sa);
  return { resource: Buffer.from(r.take()), scope: Buffer.from(s.take()) };
}

/** An ExportTraceServiceRequest around span entries made by encodeSpan (one resource, one scope, as node-svc has). */
export function exportRequest(resource: Resource, scope: { name: string; version?: string }, spans: Buffer): Buffer {
  const h = heads(resource, scope);
  return wrap(h, resource.schemaUrl, spans);
}

function wrap(h: { resource: Buffer; scope: Buffer }, schemaUrl: string | undefined, spans: Buffer): Buffer {
  const w = new Writer(h.resource.length + h.scope.length + spans.length + 64);
  w.tag(1, 2);
  const rs = w.begin();
  w.ensure(h.resource.length);
  w.pos += h.resource.copy(w.buf, w.pos);
  w.tag(2, 2);
  const ss = w.begin();
  w.ensure(h.scope.length + spans.length);
  w.pos += h.scope.copy(w.buf, w.pos);
  w.pos += spans.copy(w.buf, w.pos);
  w.end(ss);
  if (schemaUrl) {
    w.tag(3, 2);
    w.string(schemaUrl);
  }
  w.end(rs);
  return w.take();
}

interface Batch {
  body: Buffer;
  spans: number;
  /** The buffer the body is a view of: written again for a later batch once this one was sent. */
  buf: Buffer;
}

/**
 * The batch span processor's job for encoded spans: fill a batch as spans end, send it when full or after the
 * schedule delay, one export at a time, drop what would overflow the queue. Reads OTEL_BSP_* like the SDK's.
 */
export class EncodedSpanBatches {
  readonly #maxQueue: number;
  readonly #maxBatch: number;
  readonly #delayMs: number;
  readonly #timeoutMs: number;
  readonly #heads: { resource: Buffer; scope: Buffer };
  readonly #schemaUrl: string | undefined;
  readonly #exporter: OTLPExporterBase<Batch[]>;
  /** Room kept at the head of each batch buffer for the request's head (resource, scope, two tags and lengths). */
  readonly #room: number;
  /** Buffers of batches sent, to fill again (no new megabyte, no page faults, per batch). */
  readonly #free: Buffer[] = [];
  #size = 256 * 1024;
  #w: Writer;
  #filling = 0;
  readonly #ready: Batch[] = [];
  #queued = 0;
  #exporting: Promise<void> | undefined;
  #timer: NodeJS.Timeout | undefined;
  #stopped = false;
  dropped = 0;

  constructor(resource: Resource, scope: { name: string; version?: string }, env: NodeJS.ProcessEnv = process.env) {
    const num = (k: string, d: number) => {
      const n = env === process.env ? getNumberFromEnv(k) : Number(env[k]?.trim() || NaN);
      return n !== undefined && Number.isFinite(n) && n > 0 ? n : d;
    };
    // Defaults 8 × the specification's (512 a batch, 2048 queued): each export request costs the official transport
    // about 0.4 ms of CPU whatever its size (about 0.8 µs per span at 512, 0.1 µs at 4096: measured, see the
    // README, Cost), and a batch of 4096 spans is about 1.1 MB, well under collectors' request limits (20 MiB for the
    // Collector's OTLP/HTTP receiver). The variables still win.
    this.#maxQueue = num('OTEL_BSP_MAX_QUEUE_SIZE', 16384);
    this.#maxBatch = Math.min(num('OTEL_BSP_MAX_EXPORT_BATCH_SIZE', 4096), this.#maxQueue);
    this.#delayMs = num('OTEL_BSP_SCHEDULE_DELAY', 5000);
    this.#timeoutMs = num('OTEL_BSP_EXPORT_TIMEOUT', 30000);
    this.#heads = heads(resource, scope);
    this.#schemaUrl = resource.schemaUrl;
    this.#room = this.#heads.resource.length + this.#heads.scope.length + 12;
    this.#w = this.#writer();
    // The official OTLP/HTTP protobuf exporter, as @opentelemetry/exporter-trace-otlp-proto builds it, with the
    // batch already encoded: serializing is handing over its bytes; the collector's answer is read by the official code.
    this.#exporter = new OTLPExporterBase(createOtlpHttpExportDelegate(
      convertLegacyHttpOptions({}, 'TRACES', 'v1/traces', { 'Content-Type': 'application/x-protobuf' }),
      { serializeRequest: (batches: Batch[]) => batches[0]!.body, deserializeResponse: (b: Uint8Array) => ProtobufTraceSerializer.deserializeResponse(b) },
      'otlp_http_span_exporter',
      { name: 'span', countItems: (batches: Batch[]) => batches.reduce((n, b) => n + b.spans, 0) },
      undefined, // no self-observability meter
    ));
  }

  /** A route's fixed attributes, encoded once (ops/otel.ts): the spans that begin with them skip encoding them. */
  encodeAttributes(attrs: Attributes): EncodedAttributes {
    return encodeAttributes(attrs);
  }

  onEnd(span: EncodableSpan): void {
    if (this.#stopped || !(span.spanContext().traceFlags & 1)) return;
    if (this.#queued + this.#filling >= this.#maxQueue) {
      this.dropped++;
      return;
    }
    encodeSpan(this.#w, span);
    if (++this.#filling >= this.#maxBatch) {
      this.#seal();
      this.#pump();
    } else if (!this.#timer) {
      this.#timer = setTimeout(() => {
        this.#timer = undefined;
        this.#seal();
        this.#pump();
      }, this.#delayMs);
      this.#timer.unref();
    }
  }

  /** A writer for the next batch: a sent batch's buffer when there is one, spans written after the room for the head. */
  #writer(): Writer {
    const w = new Writer(this.#free.pop() ?? this.#size);
    w.pos = this.#room;
    return w;
  }

  /** The batch as one export request, in its own buffer: the head written into the room before the spans (what
   *  wrap() makes, without copying the spans). */
  #seal(): void {
    if (!this.#filling) return;
    const w = this.#w;
    const spans = w.pos - this.#room;
    if (this.#schemaUrl) {
      w.tag(3, 2);
      w.string(this.#schemaUrl);
    }
    const { resource, scope } = this.#heads;
    const scopeSpans = scope.length + spans; // ScopeSpans: its scope, then the spans
    const resourceSpans = resource.length + 1 + varintSize(scopeSpans) + scopeSpans + (w.pos - this.#room - spans);
    const start = this.#room - (1 + varintSize(resourceSpans) + resource.length + 1 + varintSize(scopeSpans) + scope.length);
    const end = w.pos;
    w.pos = start;
    w.tag(1, 2);
    w.uvarint(resourceSpans);
    w.bytes(resource);
    w.tag(2, 2);
    w.uvarint(scopeSpans);
    w.bytes(scope);
    this.#ready.push({ body: w.buf.subarray(start, end), spans: this.#filling, buf: w.buf });
    this.#size = Math.max(this.#size, w.buf.length);
    this.#w = this.#writer();
    this.#queued += this.#filling;
    this.#filling = 0;
    if (this.#timer) clearTimeout(this.#timer);
    this.#timer = undefined;
  }

  /** Send the ready batches one after another (the SDK's processor has one export in flight too). */
  #pump(): void {
    if (this.#exporting || !this.#ready.length) return;
    this.#exporting = (async () => {
      while (this.#ready.length) {
        const batch = this.#ready.shift()!;
        await this.#send(batch);
        this.#queued -= batch.spans;
      }
    })().finally(() => { this.#exporting = undefined; });
  }

  #send(batch: Batch): Promise<void> {
    return new Promise((resolve) => {
      const timer = setTimeout(() => { globalErrorHandler(new Error('Timeout')); resolve(); }, this.#timeoutMs);
      timer.unref();
      this.#exporter.export([batch], (r: ExportResult) => {
        clearTimeout(timer);
        // Sent and answered 2xx: the transport is done with the body, so its buffer can take a later batch. Not after
        // a failure (a collector may answer 4xx/5xx while the body is still being written, or gzipped, from that
        // memory) nor after a timeout of ours (the transport may still be sending it): that buffer is left to the GC.
        if (r.code === ExportResultCode.SUCCESS && this.#free.length < 2 && batch.buf.length >= this.#size) this.#free.push(batch.buf);
        if (r.code !== ExportResultCode.SUCCESS) globalErrorHandler(r.error ?? new Error('span export failed'));
        resolve();
      });
    });
  }

  /** Send what is buffered, then close the exporter (its in-flight requests finish first). */
  async shutdown(): Promise<void> {
    if (this.#stopped) return;
    this.#seal();
    this.#pump();
    this.#stopped = true;
    while (this.#exporting) await this.#exporting;
    await this.#exporter.shutdown();
  }
}
