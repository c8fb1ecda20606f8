// The Prometheus rules and the Grafana dashboard, checked with the real promtool (Debian's `prometheus` package):
// `promtool check rules`, `promtool test rules` (every alert fires in a test and stays quiet in another), every
// dashboard query parsed by promtool, and every runbook pointing at a README section that exists. Skipped only outside
// CI on a machine without promtool (.ci/run installs it). That the daemon serves every metric these use is
// test/e2e/metrics.test.ts.
import { mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, describe, expect, it } from 'vitest';
import { parse, stringify } from 'yaml';
import { REPO_ROOT } from '../helpers/cli.js';
import { alertRules, dashboard, dashboardExprs, hasPromtool, metricNames, promtool, RULE_TESTS, RULES, selectorLabels, substituteVariables } from '../helpers/prometheus.js';

if (!process.env.CI && !hasPromtool) console.warn('[prometheus] SKIPPED: promtool is not installed (apt-get install --no-install-recommends prometheus; .ci/run does)');

const tmp = mkdtempSync(join(tmpdir(), 'node-svc-promtool-'));
afterAll(() => rmSync(tmp, { recursive: true, force: true }));

/** `groups:` with one recording rule per expression: promtool check rules parses each (no server needed). */
function checkExprs(exprs: string[]): ReturnType<typeof promtool> {
  const file = join(tmp, `exprs-${Math.random().toString(36).slice(2)}.yml`);
  writeFileSync(file, stringify({ groups: [{ name: 'exprs', rules: exprs.map((expr, i) => ({ record: `node_svc_dashboard:expr_${i}`, expr })) }] }));
  return promtool(['check', 'rules', file]);
}

/** GitHub's anchor of a README heading. */
const anchorOf = (heading: string) => heading.trim().toLowerCase().replace(/[^\p{L}\p{N}\s_-]/gu, '').replace(/\s/g, '-');
const readmeAnchors = () => new Set(readFileSync(join(REPO_ROOT, 'README.md'), 'utf8').split('\n').filter((l) => /^#{1,6} /.test(l)).map((l) => anchorOf(l.replace(/^#+ /, ''))));

describe.skipIf(!process.env.CI && !hasPromtool)('Prometheus rules and Grafana dashboard (promtool)', () => {
  const rules = alertRules();

  it('promtool check rules accepts data/prometheus/alerts.yml, every rule an alert', () => {
    const r = promtool(['check', 'rules', RULES]);
    expect(r.code, r.out).toBe(0);
    expect(r.out).toContain(`SUCCESS: ${rules.length} rules found`);
    expect(rules.length).toBeGreaterThanOrEqual(8);
    for (const a of rules) expect(a.alert, JSON.stringify(a)).toMatch(/^NodeSvc[A-Z]\w+$/);
  });

  it('every alert has a severity, a summary, a description and a runbook at a README section that exists', () => {
    const anchors = readmeAnchors();
    for (const a of rules) {
      expect(['critical', 'warning', 'info'], a.alert).toContain(a.labels?.severity);
      expect(a.annotations?.summary, a.alert).toBeTruthy();
      expect(a.annotations?.description, a.alert).toBeTruthy();
      const runbook = a.annotations?.runbook ?? '';
      expect(runbook, a.alert).toMatch(/^README\.md#[\w-]+$/);
      expect(anchors.has(runbook.split('#')[1]!), `${a.alert}: ${runbook} is not a heading of README.md`).toBe(true);
    }
  });

  it('promtool test rules passes, with every alert expected to fire in one case and to stay quiet in another', () => {
    const r = promtool(['test', 'rules', RULE_TESTS]);
    expect(r.code, r.out).toBe(0);
    expect(r.out).toContain('SUCCESS');
    const tests = (parse(readFileSync(RULE_TESTS, 'utf8')) as { tests: Array<{ alert_rule_test?: Array<{ alertname: string; exp_alerts?: unknown[] }> }> }).tests;
    const cases = tests.flatMap((t) => t.alert_rule_test ?? []);
    for (const a of rules) {
      expect(cases.some((c) => c.alertname === a.alert && (c.exp_alerts?.length ?? 0) > 0), `${a.alert} never expected to fire`).toBe(true);
      expect(cases.some((c) => c.alertname === a.alert && (c.exp_alerts?.length ?? 0) === 0), `${a.alert} never expected to stay quiet`).toBe(true);
    }
    for (const c of cases) expect(rules.map((a) => a.alert), `a test of an alert that does not exist: ${c.alertname}`).toContain(c.alertname);
  });

  it('promtool test rules fails when a rule no longer does what its test says', () => {
    // The same tests on a copy whose NodeSvcSettlementsStuck waits 1 minute instead of 10: they must notice.
    const src = readFileSync(RULES, 'utf8');
    const changed = src.replace(/(alert: NodeSvcSettlementsStuck[\s\S]*?for: )10m/, '$11m');
    expect(changed).not.toBe(src);
    writeFileSync(join(tmp, 'alerts.yml'), changed);
    writeFileSync(join(tmp, 'alerts.test.yml'), readFileSync(RULE_TESTS, 'utf8'));
    const r = promtool(['test', 'rules', join(tmp, 'alerts.test.yml')]);
    expect(r.code).not.toBe(0);
    expect(r.out).toMatch(/FAILED[\s\S]*NodeSvcSettlementsStuck/);
  });

  it('every query of data/grafana/node-svc.json parses with promtool, variables substituted', () => {
    const exprs = dashboardExprs();
    expect(exprs.length).toBeGreaterThanOrEqual(20);
    const r = checkExprs(exprs.map((e) => e.expr));
    expect(r.code, `${r.out}\n${exprs.map((e, i) => `expr_${i}: ${e.where}`).join('\n')}`).toBe(0);
    expect(r.out).toContain(`SUCCESS: ${exprs.length} rules found`);
    // …and the same check refuses a query that does not parse.
    const bad = checkExprs(['sum by (route (rate(node_svc_http_requests_total[5m]))']);
    expect(bad.code).not.toBe(0);
    expect(bad.out).toMatch(/parse error/);
  });

  it('the dashboard: unique panel ids, every panel on the ${datasource} variable with at least one query, known variables only', () => {
    const d = dashboard();
    const ids = d.panels.map((p) => p.id);
    expect(new Set(ids).size).toBe(ids.length);
    expect(d.templating.list.map((v) => v.name)).toEqual(expect.arrayContaining(['datasource', 'instance']));
    for (const p of d.panels.filter((x) => x.type !== 'row')) {
      expect(p.datasource?.uid, p.title).toBe('${datasource}');
      expect(p.targets?.length, p.title).toBeGreaterThan(0);
    }
    expect(() => substituteVariables('rate(x{instance=~"$nope"}[5m])', ['instance'])).toThrow(/unknown dashboard variable \$nope/);
  });

  it('covers what the dashboard is for: money billed, checkpointed and final, deliveries and latency, outbox, lag, HTTP', () => {
    const used = new Set(dashboardExprs().flatMap((e) => metricNames(e.expr)));
    for (const name of ['node_svc_billed_micro', 'node_svc_checkpointed_micro', 'node_svc_final_micro', 'node_svc_webhook_deliveries_total',
      'node_svc_webhook_attempt_duration_seconds_bucket', 'node_svc_webhook_delivery_latency_seconds_bucket', 'node_svc_outbox_depth',
      'node_svc_webhook_dead_deliveries_unresolved', 'node_svc_settlement_lag_seconds', 'node_svc_http_requests_total'])
      expect(used, name).toContain(name);
  });

  it('reads metric names and selector labels out of PromQL (what test/e2e/metrics.test.ts compares with /metrics)', () => {
    expect(metricNames('sum by (outcome, le) (rate(node_svc_webhook_attempt_duration_seconds_bucket{instance=~".+", outcome="dead"}[5m]))'))
      .toEqual(['node_svc_webhook_attempt_duration_seconds_bucket']);
    expect(metricNames('deriv(sum by (job, instance) (node_svc_outbox_depth)[15m:1m]) > 0 and on (job, instance) node_svc_outbox_oldest_pending_age_seconds > 300'))
      .toEqual(['node_svc_outbox_depth', 'node_svc_outbox_oldest_pending_age_seconds']);
    expect(metricNames('max by (asset) (node_svc_billed_micro - node_svc_final_micro) / 1e6 > bool 0')).toEqual(['node_svc_billed_micro', 'node_svc_final_micro']);
    expect(() => metricNames('rate(http_requests_total[5m])')).toThrow(/not a metric of node-svc/);
    expect(selectorLabels('sum(rate(node_svc_http_requests_total{instance=~".+", status=~"5.."}[5m])) / node_svc_store_up{job="a,b=c"}'))
      .toEqual([{ metric: 'node_svc_http_requests_total', labels: ['instance', 'status'] }, { metric: 'node_svc_store_up', labels: ['job'] }]);
  });
});
