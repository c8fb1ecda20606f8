// Idle keep-alive connections (README "Operations", --keep-alive-timeout): the daemon keeps an idle connection
// open 65 s by default, longer than the clients and proxies that reuse connections, so it is never the side that closes
// one as the client sends its next request on it (that request fails with ECONNRESET: bench/headroom lost 11 of 10,000
// on Node's default of 5 s). A drain (SIGTERM) does not wait for that timeout. The real daemon, a node:http client.
import { Agent, request, type IncomingMessage } from 'node:http';
import { connect, type Socket } from 'node:net';
import { afterAll, beforeAll, describe, expect, it, vi } from 'vitest';
import { runCli, tempDataDir, type TempDataDir } from '../helpers/cli.js';
import { setupNodes, startDaemon, type RunningDaemon } from '../helpers/daemon.js';
import { issuerKeyPair } from '../helpers/issuer.js';

vi.setConfig({ testTimeout: 60_000, hookTimeout: 60_000 });

const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));

/** GET `path` through `agent`: the answer, whether it went on a reused connection, and that connection's local port. */
function get(url: string, path: string, token: string, agent: Agent): Promise<{ res: IncomingMessage; reused: boolean; port: number }> {
  const u = new URL(url);
  return new Promise((resolve, reject) => {
    const req = request({ host: u.hostname, port: u.port, path, headers: { authorization: `Bearer ${token}` }, agent }, (res) => {
      res.resume();
      res.once('end', () => resolve({ res, reused: req.reusedSocket, port: req.socket!.localPort! }));
    });
    req.once('error', reject);
    req.end();
  });
}

describe('idle keep-alive connections', () => {
  let dir: TempDataDir;
  let token: string;
  const daemons: RunningDaemon[] = [];

  beforeAll(async () => {
    dir = await tempDataDir('node-svc-keepalive-');
    ({ tokenA: token } = await setupNodes(dir.dataDir, await issuerKeyPair()));
  });
  afterAll(async () => {
    for (const d of daemons) await d.stop('SIGKILL');
    await dir?.cleanup();
  });

  it('stay open past node\'s 5 s by default (Keep-Alive: timeout=65): the next request goes on the same connection', async () => {
    const d = await startDaemon(dir.dataDir);
    // A client that keeps free sockets until the server closes them (node's Agent without a timeout of its own).
    const agent = new Agent({ keepAlive: true, maxSockets: 1 });
    try {
      const first = await get(d.url, '/v1/streams/none/headroom', token, agent);
      expect(first.res.statusCode).toBe(404);
      let closed = false;
      const free = Object.values(agent.freeSockets).flat()[0] as Socket;
      free.once('close', () => { closed = true; });
      await sleep(6_500); // past the 5 s node's http server closes an idle connection after
      expect(closed, 'the daemon closed the idle connection').toBe(false);
      const second = await get(d.url, '/v1/streams/none/headroom', token, agent);
      expect(second.res.statusCode).toBe(404);
      expect(second.reused).toBe(true);
      expect(second.port).toBe(first.port);
      expect(second.res.headers['keep-alive']).toBe('timeout=65');
    } finally {
      agent.destroy();
      expect(await d.stop('SIGTERM')).toBe(0);
    }
  });

  it('--keep-alive-timeout 1: announced, and the daemon closes the idle connection after about 1 s', async () => {
    const d = await startDaemon(dir.dataDir, { args: ['--keep-alive-timeout', '1'] });
    try {
      const u = new URL(d.url);
      const sock = connect(Number(u.port), u.hostname);
      await new Promise((r) => sock.once('connect', r));
      let got = '';
      let answeredAt = 0;
      sock.setEncoding('utf8').on('data', (s: string) => { got += s; if (!answeredAt && got.includes('\r\n\r\n')) answeredAt = Date.now(); });
      const closed = new Promise<number>((r) => sock.once('close', () => r(Date.now())));
      sock.write(`GET /healthz HTTP/1.1\r\nHost: ${u.host}\r\nConnection: keep-alive\r\n\r\n`);
      const closedAt = await closed;
      expect(got).toMatch(/^HTTP\/1\.1 200 /);
      expect(got).toMatch(/\r\nKeep-Alive: timeout=1\r\n/i);
      expect(closedAt - answeredAt, 'closed by the daemon after its 1 s').toBeGreaterThanOrEqual(800);
      expect(closedAt - answeredAt).toBeLessThan(5_000);
    } finally {
      expect(await d.stop('SIGTERM')).toBe(0);
    }
  });

  it('SIGTERM with a request in flight on a keep-alive connection: answered, then closed, and the daemon exits at once (not after the 65 s)', async () => {
    const d = await startDaemon(dir.dataDir);
    daemons.push(d); // killed after the file if this test fails before its SIGTERM
    const u = new URL(d.url);
    const body = JSON.stringify({ credential: 'not.a.jws' });
    const sock = connect(Number(u.port), u.hostname);
    await new Promise((r) => sock.once('connect', r));
    let got = '';
    sock.setEncoding('utf8').on('data', (s: string) => { got += s; });
    const closed = new Promise<number>((r) => sock.once('close', () => r(Date.now())));
    // The head and half the body: the request is in flight when the signal arrives (the daemon's 100 Continue says it
    // has read the head).
    sock.write(`POST /v1/allowances/verify HTTP/1.1\r\nHost: ${u.host}\r\nAuthorization: Bearer ${token}\r\nContent-Type: application/json\r\nContent-Length: ${body.length}\r\nConnection: keep-alive\r\nExpect: 100-continue\r\n\r\n${body.slice(0, 5)}`);
    for (let i = 0; i < 200 && !got.startsWith('HTTP/1.1 100 '); i++) await sleep(50);
    expect(got).toMatch(/^HTTP\/1\.1 100 Continue\r\n\r\n$/);
    const t0 = Date.now();
    const exit = d.stop('SIGTERM');
    await sleep(300);
    sock.write(body.slice(5));
    expect(await exit).toBe(0);
    const closedAt = await closed;
    expect(got).toMatch(/^HTTP\/1\.1 100 Continue\r\n\r\nHTTP\/1\.1 422 [^]*"refusal":"malformed"/); // answered in full
    expect(closedAt - t0, 'the connection closed soon after its answer').toBeLessThan(10_000);
    sock.destroy();
  });

  it('--keep-alive-timeout out of range or not an integer: refused, naming the flag', async () => {
    const values = ['0', '3601', '1.5', 'x'];
    const runs = await Promise.all(values.map((v) => runCli(['--data-dir', dir.dataDir, 'daemon', '--port', '0', '--keep-alive-timeout', v])));
    for (const r of runs) {
      expect(r.code, r.stderr).toBe(2);
      expect(r.stderr).toContain('--keep-alive-timeout must be an integer from 1 to 3600');
    }
  });
});
