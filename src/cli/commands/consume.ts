import { escapeControl } from '../../domain/text.js';
import { createServer } from 'node:http';
import type { AddressInfo } from 'node:net';
import { formatMicro } from '../../domain/amount.js';
import { configError, usageError } from '../../domain/errors.js';
import { createConsumer, memoryStore, sqliteStore } from '../../sdk/consumer.js';
import type { CommandResult, GlobalOptions } from '../output.js';

const MAX_BODY = 1024 * 1024;

/**
 * A ready webhook receiver on the reference consumer: verifies, applies and prints each event; answers 2xx
 * only after the state is persisted, 401 on a bad signature, 400 on a bad envelope. GET / shows the state.
 */
export async function consume(g: GlobalOptions, o: { port: string; host: string; secret?: string; state?: string }): Promise<CommandResult> {
  const secret = o.secret ?? process.env.NODE_SVC_WEBHOOK_SECRET;
  if (!secret) throw usageError('no signing secret', 'pass --secret <whsec_…> (printed by `node-svc webhooks add`) or set NODE_SVC_WEBHOOK_SECRET');
  const port = Number(o.port);
  if (!/^\d+$/.test(o.port) || port > 65535) throw usageError(`--port must be 0-65535, got "${o.port}"`);
  const consumer = createConsumer({ secret: secret.split(','), store: o.state ? await sqliteStore(o.state) : memoryStore() });
  const json = g.format ? g.format !== 'table' : !!g.json || !process.stdout.isTTY;
  const server = createServer((req, res) => {
    const send = (status: number, body: unknown) => {
      res.writeHead(status, { 'content-type': 'application/json' });
      res.end(JSON.stringify(body));
    };
    if (req.method === 'GET') {
      consumer.state().then((s) => send(200, s), () => send(500, { error: 'state unavailable' }));
      return;
    }
    if (req.method !== 'POST') return send(405, { error: 'POST only' });
    const chunks: Buffer[] = [];
    let size = 0;
    req.on('data', (c: Buffer) => {
      size += c.length;
      if (size > MAX_BODY) { send(413, { error: 'body too large' }); req.destroy(); return; }
      chunks.push(c);
    });
    req.on('end', () => {
      if (size > MAX_BODY) return;
      const raw = Buffer.concat(chunks);
      consumer.handle(raw, req.headers).then(
        (r) => {
          const line = { at: new Date().toISOString(), status: r.status, ...(r.reason ? { reason: r.reason, detail: r.detail } : {}), ...(r.event ? { event: r.event } : {}) };
          process.stdout.write(json ? `${JSON.stringify(line)}\n` : `${escapeControl(`${line.at}  ${r.status.padEnd(9)} ${r.event ? describeEvent(r.event) : `${r.reason}: ${r.detail}`}`)}\n`);
          if (r.status === 'rejected') return send(r.reason === 'bad_signature' ? 401 : 400, { status: r.status, reason: r.reason, detail: r.detail });
          send(200, { status: r.status });
        },
        () => send(500, { error: 'could not persist the event; retry' }),
      );
    });
  });
  await new Promise<void>((resolve, reject) => {
    server.once('error', (err: NodeJS.ErrnoException) => {
      consumer.close();
      // Expected at a start: named, not an internal error.
      reject(err.code === 'EADDRINUSE' ? configError(`${o.host}:${port} is already in use`, 'stop what listens there, or pick another --port') : err);
    });
    server.listen(port, o.host, () => resolve());
  });
  const a = server.address() as AddressInfo;
  process.stderr.write(`consuming on http://${a.family === 'IPv6' ? `[${a.address}]` : a.address}:${a.port}${o.state ? ` (state in ${o.state})` : ' (state in memory)'}\n`);
  await new Promise<void>((resolve) => {
    const stop = () => server.close(() => { consumer.close(); resolve(); });
    process.once('SIGINT', stop);
    process.once('SIGTERM', stop);
  });
  return { data: undefined, human: '' };
}

/** One line per event for people: kind, what it is about, money as an asset amount (never raw micro units), the rest. */
export function describeEvent(e: { id: string; type: string; data: Record<string, unknown> }): string {
  const { amountMicro, asset, stream, budget, subscription, ...rest } = e.data as Record<string, unknown>;
  const about = [stream, budget, subscription].filter((x) => typeof x === 'string').join(' ');
  const money = typeof amountMicro === 'string' && /^\d+$/.test(amountMicro) ? formatMicro(amountMicro, typeof asset === 'string' ? asset : undefined) : '';
  const more = Object.entries(rest).map(([k, v]) => `${k}=${typeof v === 'string' ? v : JSON.stringify(v)}`).join(' ');
  return [e.type.padEnd(24), about, money, more, e.id].filter(Boolean).join('  ');
}
