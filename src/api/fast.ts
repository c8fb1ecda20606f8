// The direct path: the requests a node makes on every paid request, answered without Hono (bench/http, bench/commit:
// Hono's Request/Response objects, body streams and middleware chain cost more than the work itself; a POST through
// them measured ~45 µs of CPU more than through node:http alone):
// - GET /v1/streams/{id}/verify|headroom|finality;
// - POST /v1/allowances/verify and POST /v1/streams/{id}/vouchers.
// Same answers as the routes: the same authentication (authenticate), the same rate limit buckets, the same body
// checks (UTF-8, JSON, the route's zod schemas with the routes' 400), the same service functions (StreamReads,
// verifyAnswer, voucherAnswer) and error answers (errorAnswer), the same request metric and server span. Only the
// plain form is taken here: exactly that path, no query string, no percent-encoding, no trailing slash, and for a POST
// a declared length within the body limit and a content type of application/json (charset utf-8 at most); anything
// else (HEAD, a query to refuse, an encoded id, a chunked body, another media type) goes to Hono, which answers it as
// the contract says.
import type { IncomingMessage, ServerResponse } from 'node:http';
import { HTTPException } from 'hono/http-exception';
import { metrics } from '../ops/metrics.js';
import { endHttp, tracer, type Span } from '../ops/tracing.js';
import type { Deps } from '../service/deps.js';
import { authenticate, type NodeForToken } from './middleware/auth.js';
import { bodyText, MAX_BODY_BYTES } from './middleware/body.js';
import { errorAnswer, invalidFromZod, type Answer } from './problem.js';
import { checkStreamId, verifyAnswer, voucherAnswer, type StreamReads } from './routes/streams.js';
import { StreamId, VerifyRequest, VoucherRequest } from './schemas.js';

const JSON_TYPE = Object.freeze({ 'content-type': 'application/json' });
const PATH = /^\/v1\/streams\/([^/?#%]+)\/([a-z]+)$/;

export type RequestListener = (req: IncomingMessage, res: ServerResponse) => void;

/** The plain JSON body the direct path reads: anything else is Hono's (415, 413, a chunked body). */
const PLAIN_JSON = /^application\/json[ \t]*(?:;[ \t]*charset[ \t]*=[ \t]*(?:utf-8|"utf-8")[ \t]*)?$/i;
const VERIFY_PATH = '/v1/allowances/verify';
const VERIFY_ROUTE = VERIFY_PATH;
const VOUCHER_ROUTE = '/v1/streams/:id/vouchers';

function plainJsonPost(req: IncomingMessage): boolean {
  const type = req.headers['content-type'];
  const length = req.headers['content-length'];
  if (type === undefined || length === undefined || req.headers['transfer-encoding'] !== undefined || !PLAIN_JSON.test(type)) return false;
  const n = Number(length);
  return Number.isSafeInteger(n) && n <= MAX_BODY_BYTES;
}

/** A request whose client went away before its body arrived: nobody to answer, nothing done. */
const ABORTED = new Error('request aborted before its body arrived');

/** The whole body (its length was declared and is within the limit: node's parser holds the request to it). */
function readBody(req: IncomingMessage): Promise<Buffer> {
  return new Promise((resolve, reject) => {
    const chunks: Buffer[] = [];
    req.on('data', (c: Buffer) => chunks.push(c));
    req.once('end', () => resolve(chunks.length === 1 ? chunks[0]! : Buffer.concat(chunks)));
    req.once('error', () => reject(ABORTED));
    req.once('close', () => { if (!req.complete) reject(ABORTED); });
  });
}

/** The body as the route's validators read it: UTF-8, JSON (400 as Hono's validator), then the route's schema. */
async function jsonOf<T>(req: IncomingMessage, schema: { safeParse(v: unknown): { success: true; data: T } | { success: false; error: Parameters<typeof invalidFromZod>[0] } }, before?: () => void): Promise<T> {
  const text = bodyText(await readBody(req));
  before?.(); // the path parameter is checked after the body checks and before JSON, as the route's validators do
  let value: unknown;
  try {
    value = JSON.parse(text);
  } catch {
    throw new HTTPException(400, { message: 'Malformed JSON in request body' });
  }
  const r = schema.safeParse(value);
  if (!r.success) throw invalidFromZod(r.error);
  return r.data;
}

/** `next` with the stream reads and the two hot writes in front of it. */
export function directPath(opts: { d: Deps; reads: StreamReads; nodeForToken: NodeForToken; rateLimit: { take(key: string): void }; next: RequestListener }): RequestListener {
  const { d, reads, nodeForToken, rateLimit, next } = opts;
  /** The route of each read, one string each (a span name and a metric label made per request would be a new string each time). */
  const routes = new Map<string, string>();
  const routeOf = (suffix: string) => routes.get(suffix) ?? (routes.set(suffix, `/v1/streams/:id/${suffix}`), routes.get(suffix)!);
  return (req, res) => {
    const url = req.url ?? '';
    if (req.method === 'POST') {
      if (url === VERIFY_PATH) return plainJsonPost(req) ? void write(req, res, VERIFY_ROUTE, (node, span) => jsonOf(req, VerifyRequest).then((body) => verifyAnswer(d, node, body, span))) : next(req, res);
      const m = PATH.exec(url);
      if (m && m[2] === 'vouchers' && plainJsonPost(req)) {
        const id = m[1]!;
        return void write(req, res, VOUCHER_ROUTE, (node, span) =>
          jsonOf(req, VoucherRequest, () => { const p = StreamId.safeParse({ id }); if (!p.success) throw invalidFromZod(p.error); }).then((body) => voucherAnswer(d, node, id, body, span)));
      }
      return next(req, res);
    }
    const m = req.method === 'GET' ? PATH.exec(url) : null;
    const read = m ? reads.get(m[2]!) : undefined;
    if (!read) return next(req, res);
    void answer(req, res, m![2]!, m![1]!, read);
  };

  /** A direct POST: span, authentication, rate limit, then `handle` (the body and the service); answered as Hono would. */
  async function write(req: IncomingMessage, res: ServerResponse, route: string, handle: (node: string, span: Span | undefined) => Promise<Answer>) {
    const span = tracer?.server('POST', route, req.url!, req.headers.traceparent, { 'client.address': req.socket.remoteAddress, 'user_agent.original': req.headers['user-agent'] });
    let node: string | undefined;
    let a: Answer;
    try {
      node = (await authenticate(req.headers.authorization, nodeForToken)).node;
      rateLimit.take(node);
      a = await handle(node, span);
    } catch (err) {
      if (err === ABORTED) {
        span?.end();
        return;
      }
      a = errorAnswer(err as Error, req.url!);
    }
    metrics.requests.incById(`POST ${a.status} ${route}`, () => ({ route, method: 'POST', status: String(a.status) }));
    if (span) endHttp(span, a.status, { 'http.route': route, 'node_svc.node': node });
    send(res, a);
  }

  async function answer(req: IncomingMessage, res: ServerResponse, suffix: string, id: string, read: (node: string, id: string) => Promise<unknown>) {
    const route = routeOf(suffix);
    const span = tracer?.server('GET', route, req.url!, req.headers.traceparent); // undefined: tracing off
    let a: Answer;
    try {
      const { node } = await authenticate(req.headers.authorization, nodeForToken);
      rateLimit.take(node);
      checkStreamId(id);
      const r = await read(node, id);
      a = { status: 200, body: typeof r === 'string' ? r : JSON.stringify(r), headers: JSON_TYPE };
    } catch (err) {
      a = errorAnswer(err as Error, req.url!);
    }
    metrics.requests.incById(`GET ${a.status} ${route}`, () => ({ route, method: 'GET', status: String(a.status) }));
    if (span) endHttp(span, a.status);
    send(res, a);
  }
}

function send(res: ServerResponse, a: Answer): void {
  if (res.destroyed) return;
  // One string: Node sends the head and the body in one write.
  res.writeHead(a.status, { ...a.headers, 'content-length': Buffer.byteLength(a.body) });
  res.end(a.body);
}
