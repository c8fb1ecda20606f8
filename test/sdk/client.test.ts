// createClient covers the whole /v1 contract: every (method, path) of the committed OpenAPI document is hit by
// some client method, and no client method hits anything outside it. A recording node:http server on 127.0.0.1
// stands in for the daemon (the API's own behaviour is tested in test/e2e/api.test.ts).
import { readFileSync } from 'node:fs';
import { createServer, type IncomingHttpHeaders, type Server } from 'node:http';
import type { AddressInfo } from 'node:net';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { ApiError, createClient, type Client } from '../../src/sdk/client.js';
import { REPO_ROOT } from '../helpers/cli.js';

interface Recorded {
  method: string;
  url: string;
  headers: IncomingHttpHeaders;
  body: string;
}

const doc = JSON.parse(readFileSync(join(REPO_ROOT, 'src/api/openapi.json'), 'utf8')) as { paths: Record<string, Record<string, unknown>> };
const HTTP_METHODS = ['get', 'put', 'post', 'delete', 'patch', 'head', 'options', 'trace'];
const documented = Object.entries(doc.paths)
  .filter(([p]) => p.startsWith('/v1/'))
  .flatMap(([p, ops]) => Object.keys(ops).filter((m) => HTTP_METHODS.includes(m)).map((m) => `${m.toUpperCase()} ${p}`))
  .sort();

/** A recorded request as `METHOD /template`: the path matched against the document's templates. */
const templates = Object.keys(doc.paths).map((p) => ({ p, re: new RegExp(`^${p.replace(/\{[^}]+\}/g, '[^/]+')}$`) }));
function asOperation(r: Recorded): string {
  const path = new URL(r.url, 'http://x').pathname;
  const hit = templates.filter((t) => t.re.test(path));
  // The most specific template wins (fewest parameters), as a router would.
  hit.sort((a, b) => (a.p.match(/\{/g)?.length ?? 0) - (b.p.match(/\{/g)?.length ?? 0));
  return `${r.method} ${hit[0]?.p ?? `UNDOCUMENTED ${path}`}`;
}

let server: Server;
let base: string;
const log: Recorded[] = [];
let answer: (r: Recorded) => { status: number; body?: string; type?: string } = (r) => (r.method === 'DELETE' ? { status: 204 } : { status: 200, body: '{}' });

beforeAll(async () => {
  server = createServer((req, res) => {
    const chunks: Buffer[] = [];
    req.on('data', (c: Buffer) => chunks.push(c));
    req.on('end', () => {
      const r: Recorded = { method: req.method!, url: req.url!, headers: req.headers, body: Buffer.concat(chunks).toString('utf8') };
      log.push(r);
      const a = answer(r);
      res.writeHead(a.status, a.body !== undefined ? { 'content-type': a.type ?? 'application/json' } : {});
      res.end(a.body);
    });
  });
  await new Promise<void>((r) => server.listen(0, '127.0.0.1', r));
  base = `http://127.0.0.1:${(server.address() as AddressInfo).port}`;
});
afterAll(async () => {
  server.closeAllConnections();
  await new Promise((r) => server.close(r));
});

// Path parameters with characters that must be escaped, so the test also sees they are encoded.
const ID = 'id:with/slash and space';
const ENC = encodeURIComponent(ID);

/** One call per client method, with arguments that exercise its optional parts. */
const calls: Record<Exclude<keyof Client, 'call'>, (c: Client) => Promise<unknown>> = {
  node: (c) => c.node(),
  verifyAllowance: (c) => c.verifyAllowance('a.b.c'),
  listStreams: (c) => c.listStreams({ limit: 5, cursor: 'cur', status: 'open', sort: 'activity' }),
  verifyStream: (c) => c.verifyStream(ID),
  headroom: (c) => c.headroom(ID),
  finality: (c) => c.finality(ID),
  receipt: (c) => c.receipt(ID),
  receiptJwks: (c) => c.receiptJwks(),
  x402Supported: (c) => c.x402Supported(),
  x402Verify: (c) => c.x402Verify({ x402Version: 2, paymentPayload: {}, paymentRequirements: {} }),
  x402Settle: (c) => c.x402Settle({ x402Version: 2, paymentPayload: {}, paymentRequirements: {} }),
  submitVoucher: (c) => c.submitVoucher(ID, 'v.o.u', 'a.b.c'),
  control: (c) => c.control('c.t.l'),
  createWebhook: (c) => c.createWebhook({ url: 'http://127.0.0.1:1/hook', events: ['budget.halted'], schemaVersion: '1.0.0' }),
  listWebhooks: (c) => c.listWebhooks(),
  deleteWebhook: (c) => c.deleteWebhook(ID),
  listDeliveries: (c) => c.listDeliveries(ID, { limit: 2 }),
  rotateWebhookSecret: (c) => c.rotateWebhookSecret(ID, 60),
  redeliverEvent: (c) => c.redeliverEvent(ID, 'whk_1'),
  listEvents: (c) => c.listEvents({ type: 'budget.halted', limit: 3 }),
};

describe('createClient against the OpenAPI document', () => {
  it('the document has /v1 operations to cover', () => {
    expect(documented.length).toBeGreaterThanOrEqual(14);
  });

  it('every client method has a call here (a new method must be added to this test)', () => {
    const c = createClient({ url: base });
    const methods = Object.keys(c).filter((k) => k !== 'call' && typeof (c as Record<string, unknown>)[k] === 'function').sort();
    expect(methods).toEqual(Object.keys(calls).sort());
  });

  it('the client methods together hit exactly the documented (method, path) set', async () => {
    const c = createClient({ url: `${base}/`, token: 'nsv_test' });
    log.length = 0;
    const byMethod = new Map<string, string>();
    for (const [name, run] of Object.entries(calls)) {
      const before = log.length;
      await run(c);
      expect(log.length - before, name).toBe(1);
      const op = asOperation(log[log.length - 1]!);
      expect(op, name).not.toMatch(/UNDOCUMENTED/);
      byMethod.set(name, op);
    }
    const hit = [...new Set(byMethod.values())].sort();
    expect(hit).toEqual(documented);
    // listStreams, verifyStream … each hits its own operation except where the document has one path for both.
    expect(byMethod.get('createWebhook')).toBe('POST /v1/webhooks');
    expect(byMethod.get('listWebhooks')).toBe('GET /v1/webhooks');
  });

  it('sends the bearer token, JSON bodies, encoded path parameters and query strings', async () => {
    const c = createClient({ url: base, token: 'nsv_test' });
    log.length = 0;
    for (const run of Object.values(calls)) await run(c);
    for (const r of log) {
      expect(r.headers.authorization).toBe('Bearer nsv_test');
      expect(r.headers.accept).toBe('application/json');
      if (r.body) expect(r.headers['content-type']).toBe('application/json');
    }
    const find = (method: string, prefix: string) => log.find((r) => r.method === method && r.url.startsWith(prefix))!;
    expect(JSON.parse(find('POST', '/v1/allowances/verify').body)).toEqual({ credential: 'a.b.c' });
    expect(JSON.parse(find('POST', `/v1/streams/${ENC}/vouchers`).body)).toEqual({ voucher: 'v.o.u', credential: 'a.b.c' });
    expect(JSON.parse(find('POST', '/v1/control').body)).toEqual({ message: 'c.t.l' });
    expect(JSON.parse(find('POST', '/v1/webhooks').body)).toEqual({ url: 'http://127.0.0.1:1/hook', events: ['budget.halted'], schemaVersion: '1.0.0' });
    expect(JSON.parse(find('POST', `/v1/webhooks/${ENC}/rotate-secret`).body)).toEqual({ overlapSeconds: 60 });
    expect(JSON.parse(find('POST', `/v1/events/${ENC}/redeliver`).body)).toEqual({ subscription: 'whk_1' });
    expect(find('GET', '/v1/streams?').url).toBe('/v1/streams?limit=5&cursor=cur&status=open&sort=activity');
    expect(find('GET', '/v1/events').url).toBe('/v1/events?type=budget.halted&limit=3');
    expect(find('GET', `/v1/webhooks/${ENC}/deliveries`).url).toBe(`/v1/webhooks/${ENC}/deliveries?limit=2`);
    expect(find('DELETE', `/v1/webhooks/${ENC}`).body).toBe('');
    // Every path parameter arrived encoded: no raw slash or space split a path.
    for (const r of log) expect(r.url).not.toContain(' ');
  });

  it('without a token no authorization header is sent; optional arguments are left out', async () => {
    const c = createClient({ url: base });
    log.length = 0;
    await c.listStreams();
    await c.submitVoucher('s1', 'v.o.u');
    await c.rotateWebhookSecret('w1');
    await c.redeliverEvent('e1');
    expect(log.map((r) => r.headers.authorization)).toEqual([undefined, undefined, undefined, undefined]);
    expect(log[0]!.url).toBe('/v1/streams');
    expect(JSON.parse(log[1]!.body)).toEqual({ voucher: 'v.o.u' });
    expect(JSON.parse(log[2]!.body)).toEqual({});
    expect(JSON.parse(log[3]!.body)).toEqual({});
  });
});

describe('createClient answers', () => {
  it('204 resolves to undefined; 200 resolves to the parsed JSON', async () => {
    const c = createClient({ url: base });
    answer = (r) => (r.method === 'DELETE' ? { status: 204 } : { status: 200, body: '{"data":[],"nextCursor":null}' });
    await expect(c.deleteWebhook('w1')).resolves.toBeUndefined();
    await expect(c.listStreams()).resolves.toEqual({ data: [], nextCursor: null });
  });

  it('a problem+json answer is thrown as ApiError with its code, status and extra members', async () => {
    const c = createClient({ url: base });
    answer = () => ({
      status: 404,
      type: 'application/problem+json',
      body: JSON.stringify({ type: 'urn:node-svc:problem:not_found', title: 'Not Found', status: 404, detail: 'no stream s9', code: 'not_found', stream: 's9' }),
    });
    const err = await c.headroom('s9').then(() => undefined, (e: unknown) => e);
    expect(err).toBeInstanceOf(ApiError);
    expect(err).toMatchObject({ code: 'not_found', status: 404, message: 'no stream s9', problem: { stream: 's9' } });
  });

  it('a body that is not JSON, or an error without a problem, is an internal error; an unreachable daemon is unavailable', async () => {
    const c = createClient({ url: base });
    answer = () => ({ status: 200, body: '<html>', type: 'text/html' });
    await expect(c.listWebhooks()).rejects.toMatchObject({ code: 'internal' });
    answer = () => ({ status: 500, body: '{"oops":true}' });
    await expect(c.listWebhooks()).rejects.toMatchObject({ code: 'internal' });
    const dead = createServer();
    await new Promise<void>((r) => dead.listen(0, '127.0.0.1', r));
    const port = (dead.address() as AddressInfo).port;
    await new Promise((r) => dead.close(r));
    await expect(createClient({ url: `http://127.0.0.1:${port}` }).listWebhooks()).rejects.toMatchObject({ code: 'unavailable' });
    answer = (r) => (r.method === 'DELETE' ? { status: 204 } : { status: 200, body: '{}' });
  });
});
