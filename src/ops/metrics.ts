// Prometheus metrics: counters and histograms kept in memory, gauges read at scrape time. Labels never carry
// secrets or ids of money (no tokens, no stream ids): bounded cardinality.
import { renderProcessMetrics } from './process.js';

type Labels = Record<string, string>;

const key = (l: Labels) => Object.keys(l).sort().map((k) => `${k}="${l[k]!.replace(/\\/g, '\\\\').replace(/"/g, '\\"').replace(/\n/g, '\\n')}"`).join(',');

class Counter {
  readonly values = new Map<string, number>();
  readonly #keys = new Map<string, string>();
  constructor(readonly name: string, readonly help: string) {}
  /** Series that exist at 0 before their first event, so increase() sees that first event (an alert on it fires). */
  zero(...labelSets: Labels[]): this {
    for (const l of labelSets) if (!this.values.has(key(l))) this.values.set(key(l), 0);
    return this;
  }
  inc(labels: Labels = {}, by = 1): void {
    const k = key(labels);
    this.values.set(k, (this.values.get(k) ?? 0) + by);
  }
  /** The hot-path form: `id` is any cheap string unique to the label set; the labels are rendered once per id. */
  incById(id: string, labels: () => Labels): void {
    let k = this.#keys.get(id);
    if (k === undefined) this.#keys.set(id, (k = key(labels())));
    this.values.set(k, (this.values.get(k) ?? 0) + 1);
  }
  render(): string {
    const lines = [`# HELP ${this.name} ${this.help}`, `# TYPE ${this.name} counter`];
    for (const [k, v] of this.values) lines.push(`${this.name}${k ? `{${k}}` : ''} ${v}`);
    return lines.join('\n');
  }
}

class Histogram {
  readonly series = new Map<string, { buckets: number[]; sum: number; count: number }>();
  constructor(readonly name: string, readonly help: string, readonly bounds: number[]) {}
  observe(value: number, labels: Labels = {}): void {
    const k = key(labels);
    let s = this.series.get(k);
    if (!s) this.series.set(k, (s = { buckets: this.bounds.map(() => 0), sum: 0, count: 0 }));
    for (let i = 0; i < this.bounds.length; i++) if (value <= this.bounds[i]!) s.buckets[i]!++;
    s.sum += value;
    s.count++;
  }
  render(): string {
    const lines = [`# HELP ${this.name} ${this.help}`, `# TYPE ${this.name} histogram`];
    for (const [k, s] of this.series) {
      const sep = k ? `${k},` : '';
      this.bounds.forEach((b, i) => lines.push(`${this.name}_bucket{${sep}le="${b}"} ${s.buckets[i]}`));
      lines.push(`${this.name}_bucket{${sep}le="+Inf"} ${s.count}`, `${this.name}_sum${k ? `{${k}}` : ''} ${s.sum}`, `${this.name}_count${k ? `{${k}}` : ''} ${s.count}`);
    }
    return lines.join('\n');
  }
}

export const metrics = {
  requests: new Counter('node_svc_http_requests_total', 'HTTP requests by route, method and status'),
  verify: new Counter('node_svc_verify_results_total', 'Credential verify answers by result (valid or the refusal name)'),
  deliveries: new Counter('node_svc_webhook_deliveries_total', 'Webhook delivery attempts by outcome (delivered, failed, dead, gone)')
    .zero(...['delivered', 'failed', 'dead', 'gone'].map((outcome) => ({ outcome }))),
  resends: new Counter('node_svc_webhook_resends_total', 'Webhook requests sent again at once on a new connection: the receiver closed the kept-alive one as the request went out (ECONNRESET or EPIPE before any answer), by error code')
    .zero({ code: 'ECONNRESET' }, { code: 'EPIPE' }),
  deliveryLatency: new Histogram('node_svc_webhook_delivery_latency_seconds', 'From event recorded to acknowledged delivery', [0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 5, 30, 300, 3600]),
  attemptDuration: new Histogram('node_svc_webhook_attempt_duration_seconds', 'One delivery attempt, from sending the request to the receiver\'s answer (or the error), by outcome', [0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30]),
  settlements: new Counter('node_svc_settlements_total', 'Settlement transitions by rail and state (submitted, checkpointed, final, failed)'),
  alerts: new Counter('node_svc_alerts_emitted_total', 'Operational events (alerts) recorded for the alert endpoints, by kind'),
  x402Verify: new Counter('node_svc_x402_verify_total', 'x402 verify answers by result (valid, or the x402 invalidReason)').zero({ result: 'valid' }),
  x402Settle: new Counter('node_svc_x402_settle_total', 'x402 settle answers by outcome (success: mined; pending: sent, not mined; failed) and reason (the x402 errorReason; none on success)')
    .zero({ outcome: 'success', reason: 'none' }, { outcome: 'pending', reason: 'settlement_pending' }),
};

/** Money is a bigint of micro units, written exactly (Prometheus reads it as a float64: exact below 2^53). */
type GaugeValue = number | bigint;

export interface Gauge {
  name: string;
  help: string;
  read(): Promise<GaugeValue | Array<{ labels: Labels; value: GaugeValue }>>;
  /** A count that only grows, read at scrape time (TYPE counter; its name ends in _total). Default: a gauge. */
  counter?: boolean;
}

/**
 * The exposition. A gauge whose read fails (the store does not answer) is left without samples — its HELP and TYPE
 * stay — so /metrics still answers, with node_svc_store_up and node_svc_health_status saying why.
 */
export async function renderMetrics(gauges: Gauge[]): Promise<string> {
  const parts = [metrics.requests.render(), metrics.verify.render(), metrics.deliveries.render(), metrics.resends.render(), metrics.deliveryLatency.render(), metrics.attemptDuration.render(), metrics.settlements.render(), metrics.alerts.render(), metrics.x402Verify.render(), metrics.x402Settle.render()];
  for (const g of gauges) {
    const v = await g.read().catch(() => []);
    const lines = [`# HELP ${g.name} ${g.help}`, `# TYPE ${g.name} ${g.counter ? 'counter' : 'gauge'}`];
    if (typeof v === 'number' || typeof v === 'bigint') lines.push(`${g.name} ${v}`);
    else for (const x of v) lines.push(`${g.name}{${key(x.labels)}} ${x.value}`);
    parts.push(lines.join('\n'));
  }
  parts.push(renderProcessMetrics());
  return `${parts.join('\n')}\n`;
}
