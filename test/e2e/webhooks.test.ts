// Webhooks end to end (DESIGN §8, seed §5–6): the real daemon (bin/node-svc daemon) with a short retry schedule,
// real receivers (node:http on 127.0.0.1), events made with signed control facts (DESIGN §7), the real CLI for replay.
import { inspectStore, type Inspector } from '../helpers/inspect.js';
import { envelopeBody, type EventKind } from '../../src/domain/events.js';
import { execFileSync } from 'node:child_process';
import { readFileSync } from 'node:fs';
import { createServer as createHttpsServer } from 'node:https';
import type { AddressInfo } from 'node:net';
import { join } from 'node:path';
import { afterAll, afterEach, beforeAll, describe, expect, it, vi } from 'vitest';
import { json, REPO_ROOT, runCli, tempDataDir, type TempDataDir } from '../helpers/cli.js';
import { clientOf, http, setupNodes, startDaemon, type HttpResult, type RunningDaemon } from '../helpers/daemon.js';
import { ISSUER, issuerKeyPair, nowSeconds, signCompact, type KeyPair } from '../helpers/issuer.js';
import {
  ack, always, failTimes, slow, startReceiver, verifyServiceSignature, verifyStandardSignature,
  type ReceivedRequest, type Receiver,
} from '../helpers/receiver.js';

vi.setConfig({ testTimeout: 60_000, hookTimeout: 60_000 });

const VERSION = (JSON.parse(readFileSync(join(REPO_ROOT, 'package.json'), 'utf8')) as { version: string }).version;
const RETRIES = '1,1'; // three attempts in all, ~2 s apart in total

let issuer: KeyPair;
let seq = 0;
const uid = (p: string) => `${p}-${++seq}-${Math.random().toString(36).slice(2, 8)}`;
const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));

/** A control fact (DESIGN §7) from the trusted issuer, aimed at `aud`. */
const control = (claims: Record<string, unknown>, aud = 'node-a') =>
  signCompact(
    { alg: issuer.alg, typ: 'control+jwt', kid: issuer.kid },
    { iss: ISSUER, aud, jti: uid('ctl'), iat: nowSeconds(), ...claims },
    issuer.privateKey,
  );

const KIND_CLAIMS: Record<string, () => Record<string, unknown>> = {
  'budget.halted': () => ({ budget: uid('b'), reason: 'anomaly' }),
  'budget.released': () => ({ budget: uid('b') }),
  'stream.revoked': () => ({ stream: uid('s') }),
  'subscription.period_opened': () => {
    const t = nowSeconds();
    return { subscription: uid('sub'), period: 1, periodStart: t, periodEnd: t + 86400 };
  },
  'subscription.renewal_declined': () => ({ subscription: uid('sub'), period: 1 }),
  'subscription.closed': () => ({ subscription: uid('sub') }),
};

type Client = ReturnType<typeof clientOf>;

/** Make one event of `kind` through POST /v1/control; returns its id. */
async function emit(c: Client, kind = 'budget.halted', aud = 'node-a'): Promise<string> {
  const r = await c.post('/v1/control', { message: control({ kind, ...KIND_CLAIMS[kind]!() }, aud) });
  expect(r.status, r.text).toBe(200);
  expect(r.body.eventId).toMatch(/^evt_/);
  return r.body.eventId as string;
}

/** Poll `fn` until it returns a truthy value (bounded); the last value is in the error. */
async function eventually<T>(fn: () => Promise<T | undefined | null | false>, what: string, timeoutMs = 15_000, everyMs = 100): Promise<T> {
  const end = Date.now() + timeoutMs;
  let last: unknown;
  for (;;) {
    last = await fn();
    if (last) return last as T;
    if (Date.now() > end) throw new Error(`${what}: not reached within ${timeoutMs} ms (last: ${JSON.stringify(last)?.slice(0, 2000)})`);
    await sleep(everyMs);
  }
}

function expectProblem(r: HttpResult, status: number, code: string) {
  expect(r.status, r.text).toBe(status);
  expect(r.headers.get('content-type')).toMatch(/^application\/problem\+json/);
  expect(r.body.code).toBe(code);
  expect(r.text).not.toMatch(/whsec_/);
}

/** The daemon's output so far (the helper has exposed it as a getter and as a function; accept both). */
const output = (d: RunningDaemon, which: 'stdout' | 'stderr'): string => {
  const v = (d as unknown as Record<string, unknown>)[which];
  return typeof v === 'function' ? (v as () => string)() : String(v);
};

const del = (base: string, token: string, path: string) => http(base, path, { method: 'DELETE', token });

// ---- the main daemon: most behaviour ----

describe('webhooks against the real daemon', () => {
  let t: TempDataDir;
  let daemon: RunningDaemon;
  let tokenA: string;
  let tokenB: string;
  let A: Client;
  let B: Client;
  let db: Inspector;
  const receivers: Receiver[] = [];
  const created: Array<{ token: string; id: string }> = [];

  beforeAll(async () => {
    issuer ??= await issuerKeyPair();
    t = await tempDataDir('node-svc-webhooks-');
    ({ tokenA, tokenB } = await setupNodes(t.dataDir, issuer));
    daemon = await startDaemon(t.dataDir, { env: { NODE_SVC_RETRY_SCHEDULE: RETRIES, NODE_SVC_DELIVERY_TIMEOUT: '2' } });
    A = clientOf(daemon.url, tokenA);
    B = clientOf(daemon.url, tokenB);
    db = inspectStore(t.dataDir, { readonly: true });
  });

  // Each test revokes what it subscribed, so later events of other tests do not reach (or pile up for) its receivers.
  afterEach(async () => {
    for (const s of created.splice(0)) await del(daemon.url, s.token, `/v1/webhooks/${s.id}`);
    for (const r of receivers.splice(0)) await r.close();
  });

  afterAll(async () => {
    db?.close();
    await daemon?.stop('SIGKILL');
    await t?.cleanup();
  });

  async function receiver(...args: Parameters<typeof startReceiver>) {
    const r = await startReceiver(...args);
    receivers.push(r);
    return r;
  }

  async function subscribe(c: Client, token: string, url: string, extra: Record<string, unknown> = {}) {
    const r = await c.post('/v1/webhooks', { url, ...extra });
    expect(r.status, r.text).toBe(201);
    created.push({ token, id: r.body.id });
    return r.body as { id: string; secret: string; events: string[]; schemaVersion: string; status: string; [k: string]: unknown };
  }

  const attemptsOf = async (c: Client, id: string) => {
    const r = await c.get(`/v1/webhooks/${id}/deliveries?limit=500`);
    expect(r.status, r.text).toBe(200);
    return r.body as { health: { pending: number; retrying: number; dead: number; delivered: number }; data: Array<Record<string, any>>; nextCursor: string | null };
  };
  const listOf = async (c: Client) => {
    const r = await c.get('/v1/webhooks');
    expect(r.status, r.text).toBe(200);
    return r.body.data as Array<Record<string, any>>;
  };
  const storedEvent = (id: string) =>
    db.prepare('SELECT seq, body FROM events WHERE id = ?').get(id) as { seq: number; body: string } | undefined;
  /** The 1.0.0 envelope of a stored event, built from its parts (not from the stored text by the daemon's function). */
  const envelopeV100 = (id: string) => {
    const e = JSON.parse(storedEvent(id)!.body) as { id: string; type: EventKind; occurredAt: string; externalRef: string; data: Record<string, unknown> };
    return envelopeBody({ id: e.id, type: e.type, occurredAt: e.occurredAt, externalRef: e.externalRef, data: e.data }, '1.0.0');
  };

  it('POST /v1/webhooks → 201 with a whsec_ secret shown only there; GET never shows a secret', async () => {
    const r = await receiver();
    const res = await A.post('/v1/webhooks', { url: `${r.url}/hook`, description: 'ledger' });
    expect(res.status, res.text).toBe(201);
    created.push({ token: tokenA, id: res.body.id });
    const s = res.body;
    expect(s.id).toMatch(/^whk_[0-9A-HJKMNP-TV-Z]{26}$/);
    expect(s.secret).toMatch(/^whsec_[A-Za-z0-9+/]{43}=$/);
    expect(Buffer.from(s.secret.slice(6), 'base64')).toHaveLength(32);
    expect(s).toMatchObject({ url: `${r.url}/hook`, events: ['*'], schemaVersion: '1.1.0', status: 'active', description: 'ledger' });
    expect(Date.parse(s.createdAt)).toBeGreaterThan(Date.now() - 60_000);

    const list = await A.get('/v1/webhooks');
    expect(list.status).toBe(200);
    const mine = (list.body.data as Array<Record<string, unknown>>).find((x) => x.id === s.id);
    expect(mine).toBeDefined();
    expect(mine).not.toHaveProperty('secret');
    expect(list.text).not.toContain('whsec_');
    expect(list.text).not.toContain(s.secret.slice(6));

    // A second subscription gets a different secret.
    const other = await subscribe(A, tokenA, `${r.url}/other`);
    expect(other.secret).not.toBe(s.secret);
  });

  it('refuses bad subscriptions and creates nothing: 400 when the body does not match the document, 422 naming the rule when it does', async () => {
    const before = (await listOf(A)).length;
    const invalid: Array<[string, Record<string, unknown>]> = [
      ['URL over 2 KiB', { url: `http://127.0.0.1:9/${'a'.repeat(2100)}` }],
      ['unknown event kind', { url: 'http://127.0.0.1:9/hook', events: ['settlement.final', 'payment.made'] }],
      ['empty events', { url: 'http://127.0.0.1:9/hook', events: [] }],
      ['schemaVersion 2.0.0', { url: 'http://127.0.0.1:9/hook', schemaVersion: '2.0.0' }],
      ['unknown field', { url: 'http://127.0.0.1:9/hook', secret: 'whsec_mine' }],
    ];
    for (const [what, body] of invalid) {
      const res = await A.post('/v1/webhooks', body);
      expect(res.status, `${what}: ${res.text}`).toBe(400);
      expectProblem(res, 400, 'invalid_request');
    }
    const refused: Array<[string, Record<string, unknown>, string]> = [
      ['ftp URL', { url: 'ftp://127.0.0.1/hook' }, 'url_invalid'],
      ['userinfo', { url: 'http://user:pass@127.0.0.1:9/hook' }, 'url_invalid'],
      ['user only', { url: 'http://user@127.0.0.1:9/hook' }, 'url_invalid'],
      ['not a URL', { url: 'not a url' }, 'url_invalid'],
      ['a fragment', { url: 'http://127.0.0.1:9/hook#x' }, 'url_invalid'],
      ['1.0.0 with a subscription.* filter', { url: 'http://127.0.0.1:9/hook', schemaVersion: '1.0.0', events: ['budget.halted', 'subscription.closed'] }, 'kind_not_in_schema_version'],
      ['link-local metadata IP', { url: 'http://169.254.169.254/latest/meta-data/' }, 'url_target_refused'],
      ['IPv6 link-local', { url: 'http://[fe80::1]:8080/hook' }, 'url_target_refused'],
      ['IPv6 metadata', { url: 'http://[fd00:ec2::254]/hook' }, 'url_target_refused'],
      ['IPv4-mapped metadata', { url: 'http://[::ffff:169.254.169.254]/hook' }, 'url_target_refused'],
    ];
    for (const [what, body, refusal] of refused) {
      const res = await A.post('/v1/webhooks', body);
      expect(res.status, `${what}: ${res.text}`).toBe(422);
      expectProblem(res, 422, 'request_refused');
      expect(res.body.refusal, what).toBe(refusal);
    }
    const tooLong = await A.post('/v1/webhooks', { url: `http://127.0.0.1:9/${'a'.repeat(2100)}` });
    expect(tooLong.body.detail).toMatch(/url/i);
    const meta = await A.post('/v1/webhooks', { url: 'http://169.254.169.254/latest/meta-data/' });
    expect(meta.body.detail).toMatch(/not an allowed webhook target/);
    expect((await listOf(A)).length).toBe(before);
  });

  it('delivers the exact stored envelope bytes, signed both ways, with the documented headers', async () => {
    const r = await receiver(ack(200));
    const s = await subscribe(A, tokenA, `${r.url}/hook`);
    const evt = await emit(A, 'budget.halted');
    const [req] = await r.waitFor((q) => q.some((x) => x.eventId === evt), 10_000, `delivery of ${evt}`).then(() => r.forEvent(evt));
    const stored = storedEvent(evt)!;

    expect(req!.method).toBe('POST');
    expect(req!.path).toBe('/hook');
    expect(req!.body.equals(Buffer.from(stored.body, 'utf8'))).toBe(true);
    expect(req!.headers['content-type']).toBe('application/json');
    expect(req!.headers['user-agent']).toBe(`node-svc/${VERSION}`);
    expect(req!.headers['x-service-event-id']).toBe(evt);
    // The head exactly: Host is the URL's host with its port, the length is the body's, each header once, no other.
    expect(req!.headers.host).toBe(new URL(r.url).host);
    expect(req!.headers['content-length']).toBe(String(req!.body.length));
    expect(req!.headers.connection).toBe('keep-alive');
    const names = req!.rawHeaders.filter((_, i) => i % 2 === 0).map((n) => n.toLowerCase());
    expect(names.sort()).toEqual(['connection', 'content-length', 'content-type', 'host', 'user-agent', 'webhook-id', 'webhook-signature', 'webhook-timestamp', 'x-service-event-id', 'x-service-signature']);

    const env = JSON.parse(req!.body.toString('utf8'));
    expect(env.id).toBe(req!.headers['x-service-event-id']);
    expect(Object.keys(env)).toEqual(['id', 'type', 'schemaVersion', 'occurredAt', 'externalRef', 'data']);
    expect(env).toMatchObject({ type: 'budget.halted', schemaVersion: '1.1.0', data: { reason: 'anomaly' } });
    expect(env.externalRef).toBe(`budget:${env.data.budget}`);
    expect(env.occurredAt).toMatch(/^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z$/);

    // x-service-signature over the raw received bytes, with the secret shown at creation.
    expect(req!.headers['x-service-signature']).toMatch(/^sha256=[0-9a-f]{64}$/);
    expect(verifyServiceSignature(s.secret, req!.body, req!.headers['x-service-signature'])).toBe(true);
    expect(verifyServiceSignature(s.secret, Buffer.concat([req!.body, Buffer.from(' ')]), req!.headers['x-service-signature'])).toBe(false);
    // Another secret: its last base64 character changed (always different from the real one).
    const other = `${s.secret.slice(0, -2)}${s.secret.at(-2) === 'A' ? 'E' : 'A'}=`;
    expect(other).not.toBe(s.secret);
    expect(verifyServiceSignature(other, req!.body, req!.headers['x-service-signature'])).toBe(false);
    expect(req!.headers['x-service-signature-previous']).toBeUndefined();

    // Standard Webhooks: id = event id, a fresh timestamp, one v1 signature.
    expect(req!.headers['webhook-id']).toBe(evt);
    const ts = Number(req!.headers['webhook-timestamp']);
    expect(Number.isInteger(ts)).toBe(true);
    expect(Math.abs(ts - nowSeconds())).toBeLessThan(60);
    expect(String(req!.headers['webhook-signature'])).toMatch(/^v1,[A-Za-z0-9+/]{43}=$/);
    expect(verifyStandardSignature(s.secret, req!)).toBe(true);
    expect(verifyStandardSignature(s.secret, { ...req!, headers: { ...req!.headers, 'webhook-timestamp': String(ts + 1) } })).toBe(false);

    // The same envelope is what GET /v1/events answers. On PostgreSQL an event is listed once every transaction older
    // than its own has ended (the watermark that keeps a cursor from skipping one that commits later; README, More than
    // one machine): a write of another test file in flight on the run's shared server can hold it back a moment (one
    // CI run read the page before it showed), so the page is read until the event is on it.
    const listed = await eventually(async () => {
      const page = await A.get(`/v1/events?type=budget.halted&limit=500`);
      return page.body.data.find((e: { id: string }) => e.id === evt);
    }, 'the event on a page of GET /v1/events');
    expect(listed).toEqual(env);

    // Delivered once; recorded as delivered.
    const d = await eventually(async () => {
      const a = await attemptsOf(A, s.id);
      return a.health.delivered === 1 && a.data.length === 1 ? a : undefined;
    }, 'attempt recorded');
    expect(d.data[0]).toMatchObject({ eventId: evt, attempt: 1, statusCode: 200, outcome: 'delivered', nextAttemptAt: null, deliveryStatus: 'delivered', error: null });
    await sleep(300);
    expect(r.forEvent(evt)).toHaveLength(1);
  });

  it('retries a failing receiver with the same event id and bytes until it acknowledges, then stops', async () => {
    const r = await receiver(failTimes(2, 503));
    const s = await subscribe(A, tokenA, `${r.url}/hook`);
    const evt = await emit(A, 'stream.revoked');
    await r.waitFor(() => r.forEvent(evt).filter((x) => x.answered !== undefined).length >= 3, 15_000, '3 attempts answered');
    const got = r.forEvent(evt);
    expect(got.map((x) => x.answered)).toEqual([503, 503, 204]);
    for (const g of got) {
      expect(g.body.equals(got[0]!.body)).toBe(true);
      expect(g.headers['x-service-event-id']).toBe(evt);
      expect(g.headers['webhook-id']).toBe(evt);
      expect(verifyServiceSignature(s.secret, g.body, g.headers['x-service-signature'])).toBe(true);
      expect(verifyStandardSignature(s.secret, g)).toBe(true);
    }
    // About one second (±20 %) between tries.
    for (let i = 1; i < got.length; i++) {
      const gap = got[i]!.at - got[i - 1]!.at;
      expect(gap).toBeGreaterThanOrEqual(750);
      expect(gap).toBeLessThan(3000);
    }

    const a = await eventually(async () => {
      const x = await attemptsOf(A, s.id);
      return x.health.delivered === 1 && x.data.length === 3 ? x : undefined;
    }, 'three attempts recorded');
    const rows = [...a.data].sort((p, q) => p.attempt - q.attempt);
    expect(rows.map((x) => x.attempt)).toEqual([1, 2, 3]);
    expect(rows.map((x) => x.statusCode)).toEqual([503, 503, 204]);
    expect(rows.map((x) => x.outcome)).toEqual(['failed', 'failed', 'delivered']);
    expect(new Set(rows.map((x) => x.eventId))).toEqual(new Set([evt]));
    expect(new Set(rows.map((x) => x.deliveryId)).size).toBe(1);
    for (const f of rows.slice(0, 2)) {
      expect(f.error).toMatch(/503/);
      expect(f.nextAttemptAt).not.toBeNull();
      const wait = Date.parse(f.nextAttemptAt) - Date.parse(f.attemptedAt) - f.durationMs;
      expect(wait).toBeGreaterThanOrEqual(790);
      expect(wait).toBeLessThanOrEqual(1210);
    }
    expect(rows[2]!.nextAttemptAt).toBeNull();
    expect(rows.every((x) => x.deliveryStatus === 'delivered')).toBe(true);
    expect(a.health).toEqual({ pending: 0, retrying: 0, dead: 0, delivered: 1 });
    // Newest first.
    expect(a.data.map((x) => x.attempt)).toEqual([3, 2, 1]);

    const sub = (await listOf(A)).find((x) => x.id === s.id)!;
    expect(sub.lastSuccessAt).not.toBeNull();
    expect(sub.failingSince).toBeNull();

    await sleep(2500); // past the rest of the schedule: nothing after the acknowledgement
    expect(r.forEvent(evt)).toHaveLength(3);
  });

  it('honours Retry-After from the receiver', async () => {
    const r = await receiver(failTimes(1, 503, { 'retry-after': '3' }));
    const s = await subscribe(A, tokenA, `${r.url}/hook`);
    const evt = await emit(A);
    await r.waitFor(() => r.forEvent(evt).length >= 2, 10_000, 'second attempt');
    const [first, second] = r.forEvent(evt);
    expect(second!.at - first!.at).toBeGreaterThanOrEqual(2900);
    const a = await eventually(async () => {
      const x = await attemptsOf(A, s.id);
      return x.health.delivered === 1 ? x : undefined;
    }, 'delivered');
    const failed = a.data.find((x) => x.outcome === 'failed')!;
    expect(Date.parse(failed.nextAttemptAt) - Date.parse(failed.attemptedAt) - failed.durationMs).toBe(3000);
  });

  it('a receiver down for the whole schedule: the delivery goes dead; `webhooks replay` delivers it once it is back', async () => {
    const r = await receiver(ack());
    const s = await subscribe(A, tokenA, `${r.url}/hook`);
    await r.down();
    const evt = await emit(A, 'budget.released');
    const dead = await eventually(async () => {
      const x = await attemptsOf(A, s.id);
      return x.health.dead === 1 ? x : undefined;
    }, 'dead', 15_000);
    expect(dead.health).toEqual({ pending: 0, retrying: 0, dead: 1, delivered: 0 });
    const rows = [...dead.data].sort((p, q) => p.attempt - q.attempt);
    expect(rows).toHaveLength(3); // the first try and one per schedule entry
    for (const x of rows) {
      expect(x).toMatchObject({ eventId: evt, statusCode: null, outcome: 'failed', deliveryStatus: 'dead' });
      expect(x.error).toMatch(/ECONNREFUSED|connect/i);
    }
    expect(rows[0]!.nextAttemptAt).not.toBeNull();
    expect(rows[2]!.nextAttemptAt).toBeNull();
    const sub = (await listOf(A)).find((x) => x.id === s.id)!;
    expect(sub.status).toBe('active');
    expect(sub.failingSince).not.toBeNull();

    await r.up();
    await sleep(1500);
    expect(r.requests).toHaveLength(0); // dead stays dead until replayed

    const cli = await runCli(['webhooks', 'replay', evt, '--url', daemon.url, '--token', tokenA, '--json']);
    expect(cli.code, cli.stderr).toBe(0);
    const out = json<{ event: string; queued: Array<{ subscription: string; deliveryId: string }> }>(cli.stdout);
    expect(out.event).toBe(evt);
    expect(out.queued.map((q) => q.subscription)).toEqual([s.id]);

    await r.waitFor(() => r.forEvent(evt).length >= 1, 10_000, 'replayed delivery');
    const [req] = r.forEvent(evt);
    expect(req!.body.equals(Buffer.from(storedEvent(evt)!.body))).toBe(true);
    expect(verifyServiceSignature(s.secret, req!.body, req!.headers['x-service-signature'])).toBe(true);
    const after = await eventually(async () => {
      const x = await attemptsOf(A, s.id);
      return x.health.delivered === 1 ? x : undefined;
    }, 'replay recorded');
    expect(after.health).toMatchObject({ dead: 1, delivered: 1, pending: 0, retrying: 0 });
    await sleep(500);
    expect(r.forEvent(evt)).toHaveLength(1);

    // The CLI's not-found path: an unknown event is exit 3.
    const unknown = await runCli(['webhooks', 'replay', 'evt_01ARZ3NDEKTSV4RRFFQ69G5FAV', '--url', daemon.url, '--token', tokenA, '--json']);
    expect(unknown.code).toBe(3);
  });

  it('410 Gone disables the subscription; nothing more is sent to it', async () => {
    const r = await receiver(always(410));
    const s = await subscribe(A, tokenA, `${r.url}/hook`);
    const e1 = await emit(A);
    await r.waitFor(() => r.forEvent(e1).length >= 1, 10_000, 'first delivery');
    const sub = await eventually(async () => (await listOf(A)).find((x) => x.id === s.id && x.status === 'disabled'), 'disabled');
    expect(sub.disabledReason).toMatch(/410/);
    const a = await attemptsOf(A, s.id);
    expect(a.data).toHaveLength(1);
    expect(a.data[0]).toMatchObject({ eventId: e1, statusCode: 410, outcome: 'gone', nextAttemptAt: null, deliveryStatus: 'dead' });

    const e2 = await emit(A);
    await sleep(2500);
    expect(r.forEvent(e1)).toHaveLength(1);
    expect(r.forEvent(e2)).toHaveLength(0);
    // A replay does not queue for a disabled subscription either.
    const re = await A.post(`/v1/events/${e2}/redeliver`, {});
    expect(re.status).toBe(202);
    expect(re.body.queued.map((q: { subscription: string }) => q.subscription)).not.toContain(s.id);
  });

  it('delivers over HTTPS to a certificate the daemon trusts (NODE_EXTRA_CA_CERTS), and not to one it does not', async () => {
    const tls = await tempDataDir('node-svc-webhooks-tls-');
    const key = join(tls.root, 'key.pem');
    const cert = join(tls.root, 'cert.pem');
    try {
      // Its own CA (basicConstraints stated, not left to openssl's configuration), for 127.0.0.1.
      execFileSync('openssl', ['req', '-x509', '-newkey', 'ec', '-pkeyopt', 'ec_paramgen_curve:prime256v1', '-nodes', '-keyout', key, '-out', cert,
        '-days', '1', '-subj', '/CN=node-svc test receiver', '-addext', 'subjectAltName=IP:127.0.0.1', '-addext', 'basicConstraints=critical,CA:TRUE'], { stdio: 'pipe' });
    } catch (err) {
      await tls.cleanup();
      throw err;
    }
    const got: Array<{ path: string | undefined; host: string | undefined; servername: unknown; names: string[]; body: Buffer; signature: string | undefined }> = [];
    const server = createHttpsServer({ key: readFileSync(key), cert: readFileSync(cert) }, (req, res) => {
      const chunks: Buffer[] = [];
      req.on('data', (c: Buffer) => chunks.push(c));
      req.on('end', () => {
        got.push({ path: req.url, host: req.headers.host, servername: (req.socket as import('node:tls').TLSSocket).servername, names: req.rawHeaders.filter((_, i) => i % 2 === 0).map((n) => n.toLowerCase()),
          body: Buffer.concat(chunks), signature: req.headers['x-service-signature'] as string | undefined });
        res.writeHead(204).end();
      });
    });
    await new Promise<void>((r) => server.listen(0, '127.0.0.1', r));
    const url = `https://127.0.0.1:${(server.address() as AddressInfo).port}/hook?via=tls`;
    let trusting: RunningDaemon | undefined;
    try {
      const { tokenA: tokenT } = await setupNodes(tls.dataDir, issuer);
      trusting = await startDaemon(tls.dataDir, { env: { NODE_SVC_RETRY_SCHEDULE: RETRIES, NODE_SVC_DELIVERY_TIMEOUT: '2', NODE_EXTRA_CA_CERTS: cert } });
      const T = clientOf(trusting.url, tokenT);
      const sub = await T.post('/v1/webhooks', { url });
      expect(sub.status, sub.text).toBe(201);
      // The suite's daemon does not trust the certificate: its attempts fail (certificate refused), nothing arrives from it.
      const untrusted = await subscribe(A, tokenA, url);
      const evt = await emit(A, 'budget.halted');
      const failed = await eventually(async () => {
        const a = await attemptsOf(A, untrusted.id);
        return a.data.find((x) => x.eventId === evt && x.outcome === 'failed');
      }, 'a failed attempt to the untrusted receiver');
      expect(failed.statusCode).toBeNull();
      expect(String(failed.error)).toMatch(/certificate/i);
      expect(got).toHaveLength(0);

      const r = await T.post('/v1/control', { message: control({ kind: 'budget.halted', budget: uid('b'), reason: 'anomaly' }) });
      expect(r.status, r.text).toBe(200);
      await eventually(async () => (got.length ? got : undefined), 'the delivery over HTTPS');
      const [q] = got;
      expect(q!.path).toBe('/hook?via=tls'); // the path with its query, as the URL has them
      expect(q!.host).toBe(new URL(url).host);
      expect(q!.servername).toBeFalsy(); // no SNI for an IP address (RFC 6066 §3), as node decides
      expect(q!.names.filter((n) => n === 'host')).toHaveLength(1);
      expect(verifyServiceSignature(sub.body.secret, q!.body, q!.signature)).toBe(true);
      expect(JSON.parse(q!.body.toString('utf8')).id).toBe(r.body.eventId);
    } finally {
      await trusting?.stop('SIGKILL');
      server.closeAllConnections();
      await new Promise((r) => server.close(r));
      await tls.cleanup();
    }
  });

  it('does not follow a redirect: a 302 is a failure, retried, and the Location is never asked', async () => {
    const r = await receiver((q) => (q.path === '/hook' ? { status: 302, headers: { location: '/elsewhere' } } : { status: 204 }));
    const s = await subscribe(A, tokenA, `${r.url}/hook`);
    const evt = await emit(A);
    const dead = await eventually(async () => {
      const x = await attemptsOf(A, s.id);
      return x.health.dead === 1 ? x : undefined;
    }, 'dead after redirects', 15_000);
    expect(dead.data).toHaveLength(3);
    for (const x of dead.data) expect(x).toMatchObject({ eventId: evt, statusCode: 302, outcome: 'failed' });
    expect(r.at('/hook')).toHaveLength(3);
    expect(r.at('/elsewhere')).toHaveLength(0);
  });

  it('rotate-secret: during the overlap deliveries verify with the old secret or the new one; after it, only the new', async () => {
    const r = await receiver(ack());
    const s = await subscribe(A, tokenA, `${r.url}/hook`);
    const old = s.secret;
    const e1 = await emit(A);
    await r.waitFor(() => r.forEvent(e1).length >= 1);
    expect(verifyServiceSignature(old, r.forEvent(e1)[0]!.body, r.forEvent(e1)[0]!.headers['x-service-signature'])).toBe(true);

    const rot = await A.post(`/v1/webhooks/${s.id}/rotate-secret`, { overlapSeconds: 3600 });
    expect(rot.status, rot.text).toBe(200);
    const fresh = rot.body.secret as string;
    expect(fresh).toMatch(/^whsec_/);
    expect(fresh).not.toBe(old);
    const until = Date.parse(rot.body.previousSecretExpiresAt);
    expect(until).toBeGreaterThan(Date.now() + 3500_000);
    expect(until).toBeLessThan(Date.now() + 3700_000);
    const listed = (await listOf(A)).find((x) => x.id === s.id)!;
    expect(listed.previousSecretExpiresAt).toBe(rot.body.previousSecretExpiresAt);
    expect(JSON.stringify(listed)).not.toContain('whsec_');

    const e2 = await emit(A);
    await r.waitFor(() => r.forEvent(e2).length >= 1);
    const q = r.forEvent(e2)[0]!;
    // A receiver that knows only one of the two secrets accepts the delivery either way.
    const acceptsWith = (secret: string) =>
      verifyServiceSignature(secret, q.body, q.headers['x-service-signature']) || verifyServiceSignature(secret, q.body, q.headers['x-service-signature-previous']);
    expect(acceptsWith(old)).toBe(true);
    expect(acceptsWith(fresh)).toBe(true);
    expect(acceptsWith('whsec_AAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA=')).toBe(false);
    expect(verifyServiceSignature(fresh, q.body, q.headers['x-service-signature'])).toBe(true);
    expect(verifyServiceSignature(old, q.body, q.headers['x-service-signature-previous'])).toBe(true);
    const sigs = String(q.headers['webhook-signature']).split(' ');
    expect(sigs).toHaveLength(2);
    expect(verifyStandardSignature(old, q)).toBe(true);
    expect(verifyStandardSignature(fresh, q)).toBe(true);
    expect(verifyStandardSignature(fresh, { ...q, headers: { ...q.headers, 'webhook-signature': sigs[0]! } })).toBe(true);
    expect(verifyStandardSignature(old, { ...q, headers: { ...q.headers, 'webhook-signature': sigs[1]! } })).toBe(true);

    // Rotating with no overlap: only the newest secret signs.
    const rot2 = await A.post(`/v1/webhooks/${s.id}/rotate-secret`, { overlapSeconds: 0 });
    expect(rot2.status).toBe(200);
    expect(rot2.body.previousSecretExpiresAt).toBeNull();
    const newest = rot2.body.secret as string;
    const e3 = await emit(A);
    await r.waitFor(() => r.forEvent(e3).length >= 1);
    const q3 = r.forEvent(e3)[0]!;
    expect(verifyServiceSignature(newest, q3.body, q3.headers['x-service-signature'])).toBe(true);
    expect(q3.headers['x-service-signature-previous']).toBeUndefined();
    expect(String(q3.headers['webhook-signature']).split(' ')).toHaveLength(1);
    expect(verifyStandardSignature(newest, q3)).toBe(true);
    expect(verifyStandardSignature(fresh, q3)).toBe(false);
    expect(verifyServiceSignature(fresh, q3.body, q3.headers['x-service-signature'])).toBe(false);

    expectProblem(await A.post(`/v1/webhooks/${s.id}/rotate-secret`, { overlapSeconds: 8 * 86400 }), 400, 'invalid_request');
  });

  it('DELETE → 204; afterwards 404 everywhere, pending retries are cancelled and nothing more arrives', async () => {
    const r = await receiver(always(503));
    const s = await subscribe(A, tokenA, `${r.url}/hook`);
    const e1 = await emit(A);
    await r.waitFor(() => r.forEvent(e1).length >= 1, 10_000, 'first try');
    const res = await del(daemon.url, tokenA, `/v1/webhooks/${s.id}`);
    expect(res.status).toBe(204);
    expect(res.text).toBe('');
    expectProblem(await del(daemon.url, tokenA, `/v1/webhooks/${s.id}`), 404, 'not_found');
    expectProblem(await A.get(`/v1/webhooks/${s.id}/deliveries`), 404, 'not_found');
    expectProblem(await A.post(`/v1/webhooks/${s.id}/rotate-secret`, {}), 404, 'not_found');
    expectProblem(await A.post(`/v1/events/${e1}/redeliver`, { subscription: s.id }), 404, 'not_found');
    expect((await listOf(A)).map((x) => x.id)).not.toContain(s.id);

    const e2 = await emit(A);
    await sleep(2500); // longer than the retry schedule
    expect(r.forEvent(e1)).toHaveLength(1);
    expect(r.forEvent(e2)).toHaveLength(0);
    const rows = db.prepare('SELECT status FROM deliveries WHERE subscription_id = ?').pluck().all(s.id);
    expect(rows).toEqual(['cancelled']);
  });

  it("another node's subscription is 404 for node-b and invisible in its list; node-b's events never reach it", async () => {
    const r = await receiver(ack());
    const rb = await receiver(ack());
    const s = await subscribe(A, tokenA, `${r.url}/hook`);
    const sb = await subscribe(B, tokenB, `${rb.url}/hook`);
    expectProblem(await del(daemon.url, tokenB, `/v1/webhooks/${s.id}`), 404, 'not_found');
    expectProblem(await B.get(`/v1/webhooks/${s.id}/deliveries`), 404, 'not_found');
    expectProblem(await B.post(`/v1/webhooks/${s.id}/rotate-secret`, {}), 404, 'not_found');
    const unknown = 'whk_01ARZ3NDEKTSV4RRFFQ69G5FAV';
    const u = await del(daemon.url, tokenB, `/v1/webhooks/${unknown}`);
    expectProblem(u, 404, 'not_found');
    expect(u.body.detail).toBe((await del(daemon.url, tokenB, `/v1/webhooks/${s.id}`)).body.detail); // unknown and foreign look the same
    const bList = await listOf(B);
    expect(bList.map((x) => x.id)).toEqual([sb.id]);
    expect((await listOf(A)).map((x) => x.id)).not.toContain(sb.id);

    // node-a's subscription is untouched and still delivers.
    const ea = await emit(A);
    const eb = await emit(B, 'budget.halted', 'node-b');
    await r.waitFor(() => r.forEvent(ea).length >= 1);
    await rb.waitFor(() => rb.forEvent(eb).length >= 1);
    await sleep(300);
    expect(r.forEvent(eb)).toHaveLength(0);
    expect(rb.forEvent(ea)).toHaveLength(0);
    expect(verifyServiceSignature(sb.secret, rb.forEvent(eb)[0]!.body, rb.forEvent(eb)[0]!.headers['x-service-signature'])).toBe(true);
  });

  it('a 1.0.0 subscription gets 1.0.0 envelopes and never the subscription.* kinds', async () => {
    const r0 = await receiver(ack());
    const r1 = await receiver(ack());
    const s0 = await subscribe(A, tokenA, `${r0.url}/hook`, { schemaVersion: '1.0.0' });
    const s1 = await subscribe(A, tokenA, `${r1.url}/hook`);
    expect(s0.schemaVersion).toBe('1.0.0');
    const kinds = ['subscription.period_opened', 'budget.halted', 'subscription.renewal_declined', 'stream.revoked', 'subscription.closed'];
    const ids: Record<string, string> = {};
    for (const k of kinds) ids[k] = await emit(A, k);
    await r1.waitFor(() => kinds.every((k) => r1.forEvent(ids[k]!).length >= 1), 10_000, 'all kinds at 1.1.0');
    await r0.waitFor(() => r0.forEvent(ids['budget.halted']!).length >= 1 && r0.forEvent(ids['stream.revoked']!).length >= 1, 10_000, '1.0.0 kinds');
    await sleep(500);

    for (const q of r0.requests) {
      const env = JSON.parse(q.body.toString('utf8'));
      expect(env.schemaVersion).toBe('1.0.0');
      expect(env.type).not.toMatch(/^subscription\./);
      expect(q.body.toString('utf8')).toBe(envelopeV100(env.id));
      expect(verifyServiceSignature(s0.secret, q.body, q.headers['x-service-signature'])).toBe(true);
      expect(verifyStandardSignature(s0.secret, q)).toBe(true);
    }
    expect(new Set(r0.requests.map((q) => q.eventId))).toEqual(new Set([ids['budget.halted'], ids['stream.revoked']]));
    for (const q of r1.requests) expect(JSON.parse(q.body.toString('utf8')).schemaVersion).toBe('1.1.0');
    // Not merely late: no delivery of a 1.1.0 kind was ever queued for the 1.0.0 subscription.
    expect(db.prepare('SELECT COUNT(*) FROM deliveries WHERE subscription_id = ?').pluck().get(s0.id)).toBe(2);
    // A replay of a 1.1.0 kind does not queue for it either.
    const re = await A.post(`/v1/events/${ids['subscription.closed']}/redeliver`, { subscription: s0.id });
    expect(re.status).toBe(202);
    expect(re.body.queued).toEqual([]);
  });

  it('an events filter receives only its kinds', async () => {
    const r = await receiver(ack());
    const s = await subscribe(A, tokenA, `${r.url}/hook`, { events: ['subscription.closed', 'stream.revoked', 'stream.revoked'] });
    expect(s.events).toEqual(['stream.revoked', 'subscription.closed']);
    const made: Array<[string, string]> = [];
    for (const k of ['budget.halted', 'stream.revoked', 'budget.released', 'subscription.period_opened', 'subscription.closed', 'budget.halted'])
      made.push([k, await emit(A, k)]);
    const wanted = made.filter(([k]) => k === 'stream.revoked' || k === 'subscription.closed').map(([, id]) => id);
    await r.waitFor(() => wanted.every((id) => r.forEvent(id).length >= 1), 10_000, 'filtered kinds');
    await sleep(500);
    expect(new Set(r.requests.map((q) => q.eventId))).toEqual(new Set(wanted));
    expect(new Set(r.requests.map((q) => JSON.parse(q.body.toString('utf8')).type))).toEqual(new Set(['stream.revoked', 'subscription.closed']));
  });

  it('keeps its sockets to one receiver across bursts: ten subscriptions on one host reuse them, not open new ones', async () => {
    // Each subscription's budget is a tenth of the node's 256 sockets (24 here). The receiver holds every request until
    // 240 are open at once (bounded: 1.5 s, below this suite's 2 s attempt timeout), so each burst needs 240 sockets to
    // one host together. Sockets are kept per host:
    // the worker once kept 64 of them and closed the rest, so each later burst opened ~190 connections again.
    // The 1.5 s run from the burst's first request, not from the first emit: 30 emits one after another can take
    // longer than that on a loaded machine, and the gate would open before anything is held.
    let gate: { open: Promise<void>; release: () => void; start: () => void } | undefined;
    const hold = () => {
      let release!: () => void;
      let timer: NodeJS.Timeout | undefined;
      const open = new Promise<void>((res) => { release = res; });
      gate = { open: open.finally(() => clearTimeout(timer)), release, start: () => { timer ??= setTimeout(release, 1500); } };
    };
    let peak = 0; // requests open at once, read as each arrives (it counts itself)
    const r = await receiver(async () => {
      peak = Math.max(peak, r.pending());
      gate?.start();
      if (gate && r.pending() >= 240) gate.release();
      await gate?.open;
      return { status: 204 };
    });
    for (let i = 0; i < 10; i++) await subscribe(A, tokenA, `${r.url}/s${i}`);
    const peaks: number[] = [];
    const burst = async () => {
      hold();
      peak = 0;
      // One after another: the node's events keep their order (other tests page through them), and the held receiver
      // still gathers the deliveries.
      const ids: string[] = [];
      for (let i = 0; i < 30; i++) ids.push(await emit(A));
      await r.waitFor(() => ids.every((id) => r.forEvent(id).length >= 10), 30_000, '30 events at 10 subscriptions');
      await eventually(async () => r.pending() === 0, 'every answer sent');
      peaks.push(peak);
    };
    await burst();
    await burst();
    await burst();
    const most = Math.max(...peaks);
    expect(most, `requests open at once, per burst: ${peaks}`).toBeGreaterThan(100); // far more than the old pool's 64
    // No more sockets than were ever in flight at once, give or take a few opened while an answered one was on its way
    // back to the pool; the old worker opened each burst's excess over 64 again (415-620 in all here).
    expect(r.connections(), `connections opened by three bursts of ${peaks} requests at once`).toBeLessThanOrEqual(most + 30);
  });

  it('GET /v1/events pages oldest first with a cursor, filters by type, and is scoped to the node', async () => {
    const mine: string[] = [];
    for (let i = 0; i < 5; i++) mine.push(await emit(A, i % 2 ? 'stream.revoked' : 'budget.halted'));
    const theirs = await emit(B, 'budget.halted', 'node-b');

    // On PostgreSQL an event is served once no older write transaction of the server is in flight (README: events
    // never skipped by a cursor), so a page read right after the POST may end before it: paged again until the newest
    // shows (a CI run's pass 3, other files' daemons writing on the same server, once saw the tail come back empty).
    const pageAll = async () => {
      const seen: string[] = [];
      let cursor: string | undefined;
      let last: HttpResult | undefined;
      for (let pages = 0; pages < 500; pages++) {
        const r = await A.get(`/v1/events?limit=2${cursor ? `&cursor=${encodeURIComponent(cursor)}` : ''}`);
        expect(r.status, r.text).toBe(200);
        expect(r.body.data.length).toBeLessThanOrEqual(2);
        seen.push(...r.body.data.map((e: { id: string }) => e.id));
        last = r;
        if (!r.body.hasMore) break;
        expect(r.body.data).toHaveLength(2);
        cursor = r.body.nextCursor;
      }
      return { seen, last };
    };
    const { seen, last } = await eventually(async () => { const all = await pageAll(); return all.seen.includes(mine[4]!) && all; }, 'the newest event in the pages', 10_000, 50);
    expect(last!.body.hasMore).toBe(false);
    expect(new Set(seen).size).toBe(seen.length);
    expect(seen).not.toContain(theirs);
    expect(seen.slice(-5)).toEqual(mine); // oldest first; ours are the newest
    // One query for every page's events (PostgreSQL: one psql run, not one each: a synchronous psql per event held this
    // process for longer than the server's keep-alive, and the next request went out on a socket the daemon had closed).
    const seqOf = new Map((db.prepare(`SELECT id, seq FROM events WHERE id IN (${seen.map(() => '?').join(', ')})`).all(...seen) as Array<{ id: string; seq: number }>).map((r) => [r.id, Number(r.seq)]));
    const seqs = seen.map((id) => seqOf.get(id)!);
    expect([...seqs].sort((a, b) => a - b)).toEqual(seqs);

    // The last cursor is kept so a reconciler can poll for what comes next.
    const tail = last!.body.nextCursor as string;
    expect(tail).toBeTruthy();
    const empty = await A.get(`/v1/events?cursor=${encodeURIComponent(tail)}`);
    expect(empty.body).toEqual({ data: [], nextCursor: tail, hasMore: false, retentionHorizon: expect.any(String), sincePruned: false });
    // Default retention 30 days: the horizon is 30 days before now.
    expect(Math.abs(Date.now() - 30 * 86_400_000 - Date.parse(empty.body.retentionHorizon))).toBeLessThan(120_000);
    const next = await emit(A);
    const after = await eventually(async () => { const r = await A.get(`/v1/events?cursor=${encodeURIComponent(tail)}`); return r.body.data.length > 0 && r; }, 'the event after the tail', 10_000, 50);
    expect(after.body.data.map((e: { id: string }) => e.id)).toEqual([next]);

    const halted = await A.get('/v1/events?type=stream.revoked&limit=500');
    expect(halted.status).toBe(200);
    expect(halted.body.data.every((e: { type: string }) => e.type === 'stream.revoked')).toBe(true);
    expect(halted.body.data.map((e: { id: string }) => e.id)).toEqual(expect.arrayContaining([mine[1], mine[3]]));

    const bEvents = await B.get('/v1/events?limit=500');
    expect(bEvents.body.data.map((e: { id: string }) => e.id)).toContain(theirs);
    for (const id of mine) expect(bEvents.body.data.map((e: { id: string }) => e.id)).not.toContain(id);

    expectProblem(await A.get('/v1/events?type=payment.made'), 400, 'invalid_request');
    expectProblem(await A.get('/v1/events?limit=0'), 400, 'invalid_request');
    expectProblem(await A.get('/v1/events?limit=501'), 400, 'invalid_request');
    // Schema-valid, refused by a rule the document names: 422 request_refused with the rule's name.
    const refusedAs = async (path: string, refusal: string) => {
      const r = await A.get(path);
      expectProblem(r, 422, 'request_refused');
      expect(r.body.refusal, path).toBe(refusal);
    };
    await refusedAs(`/v1/events?cursor=${Buffer.from('-4').toString('base64url')}`, 'cursor_unknown');
    await refusedAs(`/v1/events?cursor=${encodeURIComponent(tail)}&since=2026-11-21T10:00:00Z`, 'cursor_with_since');
    await refusedAs('/v1/events?since=2026-99-99T99:99:99Z', 'since_invalid');
    await refusedAs(`/v1/streams?cursor=${Buffer.from('9:x').toString('base64url')}x`, 'cursor_unknown');
    await refusedAs(`/v1/streams?sort=activity&cursor=${Buffer.from('stream-1').toString('base64url')}`, 'cursor_unknown');
    expectProblem(await A.get('/v1/events?since=yesterday'), 400, 'invalid_request'); // not the documented pattern
  });

  it("POST /v1/events/{id}/redeliver sends the same event again; another node's event is 404", async () => {
    const r = await receiver(ack());
    const s = await subscribe(A, tokenA, `${r.url}/hook`);
    const evt = await emit(A);
    await r.waitFor(() => r.forEvent(evt).length >= 1);
    const re = await A.post(`/v1/events/${evt}/redeliver`, {});
    expect(re.status, re.text).toBe(202);
    expect(re.body.event).toBe(evt);
    expect(re.body.queued).toEqual([{ subscription: s.id, deliveryId: expect.stringMatching(/^dlv_/) }]);
    await r.waitFor(() => r.forEvent(evt).length >= 2, 10_000, 'redelivery');
    const [a, b] = r.forEvent(evt);
    expect(b!.body.equals(a!.body)).toBe(true);
    expect(b!.headers['x-service-event-id']).toBe(evt);
    expect(verifyServiceSignature(s.secret, b!.body, b!.headers['x-service-signature'])).toBe(true);

    // Only to the named subscription, when one is named.
    const re2 = await A.post(`/v1/events/${evt}/redeliver`, { subscription: s.id });
    expect(re2.status).toBe(202);
    expect(re2.body.queued.map((q: { subscription: string }) => q.subscription)).toEqual([s.id]);
    await r.waitFor(() => r.forEvent(evt).length >= 3, 10_000, 'second redelivery');

    expectProblem(await B.post(`/v1/events/${evt}/redeliver`, {}), 404, 'not_found');
    expectProblem(await A.post('/v1/events/evt_01ARZ3NDEKTSV4RRFFQ69G5FAV/redeliver', {}), 404, 'not_found');
    const eb = await emit(B, 'budget.halted', 'node-b');
    expectProblem(await A.post(`/v1/events/${eb}/redeliver`, {}), 404, 'not_found');
    // node-b naming node-a's subscription for its own event: 404, nothing queued.
    expectProblem(await B.post(`/v1/events/${eb}/redeliver`, { subscription: s.id }), 404, 'not_found');
    await sleep(300);
    expect(r.forEvent(eb)).toHaveLength(0);
    expect(r.forEvent(evt)).toHaveLength(3);
  });
});

// ---- crash and graceful stop: each on its own data dir ----

async function freshDaemon(prefix: string, env: Record<string, string>) {
  issuer ??= await issuerKeyPair();
  const t = await tempDataDir(prefix);
  const { tokenA } = await setupNodes(t.dataDir, issuer);
  const daemon = await startDaemon(t.dataDir, { env });
  return { t, tokenA, daemon };
}

/** Every event of node-a, through GET /v1/events (bounded walk). */
async function allEventIds(c: Client): Promise<string[]> {
  const ids: string[] = [];
  let cursor: string | undefined;
  for (let pages = 0; pages < 100; pages++) {
    const r = await c.get(`/v1/events?limit=500${cursor ? `&cursor=${encodeURIComponent(cursor)}` : ''}`);
    expect(r.status, r.text).toBe(200);
    ids.push(...r.body.data.map((e: { id: string }) => e.id));
    if (!r.body.hasMore) return ids;
    cursor = r.body.nextCursor;
  }
  throw new Error('too many event pages');
}

describe('crash safety: kill -9 in the middle of a 2,000-event burst', () => {
  let t: TempDataDir | undefined;
  let daemon: RunningDaemon | undefined;
  let r: Receiver | undefined;

  afterAll(async () => {
    await daemon?.stop('SIGKILL');
    await r?.close();
    await t?.cleanup();
  });

  it('after a restart on the same data dir every recorded event arrives at least once', { timeout: 170_000 }, async () => {
    // A 1 s attempt timeout keeps the lease of deliveries in flight at the crash short (timeout + 60 s).
    const env = { NODE_SVC_RETRY_SCHEDULE: '1,1,1,1,1', NODE_SVC_DELIVERY_TIMEOUT: '1' };
    const f = await freshDaemon('node-svc-crash-', env);
    ({ t, daemon } = f);
    // Slow during the burst, so the crash leaves a backlog: deliveries never tried and some in flight (a subscription
    // may borrow up to 64 sockets: 80 deliveries/s at most, where the 900 events take a few seconds to record).
    r = await startReceiver(slow(800, 204));
    const A = clientOf(daemon.url, f.tokenA);
    const sub = await A.post('/v1/webhooks', { url: `${r.url}/hook`, events: ['budget.halted'] });
    expect(sub.status).toBe(201);
    const secret = sub.body.secret as string;

    const TOTAL = 2000;
    const KILL_AT = 900;
    const messages = Array.from({ length: TOTAL }, (_, i) => control({ kind: 'budget.halted', budget: `burst-${i % 50}`, reason: 'rate' }));
    const acked: string[] = [];
    let next = 0;
    let killed = false;
    let killing: Promise<unknown> | undefined;
    const worker = async () => {
      while (!killed && next < TOTAL) {
        const m = messages[next++]!;
        try {
          const res = await fetch(`${daemon!.url}/v1/control`, {
            method: 'POST', headers: { authorization: `Bearer ${f.tokenA}`, 'content-type': 'application/json' }, body: JSON.stringify({ message: m }),
          });
          const body = (await res.json()) as { eventId?: string };
          if (res.status === 200 && body.eventId) acked.push(body.eventId);
        } catch {
          // the daemon was killed under this request
        }
        if (!killed && acked.length >= KILL_AT) {
          killed = true;
          killing = daemon!.stop('SIGKILL');
        }
      }
    };
    await Promise.all(Array.from({ length: 24 }, worker));
    expect(killed).toBe(true);
    expect(await killing).toBeNull(); // killed by the signal
    // What had arrived by the crash, copied now: the restarted daemon delivers the backlog while the events are listed.
    const beforeRestart = new Set(r.eventIds());
    r.setPolicy(ack()); // fast from now on

    daemon = await startDaemon(t.dataDir, { env });
    const A2 = clientOf(daemon.url, f.tokenA);
    const ids = await allEventIds(A2);
    expect(ids.length).toBeGreaterThanOrEqual(acked.length);
    expect(ids.length).toBeLessThan(TOTAL);
    const listed = new Set(ids);
    for (const id of acked) expect(listed.has(id)).toBe(true); // an acknowledged event survived the crash
    const seen = r.eventIds();
    const backlog = ids.filter((id) => !beforeRestart.has(id)).length;
    expect(backlog, `events not yet delivered when the daemon was killed (${ids.length} recorded, ${beforeRestart.size} had arrived)`).toBeGreaterThan(0);

    await r.waitFor(() => ids.every((id) => seen.has(id)), 120_000, `all ${ids.length} events delivered`);
    const missing = ids.filter((id) => r!.count(id) === 0);
    expect(missing).toEqual([]);
    for (const q of r.requests) expect(verifyServiceSignature(secret, q.body, q.headers['x-service-signature'])).toBe(true);
    expect(new Set(r.requests.map((q) => q.eventId))).toEqual(listed); // nothing that was not recorded

    const h = await eventually(async () => {
      const x = await A2.get(`/v1/webhooks/${sub.body.id}/deliveries?limit=1`);
      return x.body.health.delivered === ids.length ? x.body.health : undefined;
    }, 'all recorded as delivered', 100_000, 500);
    expect(h).toEqual({ pending: 0, retrying: 0, dead: 0, delivered: ids.length });
  });
});

describe('graceful stop: SIGTERM drains in-flight deliveries', () => {
  let t: TempDataDir | undefined;
  let daemon: RunningDaemon | undefined;
  let r: Receiver | undefined;

  afterAll(async () => {
    await daemon?.stop('SIGKILL');
    await r?.close();
    await t?.cleanup();
  });

  it('deliveries held by a slow receiver complete and are recorded as delivered before exit 0', async () => {
    const f = await freshDaemon('node-svc-drain-', { NODE_SVC_RETRY_SCHEDULE: RETRIES, NODE_SVC_DELIVERY_TIMEOUT: '5' });
    ({ t, daemon } = f);
    r = await startReceiver(slow(1000, 200));
    const A = clientOf(daemon.url, f.tokenA);
    const sub = await A.post('/v1/webhooks', { url: `${r.url}/hook` });
    expect(sub.status).toBe(201);
    const ids: string[] = [];
    for (let i = 0; i < 12; i++) ids.push(await emit(A));
    await r.waitFor(() => ids.every((id) => r!.forEvent(id).length > 0), 10_000, 'all in flight');
    expect(r.pending()).toBeGreaterThan(0);
    const inFlight = r.requests.filter((q) => q.answered === undefined).map((q) => q.eventId);
    expect(inFlight.length).toBeGreaterThan(0);

    const signalled = Date.now();
    const code = await daemon.stop('SIGTERM');
    const exited = Date.now();
    expect(code).toBe(0);
    expect(output(daemon, 'stdout')).toMatch(/SIGTERM: draining/);
    expect(exited - signalled).toBeLessThan(10_000);
    // It waited for the receiver's answers.
    for (const id of inFlight) {
      const q = r.forEvent(id)[0]!;
      expect(q.answered).toBe(200);
    }

    const db = inspectStore(t.dataDir, { readonly: true });
    try {
      for (const id of inFlight) {
        const row = db
          .prepare(`SELECT d.status, d.last_status, (SELECT COUNT(*) FROM delivery_attempts a WHERE a.delivery_id = d.id AND a.outcome = 'delivered') AS ok
            FROM deliveries d JOIN events e ON e.seq = d.event_seq WHERE e.id = ?`)
          .get(id) as { status: string; last_status: number; ok: number };
        expect(row, id).toEqual({ status: 'delivered', last_status: 200, ok: 1 });
      }
    } finally {
      db.close();
    }
    expect(output(daemon, 'stderr')).not.toMatch(/"level":"error"/);
  });
});
