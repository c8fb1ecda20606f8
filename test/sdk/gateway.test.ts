// The gateway plugins inside real apps of their frameworks, imported through the public exports
// (node-svc/gateway/hono|express|fastify): Hono via app.request, Express 5 listening on 127.0.0.1:0,
// Fastify 5 via app.inject. Vouchers are forwarded to a recording node:http server on 127.0.0.1.
import { createServer, type IncomingHttpHeaders, type Server } from 'node:http';
import type { AddressInfo } from 'node:net';
import express from 'express';
import Fastify from 'fastify';
import { Hono } from 'hono';
import { KeySet } from 'node-svc/sdk';
import { allowance as expressAllowance } from 'node-svc/gateway/express';
import { allowance as fastifyAllowance } from 'node-svc/gateway/fastify';
import { allowance as honoAllowance, type AllowanceEnv, type GatewayOptions } from 'node-svc/gateway/hono';
import { afterAll, beforeAll, describe, expect, it, vi } from 'vitest';
import { ISSUER, keyPair, mintCredential, NODE, nowSeconds, trusted, type KeyPair } from '../helpers/issuer.js';

vi.setConfig({ testTimeout: 30_000, hookTimeout: 30_000 });

interface Answer {
  status: number;
  headers: Record<string, string>;
  body: any;
}
interface Harness {
  request(path: string, headers?: Record<string, string>): Promise<Answer>;
  close(): Promise<void>;
}
type Start = (opts: GatewayOptions) => Promise<Harness>;

const parse = (text: string) => {
  try {
    return JSON.parse(text);
  } catch {
    return text;
  }
};

const FRAMEWORKS: Record<string, Start> = {
  hono: async (opts) => {
    const app = new Hono<AllowanceEnv>();
    app.get('/free', (c) => c.json({ free: true }));
    app.use('/paid/*', honoAllowance(opts));
    app.get('/paid/x', (c) => c.json({ allowance: c.get('allowance') }));
    return {
      async request(path, headers = {}) {
        const res = await app.request(path, { headers });
        return { status: res.status, headers: Object.fromEntries(res.headers), body: parse(await res.text()) };
      },
      async close() {},
    };
  },
  express: async (opts) => {
    const app = express();
    app.get('/free', (_req, res) => void res.json({ free: true }));
    app.use('/paid', expressAllowance(opts) as unknown as express.RequestHandler);
    app.get('/paid/x', (req, res) => void res.json({ allowance: (req as unknown as { allowance: unknown }).allowance }));
    const server = await new Promise<Server>((resolve) => {
      const s = app.listen(0, '127.0.0.1', () => resolve(s));
    });
    const base = `http://127.0.0.1:${(server.address() as AddressInfo).port}`;
    return {
      async request(path, headers = {}) {
        const res = await fetch(`${base}${path}`, { headers });
        return { status: res.status, headers: Object.fromEntries(res.headers), body: parse(await res.text()) };
      },
      async close() {
        server.closeAllConnections();
        await new Promise((r) => server.close(r));
      },
    };
  },
  fastify: async (opts) => {
    const app = Fastify();
    await app.register(async (paid) => {
      await paid.register(fastifyAllowance as never, opts);
      paid.get('/paid/x', async (req) => ({ allowance: (req as unknown as { allowance: unknown }).allowance }));
    });
    app.get('/free', async () => ({ free: true }));
    await app.ready();
    return {
      async request(path, headers = {}) {
        const res = await app.inject({ method: 'GET', url: path, headers });
        return { status: res.statusCode, headers: res.headers as Record<string, string>, body: parse(res.body) };
      },
      close: () => app.close(),
    };
  },
};

let ed: KeyPair;
let es: KeyPair;
let stranger: KeyPair;
let keys: KeySet;

// The voucher target: records every request, answers after `delayMs`.
let target: Server;
let targetUrl: string;
const forwarded: Array<{ method: string; url: string; headers: IncomingHttpHeaders; body: string; at: number }> = [];
let delayMs = 0;

beforeAll(async () => {
  ed = await keyPair('EdDSA');
  es = await keyPair('ES256');
  stranger = await keyPair('EdDSA', ed.kid);
  keys = new KeySet([trusted(ed), trusted(es)]);
  target = createServer((req, res) => {
    const chunks: Buffer[] = [];
    req.on('data', (c: Buffer) => chunks.push(c));
    req.on('end', () => {
      forwarded.push({ method: req.method!, url: req.url!, headers: req.headers, body: Buffer.concat(chunks).toString('utf8'), at: Date.now() });
      setTimeout(() => {
        res.writeHead(200, { 'content-type': 'application/json' });
        res.end('{"accepted":true}');
      }, delayMs);
    });
  });
  await new Promise<void>((r) => target.listen(0, '127.0.0.1', r));
  targetUrl = `http://127.0.0.1:${(target.address() as AddressInfo).port}`;
});
afterAll(async () => {
  target.closeAllConnections();
  await new Promise((r) => target.close(r));
});

const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));
async function until<T>(fn: () => T | undefined, ms = 10_000): Promise<T> {
  const end = Date.now() + ms;
  for (;;) {
    const v = fn();
    if (v !== undefined) return v;
    if (Date.now() > end) throw new Error('condition not reached');
    await sleep(20);
  }
}

function expect402(r: Answer, refusal: string) {
  expect(r.status, JSON.stringify(r.body)).toBe(402);
  expect(r.headers['content-type']).toMatch(/^application\/problem\+json/);
  expect(r.headers['www-authenticate']).toMatch(/realm="node-svc"/);
  expect(r.body).toMatchObject({ status: 402, code: 'credential_refused', valid: false, refusal, detail: expect.any(String), title: expect.any(String), type: expect.any(String) });
  expect(r.body.allowance).toBeUndefined();
}

describe.each(Object.keys(FRAMEWORKS))('gateway/%s in a real app', (name) => {
  const start = FRAMEWORKS[name]!;
  let app: Harness;
  beforeAll(async () => {
    app = await start({ keys, audience: NODE });
  });
  afterAll(async () => {
    await app?.close();
  });

  it('a valid Allowance credential passes and the handler sees the payload', async () => {
    const now = nowSeconds();
    const jws = mintCredential({ key: ed, now, claims: { jti: `cred-${name}` } });
    const r = await app.request('/paid/x', { authorization: `Allowance ${jws}` });
    expect(r.status, JSON.stringify(r.body)).toBe(200);
    expect(r.body.allowance).toEqual({
      valid: true,
      credentialId: `cred-${name}`,
      issuer: ISSUER,
      payer: 'payer-1',
      node: NODE,
      stream: 'stream-1',
      budget: 'budget-1',
      capMicro: '5000000',
      asset: 'USDC',
      unitPriceMicro: '25',
      rateMicroPerSecond: '1000',
      mode: 'escrow',
      issuedAt: new Date(now * 1000).toISOString(),
      expiresAt: new Date((now + 3600) * 1000).toISOString(),
    });
    // ES256 too, and the scheme is case-insensitive.
    const r2 = await app.request('/paid/x', { authorization: `allowance ${mintCredential({ key: es })}` });
    expect(r2.status).toBe(200);
    expect(r2.body.allowance).toMatchObject({ valid: true, node: NODE });
  });

  it('routes outside the guard are untouched', async () => {
    const r = await app.request('/free');
    expect(r.status).toBe(200);
    expect(r.body).toEqual({ free: true });
  });

  it('no header → 402 malformed', async () => {
    expect402(await app.request('/paid/x'), 'malformed');
  });

  it('another scheme → 402 malformed', async () => {
    const jws = mintCredential({ key: ed });
    expect402(await app.request('/paid/x', { authorization: `Bearer ${jws}` }), 'malformed');
    expect402(await app.request('/paid/x', { authorization: jws }), 'malformed');
    expect402(await app.request('/paid/x', { authorization: 'Allowance' }), 'malformed');
  });

  it('expired → 402 expired', async () => {
    expect402(await app.request('/paid/x', { authorization: `Allowance ${mintCredential({ key: ed, now: nowSeconds() - 7200 })}` }), 'expired');
  });

  it('another audience → 402 wrong_audience', async () => {
    expect402(await app.request('/paid/x', { authorization: `Allowance ${mintCredential({ key: ed, claims: { aud: 'node-b' } })}` }), 'wrong_audience');
  });

  it('a bad signature → 402 bad_signature; garbage → 402 malformed', async () => {
    expect402(await app.request('/paid/x', { authorization: `Allowance ${mintCredential({ key: ed, signWith: stranger.privateKey })}` }), 'bad_signature');
    expect402(await app.request('/paid/x', { authorization: 'Allowance not.a.jws!' }), 'malformed');
  });

  it('a custom header (with no scheme, or a custom one)', async () => {
    const raw = await start({ keys, audience: NODE, header: 'X-Allowance', scheme: '' });
    const custom = await start({ keys, audience: NODE, header: 'x-pay', scheme: 'Token' });
    try {
      const jws = mintCredential({ key: ed });
      const ok = await raw.request('/paid/x', { 'x-allowance': jws });
      expect(ok.status, JSON.stringify(ok.body)).toBe(200);
      expect(ok.body.allowance).toMatchObject({ valid: true });
      // The default header is not looked at any more.
      expect402(await raw.request('/paid/x', { authorization: `Allowance ${jws}` }), 'malformed');
      expect((await custom.request('/paid/x', { 'x-pay': `Token ${jws}` })).status).toBe(200);
      expect402(await custom.request('/paid/x', { 'x-pay': `Allowance ${jws}` }), 'malformed');
      expect402(await custom.request('/paid/x', { 'x-pay': `Token ${mintCredential({ key: ed, now: nowSeconds() - 7200 })}` }), 'expired');
    } finally {
      await raw.close();
      await custom.close();
    }
  });

  it('forwardVouchers posts the voucher off the request path (a slow target does not delay the answer)', async () => {
    const fwd = await start({ keys, audience: NODE, forwardVouchers: { url: `${targetUrl}/`, token: 'nsv_gateway' } });
    try {
      delayMs = 1500;
      forwarded.length = 0;
      const stream = `st:${name}@1+x=y`; // characters the path must encode
      const jws = mintCredential({ key: ed, claims: { stream } });
      const voucher = `voucher-${name}.payload.sig`;
      const t0 = Date.now();
      const r = await fwd.request('/paid/x', { authorization: `Allowance ${jws}`, 'x-allowance-voucher': voucher });
      const took = Date.now() - t0;
      expect(r.status).toBe(200);
      expect(took).toBeLessThan(delayMs / 2);
      const got = await until(() => forwarded[0]);
      expect(got.method).toBe('POST');
      expect(got.url).toBe(`/v1/streams/${encodeURIComponent(stream)}/vouchers`);
      expect(got.headers.authorization).toBe('Bearer nsv_gateway');
      expect(got.headers['content-type']).toMatch(/^application\/json/);
      expect(JSON.parse(got.body)).toEqual({ voucher, credential: jws });

      // A second request while the first forward is still waiting on the slow target: answered at once too.
      const t1 = Date.now();
      const r2 = await fwd.request('/paid/x', { authorization: `Allowance ${jws}`, 'x-allowance-voucher': `${voucher}-2` });
      expect(r2.status).toBe(200);
      expect(Date.now() - t1).toBeLessThan(delayMs / 2);
      const second = await until(() => forwarded[1]);
      expect(JSON.parse(second.body)).toEqual({ voucher: `${voucher}-2`, credential: jws });

      // No voucher header, or a refused credential: nothing is forwarded.
      delayMs = 0;
      expect((await fwd.request('/paid/x', { authorization: `Allowance ${jws}` })).status).toBe(200);
      expect402(await fwd.request('/paid/x', { authorization: `Allowance ${mintCredential({ key: ed, now: nowSeconds() - 7200 })}`, 'x-allowance-voucher': 'v.x.y' }), 'expired');
      await sleep(300);
      expect(forwarded).toHaveLength(2);
    } finally {
      delayMs = 0;
      await fwd.close();
    }
  });

  it('forwardVouchers with a custom voucher header', async () => {
    const fwd = await start({ keys, audience: NODE, forwardVouchers: { url: targetUrl, token: 't2', voucherHeader: 'X-Voucher' } });
    try {
      forwarded.length = 0;
      const jws = mintCredential({ key: ed });
      expect((await fwd.request('/paid/x', { authorization: `Allowance ${jws}`, 'x-allowance-voucher': 'ignored' })).status).toBe(200);
      expect((await fwd.request('/paid/x', { authorization: `Allowance ${jws}`, 'x-voucher': 'vv' })).status).toBe(200);
      const got = await until(() => forwarded[0]);
      expect(JSON.parse(got.body)).toEqual({ voucher: 'vv', credential: jws });
      await sleep(200);
      expect(forwarded).toHaveLength(1);
    } finally {
      await fwd.close();
    }
  });
});

describe('gateway options', () => {
  it('are validated when the middleware is created', () => {
    for (const make of [honoAllowance, expressAllowance]) {
      expect(() => make({} as never)).toThrow(TypeError);
      expect(() => make({ keys } as never)).toThrow(TypeError);
      expect(() => make({ audience: NODE } as never)).toThrow(TypeError);
    }
  });

  it('fastify registration with bad options fails at ready()', async () => {
    const app = Fastify();
    app.register(fastifyAllowance as never, { audience: NODE } as never);
    await expect(app.ready()).rejects.toThrow(TypeError);
    await app.close().catch(() => undefined);
  });
});
