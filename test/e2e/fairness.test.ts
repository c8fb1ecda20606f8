// Issue #12 item 4 (and DESIGN §14 fairness): one node's hanging receivers and its flood of redeliveries never delay
// another node's deliveries; per-node limits on subscriptions and pending redeliveries answer 429 limit_exceeded.
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { tempDataDir, type TempDataDir } from '../helpers/cli.js';
import { clientOf, setupNodes, startDaemon, type RunningDaemon } from '../helpers/daemon.js';
import { ISSUER, keyPair, nowSeconds, signCompact, type KeyPair } from '../helpers/issuer.js';
import { ack, failTimes, startReceiver, type Receiver } from '../helpers/receiver.js';
import { waitFor } from '../helpers/wait.js';

let issuer: KeyPair;
let n = 0;
const control = (aud: string) =>
  signCompact(
    { alg: issuer.alg, typ: 'control+jwt', kid: issuer.kid },
    { iss: ISSUER, aud, jti: `ctl-${++n}-${Math.random().toString(36).slice(2)}`, iat: nowSeconds(), kind: 'budget.halted', budget: `b${n}`, reason: 'anomaly' },
    issuer.privateKey,
  );

describe('fair delivery across nodes, per-node limits', () => {
  let tmp: TempDataDir;
  let daemon: RunningDaemon;
  let hanging: Receiver;
  let healthy: Receiver;
  let a: ReturnType<typeof clientOf>;
  let b: ReturnType<typeof clientOf>;
  let tokenA: string;

  beforeAll(async () => {
    tmp = await tempDataDir();
    issuer = await keyPair();
    const t = await setupNodes(tmp.dataDir, issuer);
    tokenA = t.tokenA;
    const tokenB = t.tokenB;
    // One receiver (one host:port) for both: node-a's paths hang, node-b's answer. The socket budget is per
    // subscription, not per host, so node-a's stuck sockets leave node-b's requests to the same host unqueued.
    const answer = ack();
    hanging = await startReceiver((req) => (req.path.startsWith('/a') ? new Promise(() => undefined) : answer(req)));
    healthy = hanging;
    // The attempt timeout is far beyond the test: node-a's attempts stay stuck for the whole test.
    daemon = await startDaemon(tmp.dataDir, { args: ['--delivery-timeout', '300', '--max-subscriptions', '3', '--max-redeliveries', '300'] });
    a = clientOf(daemon.url, tokenA);
    b = clientOf(daemon.url, tokenB);
  }, 60_000);

  afterAll(async () => {
    await daemon?.stop('SIGKILL');
    await hanging?.close();
    await tmp?.cleanup();
  });

  it("node-a's three hanging subscriptions and 300 queued redeliveries do not delay node-b's event", async () => {
    for (let i = 0; i < 3; i++) expect((await a.post('/v1/webhooks', { url: `${hanging.url}/a${i}` })).status).toBe(201);
    expect((await b.post('/v1/webhooks', { url: `${healthy.url}/b` })).status).toBe(201);
    // 100 events for node-a: 300 deliveries, each subscription's budget fills up and stays stuck
    const ids: string[] = [];
    for (let i = 0; i < 100; i++) {
      const r = await a.post('/v1/control', { message: control('node-a') });
      expect(r.status, r.text).toBe(200);
      ids.push(r.body.eventId);
    }
    // and a flood of redeliveries on top: 100 events x 3 subscriptions = 300, exactly the limit
    for (const id of ids) expect((await a.post(`/v1/events/${id}/redeliver`, {})).status).toBe(202);
    await waitFor(() => hanging.requests.filter((q) => q.path.startsWith('/a')).length >= 64, 'node-a saturating its sockets', 20_000, 50);

    const r = await b.post('/v1/control', { message: control('node-b') });
    expect(r.status).toBe(200);
    // node-a's attempts time out only after 300 s; node-b's delivery arrives long before any of them.
    const got = await waitFor(() => healthy.requests.find((q) => q.eventId === r.body.eventId), "node-b's event at its receiver", 20_000, 20);
    expect(got.eventId).toBe(r.body.eventId);
    expect(hanging.requests.filter((q) => q.path.startsWith('/a')).every((q) => q.answered === undefined)).toBe(true);
  });

  it('a redelivery beyond the per-node limit is a 429 limit_exceeded naming it, with Retry-After', async () => {
    const e = await a.post('/v1/control', { message: control('node-a') });
    const r = await a.post(`/v1/events/${e.body.eventId}/redeliver`, {});
    expect(r.status, r.text).toBe(429);
    expect(r.headers.get('content-type')).toMatch(/^application\/problem\+json/);
    expect(r.body).toMatchObject({ code: 'limit_exceeded', limit: 'redeliveries', max: 300 });
    expect(Number(r.headers.get('retry-after'))).toBeGreaterThan(0);
    // another node is not limited by node-a's queue
    const other = await b.post('/v1/control', { message: control('node-b') });
    expect((await b.post(`/v1/events/${other.body.eventId}/redeliver`, {})).status).toBe(202);
  });

  it('a subscription beyond the per-node limit is a 429 limit_exceeded; deleting one makes room', async () => {
    const r = await a.post('/v1/webhooks', { url: `${healthy.url}/a-extra` });
    expect(r.status, r.text).toBe(429);
    expect(r.body).toMatchObject({ code: 'limit_exceeded', limit: 'subscriptions', max: 3 });
    expect((await b.post('/v1/webhooks', { url: `${healthy.url}/b2` })).status).toBe(201);
    const first = (await a.get('/v1/webhooks')).body.data[0].id as string;
    expect((await fetch(`${daemon.url}/v1/webhooks/${first}`, { method: 'DELETE', headers: { authorization: `Bearer ${tokenA}` } })).status).toBe(204);
    expect((await a.post('/v1/webhooks', { url: `${healthy.url}/a-extra` })).status).toBe(201);
  });
});

describe("a retry falls due while another node's receiver hangs and its events keep coming", () => {
  let tmp: TempDataDir;
  let daemon: RunningDaemon;
  let receiver: Receiver;
  let a: ReturnType<typeof clientOf>;
  let b: ReturnType<typeof clientOf>;

  beforeAll(async () => {
    tmp = await tempDataDir();
    issuer = await keyPair();
    const t = await setupNodes(tmp.dataDir, issuer);
    // node-a's path hangs (for longer than the test); node-b's fails its event's first delivery, then acknowledges.
    const failOnce = failTimes(1);
    receiver = await startReceiver((req) => (req.path.startsWith('/a') ? new Promise(() => undefined) : failOnce(req)));
    daemon = await startDaemon(tmp.dataDir, { args: ['--delivery-timeout', '300', '--retry-schedule', '1'] });
    a = clientOf(daemon.url, t.tokenA);
    b = clientOf(daemon.url, t.tokenB);
    expect((await a.post('/v1/webhooks', { url: `${receiver.url}/a` })).status).toBe(201);
    expect((await b.post('/v1/webhooks', { url: `${receiver.url}/b` })).status).toBe(201);
  }, 60_000);

  afterAll(async () => {
    await daemon?.stop('SIGKILL');
    await receiver?.close();
    await tmp?.cleanup();
  });

  it("is sent at its time (1 s ± 20 %), though the last pump before it claimed attempts that hang", async () => {
    const e = await b.post('/v1/control', { message: control('node-b') });
    expect(e.status, e.text).toBe(200);
    const first = await waitFor(() => receiver.requests.find((q) => q.path === '/b' && q.answered === 500), "node-b's first attempt, failed", 10_000, 10);
    // Then node-a's events, three 200 ms apart: each is claimed at once (the worker is woken) and hangs, and nothing
    // else happens before node-b's retry falls due. A pump that claimed must still leave the retry its timer.
    for (let i = 0; i < 3; i++) {
      await new Promise((r) => setTimeout(r, 200));
      expect((await a.post('/v1/control', { message: control('node-a') })).status).toBe(200);
    }
    const retry = await waitFor(() => receiver.requests.find((q) => q.path === '/b' && q !== first), "node-b's retry", 4000, 10);
    expect(retry.eventId).toBe(first.eventId);
    expect(retry.at - first.at).toBeLessThan(1200 + 500);
    // node-a's three were claimed and hang (the third may reach the receiver after the retry on a loaded machine).
    await waitFor(() => receiver.requests.filter((q) => q.path === '/a').length >= 3, "node-a's three deliveries, hanging", 10_000, 10);
    expect(receiver.requests.filter((q) => q.path === '/a').length).toBe(3);
    expect(receiver.requests.filter((q) => q.path === '/a' && q.at < retry.at).length, "node-a's deliveries claimed before node-b's retry").toBeGreaterThanOrEqual(2);
  });
});
