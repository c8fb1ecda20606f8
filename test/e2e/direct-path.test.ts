// The direct path (src/api/fast.ts) answers the plain form of POST /v1/allowances/verify and POST
// /v1/streams/{id}/vouchers without Hono; a chunked body (no declared length) still goes through Hono. Every request
// below is sent both ways, one after the other, and the two answers must be the same: status, content type, the
// headers a client reads, and the body. Then what only one way can see: the request metric and the body checks.
import { request } from 'node:http';
import { connect } from 'node:net';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { tempDataDir, type TempDataDir } from '../helpers/cli.js';
import { setupNodes, startDaemon, type RunningDaemon } from '../helpers/daemon.js';
import { issuerKeyPair, keyPair, mintCredential, payerKeyPair, signVoucher, type KeyPair } from '../helpers/issuer.js';
import { waitFor } from '../helpers/wait.js';

interface Reply { status: number; type: string | undefined; auth: string | undefined; retry: string | undefined; body: string }

describe('the direct write path answers as Hono does', () => {
  let tmp: TempDataDir;
  let daemon: RunningDaemon;
  let token: string;
  let issuer: KeyPair;
  let payer: KeyPair;
  let stranger: KeyPair;

  /** POST `body` (bytes) to `path`: with its length declared (the direct path) or chunked (Hono). */
  type Options = { type?: string | string[]; auth?: string | null; host?: string };
  const post = (path: string, body: Buffer | string, o: Options & { chunked: boolean }): Promise<Reply> =>
    new Promise((resolve, reject) => {
      const bytes = Buffer.from(body);
      const headers: Record<string, string | string[]> = { 'content-type': o.type ?? 'application/json' };
      if (o.host !== undefined) headers.host = o.host;
      if (o.auth !== null) headers.authorization = o.auth ?? `Bearer ${token}`;
      if (!o.chunked) headers['content-length'] = String(bytes.length);
      const u = new URL(path, daemon.url);
      const req = request({ host: u.hostname, port: u.port, path: u.pathname + u.search, method: 'POST', headers }, (res) => {
        const chunks: Buffer[] = [];
        res.on('data', (c: Buffer) => chunks.push(c));
        res.on('end', () => resolve({
          status: res.statusCode!, type: res.headers['content-type'], auth: res.headers['www-authenticate'] as string | undefined,
          retry: res.headers['retry-after'] as string | undefined, body: Buffer.concat(chunks).toString('utf8'),
        }));
      });
      req.on('error', reject);
      if (o.chunked) req.write(bytes.subarray(0, 1)); // a first chunk on its own: the body is chunked, not one write
      req.end(o.chunked ? bytes.subarray(1) : bytes);
    });
  /** The request metric's series that moved during `f`, with how much. */
  const counted = async (f: () => Promise<Reply>) => {
    const series = async () => new Map((await (await fetch(`${daemon.url}/metrics`)).text()).split('\n')
      .filter((l) => l.startsWith('node_svc_http_requests_total{')).map((l) => [l.slice(0, l.lastIndexOf(' ')), Number(l.slice(l.lastIndexOf(' ') + 1))] as const));
    const before = await series();
    const reply = await f();
    const moved = [...(await series())].filter(([k, v]) => v !== (before.get(k) ?? 0)).map(([k, v]) => `${k} +${v - (before.get(k) ?? 0)}`);
    return { ...reply, counted: moved };
  };
  const both = async (path: string, body: Buffer | string, o: Options = {}) => {
    const direct = await counted(() => post(path, body, { ...o, chunked: false }));
    const hono = await counted(() => post(path, body, { ...o, chunked: true }));
    return { direct, hono };
  };
  const metric = async (route: string, status: number) => {
    const text = await (await fetch(`${daemon.url}/metrics`)).text();
    const line = text.split('\n').find((l) => l.startsWith('node_svc_http_requests_total{') && l.includes(`route="${route}"`) && l.includes('method="POST"') && l.includes(`status="${status}"`));
    return line ? Number(line.slice(line.lastIndexOf(' ') + 1)) : 0;
  };

  beforeAll(async () => {
    tmp = await tempDataDir();
    issuer = await issuerKeyPair();
    payer = await payerKeyPair();
    stranger = await keyPair('EdDSA', 'stranger');
    token = (await setupNodes(tmp.dataDir, issuer)).tokenA;
    daemon = await startDaemon(tmp.dataDir);
  }, 60_000);

  afterAll(async () => {
    await daemon?.stop();
    await tmp.cleanup();
  });

  it('POST /v1/allowances/verify: valid (a registered stream), refusals, bad bodies, bad tokens', async () => {
    const valid = mintCredential({ key: issuer, payer, claims: { stream: 'dp-1' } });
    expect((await post('/v1/allowances/verify', JSON.stringify({ credential: valid }), { chunked: false })).status).toBe(200); // registers it
    const cases: Array<[string, Buffer | string, Options?]> = [
      ['valid, registered', JSON.stringify({ credential: valid })],
      ['valid, with a charset', JSON.stringify({ credential: valid }), { type: 'application/json; charset=utf-8' }],
      ['valid, a space before the charset (Hono: 415)', JSON.stringify({ credential: valid }), { type: 'application/json ; charset=utf-8' }],
      ['valid, spaces around "=" (Hono: 415)', JSON.stringify({ credential: valid }), { type: 'application/json; charset = utf-8' }],
      ['valid, two content types', JSON.stringify({ credential: valid }), { type: ['application/json', 'text/plain'] }],
      ['valid, a Host header node-server refuses', JSON.stringify({ credential: valid }), { host: 'a@b' }],
      ['valid, a Host header in capitals', JSON.stringify({ credential: valid }), { host: 'LOCALHOST' }],
      ['valid, another JSON media type', JSON.stringify({ credential: valid }), { type: 'application/vnd.api+json' }],
      ['unknown key', JSON.stringify({ credential: mintCredential({ key: stranger, claims: { stream: 'dp-x' } }) })],
      ['wrong audience', JSON.stringify({ credential: mintCredential({ key: issuer, claims: { stream: 'dp-y', aud: 'node-b' } }) })],
      ['not a JWS', JSON.stringify({ credential: 'not-a-jws' })],
      ['empty credential', JSON.stringify({ credential: '' })],
      ['credential not a string', JSON.stringify({ credential: 42 })],
      ['unknown member', JSON.stringify({ credential: valid, extra: 1 })],
      ['no members', '{}'],
      ['an array', '[]'],
      ['malformed JSON', '{"credential":'],
      ['empty body', ''],
      ['invalid UTF-8', Buffer.from([0x7b, 0x22, 0xff, 0xfe, 0x22, 0x7d])],
      ['no token', JSON.stringify({ credential: valid }), { auth: null }],
      ['unknown token', JSON.stringify({ credential: valid }), { auth: 'Bearer nsv_nope' }],
      ['not a bearer', JSON.stringify({ credential: valid }), { auth: 'Basic abc' }],
    ];
    for (const [what, body, o] of cases) {
      const { direct, hono } = await both('/v1/allowances/verify', body, o);
      expect({ what, ...direct }).toEqual({ what, ...hono });
    }
  });

  it('POST /v1/streams/{id}/vouchers: accepted, stale, refusals, bad ids and bodies', async () => {
    const stream = 'dp-v';
    expect((await post('/v1/allowances/verify', JSON.stringify({ credential: mintCredential({ key: issuer, payer, claims: { stream } }) }), { chunked: false })).status).toBe(200);
    const voucher = (amount: number, s = stream) => signVoucher(payer, { stream: s, amount: String(amount), units: String(amount / 25) });
    // Accepted both ways (each its own amount), the same answer apart from the amounts and the voucher's hash.
    const first = await post(`/v1/streams/${stream}/vouchers`, JSON.stringify({ voucher: voucher(1000) }), { chunked: false });
    const second = await post(`/v1/streams/${stream}/vouchers`, JSON.stringify({ voucher: voucher(2000) }), { chunked: true });
    expect(first.status).toBe(200);
    expect(second.status).toBe(200);
    const shape = (r: Reply) => ({ ...r, body: { ...JSON.parse(r.body), billedMicro: '-', billedUnits: '-', remainingCapMicro: '-', voucherHash: '-' } });
    expect(shape(first)).toEqual(shape(second));
    expect(JSON.parse(first.body)).toMatchObject({ accepted: true, billedMicro: '1000' });
    expect(JSON.parse(second.body)).toMatchObject({ accepted: true, billedMicro: '2000' });
    const cases: Array<[string, string, Buffer | string, Options?]> = [
      ['a dot segment for the id', '..', JSON.stringify({ voucher: voucher(5000) })],
      ['a single dot for the id', '.', JSON.stringify({ voucher: voucher(5000) })],
      ['a backslash in the id', 'a\\b', JSON.stringify({ voucher: voucher(5000) })],
      ['a Host header node-server refuses', stream, JSON.stringify({ voucher: voucher(5000) }), { host: 'x:99999' }],
      ['stale', stream, JSON.stringify({ voucher: voucher(1500) })],
      ['wrong stream', stream, JSON.stringify({ voucher: voucher(3000, 'other') })],
      ['over the cap', stream, JSON.stringify({ voucher: voucher(9_000_000) })],
      ['bad signature', stream, JSON.stringify({ voucher: signVoucher(stranger, { stream, amount: '4000', units: '1' }) })],
      ['not a JWS', stream, JSON.stringify({ voucher: 'x.y' })],
      ['unknown stream', 'dp-none', JSON.stringify({ voucher: voucher(1000, 'dp-none') })],
      ['id too long', 'i'.repeat(257), JSON.stringify({ voucher: voucher(5000) })],
      ['id too long and malformed JSON', 'i'.repeat(257), '{'],
      ['unknown member', stream, JSON.stringify({ voucher: voucher(5000), amount: 1 })],
      ['voucher missing', stream, '{}'],
      ['voucher a number', stream, JSON.stringify({ voucher: 5 })],
      ['malformed JSON', stream, '{"voucher"'],
      ['invalid UTF-8', stream, Buffer.from([0x7b, 0xc3, 0x28, 0x7d])],
      ['no token', stream, JSON.stringify({ voucher: voucher(5000) }), { auth: null }],
    ];
    for (const [what, id, body, o] of cases) {
      const { direct, hono } = await both(`/v1/streams/${id}/vouchers`, body, o);
      expect({ what, ...direct }).toEqual({ what, ...hono });
    }
    // Nothing above billed anything more.
    const f = await (await fetch(`${daemon.url}/v1/streams/${stream}/finality`, { headers: { authorization: `Bearer ${token}` } })).json();
    expect(f.billedTruth.amountMicro).toBe('2000');
  });

  it('a client that leaves: a body cut off is dropped, a body sent whole is billed; the daemon answers on', async () => {
    const stream = 'dp-gone';
    expect((await post('/v1/allowances/verify', JSON.stringify({ credential: mintCredential({ key: issuer, payer, claims: { stream } }) }), { chunked: false })).status).toBe(200);
    const finality = async () => (await (await fetch(`${daemon.url}/v1/streams/${stream}/finality`, { headers: { authorization: `Bearer ${token}` } })).json()).billedTruth.amountMicro;
    const raw = (text: string) => new Promise<void>((resolve, reject) => {
      const u = new URL(daemon.url);
      const sock = connect(Number(u.port), u.hostname, () => sock.end(text, () => { sock.destroy(); resolve(); }));
      sock.on('error', reject);
    });
    const head = (length: number) => `POST /v1/streams/${stream}/vouchers HTTP/1.1\r\nhost: 127.0.0.1\r\nauthorization: Bearer ${token}\r\ncontent-type: application/json\r\ncontent-length: ${length}\r\n\r\n`;
    const cut = JSON.stringify({ voucher: signVoucher(payer, { stream, amount: '1000', units: '40' }) });
    await raw(head(cut.length) + cut.slice(0, cut.length >> 1));
    const whole = JSON.stringify({ voucher: signVoucher(payer, { stream, amount: '2000', units: '80' }) });
    await raw(head(whole.length) + whole);
    await waitFor(async () => (await finality()) === '2000', 'the whole voucher billed', 5_000, 20);
    // Still serving: the next voucher is judged on what the whole one billed.
    const next = await post(`/v1/streams/${stream}/vouchers`, JSON.stringify({ voucher: signVoucher(payer, { stream, amount: '3000', units: '120' }) }), { chunked: false });
    expect(JSON.parse(next.body)).toMatchObject({ accepted: true, billedMicro: '3000' });
  });

  it('counts its requests under the route, as Hono does, and leaves other forms to Hono', async () => {
    const before = await metric('/v1/allowances/verify', 422);
    const body = JSON.stringify({ credential: 'not-a-jws' });
    await post('/v1/allowances/verify', body, { chunked: false });
    await post('/v1/allowances/verify', body, { chunked: true });
    expect(await metric('/v1/allowances/verify', 422)).toBe(before + 2);
    // Another media type, a query, a trailing slash: Hono's answers (415, 400 naming the query parameter, 404).
    expect((await post('/v1/allowances/verify', body, { chunked: false, type: 'text/plain' })).status).toBe(415);
    const query = await post('/v1/allowances/verify?x=1', body, { chunked: false });
    expect(query.status).toBe(400);
    expect(JSON.parse(query.body).detail).toMatch(/x/);
    expect((await post('/v1/allowances/verify/', body, { chunked: false })).status).toBe(404);
  });
});
