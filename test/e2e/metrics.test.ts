// GET /metrics of the real daemon against what the Prometheus rules (data/prometheus/alerts.yml) and the Grafana
// dashboard (data/grafana/node-svc.json) query: every metric name they use is served (names parsed out of their
// PromQL, so a renamed metric fails here), the exposition passes `promtool check metrics`, money per asset is exact,
// the health gauges are the /healthz verdict, build_info names the build, and /metrics keeps answering while a
// PostgreSQL store is down (node_svc_store_up 0), then recovers without a restart.
import { spawnSync } from 'node:child_process';
import { readFileSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it, vi } from 'vitest';
import { stringify } from 'yaml';
import { REPO_ROOT, tempDataDir, type TempDataDir } from '../helpers/cli.js';
import { clientOf, http, setupNodes, startDaemon, type RunningDaemon } from '../helpers/daemon.js';
import { ISSUER, issuerKeyPair, mintCredential, nowSeconds, payerKeyPair, signCompact, signVoucher } from '../helpers/issuer.js';
import { stopServer } from '../helpers/pg-outage.js';
import { pgAvailable, startPostgres, type PostgresServer } from '../helpers/postgres.js';
import { alertRules, allExprs, hasPromtool, inputSeries, metricNames, metricValue as value, promtool, RULES, samples, selectorLabels, usedMetricNames } from '../helpers/prometheus.js';
import { always, startReceiver, type Receiver } from '../helpers/receiver.js';
import { waitFor } from '../helpers/wait.js';

vi.setConfig({ testTimeout: 60_000, hookTimeout: 60_000 });

/** `# TYPE <name> <type>` of every metric family served. */
const types = (text: string) => new Map([...text.matchAll(/^# TYPE (\S+) (\S+)$/gm)].map((m) => [m[1]!, m[2]!]));

/** The family a sample name belongs to: a histogram's `_bucket`, `_sum` and `_count` are its own. */
function familyOf(name: string, served: Map<string, string>): string | undefined {
  if (served.has(name)) return name;
  const base = name.replace(/_(bucket|sum|count)$/, '');
  return base !== name && served.get(base) === 'histogram' ? base : undefined;
}

describe('GET /metrics against the Prometheus rules and the dashboard', () => {
  let dir: TempDataDir;
  let daemon: RunningDaemon;
  let receiver: Receiver;
  let failing: Receiver;
  /** /metrics before the event that makes a delivery dead, and after. */
  let early: string;
  let text: string;

  beforeAll(async () => {
    dir = await tempDataDir('node-svc-metrics-');
    const issuer = await issuerKeyPair();
    const { tokenA } = await setupNodes(dir.dataDir, issuer);
    // One retry, at once: a receiver that always fails makes a dead delivery after two attempts.
    daemon = await startDaemon(dir.dataDir, { args: ['--retry-schedule', '0'] });
    receiver = await startReceiver();
    failing = await startReceiver(always(500));
    const A = clientOf(daemon.url, tokenA);
    expect((await A.post('/v1/webhooks', { url: `${receiver.url}/hook` })).status).toBe(201);
    expect((await A.post('/v1/webhooks', { url: `${failing.url}/hook` })).status).toBe(201);
    // Money in two assets: 1000 + 250 micro USDC on two streams, 2500 micro EURC on one.
    const payer = await payerKeyPair();
    for (const [stream, asset, amount] of [['m-usdc-1', 'USDC', '1000'], ['m-usdc-2', 'USDC', '250'], ['m-eurc-1', 'EURC', '2500']] as const) {
      const v = await A.post('/v1/allowances/verify', { credential: mintCredential({ key: issuer, payer, claims: { stream, asset } }) });
      expect(v.status, v.text).toBe(200);
      const r = await A.post(`/v1/streams/${stream}/vouchers`, { voucher: signVoucher(payer, { stream, amount, units: '1' }) });
      expect(r.status, r.text).toBe(200);
    }
    early = (await http(daemon.url, '/metrics')).text;
    // An event (a budget halted by the issuer) for both receivers: wait until the worker has counted the delivered
    // attempt and the dead one.
    const halt = signCompact({ alg: issuer.alg, typ: 'control+jwt', kid: issuer.kid },
      { iss: ISSUER, aud: 'node-a', jti: `ctl-${Date.now()}`, iat: nowSeconds(), kind: 'budget.halted', budget: 'b-metrics', reason: 'anomaly' }, issuer.privateKey);
    const ctl = await A.post('/v1/control', { message: halt });
    expect(ctl.status, ctl.text).toBe(200);
    text = await waitFor(async () => {
      const r = await http(daemon.url, '/metrics');
      expect(r.status).toBe(200);
      // The counters move when an attempt ends, the store's gauge once its result is written: wait for both.
      const done = ['delivered', 'dead'].every((outcome) => Number(value(r.text, 'node_svc_webhook_attempt_duration_seconds_count', { outcome }) ?? 0) > 0);
      return done && value(r.text, 'node_svc_webhook_dead_deliveries') === '1' ? r.text : undefined;
    }, 'a delivered and a dead attempt in /metrics, the dead one written', 20_000);
  });

  afterAll(async () => {
    await daemon?.stop();
    await receiver?.close();
    await failing?.close();
    await dir?.cleanup();
  });

  it('serves every metric the alert rules and the dashboard query (names parsed out of their PromQL)', () => {
    const used = usedMetricNames().filter((n) => n !== 'up'); // `up` is Prometheus's own, about the scrape
    expect(used.length).toBeGreaterThan(15);
    const served = types(text);
    const missing = used.filter((n) => familyOf(n, served) === undefined);
    expect(missing, `queried by data/prometheus/alerts.yml or data/grafana/node-svc.json but not served by /metrics`).toEqual([]);
    // Every label a selector matches on is one the daemon writes on that metric (instance and job: Prometheus's).
    const wrong: string[] = [];
    for (const { metric, labels } of allExprs().flatMap(selectorLabels)) {
      const written = new Set([...samples(text, metric).keys()].flatMap((l) => [...l.matchAll(/(\w+)="/g)].map((m) => m[1]!)));
      if (!samples(text, metric).size) continue; // no sample yet (settlements without a rail): nothing to compare
      for (const l of labels) if (l !== 'instance' && l !== 'job' && !written.has(l)) wrong.push(`${metric}{${l}}`);
    }
    expect(wrong, 'labels selected by the rules or the dashboard that /metrics does not write').toEqual([]);
    // What the rules select by label value exists with those values.
    expect(value(text, 'node_svc_webhook_deliveries_total', { outcome: 'gone' })).toBe('0'); // exported before the first one
    expect(value(text, 'node_svc_settlements', { state: 'stuck' })).toBe('0');
    expect(value(text, 'node_svc_settlement_lag_seconds', { rail: 'escrow' })).toBe('0');
    expect(value(text, 'node_svc_settlement_lag_seconds', { rail: 'card' })).toBe('0');
    expect(value(text, 'node_svc_store_up')).toBe('1');
  });

  it.skipIf(!process.env.CI && !hasPromtool)('passes promtool check metrics (Prometheus naming conventions)', () => {
    const r = promtool(['check', 'metrics'], text);
    expect(r.code, r.out).toBe(0);
    expect(r.out.trim()).toBe('');
  });

  it.skipIf(!process.env.CI && !hasPromtool)('the alert rules on these scrapes (promtool): the dead delivery and the failing subscription fire, nothing else', () => {
    // Prometheus's view: the scrape before the dead delivery for 10 minutes, the one after for 20, and `up` 1.
    const names = [...new Set(alertRules().flatMap((r) => metricNames(r.expr)))].filter((n) => n !== 'up');
    const target = { job: 'node-svc', instance: 'a:8787' };
    const file = join(dir.root, 'real.test.yml');
    writeFileSync(file, stringify({
      rule_files: [RULES],
      evaluation_interval: '1m',
      tests: [{
        interval: '1m',
        input_series: [{ series: 'up{job="node-svc", instance="a:8787"}', values: '1x29' }, ...inputSeries([early, text], names, target, [10, 20])],
        promql_expr_test: [{
          expr: 'ALERTS{alertstate="firing"}',
          eval_time: '25m',
          exp_samples: [
            { labels: 'ALERTS{alertname="NodeSvcDeliveriesDead", alertstate="firing", severity="warning", job="node-svc", instance="a:8787"}', value: 1 },
            { labels: 'ALERTS{alertname="NodeSvcHealthDegraded", alertstate="firing", severity="warning", job="node-svc", instance="a:8787", check="subscriptions", status="degraded"}', value: 1 },
          ],
        }],
      }],
    }));
    const r = promtool(['test', 'rules', file]);
    expect(r.code, `${r.out}\n${readFileSync(file, 'utf8')}`).toBe(0);
  });

  it('money per asset, exact micro units: billed, checkpointed and final', () => {
    expect(value(text, 'node_svc_billed_micro', { asset: 'USDC' })).toBe('1250');
    expect(value(text, 'node_svc_billed_micro', { asset: 'EURC' })).toBe('2500');
    for (const asset of ['USDC', 'EURC']) {
      expect(value(text, 'node_svc_checkpointed_micro', { asset })).toBe('0'); // no rail: nothing settles
      expect(value(text, 'node_svc_final_micro', { asset })).toBe('0');
    }
  });

  it('deliveries and attempt duration by outcome, the dead delivery counted, and the outbox drained to an oldest pending age of 0', async () => {
    // The event went to two subscriptions: delivered to one; failed, retried once and dead at the other.
    expect(value(text, 'node_svc_webhook_deliveries_total', { outcome: 'delivered' })).toBe('1');
    expect(value(text, 'node_svc_webhook_deliveries_total', { outcome: 'failed' })).toBe('1');
    expect(value(text, 'node_svc_webhook_deliveries_total', { outcome: 'dead' })).toBe('1');
    for (const outcome of ['delivered', 'failed', 'dead']) {
      expect(value(text, 'node_svc_webhook_attempt_duration_seconds_count', { outcome }), outcome).toBe('1');
      expect(value(text, 'node_svc_webhook_attempt_duration_seconds_bucket', { outcome, le: '+Inf' }), outcome).toBe('1');
    }
    expect(value(text, 'node_svc_webhook_dead_deliveries')).toBe('1');
    expect(value(text, 'node_svc_webhook_dead_deliveries_unresolved')).toBe('1'); // not replayed
    const drained = await waitFor(async () => {
      const t = (await http(daemon.url, '/metrics')).text;
      return value(t, 'node_svc_outbox_depth', { status: 'pending' }) === '0' ? t : undefined;
    }, 'the outbox drained', 20_000);
    expect(value(drained, 'node_svc_outbox_oldest_pending_age_seconds')).toBe('0');
  });

  it('the health gauges are the /healthz verdict, one series per status with 1 for the current one', async () => {
    // Read /healthz on both sides of the scrape: compare only when the verdict did not move meanwhile.
    const { verdict, metrics } = await waitFor(async () => {
      const before = (await http(daemon.url, '/healthz')).body;
      const m = (await http(daemon.url, '/metrics')).text;
      const after = (await http(daemon.url, '/healthz')).body;
      const shape = (v: { status: string; checks: Array<{ name: string; status: string }> }) => JSON.stringify([v.status, v.checks.map((c) => [c.name, c.status])]);
      return shape(before) === shape(after) ? { verdict: after, metrics: m } : undefined;
    }, 'a stable verdict', 20_000);
    for (const status of ['ok', 'degraded', 'down']) expect(value(metrics, 'node_svc_health_status', { status }), status).toBe(verdict.status === status ? '1' : '0');
    expect(verdict.checks.map((c: { name: string }) => c.name)).toEqual(expect.arrayContaining(['store', 'keys', 'rail', 'outbox', 'settlements', 'subscriptions']));
    for (const c of verdict.checks as Array<{ name: string; status: string }>)
      for (const status of ['ok', 'degraded', 'down']) expect(value(metrics, 'node_svc_health_check_status', { check: c.name, status }), `${c.name} ${status}`).toBe(c.status === status ? '1' : '0');
  });

  it('build_info names the version, the commit and Node.js', () => {
    const pkg = JSON.parse(readFileSync(join(REPO_ROOT, 'package.json'), 'utf8')) as { version: string };
    const labels = [...samples(text, 'node_svc_build_info').keys()];
    expect(labels).toHaveLength(1);
    expect(labels[0]).toMatch(new RegExp(`^version="${pkg.version.replace(/\./g, '\\.')}",commit="([0-9a-f]{12}|unknown)",node_version="${process.version}"$`));
    // CI builds (npm test runs `npm run build`) from a git checkout: the commit is the one checked out. Elsewhere dist/
    // may predate the last commit.
    const head = spawnSync('git', ['rev-parse', '--short=12', 'HEAD'], { cwd: REPO_ROOT, encoding: 'utf8' });
    if (process.env.CI && head.status === 0) expect(labels[0]).toContain(`commit="${head.stdout.trim()}"`);
  });
});

// A server of its own (stopped and started by the test). Skipped only outside CI without PostgreSQL's binaries.
describe.skipIf(!process.env.CI && !pgAvailable().ok)('GET /metrics while the PostgreSQL store is down', () => {
  let server: PostgresServer;
  let dir: TempDataDir;
  let daemon: RunningDaemon;
  let restart: (() => Promise<void>) | undefined;

  beforeAll(async () => {
    server = await startPostgres();
    dir = await tempDataDir('node-svc-metrics-pg-');
    daemon = await startDaemon(dir.dataDir, { env: { NODE_SVC_STORE: await server.createDatabase('metrics_down') } });
  });
  afterAll(async () => {
    await daemon?.stop();
    await restart?.().catch(() => undefined);
    await server?.stop();
    await dir?.cleanup();
  });

  it('answers 200 with node_svc_store_up 0 and the verdict down, then 1 again once the server is back, without a restart', async () => {
    const up = await http(daemon.url, '/metrics');
    expect(up.status).toBe(200);
    expect(value(up.text, 'node_svc_store_up')).toBe('1');
    expect(value(up.text, 'node_svc_outbox_depth', { status: 'pending' })).toBe('0');

    restart = await stopServer(server.port);
    const down = await http(daemon.url, '/metrics');
    expect(down.status).toBe(200);
    expect(value(down.text, 'node_svc_store_up')).toBe('0');
    expect(value(down.text, 'node_svc_health_status', { status: 'down' })).toBe('1');
    expect(value(down.text, 'node_svc_health_check_status', { check: 'store', status: 'down' })).toBe('1');
    // Gauges read from the store keep their HELP and TYPE, without samples; the in-memory counters are still there.
    expect(down.text).toMatch(/^# TYPE node_svc_outbox_depth gauge$/m);
    expect(samples(down.text, 'node_svc_outbox_depth').size).toBe(0);
    expect(value(down.text, 'node_svc_webhook_deliveries_total', { outcome: 'dead' })).toBe('0');
    expect((await http(daemon.url, '/healthz')).status).toBe(503);

    await restart();
    restart = undefined;
    const back = await waitFor(async () => {
      const r = await http(daemon.url, '/metrics');
      return value(r.text, 'node_svc_store_up') === '1' ? r : undefined;
    }, 'node_svc_store_up 1 after the server started again', 30_000);
    expect(back.status).toBe(200);
    expect(value(back.text, 'node_svc_outbox_depth', { status: 'pending' })).toBe('0');
  });
});
