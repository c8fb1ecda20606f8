// OpenTelemetry traces, off unless the standard OTEL_* variables ask for them (README "Traces"). This module never
// imports OpenTelemetry: startTracing() loads ./otel.js, and with it the SDK, only when tracing is on, so a daemon
// started without those variables loads no OpenTelemetry module and its hot paths pay one `if` on `tracer`.
// What a span carries is chosen where it is made: ids, names, amounts, status codes; never a token, secret, JWS,
// voucher or signature.
import { configError } from '../domain/errors.js';
import { Lru } from '../lru.js';
import { log } from '../log.js';

export type AttrValue = string | number | boolean;
export type Attrs = Record<string, AttrValue | undefined>;

/** A span's identity, for links (the W3C trace context of a span that ended, or may end, earlier). */
export interface SpanRef {
  traceId: string;
  spanId: string;
  traceFlags: number;
}

export interface Span {
  readonly ref: SpanRef;
  /** The W3C `traceparent` header value naming this span (what a webhook receiver's trace continues). */
  readonly traceparent: string;
  set(attrs: Attrs): void;
  /** One attribute (no object to build on a hot path); undefined is skipped. */
  attr(key: string, value: AttrValue | undefined): void;
  rename(name: string): void;
  /** Status ERROR with a short message (a refusal name, an error class: never a secret). */
  fail(message: string): void;
  end(): void;
  /** A child span (INTERNAL unless told). */
  child(name: string, attrs?: Attrs, kind?: SpanKindName): Span;
}

export type SpanKindName = 'internal' | 'server' | 'client';

export interface StartOptions {
  kind?: SpanKindName;
  parent?: Span;
  links?: readonly SpanRef[];
  attributes?: Attrs;
  /** ms since the epoch: a span recorded after the fact (settlement.confirm starts before the rail call it describes). */
  startTime?: number;
}

export interface Tracer {
  /** The HTTP server span of a request: its incoming `traceparent` (a node's own trace) is the parent. `route` '' when
   *  not known yet (then named by the method, as the semantic conventions say, until rename()). */
  server(method: string, route: string, path: string, traceparent: string | string[] | undefined, attrs?: Attrs): Span;
  start(name: string, o?: StartOptions): Span;
  /** Export what is buffered and stop (bounded by the exporter's timeout). */
  shutdown(): Promise<void>;
}

/** The tracer while tracing is on; undefined otherwise (every hook is `tracer?.…` or `if (tracer)`). */
export let tracer: Tracer | undefined;

export interface TracingConfig {
  /** Where spans go (the traces endpoint as the exporter will use it). */
  endpoint: string;
  protocol: 'http/protobuf' | 'http/json';
}

const SAMPLERS = ['always_on', 'always_off', 'traceidratio', 'parentbased_always_on', 'parentbased_always_off', 'parentbased_traceidratio'];

/**
 * Whether the environment asks for traces, checked without loading OpenTelemetry. On when OTEL_EXPORTER_OTLP_ENDPOINT
 * or OTEL_EXPORTER_OTLP_TRACES_ENDPOINT is set, or OTEL_TRACES_EXPORTER=otlp (then the SDK's default endpoint);
 * OTEL_SDK_DISABLED=true or OTEL_TRACES_EXPORTER=none turns it off. What the SDK would only warn about and ignore
 * (a sampler it does not know, grpc, another exporter) refuses the start here, naming the variable.
 */
export function tracingConfig(env: NodeJS.ProcessEnv = process.env): TracingConfig | undefined {
  const v = (k: string) => (env[k]?.trim() ? env[k]!.trim() : undefined);
  if (v('OTEL_SDK_DISABLED')?.toLowerCase() === 'true') return undefined;
  const exporter = v('OTEL_TRACES_EXPORTER')?.toLowerCase();
  if (exporter === 'none') return undefined;
  if (exporter !== undefined && exporter !== 'otlp')
    throw configError(`OTEL_TRACES_EXPORTER="${exporter}": node-svc exports traces over OTLP/HTTP only`, 'set it to otlp (or none), or unset it');
  const signal = v('OTEL_EXPORTER_OTLP_TRACES_ENDPOINT');
  const base = v('OTEL_EXPORTER_OTLP_ENDPOINT');
  if (!signal && !base && exporter !== 'otlp') return undefined;
  const endpoint = signal ?? (base ? `${base.replace(/\/+$/, '')}/v1/traces` : 'http://localhost:4318/v1/traces');
  let url: URL | undefined;
  try {
    url = new URL(endpoint);
  } catch {
    url = undefined;
  }
  const name = signal ? 'OTEL_EXPORTER_OTLP_TRACES_ENDPOINT' : 'OTEL_EXPORTER_OTLP_ENDPOINT';
  if (!url || (url.protocol !== 'http:' && url.protocol !== 'https:')) throw configError(`${name} is not an http(s) URL`, 'e.g. http://127.0.0.1:4318 (OTLP/HTTP)');
  const protocol = (v('OTEL_EXPORTER_OTLP_TRACES_PROTOCOL') ?? v('OTEL_EXPORTER_OTLP_PROTOCOL') ?? 'http/protobuf').toLowerCase();
  if (protocol !== 'http/protobuf' && protocol !== 'http/json')
    throw configError(`OTEL_EXPORTER_OTLP_PROTOCOL="${protocol}": node-svc exports over OTLP/HTTP only`, 'use http/protobuf (the default) or http/json');
  const sampler = v('OTEL_TRACES_SAMPLER')?.toLowerCase();
  if (sampler !== undefined && !SAMPLERS.includes(sampler)) throw configError(`OTEL_TRACES_SAMPLER="${sampler}" is not one of ${SAMPLERS.join(', ')}`);
  if (sampler?.endsWith('traceidratio')) {
    const arg = v('OTEL_TRACES_SAMPLER_ARG');
    const ratio = arg === undefined ? 1 : Number(arg);
    if (!Number.isFinite(ratio) || ratio < 0 || ratio > 1) throw configError(`OTEL_TRACES_SAMPLER_ARG="${arg}" must be a number from 0 to 1`);
  }
  return { endpoint: url.toString(), protocol };
}

/** Start tracing when the environment asks for it (loading the SDK then, never otherwise). Throws a config error. */
export async function startTracing(env: NodeJS.ProcessEnv = process.env): Promise<TracingConfig | undefined> {
  const config = tracingConfig(env);
  if (!config || tracer) return config;
  const { otelTracer } = await import('./otel.js');
  tracer = await otelTracer(config, env, log); // this module's logger: otel.js may be another copy of log.js (the CLI's bundles)
  return config;
}

export async function stopTracing(): Promise<void> {
  const t = tracer;
  tracer = undefined;
  causes.clear();
  await t?.shutdown();
}

/**
 * `fn` inside a child span of `parent` (no span, and no cost beyond the check, when tracing is off). A named refusal
 * (422) is an answer, not a failure: `node_svc.refusal` on the span; any other error sets its status and `error.type`.
 */
export async function inSpan<T>(parent: Span | undefined, name: string, attrs: Attrs, fn: (span?: Span) => Promise<T>, describe?: (r: T, span: Span) => void): Promise<T> {
  if (!parent) return fn();
  const span = parent.child(name, attrs);
  try {
    const r = await fn(span);
    describe?.(r, span);
    return r;
  } catch (err) {
    const refusal = (err as { extra?: { refusal?: unknown } }).extra?.refusal;
    if (typeof refusal === 'string') span.set({ 'node_svc.refusal': refusal });
    else {
      span.set({ 'error.type': errorType(err) });
      span.fail(errorType(err));
    }
    throw err;
  } finally {
    span.end();
  }
}

/** A short, secret-free name for an error on a span: its code (`unavailable`, ECONNREFUSED) or its class. */
export function errorType(err: unknown): string {
  const e = err as { code?: unknown; name?: unknown };
  if (typeof e?.code === 'string') return e.code;
  return typeof e?.name === 'string' ? e.name : 'error';
}

/**
 * What a voucher caused, as span links (they happen later, in other traces): kept in memory, bounded, per daemon.
 * A voucher's span is remembered by stream until a settlement takes it; the settlement's spans by settlement id; the
 * spans an event came from by event id, for its deliveries. Nothing is stored (no migration): after a restart, or
 * when another daemon sharing a PostgreSQL store settles or delivers, those spans start without links.
 */
class Causes {
  /** node\nstream → the spans of vouchers accepted since its last settlement (the last few). */
  readonly #vouchers = new Lru<string, SpanRef[]>(10_000);
  readonly #settlements = new Lru<string, SpanRef[]>(10_000);
  readonly #events = new Lru<string, SpanRef[]>(10_000);
  static readonly PER_STREAM = 8;

  voucher(node: string, stream: string, ref: SpanRef): void {
    const k = `${node}\n${stream}`;
    const refs = this.#vouchers.get(k) ?? [];
    refs.push(ref);
    if (refs.length > Causes.PER_STREAM) refs.shift();
    this.#vouchers.set(k, refs);
  }

  /** A voucher that was not accepted after all (remembered before its commit, see routes/streams.ts). */
  forgetVoucher(node: string, stream: string, ref: SpanRef): void {
    const refs = this.#vouchers.get(`${node}\n${stream}`);
    const i = refs ? refs.indexOf(ref) : -1;
    if (i >= 0) refs!.splice(i, 1);
  }

  /** The voucher spans a settlement of this stream settles (forgotten here: the next settlement links newer ones). */
  takeVouchers(node: string, stream: string): SpanRef[] {
    const k = `${node}\n${stream}`;
    const refs = this.#vouchers.get(k) ?? [];
    this.#vouchers.delete(k);
    return refs;
  }

  settlement(id: string, refs: SpanRef[]): void {
    this.#settlements.set(id, refs);
  }

  forSettlement(id: string): SpanRef[] {
    return this.#settlements.get(id) ?? [];
  }

  event(id: string, refs: SpanRef[]): void {
    this.#events.set(id, refs);
  }

  forEvent(id: string): SpanRef[] {
    return this.#events.get(id) ?? [];
  }

  clear(): void {
    this.#vouchers.clear();
    this.#settlements.clear();
    this.#events.clear();
  }
}

export const causes = new Causes();

/** End an HTTP server span with its status (semantic conventions: a 5xx is an error, `error.type` its code). */
export function endHttp(span: Span, status: number, attrs?: Attrs): void {
  span.attr('http.response.status_code', status);
  if (attrs) span.set(attrs);
  if (status >= 500) {
    span.attr('error.type', String(status));
    span.fail(`HTTP ${status}`);
  }
  span.end();
}

/** End an HTTP client span when its response (or error) arrives: a status of 400 or more, or no answer, is an error. */
export async function endClient<R extends { statusCode?: number | undefined }>(span: Span, p: Promise<R>): Promise<R> {
  try {
    const res = await p;
    const status = res.statusCode ?? 0;
    span.set({ 'http.response.status_code': status, ...(status >= 400 ? { 'error.type': String(status) } : {}) });
    if (status >= 400) span.fail(`HTTP ${status}`);
    return res;
  } catch (err) {
    span.set({ 'error.type': errorType(err) });
    span.fail(errorType(err));
    throw err;
  } finally {
    span.end();
  }
}
