// --store-pool (README "More than one machine"): how many write transactions a daemon on PostgreSQL runs at once;
// writes beyond that wait and commit together, one COMMIT for the group. What an operator sees of it:
// node_svc_store_commits_total and node_svc_store_writes_total on /metrics. The real daemon and CLI: on the SQLite
// passes the daemon's own write queue, on the PostgreSQL pass (NODE_SVC_TEST_STORE=postgres) --store-pool 1.
import { mkdir, writeFile } from 'node:fs/promises';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it, vi } from 'vitest';
import { json, runCli, tempDataDir, type TempDataDir } from '../helpers/cli.js';
import { clientOf, http, setupNodes, startDaemon, type RunningDaemon } from '../helpers/daemon.js';
import { haltFact, issuerKeyPair, type KeyPair } from '../helpers/issuer.js';
import { pgUrlOf, readRows } from '../helpers/inspect.js';
import { testServerUrl } from '../helpers/postgres.js';
import { metricValue } from '../helpers/prometheus.js';

vi.setConfig({ testTimeout: 60_000, hookTimeout: 60_000 });

const onPostgres = !!testServerUrl();
/** The daemon's sessions on its database (its connections name themselves node-svc; readRows's own does not). */
const daemonSessions = async (dataDir: string) =>
  Number((await readRows<{ n: string }>(dataDir, "SELECT count(*)::text AS n FROM pg_stat_activity WHERE datname = current_database() AND application_name = 'node-svc'"))[0]!.n);
const counters = async (url: string) => {
  const text = (await http(url, '/metrics')).text;
  return { commits: Number(metricValue(text, 'node_svc_store_commits_total')), writes: Number(metricValue(text, 'node_svc_store_writes_total')), text };
};

describe(`concurrent writes share commits, counted on /metrics (${onPostgres ? 'PostgreSQL, --store-pool 1' : 'SQLite'})`, () => {
  let dir: TempDataDir;
  let daemon: RunningDaemon;
  let issuer: KeyPair;
  let tokenA: string;

  beforeAll(async () => {
    dir = await tempDataDir('node-svc-store-pool-');
    issuer = await issuerKeyPair();
    ({ tokenA } = await setupNodes(dir.dataDir, issuer));
    daemon = await startDaemon(dir.dataDir, { args: onPostgres ? ['--store-pool', '1'] : [] });
  });
  afterAll(async () => {
    await daemon?.stop();
    await dir?.cleanup();
  });

  it('24 control facts at once: each applied once, every write counted, and on PostgreSQL fewer commits than writes', async () => {
    const A = clientOf(daemon.url, tokenA);
    const before = await counters(daemon.url);
    expect(before.text).toMatch(/^# TYPE node_svc_store_commits_total counter$/m);
    expect(before.text).toMatch(/^# TYPE node_svc_store_writes_total counter$/m);
    expect(before.writes).toBeGreaterThanOrEqual(before.commits);
    const facts = Array.from({ length: 24 }, () => haltFact(issuer));
    const answers = await Promise.all(facts.map((message) => A.post('/v1/control', { message })));
    for (const r of answers) expect(r.body, r.text).toMatchObject({ applied: true, duplicate: false });
    expect(new Set(answers.map((r) => r.body.eventId)).size).toBe(24);
    const after = await counters(daemon.url);
    const writes = after.writes - before.writes;
    const commits = after.commits - before.commits;
    expect(writes).toBeGreaterThanOrEqual(24);
    expect(commits).toBeGreaterThan(0);
    expect(commits).toBeLessThanOrEqual(writes);
    // One write transaction at a time: the facts that arrived while one ran waited and went together.
    if (onPostgres) {
      // One write transaction at a time: the facts that arrived while one ran waited and went together (here 2
      // commits for 24 writes with --store-pool 1, 11 with the default 10).
      expect(commits, `${commits} commits for ${writes} writes`).toBeLessThan(writes);
      // And the daemon never opened a second write connection: its sessions are the one write connection, at most 3
      // read connections and the LISTEN connection (the default 10 opens up to 10 write connections in such a burst).
      expect(await daemonSessions(dir.dataDir)).toBeLessThanOrEqual(1 + 3 + 1);
    }
    // Every fact is there once: the same 24 again are duplicates, nothing applied twice.
    const again = await Promise.all(facts.map((message) => A.post('/v1/control', { message })));
    for (const r of again) expect(r.body, r.text).toMatchObject({ applied: false, duplicate: true });
  });
});

describe.runIf(onPostgres)('config.json {"store": <url>, "storePool": 2}, without the flag or the environment', () => {
  let dir: TempDataDir;
  let daemon: RunningDaemon | undefined;
  afterAll(async () => {
    await daemon?.stop();
    await dir?.cleanup();
  });

  it('the daemon starts on that store with at most 2 write connections', async () => {
    dir = await tempDataDir('node-svc-store-pool-config-');
    const issuer = await issuerKeyPair();
    const { tokenA } = await setupNodes(dir.dataDir, issuer);
    await writeFile(join(dir.dataDir, 'config.json'), JSON.stringify({ store: pgUrlOf(dir.dataDir), storePool: 2 }));
    daemon = await startDaemon(dir.dataDir, { env: { NODE_SVC_STORE: undefined } }); // the store comes from config.json only
    const A = clientOf(daemon.url, tokenA);
    const answers = await Promise.all(Array.from({ length: 24 }, () => A.post('/v1/control', { message: haltFact(issuer) })));
    for (const r of answers) expect(r.body, r.text).toMatchObject({ applied: true });
    expect(await daemonSessions(dir.dataDir)).toBeLessThanOrEqual(2 + 3 + 1);
  });
});

describe('--store-pool refused by name', () => {
  let dir: TempDataDir;
  beforeAll(async () => {
    dir = await tempDataDir('node-svc-store-pool-flags-');
  });
  afterAll(async () => dir?.cleanup());

  it('out of 1 to 100, or not an integer: exit 2 naming the flag; nothing listens', async () => {
    for (const v of ['0', '101', 'many', '2.5']) {
      const r = await runCli(['--data-dir', dir.dataDir, 'daemon', '--port', '0', '--store-pool', v], { timeoutMs: 15_000 });
      expect(r.code, r.stderr).toBe(2);
      expect(r.stdout).not.toMatch(/listening on/);
      expect(json(r.stderr.trim().split('\n')[0]!).error.message).toBe(`--store-pool must be an integer from 1 to 100, got "${v}"`);
    }
  });

  it('with a SQLite store (flag or NODE_SVC_STORE_POOL): refused, saying it applies to PostgreSQL only', async () => {
    for (const o of [{ args: ['--store-pool', '4'], env: {} }, { args: [], env: { NODE_SVC_STORE_POOL: '4' } }]) {
      const r = await runCli(['--data-dir', dir.dataDir, 'daemon', '--port', '0', ...o.args], { timeoutMs: 15_000, env: { NODE_SVC_STORE: undefined, ...o.env } });
      expect(r.code, r.stderr).toBe(2);
      expect(r.stdout).not.toMatch(/listening on/);
      expect(json(r.stderr.trim().split('\n')[0]!).error.message).toMatch(/^--store-pool applies to a PostgreSQL store only/);
    }
  });

  it('config.json {"storePool": 0}: exit 4 naming the key and its range', async () => {
    const cfg = join(dir.dataDir, 'config.json');
    await mkdir(dir.dataDir, { recursive: true });
    await writeFile(cfg, JSON.stringify({ storePool: 0 }));
    try {
      const r = await runCli(['--data-dir', dir.dataDir, 'daemon', '--port', '0'], { timeoutMs: 15_000, env: { NODE_SVC_STORE: undefined } });
      expect(r.code, r.stderr).toBe(4);
      expect(json(r.stderr.trim().split('\n')[0]!).error.message).toMatch(/"storePool": must be .*1 .*100/);
    } finally {
      await writeFile(cfg, '{}');
    }
  });
});
