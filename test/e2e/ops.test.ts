// Operations end to end (README "Operations", DESIGN §10–11): the real daemon and CLI (bin/node-svc) on 127.0.0.1
// with temp data dirs — /metrics, JSON logs, <data-dir>/config.json layering, the one-daemon-per-data-dir lock,
// online backup, webhooks replay --since, and nodes rm refusing a node with money history.
import { spawn } from 'node:child_process';
import { existsSync, readFileSync } from 'node:fs';
import { mkdir, writeFile } from 'node:fs/promises';
import { join } from 'node:path';
import Database from 'better-sqlite3';
import { afterAll, beforeAll, describe, expect, it, vi } from 'vitest';
import { BIN, cliFor, json, REPO_ROOT, runCli, tempDataDir, type TempDataDir } from '../helpers/cli.js';
import { clientOf, http, setupNodes, startDaemon, type RunningDaemon } from '../helpers/daemon.js';
import { haltFact, issuerKeyPair, mintCredential, payerKeyPair, signVoucher, type KeyPair } from '../helpers/issuer.js';
import { startReceiver, type Receiver } from '../helpers/receiver.js';
import { testServerUrl } from '../helpers/postgres.js';
import { pgUrlOf } from '../helpers/inspect.js';

vi.setConfig({ testTimeout: 40_000, hookTimeout: 40_000 });

const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));
let seq = 0;
const uid = (p: string) => `${p}-${++seq}-${Math.random().toString(36).slice(2, 8)}`;

/** Poll until `fn` returns something truthy (bounded); the last value is in the error. */
async function eventually<T>(fn: () => Promise<T | undefined | null | false> | T | undefined | null | false, what: string, timeoutMs = 15_000): Promise<T> {
  const end = Date.now() + timeoutMs;
  let last: unknown;
  for (;;) {
    last = await fn();
    if (last) return last as T;
    if (Date.now() > end) throw new Error(`${what}: not reached within ${timeoutMs} ms (last: ${JSON.stringify(last)?.slice(0, 1500)})`);
    await sleep(100);
  }
}

/** The daemon without the helper's fixed `--rate-limit 0`, so config.json and env can set it. */
function spawnDaemon(dataDir: string, extra: string[] = [], env: Record<string, string> = {}): Promise<{ url: string; stop(): Promise<number | null> }> {
  const e: NodeJS.ProcessEnv = {};
  for (const [k, v] of Object.entries(process.env)) if (!k.startsWith('NODE_SVC_')) e[k] = v;
  const store = pgUrlOf(dataDir); // the run's PostgreSQL database of this data dir, when there is one
  if (store) e.NODE_SVC_STORE = store;
  Object.assign(e, env);
  const child = spawn(process.execPath, [BIN, '--data-dir', dataDir, 'daemon', '--port', '0', '--host', '127.0.0.1', ...extra], { cwd: REPO_ROOT, env: e, stdio: ['ignore', 'pipe', 'pipe'] });
  let out = '';
  let err = '';
  child.stdout!.setEncoding('utf8').on('data', (s: string) => { out += s; });
  child.stderr!.setEncoding('utf8').on('data', (s: string) => { err += s; });
  const exited = new Promise<number | null>((r) => child.once('exit', (code) => r(code)));
  return new Promise((resolve, reject) => {
    const timer = setTimeout(() => { child.kill('SIGKILL'); reject(new Error(`daemon not listening in 20 s\n${out}\n${err}`)); }, 20_000);
    void exited.then((code) => { clearTimeout(timer); reject(new Error(`daemon exited ${code}\n${out}\n${err}`)); });
    child.stdout!.on('data', () => {
      const m = /listening on (http:\/\/\S+)/.exec(out);
      if (!m) return;
      clearTimeout(timer);
      resolve({ url: m[1]!, stop: () => { if (child.exitCode === null && child.signalCode === null) child.kill('SIGTERM'); return exited; } });
    });
  });
}

/** How many of `n` quick GETs /v1/streams were answered 429 (each 429 must carry Retry-After). */
async function burst(url: string, token: string, n = 12): Promise<number> {
  const rs = await Promise.all(Array.from({ length: n }, () => http(url, '/v1/streams', { token })));
  for (const r of rs) {
    expect([200, 429]).toContain(r.status);
    if (r.status === 429) expect(r.headers.get('retry-after')).toMatch(/^\d+$/);
  }
  return rs.filter((r) => r.status === 429).length;
}

describe('one running daemon: metrics, logs, backup, replay, nodes rm', () => {
  let dir: TempDataDir;
  let issuer: KeyPair;
  let tokenA: string;
  let daemon: RunningDaemon;
  let receiver: Receiver;
  let secret: string;
  let subscription: string;
  const events: string[] = [];
  const streams: string[] = [];
  let A: ReturnType<typeof clientOf>;

  beforeAll(async () => {
    dir = await tempDataDir('node-svc-ops-');
    issuer = await issuerKeyPair();
    ({ tokenA } = await setupNodes(dir.dataDir, issuer));
    daemon = await startDaemon(dir.dataDir);
    A = clientOf(daemon.url, tokenA);
    receiver = await startReceiver();
    const w = await A.post('/v1/webhooks', { url: `${receiver.url}/hook` });
    expect(w.status, w.text).toBe(201);
    secret = w.body.secret;
    subscription = w.body.id;
    expect(secret).toMatch(/^whsec_/);

    // Traffic: two streams registered, a voucher, a refused verify, a headroom read, three events delivered.
    const payer = await payerKeyPair();
    for (let i = 0; i < 2; i++) {
      const stream = uid('s');
      const r = await A.post('/v1/allowances/verify', { credential: mintCredential({ key: issuer, payer, claims: { stream } }) });
      expect(r.status, r.text).toBe(200);
      streams.push(stream);
    }
    const v = await A.post(`/v1/streams/${streams[0]}/vouchers`, { voucher: signVoucher(payer, { stream: streams[0]!, amount: '1000', units: '40' }) });
    expect(v.status, v.text).toBe(200);
    const stranger = await issuerKeyPair();
    const refused = await A.post('/v1/allowances/verify', { credential: mintCredential({ key: issuer, claims: { stream: uid('s') }, signWith: stranger.privateKey }) });
    expect(refused.status).toBe(422);
    expect(refused.body.refusal).toBe('bad_signature');
    expect((await A.get(`/v1/streams/${streams[0]}/headroom`)).status).toBe(200);
    for (let i = 0; i < 3; i++) {
      const r = await A.post('/v1/control', { message: haltFact(issuer) });
      expect(r.status, r.text).toBe(200);
      events.push(r.body.eventId);
    }
    await receiver.waitFor(() => events.every((id) => receiver.count(id) >= 1), 15_000, 'first delivery of each event');
  });

  afterAll(async () => {
    await daemon?.stop();
    await receiver?.close();
    await dir?.cleanup();
  });

  it('GET /metrics (no auth) reports requests by route pattern, verify results, deliveries, latency and gauges', async () => {
    // The delivered counter moves after the receiver has answered: wait for the worker to record it.
    const text = await eventually(async () => {
      const r = await http(daemon.url, '/metrics');
      expect(r.status).toBe(200);
      expect(r.headers.get('content-type')).toMatch(/^text\/plain/);
      const m = /node_svc_webhook_deliveries_total\{outcome="delivered"\} (\d+)/.exec(r.text);
      const drained = /^node_svc_outbox_depth\{status="pending"\} 0$/m.test(r.text);
      return m && Number(m[1]) >= events.length && drained ? r.text : undefined;
    }, 'delivered deliveries and a drained outbox in /metrics');

    expect(text).toMatch(/^# TYPE node_svc_http_requests_total counter$/m);
    // Labels are the route pattern (never the raw id), sorted: method, route, status.
    expect(text).toMatch(/^node_svc_http_requests_total\{method="GET",route="\/v1\/streams\/:id\/headroom",status="200"\} [1-9]\d*$/m);
    expect(text).toMatch(/^node_svc_http_requests_total\{method="POST",route="\/v1\/allowances\/verify",status="422"\} 1$/m);
    for (const s of streams) expect(text).not.toContain(s);
    expect(text).toMatch(/^node_svc_verify_results_total\{result="valid"\} 2$/m);
    expect(text).toMatch(/^node_svc_verify_results_total\{result="bad_signature"\} 1$/m);
    expect(text).toMatch(/^node_svc_webhook_delivery_latency_seconds_bucket\{le="\+Inf"\} [1-9]\d*$/m);
    expect(text).toMatch(/^node_svc_webhook_delivery_latency_seconds_bucket\{le="0\.005"\} \d+$/m);
    expect(text).toMatch(/^node_svc_webhook_delivery_latency_seconds_count [1-9]\d*$/m);
    expect(text).toMatch(/^# TYPE node_svc_outbox_depth gauge$/m);
    expect(text).toMatch(/^node_svc_outbox_depth\{status="retrying"\} 0$/m);
    expect(text).toMatch(/^node_svc_settlement_lag_seconds\{rail="escrow"\} 0$/m); // no rail: no settlement open
    expect(text).toMatch(/^node_svc_settlement_lag_seconds\{rail="card"\} 0$/m);
    expect(text).toMatch(/^node_svc_unsettled_streams 1$/m); // one voucher, no settlement
    expect(text).toMatch(/^node_svc_webhook_dead_deliveries 0$/m);

    // No secret anywhere: not in /metrics, not in the daemon's output.
    for (const s of [tokenA, secret, secret.replace(/^whsec_/, '')]) {
      expect(text).not.toContain(s);
      expect(daemon.stderr).not.toContain(s);
      expect(daemon.stdout).not.toContain(s);
    }
    expect(text).not.toMatch(/nsv_|whsec_/);
    expect(daemon.stderr).not.toMatch(/nsv_|whsec_/);
  });

  it('daemon logs are JSON lines on stderr (level and msg) when piped', () => {
    const lines = daemon.stderr.split('\n').filter(Boolean);
    expect(lines.length).toBeGreaterThan(0);
    for (const line of lines) {
      const entry = json<Record<string, unknown>>(line);
      expect(['debug', 'info', 'warn', 'error', 'fatal']).toContain(entry.level);
      expect(typeof entry.msg).toBe('string');
      expect(typeof entry.time).toBe('string');
    }
    expect(lines.map((l) => json(l).msg)).toContain('daemon started');
  });

  it.runIf(!!testServerUrl())('backup and restore on a PostgreSQL store: refused (exit 2) with the pg_dump / pg_restore way, nothing written', async () => {
    const cli = cliFor(dir.dataDir);
    const file = join(dir.root, 'backup-pg.db');
    const r = await cli('backup', file);
    expect(r.code).toBe(2);
    expect(json(r.stderr).error).toMatchObject({ code: 'usage', message: expect.stringMatching(/this store is PostgreSQL/), hint: expect.stringMatching(/pg_dump/) });
    expect(existsSync(file)).toBe(false);
    const back = await cli('restore', file);
    expect(back.code).toBe(2);
    expect(json(back.stderr).error.hint).toMatch(/pg_restore/);
    expect(r.stderr + back.stderr).not.toMatch(/postgres:\/\/[^*\s]*:[^@*]+@/); // the URL's password is never shown
  });

  it.skipIf(!!testServerUrl())('backup <file> while the daemon runs: a SQLite file with the same nodes and streams; refuses to overwrite without --force', async () => {
    const cli = cliFor(dir.dataDir);
    const file = join(dir.root, 'backup.db');
    const r = await cli('backup', file);
    expect(r.code, r.stderr).toBe(0);
    expect(json(r.stdout).file).toBe(file);

    const rows = (db: Database.Database) => ({
      nodes: db.prepare("SELECT * FROM nodes WHERE id != '@operator' ORDER BY id").all(), // @operator: the owner of alert endpoints (migration 0150)
      streams: db.prepare('SELECT * FROM streams ORDER BY id').all(),
    });
    const copy = new Database(file, { readonly: true, fileMustExist: true });
    const live = new Database(join(dir.dataDir, 'node-svc.db'), { readonly: true, fileMustExist: true });
    try {
      const a = rows(copy);
      const b = rows(live);
      expect(a.nodes.length).toBe(2);
      expect(a.streams.length).toBe(streams.length);
      expect(a).toEqual(b);
      expect(copy.pragma('integrity_check', { simple: true })).toBe('ok');
    } finally {
      copy.close();
      live.close();
    }

    const again = await cli('backup', file);
    expect(again.code).toBe(2);
    expect(again.stderr).toMatch(/already exists/);
    expect(again.stderr).toMatch(/--force/);
    const forced = await cli('backup', file, '--force');
    expect(forced.code, forced.stderr).toBe(0);
    const reopened = new Database(file, { readonly: true, fileMustExist: true });
    try {
      expect((reopened.prepare('SELECT COUNT(*) AS n FROM streams').get() as { n: number }).n).toBe(streams.length);
    } finally {
      reopened.close();
    }
  });

  it('webhooks replay --since 1h delivers every event of the node again, with the same ids', async () => {
    const cli = cliFor(dir.dataDir);
    const listed = await A.get('/v1/events?limit=500');
    expect(listed.status, listed.text).toBe(200);
    const all = (listed.body.data as Array<{ id: string }>).map((e) => e.id);
    expect(all).toEqual(expect.arrayContaining(events));
    const before = new Map(all.map((id) => [id, receiver.count(id)]));
    for (const id of all) expect(before.get(id)).toBe(1);

    const r = await cli('webhooks', 'replay', '--since', '1h', '--url', daemon.url, '--token', tokenA);
    expect(r.code, r.stderr).toBe(0);
    const out = json(r.stdout);
    expect(out.events).toBe(all.length);
    expect(out.deliveriesQueued).toBe(all.length);

    await receiver.waitFor(() => all.every((id) => receiver.count(id) === 2), 15_000, 'a second delivery of every event');
    for (const id of all) {
      const got = receiver.forEvent(id);
      expect(got.map((g) => g.seen)).toEqual([0, 1]);
      expect(got[1]!.body.equals(got[0]!.body)).toBe(true); // the same event, byte for byte
    }
    const deliveries = await A.get(`/v1/webhooks/${subscription}/deliveries?limit=100`);
    expect(deliveries.status).toBe(200);
  });

  it('webhooks replay usage errors: --since garbage, or neither an event nor --since (exit 2)', async () => {
    const cli = cliFor(dir.dataDir);
    const garbage = await cli('webhooks', 'replay', '--since', 'garbage', '--url', daemon.url, '--token', tokenA);
    expect(garbage.code).toBe(2);
    expect(json(garbage.stderr).error.code).toBe('usage');
    expect(garbage.stderr).toMatch(/garbage/);
    const none = await cli('webhooks', 'replay', '--url', daemon.url, '--token', tokenA);
    expect(none.code).toBe(2);
    expect(json(none.stderr).error.code).toBe('usage');
    const both = await cli('webhooks', 'replay', events[0]!, '--since', '1h', '--url', daemon.url, '--token', tokenA);
    expect(both.code).toBe(2);
  });

  it('nodes rm of a node with streams and events exits 4 naming them; the node is still listed', async () => {
    const cli = cliFor(dir.dataDir);
    const r = await cli('nodes', 'rm', 'node-a');
    expect(r.code).toBe(4);
    const err = json(r.stderr).error;
    expect(err.message).toMatch(/node-a/);
    expect(err.message).toMatch(/\d+ streams/);
    expect(err.message).toMatch(/\d+ events/);
    expect(err.message).toMatch(/webhook subscriptions/);
    const list = await cli('nodes', 'list');
    expect(list.code, list.stderr).toBe(0);
    expect(JSON.stringify(json(list.stdout))).toContain('"node-a"');
    // Its token still works: nothing was removed.
    expect((await A.get('/v1/streams')).status).toBe(200);
  });
});

describe('<data-dir>/config.json', () => {
  let dir: TempDataDir;
  let tokenA: string;

  beforeAll(async () => {
    dir = await tempDataDir('node-svc-config-');
    ({ tokenA } = await setupNodes(dir.dataDir, await issuerKeyPair()));
  });
  afterAll(async () => dir?.cleanup());

  it('an unknown key, a bad type and a bad value: daemon exits 4 with one error naming every key', async () => {
    const cfg = join(dir.dataDir, 'config.json');
    await writeFile(cfg, JSON.stringify({ prot: 8787, host: 127, port: 70000, rateLimit: 'fast' }));
    try {
      const r = await runCli(['--data-dir', dir.dataDir, 'daemon', '--port', '0'], { timeoutMs: 15_000 });
      expect(r.code, r.stdout + r.stderr).toBe(4);
      expect(r.stdout).not.toMatch(/listening on/);
      const lines = r.stderr.trim().split('\n');
      expect(lines).toHaveLength(1); // ONE error
      const { error } = json(lines[0]!);
      expect(error.code).toBe('config');
      expect(error.message).toContain('config.json');
      expect(error.message).toMatch(/4 problem/);
      expect(error.message).toContain('"prot": unknown key');
      expect(error.message).toContain('did you mean "port"');
      expect(error.message).toMatch(/"host": must be a string/);
      expect(error.message).toMatch(/"port": must be .*70000/);
      expect(error.message).toMatch(/"rateLimit": must be a non-negative integer.*fast/);
      expect(existsSync(join(dir.dataDir, 'daemon.pid'))).toBe(false);
    } finally {
      await writeFile(cfg, '{}');
    }
  });

  it('{"rateLimit": 2} is applied (429 after a burst); --rate-limit 0 and NODE_SVC_RATE_LIMIT=0 win over it', async () => {
    await writeFile(join(dir.dataDir, 'config.json'), JSON.stringify({ rateLimit: 2 }));
    try {
      const fromFile = await spawnDaemon(dir.dataDir);
      try {
        expect(await burst(fromFile.url, tokenA)).toBeGreaterThan(0);
      } finally {
        expect(await fromFile.stop()).toBe(0);
      }

      const flag = await spawnDaemon(dir.dataDir, ['--rate-limit', '0']);
      try {
        expect(await burst(flag.url, tokenA)).toBe(0);
      } finally {
        expect(await flag.stop()).toBe(0);
      }

      const env = await spawnDaemon(dir.dataDir, [], { NODE_SVC_RATE_LIMIT: '0' });
      try {
        expect(await burst(env.url, tokenA)).toBe(0);
      } finally {
        expect(await env.stop()).toBe(0);
      }
    } finally {
      await writeFile(join(dir.dataDir, 'config.json'), '{}');
    }
  });
});

describe('one daemon per data dir', () => {
  // SQLite only: daemons on one PostgreSQL database are meant to run side by side (test/e2e/multi-daemon.test.ts).
  it.skipIf(!!testServerUrl())('a second daemon exits 4 naming the running pid; after a SIGKILL the stale lock is taken over', async () => {
    const dir = await tempDataDir('node-svc-lock-');
    await mkdir(dir.dataDir, { recursive: true });
    let first: RunningDaemon | undefined;
    let third: RunningDaemon | undefined;
    try {
      first = await startDaemon(dir.dataDir);
      const pidFile = join(dir.dataDir, 'daemon.pid');
      expect(readFileSync(pidFile, 'utf8').trim()).toBe(String(first.pid));

      const second = await runCli(['--data-dir', dir.dataDir, 'daemon', '--port', '0', '--rate-limit', '0'], { timeoutMs: 15_000 });
      expect(second.code, second.stdout + second.stderr).toBe(4);
      expect(second.stdout).not.toMatch(/listening on/);
      expect(json(second.stderr).error.message).toContain(`pid ${first.pid}`);
      expect(readFileSync(pidFile, 'utf8').trim()).toBe(String(first.pid)); // untouched
      expect((await http(first.url, '/healthz')).status).toBe(200);

      expect(await first.stop('SIGKILL')).toBeNull();
      expect(existsSync(pidFile)).toBe(true); // left behind by the crash
      third = await startDaemon(dir.dataDir);
      expect(readFileSync(pidFile, 'utf8').trim()).toBe(String(third.pid));
      expect((await http(third.url, '/healthz')).body).toMatchObject({ status: expect.stringMatching(/^(ok|degraded)$/), checks: expect.any(Array) });
      expect(await third.stop()).toBe(0);
      expect(existsSync(pidFile)).toBe(false);
    } finally {
      await first?.stop('SIGKILL');
      await third?.stop('SIGKILL');
      await dir.cleanup();
    }
  });
});
