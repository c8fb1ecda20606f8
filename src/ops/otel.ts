// The OpenTelemetry side of ops/tracing.ts, imported only when tracing is on. From the official packages: the
// samplers, the resource and its detectors, the W3C propagator, and the OTLP/HTTP export (transport, retries, the
// OTEL_EXPORTER_OTLP_* settings); in http/json the SDK's BatchSpanProcessor and JSON exporter as they are. Recording
// is ours: the SDK's Span and Tracer cost about 2 µs per span on the direct reads (limit checks per attribute, hrtime
// conversions at start and end, a context per span), so a span here is a small object the exporter reads as a
// ReadableSpan: attributes set in one object, the clock read once at each end and converted to [s, ns] only when
// read, ids as 24 bytes of a random slab (hex only when read). In http/protobuf (the default) a span is encoded when it ends
// (ops/otlp-proto.ts) instead of kept until its batch leaves. Parents are passed explicitly (no context manager:
// AsyncLocalStorage would tax every promise of the process); a request's incoming `traceparent` is read with the W3C
// propagator. What the CPU profiles of bench/tracing showed: README "Traces", Cost.
import { randomFillSync } from 'node:crypto';
import { diag, DiagLogLevel, isSpanContextValid, ROOT_CONTEXT, SpanKind, SpanStatusCode, trace, TraceFlags, type Attributes, type HrTime, type Link, type SpanContext, type SpanStatus, type TraceState } from '@opentelemetry/api';
import { W3CTraceContextPropagator } from '@opentelemetry/core';
import { defaultResource, detectResources, envDetector, resourceFromAttributes, type Resource } from '@opentelemetry/resources';
import {
  AlwaysOffSampler, AlwaysOnSampler, BatchSpanProcessor, ParentBasedSampler, SamplingDecision, TraceIdRatioBasedSampler,
  type ReadableSpan, type Sampler,
} from '@opentelemetry/sdk-trace-base';
import { ATTR_SERVICE_NAME, ATTR_SERVICE_VERSION } from '@opentelemetry/semantic-conventions';
import { log as defaultLog } from '../log.js';
import { VERSION } from '../version.js';
import type { EncodedAttributes } from './otlp-proto.js';
import type { Attrs, AttrValue, Span, SpanKindName, SpanRef, StartOptions, Tracer, TracingConfig } from './tracing.js';

const KINDS: Record<SpanKindName, SpanKind> = { internal: SpanKind.INTERNAL, server: SpanKind.SERVER, client: SpanKind.CLIENT };
const UNSET: SpanStatus = Object.freeze({ code: SpanStatusCode.UNSET });
const NONE: never[] = Object.freeze([]) as unknown as never[];
const hex2 = (n: number) => (n & 0xff).toString(16).padStart(2, '0');

// Ids: each span takes 24 bytes of a slab of randomness (trace id 16, span id 8) that is never written again, so the
// encoder copies a span's ids as bytes and the hex strings are made only when something reads them (a traceparent
// header, a link, a child's parent): one randomFillSync per 341 spans, no hex on the direct reads.
const SLAB = 24 * 341;
/**
 * The daemon's logger, handed over by tracing.ts: this module is loaded by node apart from the CLI's bundles
 * (src/build/cli-bundle.ts), so its own import of log.js is another copy, which the daemon's log level does not reach.
 */
let log: typeof defaultLog = defaultLog;
let slab = randomFillSync(Buffer.allocUnsafe(SLAB));
let slabAt = 0;
const zero = (b: Buffer, at: number, n: number) => {
  for (let i = at; i < at + n; i++) if (b[i] !== 0) return false;
  return true;
};

/** A span's context over its 24 bytes of a slab; the hex ids made on first read. */
class SlabContext implements SpanContext {
  #traceId: string | undefined;
  #spanId: string | undefined;
  readonly slab: Buffer;
  readonly at: number;
  traceFlags = TraceFlags.NONE;
  traceState: TraceState | undefined;
  /** Ids for a new span: the parent's trace id (its bytes, or its hex), or a new one. */
  constructor(parent: SpanContext | undefined) {
    if (slabAt + 24 > SLAB) {
      slab = randomFillSync(Buffer.allocUnsafe(SLAB));
      slabAt = 0;
    }
    const b = (this.slab = slab);
    const at = (this.at = slabAt);
    slabAt += 24;
    if (parent instanceof SlabContext) {
      parent.slab.copy(b, at, parent.at, parent.at + 16);
      this.#traceId = parent.#traceId;
    } else if (parent) {
      b.write(parent.traceId, at, 16, 'hex');
      this.#traceId = parent.traceId;
    } else while (zero(b, at, 16)) randomFillSync(b, at, 16); // all zeros is the invalid id
    while (zero(b, at + 16, 8)) randomFillSync(b, at + 16, 8);
  }
  get traceId(): string {
    return (this.#traceId ??= this.slab.toString('hex', this.at, this.at + 16));
  }
  get spanId(): string {
    return (this.#spanId ??= this.slab.toString('hex', this.at + 16, this.at + 24));
  }
}

/** ms since the epoch (sub-ms precision) from one clock read; [s, ns] only when the exporter asks. */
const ORIGIN = performance.timeOrigin; // constant for the process: read once, not per span
const clock = () => ORIGIN + performance.now();
function hr(ms: number): HrTime {
  const s = Math.floor(ms / 1000);
  const ns = Math.round((ms - s * 1000) * 1e6);
  return ns >= 1e9 ? [s + 1, ns - 1e9] : [s, ns];
}

/** Samplers built here that never read the trace id (always on or off, at the root and under every kind of parent). */
const IGNORES_TRACE_ID = new WeakSet<Sampler>();

/** The sampler OTEL_TRACES_SAMPLER(_ARG) names (tracingConfig validated both), built from the SDK's samplers. */
export function samplerFromEnv(env: NodeJS.ProcessEnv): Sampler {
  const s = samplerNamed(env);
  if (!(env.OTEL_TRACES_SAMPLER?.trim().toLowerCase() ?? '').endsWith('traceidratio')) IGNORES_TRACE_ID.add(s);
  return s;
}

function samplerNamed(env: NodeJS.ProcessEnv): Sampler {
  const name = env.OTEL_TRACES_SAMPLER?.trim().toLowerCase() || 'parentbased_always_on';
  const arg = env.OTEL_TRACES_SAMPLER_ARG?.trim();
  const ratio = () => new TraceIdRatioBasedSampler(arg ? Number(arg) : 1);
  switch (name) {
    case 'always_on': return new AlwaysOnSampler();
    case 'always_off': return new AlwaysOffSampler();
    case 'traceidratio': return ratio();
    case 'parentbased_always_off': return new ParentBasedSampler({ root: new AlwaysOffSampler() });
    case 'parentbased_traceidratio': return new ParentBasedSampler({ root: ratio() });
    default: return new ParentBasedSampler({ root: new AlwaysOnSampler() });
  }
}

/** A span as the exporter reads it (ReadableSpan) and as node-svc's hooks drive it (Span). */
class RecordedSpan implements ReadableSpan, Span {
  readonly attributes: Attributes;
  readonly links: Link[];
  readonly events = NONE;
  readonly droppedAttributesCount = 0;
  readonly droppedEventsCount = 0;
  readonly droppedLinksCount = 0;
  readonly resource: Resource;
  readonly instrumentationScope: { name: string; version: string };
  status: SpanStatus = UNSET;
  /** A server span's method, scheme and route, encoded once per route: the encoder uses them while they are still
   *  the span's first attributes with those values (ops/otlp-proto.ts). */
  encodedAttributes: EncodedAttributes | undefined;
  #ref: SpanRef | undefined;
  #end = -1;

  constructor(
    readonly owner: OtelTracer,
    public name: string,
    readonly kind: SpanKind,
    readonly context: SlabContext,
    readonly parentSpanContext: SpanContext | undefined,
    attributes: Attributes,
    links: Link[] | undefined,
    readonly start: number,
    /** Sampled out: ids for propagation, nothing recorded or exported. */
    readonly recording: boolean,
  ) {
    this.attributes = attributes;
    this.links = links ?? NONE;
    this.resource = owner.resource;
    this.instrumentationScope = owner.scope;
  }
  spanContext(): SpanContext {
    return this.context;
  }
  get startTime(): HrTime {
    return hr(this.start);
  }
  get endTime(): HrTime {
    return hr(this.#end < 0 ? this.start : this.#end);
  }
  get duration(): HrTime {
    const ms = Math.max(0, (this.#end < 0 ? this.start : this.#end) - this.start);
    const s = Math.floor(ms / 1000);
    return [s, Math.round((ms - s * 1000) * 1e6)];
  }
  /** ms since the epoch, as the encoder reads them (no [s, ns] array). */
  get startMs(): number {
    return this.start;
  }
  get endMs(): number {
    return this.#end < 0 ? this.start : this.#end;
  }
  get ended(): boolean {
    return this.#end >= 0;
  }
  get ref(): SpanRef {
    return (this.#ref ??= { traceId: this.context.traceId, spanId: this.context.spanId, traceFlags: this.context.traceFlags });
  }
  get traceparent(): string {
    return `00-${this.context.traceId}-${this.context.spanId}-${hex2(this.context.traceFlags)}`;
  }
  set(attrs: Attrs): void {
    if (!this.recording || this.#end >= 0) return;
    for (const k in attrs) {
      const v = attrs[k];
      if (v !== undefined) this.attributes[k] = this.owner.limit(v);
    }
  }
  attr(key: string, value: AttrValue | undefined): void {
    if (value !== undefined && this.recording && this.#end < 0) this.attributes[key] = this.owner.limit(value);
  }
  rename(name: string): void {
    if (this.#end < 0) this.name = name;
  }
  fail(message: string): void {
    if (this.recording && this.#end < 0) this.status = { code: SpanStatusCode.ERROR, message };
  }
  end(): void {
    if (this.#end >= 0) return;
    this.#end = clock();
    if (this.recording) this.owner.processor.onEnd(this);
  }
  child(name: string, attrs?: Attrs, kind: SpanKindName = 'internal'): Span {
    return this.owner.open(name, KINDS[kind], this.context, attrs, undefined, undefined);
  }
}

const getter = { get: (c: unknown, k: string) => (c as Record<string, string | string[] | undefined>)[k], keys: (c: unknown) => Object.keys(c as object) };

/** Where ended spans go: the SDK's batch processor (http/json) or the encoding batcher (http/protobuf). */
interface SpanSink {
  onEnd(span: RecordedSpan): void;
  shutdown(): Promise<void>;
  /** Attributes encoded ahead (http/protobuf only). */
  encodeAttributes?(attrs: Attributes): EncodedAttributes;
}

class OtelTracer implements Tracer {
  readonly #propagator = new W3CTraceContextPropagator();
  /** OTEL_ATTRIBUTE_VALUE_LENGTH_LIMIT (OTEL_SPAN_ATTRIBUTE_VALUE_LENGTH_LIMIT wins), as the SDK applies it. */
  readonly #valueLimit: number;

  readonly #samplerReadsTraceId: boolean;

  constructor(readonly processor: SpanSink, readonly sampler: Sampler, readonly resource: Resource, readonly scope: { name: string; version: string }, env: NodeJS.ProcessEnv) {
    this.#samplerReadsTraceId = !IGNORES_TRACE_ID.has(sampler);
    const n = Number(env.OTEL_SPAN_ATTRIBUTE_VALUE_LENGTH_LIMIT?.trim() || env.OTEL_ATTRIBUTE_VALUE_LENGTH_LIMIT?.trim() || NaN);
    this.#valueLimit = Number.isInteger(n) && n >= 0 ? n : Infinity;
  }

  /** Per method and route (a handful): the span name (`GET /v1/streams/:id/headroom`) and the route's fixed
   *  attributes, encoded, made once instead of once per request. */
  readonly #routes = new Map<string, Map<string, { name: string; encoded: EncodedAttributes | undefined }>>();
  #routeOf(method: string, route: string): { name: string; encoded: EncodedAttributes | undefined } {
    let byRoute = this.#routes.get(method);
    if (!byRoute) this.#routes.set(method, (byRoute = new Map()));
    let r = byRoute.get(route);
    if (r === undefined) {
      r = { name: `${method} ${route}`, encoded: this.processor.encodeAttributes?.({ 'http.request.method': method, 'url.scheme': 'http', 'http.route': route }) };
      if (byRoute.size < 1000) byRoute.set(route, r);
    }
    return r;
  }

  limit(v: AttrValue): AttrValue {
    return typeof v === 'string' && v.length > this.#valueLimit ? v.slice(0, this.#valueLimit) : v;
  }

  server(method: string, route: string, path: string, traceparent: string | string[] | undefined, attrs?: Attrs): Span {
    const parent = traceparent ? trace.getSpanContext(this.#propagator.extract(ROOT_CONTEXT, { traceparent }, getter)) : undefined;
    if (!route) return this.#make(method, SpanKind.SERVER, parent, { 'http.request.method': method, 'url.path': this.limit(path), 'url.scheme': 'http' }, attrs, undefined, undefined);
    const r = this.#routeOf(method, route);
    const a: Attributes = { 'http.request.method': method, 'url.scheme': 'http', 'http.route': route, 'url.path': this.limit(path) };
    const span = this.#make(r.name, SpanKind.SERVER, parent, a, attrs, undefined, undefined);
    span.encodedAttributes = r.encoded;
    return span;
  }

  start(name: string, o: StartOptions = {}): Span {
    const links: Link[] | undefined = o.links?.length ? o.links.map((r) => ({ context: { traceId: r.traceId, spanId: r.spanId, traceFlags: r.traceFlags, isRemote: true } })) : undefined;
    return this.open(name, KINDS[o.kind ?? 'internal'], (o.parent as RecordedSpan | undefined)?.context, o.attributes, links, o.startTime);
  }

  open(name: string, kind: SpanKind, parent: SpanContext | undefined, attrs: Attrs | undefined, links: Link[] | undefined, startTime: number | undefined): Span {
    return this.#make(name, kind, parent, {}, attrs, links, startTime);
  }

  #make(name: string, kind: SpanKind, parent: SpanContext | undefined, base: Attributes, attrs: Attrs | undefined, links: Link[] | undefined, startTime: number | undefined): RecordedSpan {
    const valid = parent !== undefined && isSpanContextValid(parent);
    const context = new SlabContext(valid ? parent : undefined);
    if (attrs) for (const k in attrs) { const v = attrs[k]; if (v !== undefined) base[k] = this.limit(v); }
    // The trace id as hex only for a sampler that reads it (the ratio samplers); the others are given ''.
    const r = this.sampler.shouldSample(valid ? trace.setSpanContext(ROOT_CONTEXT, parent) : ROOT_CONTEXT, this.#samplerReadsTraceId ? context.traceId : '', name, kind, base, links ?? NONE);
    if (r.attributes) Object.assign(base, r.attributes);
    const sampled = r.decision === SamplingDecision.RECORD_AND_SAMPLED;
    context.traceFlags = sampled ? TraceFlags.SAMPLED : TraceFlags.NONE;
    context.traceState = r.traceState ?? (valid ? parent.traceState : undefined);
    return new RecordedSpan(this, name, kind, context, valid ? parent : undefined, base, links, startTime ?? clock(), r.decision !== SamplingDecision.NOT_RECORD);
  }

  /** Export what is buffered, for 5 s at most: a stop must not wait out a collector that hangs. */
  async shutdown(): Promise<void> {
    let timer: NodeJS.Timeout | undefined;
    const late = new Promise<void>((resolve) => { timer = setTimeout(() => { log.warn('traces not all exported at stop: the collector did not answer within 5 s'); resolve(); }, 5000); });
    try {
      await Promise.race([this.processor.shutdown().catch((err: unknown) => log.warn('traces not all exported at stop', { error: (err as Error).message })), late]);
    } finally {
      clearTimeout(timer);
    }
  }
}

/** An error's message, not its stack (the exporter hands some over as JSON strings). */
function messageOf(a: unknown): string {
  if (a instanceof Error) return a.message;
  if (typeof a !== 'string') return '';
  try {
    const j = JSON.parse(a) as { message?: unknown };
    if (typeof j?.message === 'string') return j.message;
  } catch {
    // not JSON: the text itself
  }
  return a;
}

/** The exporter's own complaints (collector down, 4xx) reach the log as warnings, at most one a minute. */
function routeDiagnostics(): void {
  let last = 0;
  const warn = (message: string, ...args: unknown[]) => {
    const now = Date.now();
    if (now - last < 60_000) return;
    last = now;
    const detail = args.map(messageOf).filter(Boolean).join('; ').slice(0, 300);
    const first = messageOf(message).slice(0, 300);
    log.warn('traces: exporter problem (spans may be dropped; the daemon goes on)', { error: detail ? `${first} ${detail}` : first });
  };
  const none = () => undefined;
  diag.setLogger({ error: warn, warn, info: none, debug: none, verbose: none }, { logLevel: DiagLogLevel.WARN, suppressOverrideMessage: true });
}

export async function otelTracer(config: TracingConfig, env: NodeJS.ProcessEnv = process.env, logTo: typeof defaultLog = defaultLog): Promise<Tracer> {
  log = logTo;
  routeDiagnostics();
  // service.name defaults to node-svc; OTEL_SERVICE_NAME and OTEL_RESOURCE_ATTRIBUTES win over it.
  const resource = defaultResource()
    .merge(resourceFromAttributes({ [ATTR_SERVICE_NAME]: 'node-svc', [ATTR_SERVICE_VERSION]: VERSION }))
    .merge(detectResources({ detectors: [envDetector] }));
  // Both read their OTEL_BSP_* settings (queue, batch size, delay, timeout) and the exporter its
  // OTEL_EXPORTER_OTLP_* ones (endpoint, headers, timeout, compression) from the environment.
  const scope = { name: 'node-svc', version: VERSION };
  let processor: SpanSink;
  if (config.protocol === 'http/json') {
    const { OTLPTraceExporter } = await import('@opentelemetry/exporter-trace-otlp-http');
    processor = new BatchSpanProcessor(new OTLPTraceExporter());
  } else {
    const { EncodedSpanBatches } = await import('./otlp-proto.js');
    processor = new EncodedSpanBatches(resource, scope, env);
  }
  log.info('traces: exporting over OTLP/HTTP', { endpoint: config.endpoint, protocol: config.protocol, service: String(resource.attributes[ATTR_SERVICE_NAME]) });
  return new OtelTracer(processor, samplerFromEnv(env), resource, scope, env);
}
