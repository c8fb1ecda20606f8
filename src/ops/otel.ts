// The OpenTelemetry side of ops/tracing.ts, imported only when tracing is on: the official SDK (a BasicTracerProvider
// with a BatchSpanProcessor, its sampler and limits from the standard OTEL_* variables), exporting over OTLP/HTTP in
// protobuf (the default) or JSON. Parents are passed explicitly (no context manager: AsyncLocalStorage would tax
// every promise of the process); a request's incoming `traceparent` is read with the W3C propagator.
import { diag, DiagLogLevel, ROOT_CONTEXT, SpanKind, SpanStatusCode, trace, type Attributes, type Context, type Link, type Span as OtelSpan } from '@opentelemetry/api';
import { W3CTraceContextPropagator } from '@opentelemetry/core';
import { defaultResource, detectResources, envDetector, resourceFromAttributes } from '@opentelemetry/resources';
import { BasicTracerProvider, BatchSpanProcessor, type SpanExporter } from '@opentelemetry/sdk-trace-base';
import { ATTR_SERVICE_NAME, ATTR_SERVICE_VERSION } from '@opentelemetry/semantic-conventions';
import { log } from '../log.js';
import { VERSION } from '../version.js';
import type { Attrs, Span, SpanKindName, SpanRef, StartOptions, Tracer, TracingConfig } from './tracing.js';

const KINDS: Record<SpanKindName, SpanKind> = { internal: SpanKind.INTERNAL, server: SpanKind.SERVER, client: SpanKind.CLIENT };

const clean = (a: Attrs | undefined): Attributes | undefined => {
  if (!a) return undefined;
  const out: Attributes = {};
  for (const k in a) if (a[k] !== undefined) out[k] = a[k];
  return out;
};

const hex2 = (n: number) => (n & 0xff).toString(16).padStart(2, '0');

class SpanHandle implements Span {
  #ref: SpanRef | undefined;
  constructor(readonly span: OtelSpan, readonly owner: OtelTracer) {}
  get ref(): SpanRef {
    if (!this.#ref) {
      const c = this.span.spanContext();
      this.#ref = { traceId: c.traceId, spanId: c.spanId, traceFlags: c.traceFlags };
    }
    return this.#ref;
  }
  get traceparent(): string {
    const r = this.ref;
    return `00-${r.traceId}-${r.spanId}-${hex2(r.traceFlags)}`;
  }
  set(attrs: Attrs): void {
    if (!this.span.isRecording()) return;
    for (const k in attrs) if (attrs[k] !== undefined) this.span.setAttribute(k, attrs[k]!);
  }
  rename(name: string): void {
    this.span.updateName(name);
  }
  fail(message: string): void {
    this.span.setStatus({ code: SpanStatusCode.ERROR, message });
  }
  end(): void {
    this.span.end();
  }
  child(name: string, attrs?: Attrs, kind: SpanKindName = 'internal'): Span {
    return this.owner.start(name, { parent: this, kind, ...(attrs ? { attributes: attrs } : {}) });
  }
}

class OtelTracer implements Tracer {
  readonly #propagator = new W3CTraceContextPropagator();
  constructor(readonly provider: BasicTracerProvider, readonly t = provider.getTracer('node-svc', VERSION)) {}

  server(method: string, route: string, path: string, traceparent: string | string[] | undefined, attrs?: Attrs): Span {
    const ctx = traceparent ? this.#propagator.extract(ROOT_CONTEXT, { traceparent }, { get: (c, k) => (c as Record<string, unknown>)[k] as string | string[] | undefined, keys: (c) => Object.keys(c as object) }) : ROOT_CONTEXT;
    const span = this.t.startSpan(route ? `${method} ${route}` : method, {
      kind: SpanKind.SERVER,
      attributes: { 'http.request.method': method, 'url.path': path, 'url.scheme': 'http', ...(route ? { 'http.route': route } : {}), ...clean(attrs) },
    }, ctx);
    return new SpanHandle(span, this);
  }

  start(name: string, o: StartOptions = {}): Span {
    const ctx: Context = o.parent ? trace.setSpan(ROOT_CONTEXT, (o.parent as SpanHandle).span) : ROOT_CONTEXT;
    const links: Link[] | undefined = o.links?.length ? o.links.map((r) => ({ context: { traceId: r.traceId, spanId: r.spanId, traceFlags: r.traceFlags, isRemote: true } })) : undefined;
    const attributes = clean(o.attributes);
    const span = this.t.startSpan(name, {
      kind: KINDS[o.kind ?? 'internal'],
      ...(attributes ? { attributes } : {}),
      ...(links ? { links } : {}),
      ...(o.startTime !== undefined ? { startTime: o.startTime } : {}),
    }, ctx);
    return new SpanHandle(span, this);
  }

  /** Export what is buffered, for 5 s at most: a stop must not wait out a collector that hangs. */
  async shutdown(): Promise<void> {
    let timer: NodeJS.Timeout | undefined;
    const late = new Promise<void>((resolve) => { timer = setTimeout(() => { log.warn('traces not all exported at stop: the collector did not answer within 5 s'); resolve(); }, 5000); });
    try {
      await Promise.race([this.provider.shutdown().catch((err: unknown) => log.warn('traces not all exported at stop', { error: (err as Error).message })), late]);
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

export async function otelTracer(config: TracingConfig): Promise<Tracer> {
  routeDiagnostics();
  // The exporter reads its endpoint, headers, timeout and compression from the OTEL_EXPORTER_OTLP_* variables itself.
  let exporter: SpanExporter;
  if (config.protocol === 'http/json') {
    const { OTLPTraceExporter } = await import('@opentelemetry/exporter-trace-otlp-http');
    exporter = new OTLPTraceExporter();
  } else {
    const { OTLPTraceExporter } = await import('@opentelemetry/exporter-trace-otlp-proto');
    exporter = new OTLPTraceExporter();
  }
  // service.name defaults to node-svc; OTEL_SERVICE_NAME and OTEL_RESOURCE_ATTRIBUTES win over it.
  const resource = defaultResource()
    .merge(resourceFromAttributes({ [ATTR_SERVICE_NAME]: 'node-svc', [ATTR_SERVICE_VERSION]: VERSION }))
    .merge(detectResources({ detectors: [envDetector] }));
  // Sampler (OTEL_TRACES_SAMPLER, _ARG), span limits and the batch processor's OTEL_BSP_* settings: from the environment.
  const provider = new BasicTracerProvider({ resource, spanProcessors: [new BatchSpanProcessor(exporter)] });
  log.info('traces: exporting over OTLP/HTTP', { endpoint: config.endpoint, protocol: config.protocol, service: String(resource.attributes[ATTR_SERVICE_NAME]) });
  return new OtelTracer(provider);
}
