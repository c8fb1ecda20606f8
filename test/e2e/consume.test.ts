// `node-svc consume` end to end: the real daemon delivers signed events (made from signed control facts,
// DESIGN §7) to the real consumer (a child process on a free 127.0.0.1 port, state in a temp SQLite file).
import { spawn, type ChildProcess } from 'node:child_process';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it, vi } from 'vitest';
import { serviceSignature } from '../../src/delivery/sign.js';
import { BIN, json, REPO_ROOT, runCli, tempDataDir, type TempDataDir } from '../helpers/cli.js';
import { clientOf, freePort, http, setupNodes, startDaemon, type RunningDaemon } from '../helpers/daemon.js';
import { ISSUER, issuerKeyPair, nowSeconds, signCompact, type KeyPair } from '../helpers/issuer.js';

vi.setConfig({ testTimeout: 60_000, hookTimeout: 60_000 });

const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));
async function eventually<T>(fn: () => Promise<T | undefined | null | false>, what: string, timeoutMs = 20_000): Promise<T> {
  const end = Date.now() + timeoutMs;
  let last: unknown;
  for (;;) {
    last = await fn();
    if (last) return last as T;
    if (Date.now() > end) throw new Error(`${what}: not reached within ${timeoutMs} ms (last: ${JSON.stringify(last)?.slice(0, 2000)})`);
    await sleep(100);
  }
}

interface Consumer {
  child: ChildProcess;
  url: string;
  readonly stdout: string;
  readonly stderr: string;
  stop(): Promise<number | null>;
}

/** `node bin/node-svc consume --port P --secret S --state F`, stdout piped; resolves once it is listening. */
function startConsume(port: number, secret: string, state: string): Promise<Consumer> {
  const env: NodeJS.ProcessEnv = {};
  for (const [k, v] of Object.entries(process.env)) if (!k.startsWith('NODE_SVC_')) env[k] = v;
  const child = spawn(process.execPath, [BIN, 'consume', '--port', String(port), '--host', '127.0.0.1', '--secret', secret, '--state', state], { cwd: REPO_ROOT, env, stdio: ['ignore', 'pipe', 'pipe'] });
  let out = '';
  let err = '';
  child.stdout!.setEncoding('utf8').on('data', (s: string) => { out += s; });
  child.stderr!.setEncoding('utf8');
  const exited = new Promise<number | null>((r) => child.once('exit', (code) => r(code)));
  return new Promise((resolve, reject) => {
    const timer = setTimeout(() => { child.kill('SIGKILL'); reject(new Error(`consume did not start\n${err}`)); }, 20_000);
    void exited.then((code) => { clearTimeout(timer); reject(new Error(`consume exited with ${code}\n${err}`)); });
    child.stderr!.on('data', (s: string) => {
      err += s;
      const m = /consuming on (http:\/\/\S+)/.exec(err);
      if (!m) return;
      clearTimeout(timer);
      resolve({
        child,
        url: m[1]!,
        get stdout() { return out; },
        get stderr() { return err; },
        stop() {
          if (child.exitCode === null && child.signalCode === null) child.kill('SIGTERM');
          return exited;
        },
      });
    });
  });
}

const lines = (text: string) => text.split('\n').filter(Boolean).map((l) => json<Record<string, any>>(l));

describe('node-svc consume receiving from the real daemon', () => {
  let issuer: KeyPair;
  let t: TempDataDir;
  let daemon: RunningDaemon;
  let tokenA: string;
  let consumer: Consumer;
  let port: number;
  let secret: string;
  let subscription: string;
  let stateFile: string;
  let seq = 0;
  const jti = () => `ctl-${++seq}-${Math.random().toString(36).slice(2, 8)}`;

  const control = (claims: Record<string, unknown>) =>
    signCompact({ alg: issuer.alg, typ: 'control+jwt', kid: issuer.kid }, { iss: ISSUER, aud: 'node-a', jti: jti(), iat: nowSeconds(), ...claims }, issuer.privateKey);

  beforeAll(async () => {
    issuer = await issuerKeyPair();
    t = await tempDataDir('node-svc-consume-');
    ({ tokenA } = await setupNodes(t.dataDir, issuer));
    daemon = await startDaemon(t.dataDir, { env: { NODE_SVC_RETRY_SCHEDULE: '1,1,1', NODE_SVC_DELIVERY_TIMEOUT: '5' } });
    port = await freePort();
    // The subscription is made with the CLI, pointing at the port the consumer will listen on.
    const add = await runCli(['webhooks', 'add', `http://127.0.0.1:${port}/`, '--description', 'consume e2e', '--url', daemon.url, '--token', tokenA, '--json']);
    expect(add.code, add.stderr).toBe(0);
    const sub = json<{ id: string; secret: string; schemaVersion: string }>(add.stdout);
    expect(sub.secret).toMatch(/^whsec_/);
    expect(sub.schemaVersion).toBe('1.1.0');
    secret = sub.secret;
    subscription = sub.id;
    stateFile = join(t.root, 'consumer-state.db');
    consumer = await startConsume(port, secret, stateFile);
    expect(consumer.url).toBe(`http://127.0.0.1:${port}`);
  });

  afterAll(async () => {
    await consumer?.stop();
    await daemon?.stop('SIGKILL');
    await t?.cleanup();
  });

  const state = async () => {
    const r = await http(consumer.url, '/');
    expect(r.status).toBe(200);
    return r.body as { streams: Record<string, any>; budgets: Record<string, any>; subscriptions: Record<string, any> };
  };

  it('control facts become events the daemon delivers, and GET / shows the merged state', async () => {
    const A = clientOf(daemon.url, tokenA);
    const start = nowSeconds();
    const facts = [
      { kind: 'budget.halted', budget: 'b-e2e', reason: 'anomaly' },
      { kind: 'budget.halted', budget: 'b-e2e', reason: 'exposure' },
      { kind: 'stream.revoked', stream: 's-e2e', reason: 'payer asked' },
      { kind: 'subscription.period_opened', subscription: 'sub-e2e', period: 1, periodStart: start, periodEnd: start + 86_400 },
    ];
    const eventIds: string[] = [];
    for (const f of facts) {
      const r = await A.post('/v1/control', { message: control(f) });
      expect(r.status, r.text).toBe(200);
      eventIds.push(r.body.eventId);
    }

    const s = await eventually(async () => {
      const x = await state();
      return x.subscriptions['sub-e2e'] && x.streams['s-e2e'] && x.budgets['b-e2e']?.reasons.length === 2 ? x : undefined;
    }, 'the consumer state shows all four events');
    expect(s).toEqual({
      streams: { 's-e2e': { checkpointedMicro: '0', finalMicro: '0', creditedMicro: '0', capturedMicro: '0', refundedMicro: '0', revoked: true, exhausted: false } },
      budgets: { 'b-e2e': { status: 'halted', reasons: ['anomaly', 'exposure'], releasedMicro: null } },
      subscriptions: {
        'sub-e2e': {
          closed: false,
          periods: { '1': { opened: true, renewalDeclined: false, periodStart: new Date(start * 1000).toISOString(), periodEnd: new Date((start + 86_400) * 1000).toISOString() } },
        },
      },
    });

    // Piped stdout: one JSON line per delivery, naming the event.
    const applied = await eventually(async () => {
      const ls = lines(consumer.stdout).filter((l) => l.status === 'applied');
      return ls.length >= 4 ? ls : undefined;
    }, 'four applied lines');
    expect(applied.map((l) => l.event.id).sort()).toEqual([...eventIds].sort());
    for (const l of applied) {
      expect(Number.isNaN(Date.parse(l.at))).toBe(false);
      expect(l.event).toMatchObject({ schemaVersion: '1.1.0', data: expect.any(Object) });
    }
    expect(applied.find((l) => l.event.type === 'stream.revoked')!.event.data).toMatchObject({ stream: 's-e2e', reason: 'payer asked' });

    // The daemon saw 2xx answers: every attempt delivered, none retrying.
    const d = await eventually(async () => {
      const r = await A.get(`/v1/webhooks/${subscription}/deliveries?limit=100`);
      return r.body.health?.delivered >= 4 ? r.body : undefined;
    }, 'deliveries recorded as delivered');
    expect(d.health).toMatchObject({ delivered: 4, retrying: 0, dead: 0 });
  });

  it('a POST with a bad signature gets 401 and a correctly signed bad envelope gets 400; the state is untouched', async () => {
    const before = await state();
    const outBefore = consumer.stdout.length;
    const body = JSON.stringify({ id: 'evt_forged', type: 'settlement.final', schemaVersion: '1.1.0', occurredAt: new Date().toISOString(), externalRef: 'x', data: { stream: 's-e2e', amountMicro: '999', asset: 'USDC' } });
    const forged = await http(consumer.url, '/', { method: 'POST', body, headers: { 'content-type': 'application/json', 'x-service-event-id': 'evt_forged', 'x-service-signature': serviceSignature('whsec_wrong', body) } });
    expect(forged.status).toBe(401);
    expect(forged.body).toMatchObject({ status: 'rejected', reason: 'bad_signature' });
    const upper = await http(consumer.url, '/', { method: 'POST', body, headers: { 'content-type': 'application/json', 'x-service-signature': `sha256=${serviceSignature(secret, body).slice(7).toUpperCase()}` } });
    expect(upper.status).toBe(401);

    const bad = JSON.stringify({ id: 'evt_bad', type: 'settlement.final', schemaVersion: '2.0.0', occurredAt: new Date().toISOString(), externalRef: 'x', data: { stream: 's-e2e', amountMicro: '999', asset: 'USDC' } });
    const envelope = await http(consumer.url, '/', { method: 'POST', body: bad, headers: { 'content-type': 'application/json', 'x-service-signature': serviceSignature(secret, bad) } });
    expect(envelope.status).toBe(400);
    expect(envelope.body).toMatchObject({ status: 'rejected', reason: 'bad_envelope', detail: expect.stringMatching(/schemaVersion/) });

    const numeric = body.replace('"999"', '999');
    const amount = await http(consumer.url, '/', { method: 'POST', body: numeric, headers: { 'x-service-signature': serviceSignature(secret, numeric) } });
    expect(amount.status).toBe(400);

    expect(await state()).toEqual(before);
    const rejected = lines(consumer.stdout.slice(outBefore)).filter((l) => l.status === 'rejected');
    expect(rejected.map((l) => l.reason)).toEqual(['bad_signature', 'bad_signature', 'bad_envelope', 'bad_envelope']);
  });

  it('a correctly signed settlement.final is credited; a redelivery of an event answers duplicate', async () => {
    const body = JSON.stringify({ id: 'evt_manual_final', type: 'settlement.final', schemaVersion: '1.0.0', occurredAt: new Date().toISOString(), externalRef: 'stream:s-e2e', data: { stream: 's-e2e', amountMicro: '9007199254740993', asset: 'USDC' } });
    const headers = { 'content-type': 'application/json', 'x-service-event-id': 'evt_manual_final', 'x-service-signature': serviceSignature(secret, body) };
    const first = await http(consumer.url, '/', { method: 'POST', body, headers });
    expect(first.status).toBe(200);
    expect(first.body).toEqual({ status: 'applied' });
    const again = await http(consumer.url, '/', { method: 'POST', body, headers });
    expect(again.status).toBe(200);
    expect(again.body).toEqual({ status: 'duplicate' });
    expect((await state()).streams['s-e2e']).toMatchObject({ finalMicro: '9007199254740993', creditedMicro: '9007199254740993', revoked: true });

    // The daemon redelivering an event (same id) reaches the consumer as a duplicate.
    const events = await clientOf(daemon.url, tokenA).get('/v1/events?type=budget.halted');
    const evt = events.body.data[0].id as string;
    const outBefore = consumer.stdout.length;
    const replay = await runCli(['webhooks', 'replay', evt, '--url', daemon.url, '--token', tokenA, '--json']);
    expect(replay.code, replay.stderr).toBe(0);
    const dup = await eventually(async () => lines(consumer.stdout.slice(outBefore)).find((l) => l.event?.id === evt), 'the replayed event reached the consumer');
    expect(dup.status).toBe('duplicate');
  });

  it('the state survives a restart of the consumer (--state file)', async () => {
    const before = await state();
    expect(await consumer.stop()).toBe(0);
    consumer = await startConsume(port, secret, stateFile);
    expect(await state()).toEqual(before);
  });

  it('refuses to start without a secret (usage error)', async () => {
    const r = await runCli(['consume', '--port', '0', '--json']);
    expect(r.code).toBe(2);
    expect(json(r.stderr).error.code).toBe('usage');
  });
});
