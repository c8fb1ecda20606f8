// Issue #13 against the real daemon: `status` and /healthz share one verdict, GET /v1/node, streams listed by
// activity and open/closed, a replay completing a retrying delivery, failed deliveries logged, process metrics,
// the finality reason, and keys over cleartext refused.
import { createServer, type AddressInfo } from 'node:net';
import { afterAll, beforeAll, describe, expect, it, vi } from 'vitest';
import { json, runCli, tempDataDir, type TempDataDir } from '../helpers/cli.js';
import { clientOf, http, setupNodes, startDaemon, type RunningDaemon } from '../helpers/daemon.js';
import { ISSUER, issuerKeyPair, mintCredential, nowSeconds, payerKeyPair, signCompact, signVoucher, type KeyPair } from '../helpers/issuer.js';
import { always, startReceiver, type Receiver } from '../helpers/receiver.js';

vi.setConfig({ testTimeout: 60_000, hookTimeout: 60_000 });

const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));
async function eventually<T>(fn: () => Promise<T | undefined | null | false>, what: string, timeoutMs = 15_000): Promise<T> {
  const end = Date.now() + timeoutMs;
  let last: unknown;
  for (;;) {
    last = await fn();
    if (last) return last as T;
    if (Date.now() > end) throw new Error(`${what}: not reached within ${timeoutMs} ms (last: ${JSON.stringify(last)?.slice(0, 1000)})`);
    await sleep(100);
  }
}

/** A loopback port nothing listens on (fetch refuses well-known ports such as 9 outright). */
async function closedPort(): Promise<number> {
  const s = createServer();
  await new Promise<void>((r) => s.listen(0, '127.0.0.1', r));
  const port = (s.address() as AddressInfo).port;
  await new Promise((r) => s.close(r));
  return port;
}

let dir: TempDataDir;
let daemon: RunningDaemon;
let issuer: KeyPair;
let payer: KeyPair;
let tokenA: string;
let tokenB: string;
let A: ReturnType<typeof clientOf>;
let receiver: Receiver;

const control = (claims: Record<string, unknown>) =>
  signCompact({ alg: issuer.alg, typ: 'control+jwt', kid: issuer.kid }, { iss: ISSUER, aud: 'node-a', jti: `ctl-${Math.random()}`, iat: nowSeconds(), ...claims }, issuer.privateKey);

async function openStream(id: string, billed?: string) {
  const credential = mintCredential({ key: issuer, payer, claims: { stream: id, jti: `cred-${id}` } });
  expect((await A.post('/v1/allowances/verify', { credential })).status).toBe(200);
  if (billed) {
    const r = await A.post(`/v1/streams/${id}/vouchers`, { voucher: signVoucher(payer, { stream: id, amount: billed, units: '1' }) });
    expect(r.status, r.text).toBe(200);
  }
}

beforeAll(async () => {
  dir = await tempDataDir();
  issuer = await issuerKeyPair();
  payer = await payerKeyPair();
  ({ tokenA, tokenB } = await setupNodes(dir.dataDir, issuer));
  // One retry five minutes out: a replay must complete the retrying delivery, not add a second one.
  daemon = await startDaemon(dir.dataDir, { args: ['--retry-schedule', '300'] });
  A = clientOf(daemon.url, tokenA);
  receiver = await startReceiver(always(500));
});

afterAll(async () => {
  await daemon?.stop();
  await receiver?.close();
  await dir?.cleanup();
});

describe('status and /healthz: one verdict', () => {
  it('healthy: exit 0, the node of the token, every check named; /healthz carries the same checks', async () => {
    const r = await runCli(['status', '--url', daemon.url, '--token', tokenA]);
    expect(r.code, r.stdout + r.stderr).toBe(0);
    const s = json(r.stdout);
    expect(s).toMatchObject({ status: 'ok', url: daemon.url, node: 'node-a', version: expect.any(String), reasons: [] });
    const names = s.checks.map((c: { name: string }) => c.name);
    // The clock check applies to a PostgreSQL store only (the PostgreSQL pass of this suite).
    expect(names).toEqual(['daemon', 'node', 'store', 'keys', 'rail', 'outbox', 'settlements', 'subscriptions', 'alerts', ...(process.env.NODE_SVC_TEST_STORE === 'postgres' ? ['clock'] : [])]);
    expect(s.checks.find((c: { name: string }) => c.name === 'alerts')).toMatchObject({ status: 'ok', figures: { endpoints: 0, failing: 0, disabled: 0 } });
    expect(s.checks.find((c: { name: string }) => c.name === 'keys').figures).toMatchObject({ count: 1, issuers: [{ issuer: ISSUER, keys: 1 }] });

    const h = await http(daemon.url, '/healthz');
    expect(h.status).toBe(200);
    expect(h.body.status).toBe('ok');
    expect(h.body.checks.map((c: { name: string }) => c.name)).toEqual(names.slice(2));

    const doctor = await runCli(['doctor', '--url', daemon.url, '--token', tokenB]);
    expect(doctor.code).toBe(0);
    expect(json(doctor.stdout).node).toBe('node-b');
  });

  it('GET /v1/node names the token\'s node; 401 without a token', async () => {
    expect((await A.get('/v1/node')).body).toMatchObject({ node: 'node-a', tokenGraceUntil: null });
    expect((await http(daemon.url, '/v1/node')).status).toBe(401);
  });

  it('unreachable: exit 4 naming the URL and the cause; a refused token is degraded (exit 1)', async () => {
    const down = await runCli(['status', '--url', `http://127.0.0.1:${await closedPort()}`, '--token', tokenA]);
    expect(down.code).toBe(4);
    expect(json(down.stdout)).toMatchObject({ status: 'unreachable' });
    expect(down.stdout).toMatch(/connection refused/);
    const bad = await runCli(['status', '--url', daemon.url, '--token', 'nsv_not-a-token']);
    expect(bad.code).toBe(1);
    expect(json(bad.stdout).checks.find((c: { name: string }) => c.name === 'node')).toMatchObject({ status: 'degraded', reason: expect.stringMatching(/token is refused/) });
  });
});

describe('GET /v1/streams: status and sort by activity', () => {
  const ids = Array.from({ length: 12 }, (_, i) => `act-${i + 1}`);
  beforeAll(async () => {
    for (const id of ids) { await openStream(id); await sleep(3); }
    await sleep(5);
    await A.post('/v1/streams/act-2/vouchers', { voucher: signVoucher(payer, { stream: 'act-2', amount: '1000', units: '1' }) }); // newest activity
    expect((await A.post('/v1/control', { message: control({ kind: 'stream.revoked', stream: 'act-5' }) })).status).toBe(200);
  });

  it('sort=activity: newest first across pages, no duplicates; status=open leaves the revoked one out', async () => {
    const seen: string[] = [];
    let cursor: string | null = null;
    let pages = 0;
    do {
      const r = await A.get(`/v1/streams?sort=activity&status=open&limit=5${cursor ? `&cursor=${cursor}` : ''}`);
      expect(r.status, r.text).toBe(200);
      seen.push(...r.body.data.map((s: { stream: string }) => s.stream));
      cursor = r.body.nextCursor;
    } while (cursor && ++pages < 10);
    const act = seen.filter((s) => s.startsWith('act-'));
    expect(act[0]).toBe('act-2');
    expect(act).not.toContain('act-5');
    expect(new Set(act).size).toBe(act.length);
    expect([...act].sort()).toEqual(ids.filter((i) => i !== 'act-5').sort());
    // newest first: act-12 was opened after act-11 …
    expect(act.indexOf('act-12')).toBeLessThan(act.indexOf('act-11'));
    const closed = await A.get('/v1/streams?status=closed');
    expect(closed.body.data.map((s: { stream: string }) => s.stream)).toEqual(['act-5']);
    expect(closed.body.data[0]).toMatchObject({ status: 'revoked', lastActivityAt: expect.any(String), checkpointedMicro: '0' });
  });

  it('a bad status is a 400 (not in the document), a cursor of another sort a 422 cursor_unknown; the CLI passes --status and --sort', async () => {
    expect((await A.get('/v1/streams?status=gone')).status).toBe(400);
    const idCursor = Buffer.from('act-3').toString('base64url');
    const other = await A.get(`/v1/streams?sort=activity&cursor=${idCursor}`);
    expect(other.status).toBe(422);
    expect(other.body).toMatchObject({ code: 'request_refused', refusal: 'cursor_unknown' });
    const cli = await runCli(['streams', 'list', '--status', 'closed', '--format', 'jsonl', '--url', daemon.url, '--token', tokenA]);
    expect(cli.code, cli.stderr).toBe(0);
    expect(cli.stdout.trim().split('\n').map((l) => JSON.parse(l).stream)).toEqual(['act-5']);
  });
});

describe('webhooks: a failing delivery is logged; replay completes the retrying delivery', () => {
  it('one send after the replay, no second one queued; a warn line names subscription, event, status, next attempt', async () => {
    const sub = (await A.post('/v1/webhooks', { url: `${receiver.url}/hook`, events: ['budget.released'] })).body;
    const evt = (await A.post('/v1/control', { message: control({ kind: 'budget.released', budget: 'b-replay' }) })).body.eventId as string;
    await receiver.waitFor(() => receiver.forEvent(evt).length >= 1, 10_000, 'first attempt');
    const retrying = await eventually(async () => {
      const d = await A.get(`/v1/webhooks/${sub.id}/deliveries`);
      return d.body.health.retrying === 1 ? d.body : undefined;
    }, 'retrying');
    expect(retrying.health).toMatchObject({ retrying: 1, delivered: 0 });
    const warn = await eventually(async () => daemon.stderr.split('\n').find((l) => l.includes('webhook delivery failed') && l.includes(evt)), 'warn line');
    const line = JSON.parse(warn);
    expect(line).toMatchObject({ level: 'warn', subscription: sub.id, event: evt, status: 500, nextAttemptAt: expect.any(String) });
    expect(warn).not.toMatch(/whsec_/);

    receiver.setPolicy(always(204));
    const cli = await runCli(['webhooks', 'replay', evt, '--url', daemon.url, '--token', tokenA, '--json']);
    expect(cli.code, cli.stderr).toBe(0);
    await receiver.waitFor(() => receiver.forEvent(evt).length >= 2, 10_000, 'replayed');
    const after = await eventually(async () => {
      const d = await A.get(`/v1/webhooks/${sub.id}/deliveries`);
      return d.body.health.delivered === 1 ? d.body : undefined;
    }, 'delivered');
    // Before the fix a second row was queued and the old one stayed retrying (sent again five minutes later).
    expect(after.health).toEqual({ pending: 0, retrying: 0, dead: 0, delivered: 1 });
    expect(receiver.forEvent(evt)).toHaveLength(2);
  });

  it('a failing subscription makes status degraded (exit 1) and names it', async () => {
    receiver.setPolicy(always(500));
    const evt = (await A.post('/v1/control', { message: control({ kind: 'budget.released', budget: 'b-fail' }) })).body.eventId as string;
    await receiver.waitFor(() => receiver.forEvent(evt).length >= 1, 10_000, 'attempt');
    const s = await eventually(async () => {
      const r = await runCli(['status', '--url', daemon.url, '--token', tokenA]);
      return r.code === 1 ? json(r.stdout) : undefined;
    }, 'degraded');
    expect(s.checks.find((c: { name: string }) => c.name === 'subscriptions')).toMatchObject({ status: 'degraded', figures: { failing: 1 } });
    expect((await http(daemon.url, '/healthz')).status).toBe(200); // degraded still answers 200 for probes
    expect((await http(daemon.url, '/healthz')).body.status).toBe('degraded');
  });
});

describe('ops', () => {
  it('/metrics has node_svc_build_info and the default process metrics', async () => {
    const m = (await http(daemon.url, '/metrics')).text;
    expect(m).toMatch(/^node_svc_build_info\{version="\d+\.\d+\.\d+",commit="(?:[0-9a-f]{12}|unknown)",node_version="v20[^"]*"\} 1$/m);
    for (const name of ['process_cpu_seconds_total', 'process_resident_memory_bytes', 'process_start_time_seconds', 'nodejs_heap_size_used_bytes', 'process_open_fds'])
      expect(m).toMatch(new RegExp(`^${name} \\d+(\\.\\d+)?(e[+-]?\\d+)?$`, 'm'));
  });

  it('finality says why a stream with JWS vouchers never settles on chain', async () => {
    await openStream('fin-1', '2500');
    const f = await A.get('/v1/streams/fin-1/finality');
    expect(f.body).toMatchObject({ finality: 'none', reason: expect.stringMatching(/^no escrow channel in the credential/) });
    const cli = await runCli(['streams', 'finality', 'fin-1', '--url', daemon.url, '--token', tokenA, '--format', 'table']);
    expect(cli.stdout).toMatch(/why not final\s+no escrow channel in the credential/);
  });

  it('keys add refuses a plain http JWKS URL unless the host is loopback', async () => {
    const r = await runCli(['keys', 'add', '--issuer', 'https://x.example', 'http://issuer.example/jwks.json', '--data-dir', dir.dataDir]);
    expect(r.code).toBe(2);
    expect(json(r.stderr).error.message).toMatch(/plain http are not trust/);
    // loopback http is allowed (it gets as far as fetching: nothing listens there)
    const local = await runCli(['keys', 'add', '--issuer', 'https://x.example', `http://127.0.0.1:${await closedPort()}/jwks.json`, '--data-dir', dir.dataDir]);
    expect(local.code).toBe(4);
    expect(json(local.stderr).error.message).toMatch(/cannot fetch .*connection refused/);
  });
});
