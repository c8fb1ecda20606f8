// A real webhook receiver: node:http on 127.0.0.1 (or the address given), port 0. Records every request (raw body
// bytes, headers) and answers per a programmable policy (fail N times, 410, redirect, delay, Retry-After, drop the
// connection).
// It can go down (listener closed, connections refused) and come back on the same port.
import { createHmac, timingSafeEqual } from 'node:crypto';
import { EventEmitter } from 'node:events';
import { createServer, type IncomingHttpHeaders, type Server, type ServerResponse } from 'node:http';
import type { AddressInfo, Socket } from 'node:net';

export interface ReceivedRequest {
  /** 0-based, in arrival order (over the receiver's whole life, across down/up). */
  index: number;
  method: string;
  /** Path and query, as sent. */
  path: string;
  headers: IncomingHttpHeaders;
  /** The head's lines as sent: name, value, name, value (names in the sender's case; duplicates kept). */
  rawHeaders: string[];
  /** The exact bytes received. */
  body: Buffer;
  /** When the request was complete (ms since the epoch). */
  at: number;
  /** `x-service-event-id`, or '' when absent. */
  eventId: string;
  /** How many earlier requests carried the same event id (0 for the first delivery of an event). */
  seen: number;
  /** The status answered (undefined while the policy is still deciding, or when the connection was dropped). */
  answered?: number;
}

export interface Reply {
  status: number;
  headers?: Record<string, string>;
  body?: string;
  /** Wait this long before answering (the request is recorded on arrival). */
  delayMs?: number;
}

/** 'drop' destroys the socket without an answer. */
export type Answer = Reply | 'drop';
export type Policy = (req: ReceivedRequest) => Answer | Promise<Answer>;

// ---- policies ----

export const ack = (status = 204): Policy => () => ({ status });
/** Answer `status` to the first `n` deliveries of each event id, then acknowledge. */
export const failTimes = (n: number, status = 500, headers?: Record<string, string>): Policy => (r) =>
  r.seen < n ? { status, ...(headers ? { headers } : {}) } : { status: 204 };
export const always = (status: number, headers?: Record<string, string>): Policy => () => ({ status, ...(headers ? { headers } : {}) });
export const slow = (delayMs: number, status = 200): Policy => () => ({ status, delayMs });
export const redirect = (location: string, status = 302): Policy => () => ({ status, headers: { location } });

export interface Receiver {
  /** `http://127.0.0.1:PORT` (the address it listens on). */
  url: string;
  port: number;
  /** Everything received so far, in order. */
  requests: ReceivedRequest[];
  /** Requests to one path (default '/hook'). */
  at(path?: string): ReceivedRequest[];
  /** Requests carrying this event id. */
  forEvent(eventId: string): ReceivedRequest[];
  /** Distinct event ids received (a live view). */
  eventIds(): ReadonlySet<string>;
  /** How many requests carried this event id. */
  count(eventId: string): number;
  setPolicy(p: Policy): void;
  /** Resolve with the requests once `pred(requests)` holds (checked on each arrival and each answer); reject after `timeoutMs`. */
  waitFor(pred: (reqs: ReceivedRequest[]) => boolean, timeoutMs?: number, what?: string): Promise<ReceivedRequest[]>;
  /** Resolve once `n` requests (in all) have been received. */
  waitForCount(n: number, timeoutMs?: number): Promise<ReceivedRequest[]>;
  /** How many requests are being answered right now (delayed ones included). */
  pending(): number;
  /** TCP connections accepted so far (over the receiver's whole life): how often senders opened a new one. */
  connections(): number;
  /** Close the listener and every connection: senders get connection refused until up(). */
  down(): Promise<void>;
  /** Listen again on the same port. */
  up(): Promise<void>;
  close(): Promise<void>;
}

export interface ReceiverOptions {
  /** The address to listen on (default 127.0.0.1), e.g. a container network's gateway for daemons in containers. */
  host?: string;
}

export async function startReceiver(policy: Policy = ack(), opts: ReceiverOptions = {}): Promise<Receiver> {
  const host = opts.host ?? '127.0.0.1';
  let current = policy;
  const requests: ReceivedRequest[] = [];
  const perEvent = new Map<string, number>();
  const ids = new Set<string>();
  const sockets = new Set<Socket>();
  let accepted = 0;
  const events = new EventEmitter();
  events.setMaxListeners(0);
  let inProgress = 0;
  let server: Server;
  let port = 0;

  const answer = (res: ServerResponse, rec: ReceivedRequest, a: Answer) => {
    if (a === 'drop') {
      res.socket?.destroy();
      return;
    }
    rec.answered = a.status;
    res.writeHead(a.status, { 'content-type': 'text/plain', ...a.headers });
    res.end(a.body ?? '');
    events.emit('change');
  };

  const make = () => {
    const s = createServer((req, res) => {
      const chunks: Buffer[] = [];
      req.on('data', (c: Buffer) => chunks.push(c));
      req.on('end', () => {
        const eventId = String(req.headers['x-service-event-id'] ?? '');
        const seen = perEvent.get(eventId) ?? 0;
        perEvent.set(eventId, seen + 1);
        ids.add(eventId);
        const rec: ReceivedRequest = {
          index: requests.length, method: req.method ?? '', path: req.url ?? '', headers: req.headers, rawHeaders: req.rawHeaders,
          body: Buffer.concat(chunks), at: Date.now(), eventId, seen,
        };
        requests.push(rec);
        inProgress++;
        events.emit('change');
        void (async () => {
          try {
            const a = await current(rec);
            if (a !== 'drop' && a.delayMs) await new Promise((r) => setTimeout(r, a.delayMs));
            answer(res, rec, a);
          } catch {
            res.writeHead(500).end();
          } finally {
            inProgress--;
          }
        })();
      });
    });
    s.on('connection', (sock) => {
      accepted++;
      sockets.add(sock);
      sock.on('close', () => sockets.delete(sock));
    });
    s.keepAliveTimeout = 5000;
    return s;
  };

  const listen = () =>
    new Promise<void>((resolve, reject) => {
      server = make();
      server.once('error', reject);
      server.listen(port, host, () => {
        port = (server.address() as AddressInfo).port;
        resolve();
      });
    });

  const shut = () =>
    new Promise<void>((resolve) => {
      if (!server.listening) return resolve();
      server.close(() => resolve());
      for (const s of sockets) s.destroy();
    });

  await listen();

  const waitFor: Receiver['waitFor'] = (pred, timeoutMs = 15_000, what = 'condition') =>
    new Promise((resolve, reject) => {
      if (pred(requests)) return resolve(requests);
      const check = () => {
        if (!pred(requests)) return;
        cleanup();
        resolve(requests);
      };
      const timer = setTimeout(() => {
        cleanup();
        reject(new Error(`receiver: ${what} not met within ${timeoutMs} ms; got ${requests.length} requests: ${
          JSON.stringify(requests.slice(-10).map((r) => ({ path: r.path, eventId: r.eventId, seen: r.seen, answered: r.answered })))}`));
      }, timeoutMs);
      const cleanup = () => {
        clearTimeout(timer);
        events.off('change', check);
      };
      events.on('change', check);
    });

  return {
    get url() {
      return `http://${host.includes(':') ? `[${host}]` : host}:${port}`;
    },
    get port() {
      return port;
    },
    requests,
    at: (path = '/hook') => requests.filter((r) => r.path === path),
    forEvent: (id) => requests.filter((r) => r.eventId === id),
    eventIds: () => ids,
    count: (id) => perEvent.get(id) ?? 0,
    setPolicy(p) {
      current = p;
    },
    waitFor,
    waitForCount: (n, timeoutMs) => waitFor((r) => r.length >= n, timeoutMs, `${n} requests`),
    pending: () => inProgress,
    connections: () => accepted,
    down: shut,
    up: listen,
    close: shut,
  };
}

// ---- receiver-side verification, written here from the specs (not with the service's own signing code) ----

const eq = (a: string, b: string) => {
  const x = Buffer.from(a);
  const y = Buffer.from(b);
  return x.length === y.length && timingSafeEqual(x, y);
};

/** x-service-signature: `sha256=` + hex HMAC-SHA256 over the raw bytes, keyed with the secret string's UTF-8 bytes. */
export function verifyServiceSignature(secret: string, body: Buffer, header: string | string[] | undefined): boolean {
  if (typeof header !== 'string') return false;
  return eq(header, `sha256=${createHmac('sha256', Buffer.from(secret, 'utf8')).update(body).digest('hex')}`);
}

/**
 * Standard Webhooks: any `v1,<base64>` in webhook-signature (space-separated) equal to
 * HMAC-SHA256(base64-decoded secret after whsec_, `${webhook-id}.${webhook-timestamp}.${body}`).
 */
export function verifyStandardSignature(secret: string, r: Pick<ReceivedRequest, 'headers' | 'body'>): boolean {
  const id = r.headers['webhook-id'];
  const ts = r.headers['webhook-timestamp'];
  const sig = r.headers['webhook-signature'];
  if (typeof id !== 'string' || typeof ts !== 'string' || typeof sig !== 'string') return false;
  const key = Buffer.from(secret.replace(/^whsec_/, ''), 'base64');
  const expected = createHmac('sha256', key).update(Buffer.concat([Buffer.from(`${id}.${ts}.`, 'utf8'), r.body])).digest('base64');
  return sig.split(' ').some((s) => {
    const [v, mac] = s.split(',');
    return v === 'v1' && mac !== undefined && eq(mac, expected);
  });
}
