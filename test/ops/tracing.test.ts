// ops/tracing.ts without a daemon: which OTEL_* environments turn traces on (and where they go), which are refused,
// and the bounded in-memory record of what a voucher caused (the span links). The daemon's side: test/e2e/tracing.test.ts.
import { describe, expect, it } from 'vitest';
import { causes, tracingConfig, type SpanRef } from '../../src/ops/tracing.js';

describe('tracingConfig', () => {
  it('is off without an endpoint or OTEL_TRACES_EXPORTER=otlp (a service name alone does not turn it on)', () => {
    expect(tracingConfig({})).toBeUndefined();
    expect(tracingConfig({ OTEL_SERVICE_NAME: 'svc', OTEL_TRACES_SAMPLER: 'always_on' })).toBeUndefined();
    expect(tracingConfig({ OTEL_EXPORTER_OTLP_ENDPOINT: '   ' })).toBeUndefined();
  });

  it('appends /v1/traces to the base endpoint, uses the traces endpoint as is, and defaults to localhost for otlp', () => {
    expect(tracingConfig({ OTEL_EXPORTER_OTLP_ENDPOINT: 'http://collector:4318/' })).toEqual({ endpoint: 'http://collector:4318/v1/traces', protocol: 'http/protobuf' });
    expect(tracingConfig({ OTEL_EXPORTER_OTLP_ENDPOINT: 'http://a:1', OTEL_EXPORTER_OTLP_TRACES_ENDPOINT: 'https://b:2/custom' })).toEqual({ endpoint: 'https://b:2/custom', protocol: 'http/protobuf' });
    expect(tracingConfig({ OTEL_TRACES_EXPORTER: 'otlp' })).toEqual({ endpoint: 'http://localhost:4318/v1/traces', protocol: 'http/protobuf' });
    expect(tracingConfig({ OTEL_EXPORTER_OTLP_ENDPOINT: 'http://a:1', OTEL_EXPORTER_OTLP_PROTOCOL: 'http/json' })?.protocol).toBe('http/json');
    expect(tracingConfig({ OTEL_EXPORTER_OTLP_ENDPOINT: 'http://a:1', OTEL_EXPORTER_OTLP_PROTOCOL: 'http/json', OTEL_EXPORTER_OTLP_TRACES_PROTOCOL: 'http/protobuf' })?.protocol).toBe('http/protobuf');
  });

  it('OTEL_SDK_DISABLED=true and OTEL_TRACES_EXPORTER=none win over an endpoint', () => {
    expect(tracingConfig({ OTEL_EXPORTER_OTLP_ENDPOINT: 'http://a:1', OTEL_SDK_DISABLED: 'TRUE' })).toBeUndefined();
    expect(tracingConfig({ OTEL_EXPORTER_OTLP_ENDPOINT: 'http://a:1', OTEL_TRACES_EXPORTER: 'none' })).toBeUndefined();
    expect(tracingConfig({ OTEL_EXPORTER_OTLP_ENDPOINT: 'http://a:1', OTEL_SDK_DISABLED: 'false' })).toBeDefined();
  });

  it.each([
    [{ OTEL_TRACES_EXPORTER: 'otlp,console' }, /OTEL_TRACES_EXPORTER/],
    [{ OTEL_EXPORTER_OTLP_ENDPOINT: 'ftp://a' }, /OTEL_EXPORTER_OTLP_ENDPOINT is not an http\(s\) URL/],
    [{ OTEL_EXPORTER_OTLP_TRACES_ENDPOINT: 'not a url' }, /OTEL_EXPORTER_OTLP_TRACES_ENDPOINT/],
    [{ OTEL_EXPORTER_OTLP_ENDPOINT: 'http://a:1', OTEL_EXPORTER_OTLP_TRACES_PROTOCOL: 'grpc' }, /grpc/],
    [{ OTEL_EXPORTER_OTLP_ENDPOINT: 'http://a:1', OTEL_TRACES_SAMPLER: 'jaeger_remote' }, /OTEL_TRACES_SAMPLER="jaeger_remote"/],
    [{ OTEL_EXPORTER_OTLP_ENDPOINT: 'http://a:1', OTEL_TRACES_SAMPLER: 'parentbased_traceidratio', OTEL_TRACES_SAMPLER_ARG: 'half' }, /OTEL_TRACES_SAMPLER_ARG/],
  ])('refuses %o, naming the variable', (env, message) => {
    expect(() => tracingConfig(env)).toThrow(message);
  });
});

describe('causes: what a voucher caused, kept in memory', () => {
  const ref = (n: number): SpanRef => ({ traceId: n.toString(16).padStart(32, '0'), spanId: n.toString(16).padStart(16, '0'), traceFlags: 1 });

  it('keeps the last 8 voucher spans of a stream until a settlement takes them', () => {
    const refs = Array.from({ length: 10 }, (_, i) => ref(i + 1));
    for (const r of refs) causes.voucher('node-a', 's1', r);
    causes.voucher('node-b', 's1', ref(99)); // another node's stream of the same id: its own
    expect(causes.takeVouchers('node-a', 's1')).toEqual(refs.slice(2));
    expect(causes.takeVouchers('node-a', 's1')).toEqual([]);
    expect(causes.takeVouchers('node-b', 's1')).toEqual([ref(99)]);
  });

  it('forgets a voucher that was not accepted after all', () => {
    const a = ref(1);
    const b = ref(2);
    causes.voucher('node-a', 's2', a);
    causes.voucher('node-a', 's2', b);
    causes.forgetVoucher('node-a', 's2', a);
    expect(causes.takeVouchers('node-a', 's2')).toEqual([b]);
  });

  it('answers the links of a settlement and of an event, and nothing for unknown ones', () => {
    causes.settlement('stl_1', [ref(5)]);
    causes.event('evt_1', [ref(6), ref(5)]);
    expect(causes.forSettlement('stl_1')).toEqual([ref(5)]);
    expect(causes.forEvent('evt_1')).toEqual([ref(6), ref(5)]);
    expect(causes.forSettlement('stl_x')).toEqual([]);
    expect(causes.forEvent('evt_x')).toEqual([]);
  });
});
