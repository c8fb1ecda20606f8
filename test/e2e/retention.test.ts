// Retention against the real daemon and CLI (issue 14): --retention prunes delivered history older than it at
// startup and on a timer, keeps what a delivery still needs and all money state, and GET /v1/events and
// `webhooks replay --since` say when they are asked for a time before the horizon.
import { inspectStore, type Inspector } from '../helpers/inspect.js';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { runCli, tempDataDir, type TempDataDir } from '../helpers/cli.js';
import { clientOf, setupNodes, startDaemon, type RunningDaemon } from '../helpers/daemon.js';
import { issuerKeyPair } from '../helpers/issuer.js';
import { waitFor } from '../helpers/wait.js';

const HOUR = 3_600_000;

describe('retention', () => {
  let tmp: TempDataDir;
  let daemon: RunningDaemon;
  let token: string;
  const now = Date.now();
  const ids = { oldDelivered: 'evt_0000000000000000000000OLDD', oldDead: 'evt_0000000000000000000000OLDX', oldLonely: 'evt_0000000000000000000000OLDL', recent: 'evt_0000000000000000000000NEWR' };

  beforeAll(async () => {
    tmp = await tempDataDir('node-svc-retention-');
    const issuer = await issuerKeyPair();
    token = (await setupNodes(tmp.dataDir, issuer)).tokenA;
    // History written before the daemon starts: three events three hours old (one delivered, one whose delivery
    // is dead, one nobody subscribed to) and one recent delivered event.
    const db = inspectStore(tmp.dataDir);
    db.prepare(`INSERT INTO webhook_subscriptions(id, node_id, url, events, schema_version, status, secret, created_at, updated_at)
      VALUES ('whk_r', 'node-a', 'http://127.0.0.1:9/h', '*', '1.1.0', 'active', 'whsec_r', ?, ?)`).run(now - 4 * HOUR, now - 4 * HOUR);
    const event = db.prepare(`INSERT INTO events(id, node_id, type, external_ref, occurred_at, body) VALUES (?, 'node-a', 'budget.halted', 'budget:b', ?, ?)`);
    const delivery = db.prepare(`INSERT INTO deliveries(id, event_seq, subscription_id, status, attempts, next_attempt_at, created_at, delivered_at)
      VALUES (?, (SELECT seq FROM events WHERE id = ?), 'whk_r', ?, 1, ?, ?, ?)`);
    for (const [id, at] of [[ids.oldDelivered, now - 3 * HOUR], [ids.oldDead, now - 3 * HOUR], [ids.oldLonely, now - 3 * HOUR], [ids.recent, now - 60_000]] as const)
      event.run(id, at, JSON.stringify({ id, type: 'budget.halted', schemaVersion: '1.1.0', occurredAt: new Date(at).toISOString(), externalRef: 'budget:b', data: { budget: 'b', reason: 'sla' } }));
    delivery.run('dlv_old', ids.oldDelivered, 'delivered', now, now - 3 * HOUR, now - 3 * HOUR + 10);
    delivery.run('dlv_dead', ids.oldDead, 'dead', now, now - 3 * HOUR, null);
    delivery.run('dlv_new', ids.recent, 'delivered', now, now - 60_000, now - 59_000);
    db.close();
    daemon = await startDaemon(tmp.dataDir, { args: ['--retention', '2h'] });
  });
  afterAll(async () => {
    await daemon?.stop();
    await tmp?.cleanup();
  });

  it('prunes the delivered and unreferenced old events, keeps the dead delivery and everything recent', async () => {
    const A = clientOf(daemon.url, token);
    const listed = await waitFor(async () => {
      const r = await A.get('/v1/events?limit=500');
      const seen = r.body.data.map((e: { id: string }) => e.id) as string[];
      return seen.includes(ids.oldDelivered) ? undefined : seen;
    }, 'the first retention pass', 15_000);
    expect(listed).toEqual([ids.oldDead, ids.recent]);
    const health = await A.get('/v1/webhooks/whk_r/deliveries');
    expect(health.body.health).toEqual({ pending: 0, retrying: 0, dead: 1, delivered: 1 });
    expect(daemon.stderr).toMatch(/pruned history older than the retention period/);
  });

  it('GET /v1/events?since= before the horizon says so; after it, it does not', async () => {
    const A = clientOf(daemon.url, token);
    const before = await A.get(`/v1/events?since=${encodeURIComponent(new Date(now - 5 * HOUR).toISOString())}`);
    expect(before.status).toBe(200);
    expect(before.body.sincePruned).toBe(true);
    expect(Math.abs(Date.parse(before.body.retentionHorizon) - (Date.now() - 2 * HOUR))).toBeLessThan(60_000);
    const after = await A.get(`/v1/events?since=${encodeURIComponent(new Date(now - 10 * 60_000).toISOString())}`);
    expect(after.body.sincePruned).toBe(false);
    expect(after.body.data.map((e: { id: string }) => e.id)).toEqual([ids.recent]);
    const bad = await A.get('/v1/events?since=yesterday');
    expect(bad.status).toBe(400);
    expect(bad.body.detail).toMatch(/since: is not an RFC 3339 time/);
  });

  it('webhooks replay --since before the horizon warns on stderr and replays what is kept', async () => {
    const r = await runCli(['webhooks', 'replay', '--since', '5h', '--url', daemon.url, '--token', token, '--json']);
    expect(r.code, r.stderr).toBe(0);
    expect(r.stderr).toMatch(/before the retention horizon .* may have been pruned/);
    const out = JSON.parse(r.stdout);
    expect(out.events).toBe(2);
    expect(out.prunedBefore).toEqual(expect.any(String));
    const none = await runCli(['webhooks', 'replay', '--since', '1m', '--url', daemon.url, '--token', token, '--json']);
    expect(none.code, none.stderr).toBe(0);
    expect(JSON.parse(none.stdout)).toMatchObject({ events: 0, prunedBefore: null });
    expect(none.stderr).not.toMatch(/retention/);
  });

  it('refuses a --retention that is not a duration or is shorter than an hour, and a bad config.json value, naming it', async () => {
    const dir = await tempDataDir('node-svc-retention-bad-');
    try {
      const bad = await runCli(['--data-dir', dir.dataDir, 'daemon', '--port', '0', '--retention', 'forever']);
      expect(bad.code).toBe(2);
      const message = (r: { stderr: string }) => JSON.parse(r.stderr).error.message as string; // JSON errors when not a TTY
      expect(message(bad)).toMatch(/--retention "forever" is not a duration/);
      const short = await runCli(['--data-dir', dir.dataDir, 'daemon', '--port', '0'], { env: { NODE_SVC_RETENTION: '10m' } });
      expect(short.code).toBe(2);
      expect(message(short)).toMatch(/--retention must be at least 1h/);
      const { writeFileSync, mkdirSync } = await import('node:fs');
      mkdirSync(dir.dataDir, { recursive: true });
      writeFileSync(join(dir.dataDir, 'config.json'), JSON.stringify({ retention: 'a month' }));
      const cfg = await runCli(['--data-dir', dir.dataDir, 'daemon', '--port', '0']);
      expect(cfg.code).not.toBe(0);
      expect(message(cfg)).toMatch(/"retention": must be a duration/);
    } finally {
      await dir.cleanup();
    }
  });
});
