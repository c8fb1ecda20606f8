// Prometheus metrics: counters and histograms kept in memory, gauges read at scrape time. Labels never carry
// secrets or ids of money (no tokens, no stream ids): bounded cardinality.
import { renderProcessMetrics } from './process.js';

type Labels = Record<string, string>;

const key = (l: Labels) => Object.keys(l).sort().map((k) => `${k}="${l[k]!.replace(/\\/g, '\\\\').replace(/"/g, '\\"').replace(/\n/g, '\\n')}"`).join(',');

class Counter {
  readonly values = new Map<string, number>();
  readonly #keys = new Map<string, string>();
  constructor(readonly name: string, readonly help: string) {}
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
  deliveries: new Counter('node_svc_webhook_deliveries_total', 'Webhook delivery attempts by outcome (delivered, failed, dead, gone)'),
  deliveryLatency: new Histogram('node_svc_webhook_delivery_latency_seconds', 'From event recorded to acknowledged delivery', [0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 5, 30, 300, 3600]),
  settlements: new Counter('node_svc_settlements_total', 'Settlement transitions by rail and state (submitted, checkpointed, final, failed)'),
  alerts: new Counter('node_svc_alerts_emitted_total', 'Operational events (alerts) recorded for the alert endpoints, by kind'),
};

export interface Gauge {
  name: string;
  help: string;
  read(): Promise<number | Array<{ labels: Labels; value: number }>>;
}

export async function renderMetrics(gauges: Gauge[]): Promise<string> {
  const parts = [metrics.requests.render(), metrics.verify.render(), metrics.deliveries.render(), metrics.deliveryLatency.render(), metrics.settlements.render(), metrics.alerts.render()];
  for (const g of gauges) {
    const v = await g.read();
    const lines = [`# HELP ${g.name} ${g.help}`, `# TYPE ${g.name} gauge`];
    if (typeof v === 'number') lines.push(`${g.name} ${v}`);
    else for (const x of v) lines.push(`${g.name}{${key(x.labels)}} ${x.value}`);
    parts.push(lines.join('\n'));
  }
  parts.push(renderProcessMetrics());
  return `${parts.join('\n')}\n`;
}
