// Issue #12: hostile input against the real daemon and CLI — SSRF through IPv6 notations at subscription time,
// terminal escapes through stored fields, secrets in logs (JWKS URL queries).
import { inspectStore, type Inspector } from '../helpers/inspect.js';
import { storeUrlFor } from '../helpers/postgres.js';
import { createServer, request as httpRequest, type Server } from 'node:http';
import type { AddressInfo } from 'node:net';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { list as webhooksList } from '../../src/cli/commands/webhooks.js';
import { render, renderError } from '../../src/cli/output.js';
import { NodeSvcError } from '../../src/domain/errors.js';
import { cliFor, tempDataDir, type TempDataDir } from '../helpers/cli.js';
import { clientOf, setupNodes, startDaemon, type RunningDaemon } from '../helpers/daemon.js';
import { keyPair, publicJwks } from '../helpers/issuer.js';
import { waitFor } from '../helpers/wait.js';

const CONTROL = /[\u0000-\u0009\u000b-\u001f\u007f-\u009f]/;

describe('hostile input, end to end', () => {
  let tmp: TempDataDir;
  let daemon: RunningDaemon;
  let tokenA: string;
  let jwks: Server;
  let c: ReturnType<typeof clientOf>;

  beforeAll(async () => {
    tmp = await tempDataDir();
    ({ tokenA } = await setupNodes(tmp.dataDir, await keyPair()));
    // A JWKS URL whose query carries a secret; it serves the keys once, then fails: every refresh logs the failure.
    let served = 0;
    const body = JSON.stringify(publicJwks(await keyPair('EdDSA', 'url-key')));
    jwks = createServer((_q, res) => (served++ === 0 ? res.writeHead(200, { 'content-type': 'application/json' }).end(body) : res.writeHead(500).end('down')));
    await new Promise<void>((r) => jwks.listen(0, '127.0.0.1', () => r()));
    const port = (jwks.address() as AddressInfo).port;
    const add = await cliFor(tmp.dataDir)('keys', 'add', '--issuer', 'https://other-issuer.test', `http://127.0.0.1:${port}/jwks?access_token=S3CRET-TOKEN`);
    expect(add.code, add.stderr).toBe(0);
    expect(add.stderr + add.stdout).not.toMatch(/S3CRET/);
    daemon = await startDaemon(tmp.dataDir, { env: { NODE_SVC_KEYS_REFRESH: '1s' } });
    c = clientOf(daemon.url, tokenA);
  }, 60_000);

  afterAll(async () => {
    await daemon?.stop();
    await new Promise<void>((r) => jwks.close(() => r()));
    await tmp.cleanup();
  });

  describe('SSRF: IPv6 forms embedding the metadata address are refused at subscription time', () => {
    for (const host of ['[64:ff9b::a9fe:a9fe]', '[64:ff9b::169.254.169.254]', '[2002:a9fe:a9fe::1]', '[::a9fe:a9fe]', '[::ffff:a9fe:a9fe]', '[64:ff9b:1::a9fe:a9fe]', '[2001:0:4136:e378:8000:63bf:5601:5601]', '0xa9.0xfe.0xa9.0xfe', '2852039166'])
      it(`refuses http://${host}/`, async () => {
        const r = await c.post('/v1/webhooks', { url: `http://${host}/` });
        // The URL matches the document (a string); the target rule it names refuses it: 422, named.
        expect(r.status, r.text).toBe(422);
        expect(r.body).toMatchObject({ code: 'request_refused', refusal: 'url_target_refused' });
        expect(r.body.detail).toMatch(/not an allowed webhook target/);
      });
  });

  describe('control characters', () => {
    it('refuses them in url and in description with a 400 naming the field', async () => {
      const u = await c.post('/v1/webhooks', { url: 'http://127.0.0.1:9/\u001b]0;PWNED\u0007\u001b[2J\r\nX', description: 'ok' });
      expect(u.status, u.text).toBe(400);
      expect(u.body.detail).toMatch(/url: must not contain control characters/);
      const d = await c.post('/v1/webhooks', { url: 'http://127.0.0.1:9/ok', description: '\u001b[5m' });
      expect(d.status, d.text).toBe(400);
      expect(d.body.detail).toMatch(/description: must not contain control characters/);
      expect(d.body.issues).toEqual([{ path: 'description', message: 'must not contain control characters' }]);
    });

    it('stores and answers the normalised URL', async () => {
      const r = await c.post('/v1/webhooks', { url: 'HTTP://LocalHost:80/a/./b/../c?x=1' });
      expect(r.status, r.text).toBe(201);
      expect(r.body.url).toBe('http://localhost/a/c?x=1');
      const listed = await c.get('/v1/webhooks');
      expect(listed.body.data.map((s: { url: string }) => s.url)).toContain('http://localhost/a/c?x=1');
    });

    it('human output escapes whatever is in the store (a row written before the check existed)', async () => {
      const db = inspectStore(tmp.dataDir);
      const now = Date.now();
      db.prepare(`INSERT INTO webhook_subscriptions(id, node_id, url, events, schema_version, description, status, secret, created_at, updated_at)
        VALUES ('whk_HOSTILE', 'node-a', ?, '*', '1.1.0', ?, 'active', 'whsec_x', ?, ?)`)
        .run('http://127.0.0.1:9/\u001b]0;PWNED\u0007\u001b[2J\r\nX', '\u001b[5m', now, now);
      db.close();
      const result = await webhooksList({ url: daemon.url, token: tokenA });
      const human = render(result, false);
      expect(human).toContain('whk_HOSTILE');
      expect(human).not.toMatch(CONTROL);
      expect(human).toContain('\\x1b]0;PWNED\\x07\\x1b[2J\\r\\nX');
      // one header line and one line per subscription: the stored \r\n did not start a line of its own
      expect(human.trimEnd().split('\n')).toHaveLength(1 + (result.data as { data: unknown[] }).data.length);
    });

    it('the watch TUI gets the stored row escaped', async () => {
      const { fetchSnapshot } = await import('../../src/tui/snapshot.js');
      const { createClient } = await import('../../src/sdk/client.js');
      const snap = await fetchSnapshot(createClient({ url: daemon.url, token: tokenA }));
      const row = snap.webhooks.find((w) => w.id === 'whk_HOSTILE')!;
      expect(row.url).toBe('http://127.0.0.1:9/\\x1b]0;PWNED\\x07\\x1b[2J\\r\\nX');
      expect(JSON.stringify(snap)).not.toMatch(/\\u001b|\\u0007/);
    });

    it('errors shown to a person are escaped too', () => {
      const out = renderError(new NodeSvcError('invalid_request', 'bad \u001b[2J thing'), false);
      expect(out).not.toMatch(CONTROL);
      expect(out).toContain('\\x1b[2J');
    });
  });

  describe('the contract says what the server does', () => {
    // fetch refuses TRACE: node:http sends any method.
    const nodeRequest = (method: string, path: string) =>
      new Promise<{ status: number; headers: Record<string, string | string[] | undefined>; body: string }>((res, rej) => {
        const req = httpRequest(`${daemon.url}${path}`, { method, headers: { authorization: `Bearer ${tokenA}` } }, (r) => {
          let body = '';
          r.setEncoding('utf8').on('data', (c: string) => { body += c; }).on('end', () => res({ status: r.statusCode!, headers: r.headers, body }));
        });
        req.once('error', rej).end();
      });
    const raw = (path: string, init: RequestInit = {}) =>
      fetch(`${daemon.url}${path}`, { ...init, headers: { authorization: `Bearer ${tokenA}`, ...(init.headers as Record<string, string>) } });

    it('a method a path does not serve is 405 with Allow, as problem+json', async () => {
      for (const [method, path, allow] of [
        ['TRACE', '/v1/webhooks', 'GET, HEAD, POST'],
        ['PUT', '/v1/webhooks/whk_x', 'DELETE'],
        ['PATCH', '/v1/streams/s1/headroom', 'GET, HEAD'],
        ['DELETE', '/healthz', 'GET, HEAD'],
      ] as const) {
        const r = await nodeRequest(method, path);
        expect(r.status, `${method} ${path}`).toBe(405);
        expect(r.headers.allow).toBe(allow);
        expect(r.headers['content-type']).toMatch(/^application\/problem\+json/);
        expect(JSON.parse(r.body).code).toBe('method_not_allowed');
      }
      expect((await nodeRequest('TRACE', '/v1/nothing-here')).status).toBe(404);
      // A served method on a route's path with a trailing slash: no such route (not a 405 that allows the method).
      for (const [method, path] of [['GET', '/v1/webhooks/'], ['POST', '/v1/allowances/verify/'], ['GET', '/v1/streams/s1/headroom/']] as const) {
        const r = await nodeRequest(method, path);
        expect(r.status, `${method} ${path}`).toBe(404);
        expect(JSON.parse(r.body).code).toBe('not_found');
      }
    });

    it('unknown query parameters are a 400 naming them, on every operation', async () => {
      for (const path of ['/v1/streams?limit=1&bogus=1', '/v1/events?colour=red', '/v1/webhooks?x=1', '/v1/streams/s1/headroom?verbose=1']) {
        const r = await raw(path);
        expect(r.status, path).toBe(400);
        const body = await r.json();
        expect(body.detail, path).toMatch(/unknown query parameter: "(bogus|colour|x|verbose)"/);
      }
      expect((await raw('/v1/streams?limit=1')).status).toBe(200);
    });

    it('an events cursor this API did not give out is the documented 422 cursor_unknown', async () => {
      const r = await raw(`/v1/events?cursor=${'A'.repeat(32)}`);
      expect(r.status).toBe(422);
      const body = await r.json();
      expect(body).toMatchObject({ code: 'request_refused', refusal: 'cursor_unknown' });
      expect(body.detail).toMatch(/cursor is not a cursor this API gave out/);
    });

    it('a body that is not valid UTF-8 is a 400, not replacement characters', async () => {
      const body = Buffer.concat([Buffer.from('{"url":"http://127.0.0.1:9/'), Buffer.from([0xff, 0xfe]), Buffer.from('","description":"x"}')]);
      const r = await raw('/v1/webhooks', { method: 'POST', headers: { 'content-type': 'application/json' }, body });
      expect(r.status).toBe(400);
      expect((await r.json()).detail).toBe('request body is not valid UTF-8');
    });
  });

  describe('secrets in logs', () => {
    it('a failing JWKS refresh never logs the URL query or userinfo', async () => {
      await waitFor(async () => /issuer keys not refreshed/.test(daemon.stderr), 'a failed refresh logged', 15_000, 200);
      expect(daemon.stderr).toMatch(/127\.0\.0\.1:\d+\/jwks\?\*\*\*/);
      expect(daemon.stderr).not.toMatch(/S3CRET|pw-/);
    });

    it('the CLI shows the source redacted, and a failing fetch names the URL without its secrets', async () => {
      const { list } = await import('../../src/cli/commands/keys.js');
      const human = render(await list({ dataDir: tmp.dataDir, store: await storeUrlFor(tmp.dataDir) }), false);
      expect(human).toMatch(/http:\/\/127\.0\.0\.1:\d+\/jwks\?\*\*\*/);
      expect(human).not.toMatch(/S3CRET|pw-/);
      const again = await cliFor(tmp.dataDir)('keys', 'add', '--issuer', 'https://third.test', `http://u:pw-S3CRET@127.0.0.1:${(jwks.address() as AddressInfo).port}/jwks?access_token=S3CRET-2`);
      expect(again.code).not.toBe(0);
      expect(again.stderr).not.toMatch(/S3CRET|pw-/);
    });
  });
});
