// A receiver that closes a kept-alive connection as the daemon sends the next delivery on it (README "Webhooks, for
// receivers"): the request is sent again at once on a new connection, within the same attempt, and is not a failed
// attempt that waits for the retry schedule. The real daemon; the receiver is a raw TCP server speaking HTTP/1.1, so it
// can reset the connection exactly when the second request arrives (a receiver whose idle timeout ends just then, and
// that announces no Keep-Alive timeout).
import { createServer, type Server, type Socket } from 'node:net';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { tempDataDir, type TempDataDir } from '../helpers/cli.js';
import { clientOf, setupNodes, startDaemon, type RunningDaemon } from '../helpers/daemon.js';
import { haltFact, issuerKeyPair, type KeyPair } from '../helpers/issuer.js';
import { waitFor } from '../helpers/wait.js';

interface Seen { conn: number; webhookId: string; answered: boolean }

/** Answers 200 to every request, except the first request on an already used connection once `armed`: reset (RST). */
function resettingReceiver() {
  const seen: Seen[] = [];
  const state = { armed: false, conns: 0 };
  const sockets = new Set<Socket>();
  const server: Server = createServer((sock) => {
    const conn = ++state.conns;
    sockets.add(sock);
    sock.once('close', () => sockets.delete(sock));
    sock.on('error', () => undefined);
    let buf = Buffer.alloc(0);
    let served = 0;
    sock.on('data', (chunk: Buffer) => {
      buf = Buffer.concat([buf, chunk]);
      for (;;) {
        const end = buf.indexOf('\r\n\r\n');
        if (end < 0) return;
        const head = buf.subarray(0, end).toString('latin1');
        const length = Number(/\r\ncontent-length:\s*(\d+)/i.exec(head)?.[1] ?? 0);
        if (buf.length < end + 4 + length) return;
        buf = buf.subarray(end + 4 + length);
        const webhookId = /\r\nwebhook-id:\s*(\S+)/i.exec(head)?.[1] ?? '';
        if (state.armed && served > 0) {
          state.armed = false;
          seen.push({ conn, webhookId, answered: false });
          sock.resetAndDestroy();
          return;
        }
        served++;
        seen.push({ conn, webhookId, answered: true });
        sock.write('HTTP/1.1 200 OK\r\nContent-Length: 0\r\n\r\n');
      }
    });
  });
  return {
    seen, state,
    listen: () => new Promise<string>((r) => server.listen(0, '127.0.0.1', () => r(`http://127.0.0.1:${(server.address() as { port: number }).port}/hook`))),
    close: () => new Promise<void>((r) => { for (const s of sockets) s.destroy(); server.close(() => r()); }),
  };
}

describe('a kept-alive connection the receiver resets as a delivery goes out on it', () => {
  let t: TempDataDir;
  let issuer: KeyPair;
  let tokenA: string;
  let daemon: RunningDaemon;
  const receiver = resettingReceiver();

  beforeAll(async () => {
    t = await tempDataDir('node-svc-stale-');
    issuer = await issuerKeyPair();
    ({ tokenA } = await setupNodes(t.dataDir, issuer));
    // A failed attempt would wait 60 s for its retry: longer than this test waits for the delivery.
    daemon = await startDaemon(t.dataDir, { args: ['--retry-schedule', '60'], env: { NODE_SVC_LOG_LEVEL: 'debug' } });
  }, 60_000);
  afterAll(async () => {
    await daemon?.stop();
    await receiver.close();
    await t?.cleanup();
  });

  it('is sent again at once on a new connection: delivered on its first attempt, nothing failed', { timeout: 60_000 }, async () => {
    const url = await receiver.listen();
    const A = clientOf(daemon.url, tokenA);
    const sub = await A.post('/v1/webhooks', { url });
    expect(sub.status, sub.text).toBe(201);
    const first = await A.post('/v1/control', { message: haltFact(issuer) });
    expect(first.status, first.text).toBe(200);
    await waitFor(async () => receiver.seen.some((s) => s.webhookId === first.body.eventId && s.answered), 'the first event delivered', 15_000);
    const conn = receiver.seen.find((s) => s.webhookId === first.body.eventId)!.conn;

    receiver.state.armed = true;
    const second = await A.post('/v1/control', { message: haltFact(issuer) });
    expect(second.status, second.text).toBe(200);
    const id = second.body.eventId as string;
    await waitFor(async () => receiver.seen.some((s) => s.webhookId === id && s.answered), 'the second event delivered', 15_000);
    // It went out on the first event's connection, which the receiver reset; then once more, on a new connection.
    const sends = receiver.seen.filter((s) => s.webhookId === id);
    expect(sends).toEqual([{ conn, webhookId: id, answered: false }, { conn: expect.any(Number), webhookId: id, answered: true }]);
    expect(sends[1]!.conn).not.toBe(conn);
    // One attempt, delivered: the reset was not the receiver's failure.
    let attempts: { eventId: string; attempt: number; outcome: string; statusCode: number | null; error: string | null }[] = [];
    await waitFor(async () => {
      attempts = (await A.get(`/v1/webhooks/${sub.body.id}/deliveries`)).body.data;
      return attempts.some((a) => a.eventId === id);
    }, 'the attempt recorded', 10_000);
    expect(attempts.filter((a) => a.eventId === id)).toEqual([expect.objectContaining({ attempt: 1, outcome: 'delivered', statusCode: 200, error: null })]);
    expect(attempts.every((a) => a.outcome === 'delivered'), JSON.stringify(attempts)).toBe(true);
    // The resend is visible: counted in /metrics by its error code (exported from 0 for both), logged at debug.
    const metrics = await fetch(`${daemon.url}/metrics`).then((r) => r.text());
    expect(metrics).toMatch(/^node_svc_webhook_resends_total\{code="ECONNRESET"\} 1$/m);
    expect(metrics).toMatch(/^node_svc_webhook_resends_total\{code="EPIPE"\} 0$/m);
    const line = daemon.stderr.split('\n').find((l) => l.includes('sent again on a new connection'));
    expect(line, daemon.stderr.slice(-2000)).toBeDefined();
    expect(JSON.parse(line!)).toMatchObject({ level: 'debug', code: 'ECONNRESET', host: new URL(url).host, webhookId: id });
    expect(line).not.toContain('/hook');
  });
});
