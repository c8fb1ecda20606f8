// store.unavailable / store.recovered (issue #23): a store that does not answer cannot be written to, so each daemon
// remembers the outage's start in memory and, once the store answers again, one daemon of those sharing it records
// both events (store.unavailable carrying the outage's start). Two real daemons on a PostgreSQL server of this test's
// own (stopped and started again: test/helpers/pg-outage.ts), the real CLI, a real receiver.
import { afterAll, beforeAll, describe, expect, it, vi } from 'vitest';
import { cliFor, json, tempDataDir, type TempDataDir } from '../helpers/cli.js';
import { startDaemon, type RunningDaemon } from '../helpers/daemon.js';
import { outage } from '../helpers/pg-outage.js';
import { pgAvailable, startPostgres, type PostgresServer } from '../helpers/postgres.js';
import { startReceiver, verifyServiceSignature, verifyStandardSignature, type Receiver } from '../helpers/receiver.js';
import { waitFor } from '../helpers/wait.js';

vi.setConfig({ testTimeout: 120_000, hookTimeout: 120_000 });

const avail = pgAvailable();
// Never skipped in CI: there, a machine without a server fails in beforeAll (startPostgres names why).
const SKIP = !avail.ok && !process.env.CI;
if (SKIP) console.warn(`[alerts-store] SKIPPED: no PostgreSQL server can be started here: ${avail.reason}`);

interface Envelope { id: string; type: string; schemaVersion: string; occurredAt: string; externalRef: string; data: Record<string, any> }

describe.skipIf(SKIP)('store.unavailable and store.recovered, once per outage among two daemons', () => {
  let server: PostgresServer;
  let t: TempDataDir;
  let rx: Receiver;
  let daemons: RunningDaemon[] = [];
  let secret: string;
  let url: string;

  beforeAll(async () => {
    server = await startPostgres();
    url = await server.createDatabase('alerts_store');
    t = await tempDataDir('node-svc-alerts-store-');
    rx = await startReceiver();
    const env = { NODE_SVC_STORE: url };
    const cli = cliFor(t.dataDir, { env });
    expect((await cli('nodes', 'add', 'node-a')).code).toBe(0);
    const add = await cli('alerts', 'add', `${rx.url}/alerts`, '--events', 'store.unavailable,store.recovered');
    expect(add.code, add.stderr).toBe(0);
    secret = json(add.stdout).secret;
    // Two daemons, each with a data dir of its own, on the one database.
    daemons = await Promise.all([0, 1].map((i) => startDaemon(`${t.dataDir}-${i}`, { env: { ...env, NODE_SVC_ALERT_WATCH_MS: '200' } })));
  });
  afterAll(async () => {
    for (const d of daemons) await d.stop('SIGKILL');
    await rx?.close();
    await server?.stop();
    await t?.cleanup();
  });

  it('an outage: reported when the store is back, with its start, by one daemon only', async () => {
    const { stoppingAt, upAt } = await outage(server.port, 3000);
    const envs = () => rx.at('/alerts').map((r) => {
      expect(verifyServiceSignature(secret, r.body, r.headers['x-service-signature'])).toBe(true);
      expect(verifyStandardSignature(secret, r)).toBe(true);
      return JSON.parse(r.body.toString('utf8')) as Envelope;
    });
    const distinct = (type: string) => [...new Map(envs().filter((e) => e.type === type).map((e) => [e.id, e])).values()];
    await waitFor(() => distinct('store.recovered').length > 0, 'store.recovered', 60_000, 100);
    // Each daemon saw the outage (its log says so at once) and, once back, either reported it or found it reported.
    for (const d of daemons) {
      await waitFor(() => /alert store\.unavailable: the store does not answer/.test(d.stderr), 'the outage logged by each daemon', 30_000, 100);
      await waitFor(() => /alert store\.recovered|store outage already reported/.test(d.stderr), 'each daemon back', 30_000, 100);
    }
    const down = distinct('store.unavailable');
    const back = distinct('store.recovered');
    expect(down).toHaveLength(1);
    expect(back).toHaveLength(1);
    const since = Date.parse(down[0]!.data.since);
    expect(since).toBeGreaterThanOrEqual(stoppingAt - 1000); // seen failing after the stop began (the watch polls every 200 ms)
    expect(since).toBeLessThanOrEqual(upAt);
    expect(down[0]).toMatchObject({ schemaVersion: 'operator/1.0.0', externalRef: 'store', occurredAt: down[0]!.data.since, data: { error: expect.any(String), daemon: expect.any(String) } });
    expect(back[0]!.data).toMatchObject({ since: down[0]!.data.since, recoveredAt: expect.any(String), downSeconds: expect.any(Number) });
    expect(Date.parse(back[0]!.data.recoveredAt)).toBeGreaterThanOrEqual(upAt - 1000);
    // Never the database's password or URL.
    expect(JSON.stringify(envs())).not.toContain(server.password);
    expect(daemons.filter((d) => /alert store\.recovered/.test(d.stderr))).toHaveLength(1);
  });
});
