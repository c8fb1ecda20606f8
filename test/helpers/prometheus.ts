// The Prometheus rules (data/prometheus) and the Grafana dashboard (data/grafana) as tests read them: their PromQL
// expressions and the metric names those use, and promtool (Debian's `prometheus` package; .ci/run installs it).
import { spawnSync } from 'node:child_process';
import { readFileSync } from 'node:fs';
import { join } from 'node:path';
import { parse } from 'yaml';
import { REPO_ROOT } from './cli.js';

export const RULES = join(REPO_ROOT, 'data', 'prometheus', 'alerts.yml');
export const RULE_TESTS = join(REPO_ROOT, 'data', 'prometheus', 'alerts.test.yml');
export const DASHBOARD = join(REPO_ROOT, 'data', 'grafana', 'node-svc.json');

export const hasPromtool = spawnSync('promtool', ['--version'], { stdio: 'ignore' }).status === 0;

/** `promtool <args>`: exit code and what it printed. */
export function promtool(args: string[], input?: string): { code: number | null; out: string } {
  const r = spawnSync('promtool', args, { encoding: 'utf8', input, timeout: 60_000 });
  return { code: r.status, out: `${r.stdout}${r.stderr}` };
}

export interface AlertRule {
  alert: string;
  expr: string;
  for?: string;
  labels?: Record<string, string>;
  annotations?: Record<string, string>;
}

export const alertRules = (): AlertRule[] =>
  (parse(readFileSync(RULES, 'utf8')) as { groups: Array<{ rules: AlertRule[] }> }).groups.flatMap((g) => g.rules);

export interface Dashboard {
  panels: Array<{ id: number; type: string; title: string; datasource?: { uid?: string }; targets?: Array<{ expr: string; refId: string }> }>;
  templating: { list: Array<{ name: string; type: string; query?: string | { query: string } }> };
}

export const dashboard = (): Dashboard => JSON.parse(readFileSync(DASHBOARD, 'utf8')) as Dashboard;

/** Grafana's variables that a Prometheus query may use besides the dashboard's own. */
const GRAFANA_VARS: Record<string, string> = { __rate_interval: '5m', __interval: '1m', __range: '1h' };

/**
 * A dashboard query as Prometheus would receive it: `$name`, `${name}` and `[[name]]` replaced by a value of that
 * type (a regex for label matchers, a duration for Grafana's intervals). An unknown variable throws.
 */
export function substituteVariables(expr: string, variables: string[]): string {
  return expr.replace(/\$\{(\w+)\}|\$(\w+)|\[\[(\w+)\]\]/g, (_all, a: string, b: string, c: string) => {
    const name = a ?? b ?? c;
    if (name in GRAFANA_VARS) return GRAFANA_VARS[name]!;
    if (!variables.includes(name)) throw new Error(`unknown dashboard variable $${name} in ${expr}`);
    return '.+';
  });
}

/** Every PromQL expression of the dashboard's panels, variables substituted, with where it is. */
export function dashboardExprs(d: Dashboard = dashboard()): Array<{ where: string; expr: string }> {
  const vars = d.templating.list.map((v) => v.name);
  return d.panels.flatMap((p) => (p.targets ?? []).map((t) => ({ where: `panel ${p.id} "${p.title}" ${t.refId}`, expr: substituteVariables(t.expr, vars) })));
}

/** The metric queries of the dashboard's variables: `label_values(metric{…}, label)` names a metric too. */
export function variableMetrics(d: Dashboard = dashboard()): string[] {
  return d.templating.list.flatMap((v) => {
    const q = typeof v.query === 'string' ? v.query : v.query?.query;
    const m = q ? /^label_values\(\s*([a-zA-Z_:][a-zA-Z0-9_:]*)/.exec(q) : null;
    return m ? [m[1]!] : [];
  });
}

const KEYWORDS = new Set(['by', 'without', 'on', 'ignoring', 'group_left', 'group_right', 'and', 'or', 'unless', 'bool', 'offset', 'inf', 'nan', 'atan2']);

/**
 * The metric names a PromQL expression selects. Label matchers (`{…}`), strings, ranges (`[…]`), grouping label
 * lists and function names are not metric names; what is left is. Only names this project's metrics can have are
 * expected (node_svc_*, process_*, nodejs_*, and Prometheus's own `up`): anything else throws, so a bug here shows.
 */
export function metricNames(expr: string): string[] {
  const bare = expr
    .replace(/"(?:[^"\\]|\\.)*"|'(?:[^'\\]|\\.)*'|`[^`]*`/g, '""')
    .replace(/\{[^}]*\}/g, ' ')
    .replace(/\[[^\]]*\]/g, ' ')
    .replace(/\b(by|without|on|ignoring|group_left|group_right)\s*\([^)]*\)/g, ' ');
  const names = new Set<string>();
  for (const m of bare.matchAll(/(?<![\w.])([a-zA-Z_:][a-zA-Z0-9_:]*)(?!\w)(\s*\()?/g)) {
    const [, name, call] = m;
    if (call || KEYWORDS.has(name!.toLowerCase()) || /^\d/.test(name!)) continue;
    if (!/^(node_svc_\w+|process_\w+|nodejs_\w+|up)$/.test(name!)) throw new Error(`"${name}" in ${expr} is not a metric of node-svc (or the extractor misread the expression)`);
    names.add(name!);
  }
  return [...names];
}

/** The label names each selector `metric{label="…", …}` of an expression matches on, by metric. */
export function selectorLabels(expr: string): Array<{ metric: string; labels: string[] }> {
  const noStrings = expr.replace(/"(?:[^"\\]|\\.)*"/g, '""');
  return [...noStrings.matchAll(/([a-zA-Z_:][a-zA-Z0-9_:]*)\s*\{([^}]*)\}/g)].map((m) => ({ metric: m[1]!, labels: [...m[2]!.matchAll(/(\w+)\s*(?:=~|!~|!=|=)/g)].map((l) => l[1]!) }));
}

/** Every PromQL expression of the alert rules and the dashboard. */
export const allExprs = (): string[] => [...alertRules().map((r) => r.expr), ...dashboardExprs().map((e) => e.expr)];

/** Every metric name used by the alert rules and the dashboard (queries and variables), sorted. */
export function usedMetricNames(): string[] {
  return [...new Set([...allExprs().flatMap(metricNames), ...variableMetrics()])].sort();
}

/** The samples of `name` in a Prometheus text exposition: labels (as written) → value. */
export function samples(text: string, name: string): Map<string, string> {
  const out = new Map<string, string>();
  for (const m of text.matchAll(new RegExp(`^${name}(?:\\{([^}]*)\\})? (\\S+)$`, 'gm'))) out.set(m[1] ?? '', m[2]!);
  return out;
}

/** The value of the one sample of `name` whose labels include every `label="value"` given (undefined: none). */
export function metricValue(text: string, name: string, labels: Record<string, string> = {}): string | undefined {
  const want = Object.entries(labels).map(([k, v]) => `${k}="${v}"`);
  const hits = [...samples(text, name)].filter(([l]) => want.every((w) => l.split(',').includes(w)));
  if (hits.length > 1) throw new Error(`${name}${JSON.stringify(labels)}: ${hits.length} samples`);
  return hits[0]?.[1];
}

/**
 * `promtool test rules` input series from real scrapes of /metrics: every sample of `names`, with `target`'s labels
 * added (what Prometheus adds: job, instance), scrape i holding its value for `minutes[i]` one-minute samples
 * (`_`, no sample, where that scrape did not have the series).
 */
export function inputSeries(scrapes: string[], names: string[], target: Record<string, string>, minutes: number[]): Array<{ series: string; values: string }> {
  const extra = Object.entries(target).map(([k, v]) => `${k}="${v}"`);
  const series = new Map<string, Array<string | undefined>>();
  scrapes.forEach((text, i) => {
    for (const name of names)
      for (const [labels, v] of samples(text, name)) {
        const key = `${name}{${[labels, ...extra].filter(Boolean).join(', ')}}`;
        if (!series.has(key)) series.set(key, scrapes.map(() => undefined));
        series.get(key)![i] = v;
      }
  });
  return [...series].map(([key, vs]) => ({ series: key, values: vs.map((v, i) => `${v === undefined ? '_' : Number(v)}x${minutes[i]! - 1}`).join(' ') }));
}
