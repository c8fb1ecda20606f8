// The direct path: the requests a node makes on every paid request, answered without Hono (bench/http, bench/commit:
// Hono's Request/Response objects, body streams and middleware chain cost more than the work itself; a POST through
// them measured ~45 µs of CPU more than through node:http alone):
// - GET /v1/streams/{id}/verify|headroom|finality;
// - POST /v1/allowances/verify and POST /v1/streams/{id}/vouchers.
// Same answers as the routes: the same authentication (authenticate), the same rate limit buckets, the same body
// checks (UTF-8, JSON, the route's zod schemas with the routes' 400), the same service functions (StreamReads,
// verifyAnswer, voucherAnswer) and error answers (errorAnswer), the same request metric and server span (both named
// by the route the request is for, a refusal before it included, as src/api/route-label.ts makes Hono name them).
// Only the plain form is taken here: exactly that path, with no query
// string, percent-encoding, dot segment, trailing slash or character @hono/node-server would rewrite or refuse, a
// plain Host header, and for a POST a declared length within the body limit and one content type header of
// application/json (charset=utf-8 at most). Anything else (HEAD, a query to refuse, an encoded id, a chunked body,
// another media type) goes to Hono, which answers it as the contract says (test/e2e/direct-path.test.ts compares).
import type { IncomingMessage, ServerResponse } from 'node:http';
import { HTTPException } from 'hono/http-exception';
import { metrics } from '../ops/metrics.js';
import { endHttp, tracer, type Span } from '../ops/tracing.js';
import type { Deps } from '../service/deps.js';
import { authenticate, type NodeForToken } from './middleware/auth.js';
import { bodyText, MAX_BODY_BYTES } from './middleware/body.js';
import { errorAnswer, invalidFromZod, jsonAnswer, type Answer } from './problem.js';
import { checkStreamId, verifyAnswer, voucherAnswer, type StreamReads } from './routes/streams.js';
import { StreamId, VerifyRequest, VoucherRequest } from './schemas.js';

/** `/v1/streams/{id}/{suffix}`, the id in the characters @hono/node-server takes as they are (reValidRequestUrl). */
const PATH = /^\/v1\/streams\/([!$&-.0-9:;=@-Z[\]_a-z~]+)\/([a-z]+)$/;
/** @hono/node-server builds the URL without parsing only for such a Host (reValidHost); any other goes to Hono. */
const PLAIN_HOST = /^[a-z0-9._-]+(?::(?:[1-5]\d{3,4}|[6-9]\d{3}))?$/;
/** Hono's routes see `..` and `.` segments resolved: never taken here. */
const DOT_ID = /^\.\.?$/;

export type RequestListener = (req: IncomingMessage, res: ServerResponse) => void;

/** The plain JSON body the direct path reads: anything else is Hono's (415, 413, a chunked body). */
const PLAIN_JSON = /^application\/json(?:;[ \t]*charset=(?:utf-8|"utf-8"))?$/i;
const VERIFY_PATH = '/v1/allowances/verify';
const VERIFY_ROUTE = VERIFY_PATH;
const VOUCHER_ROUTE = '/v1/streams/:id/vouchers';

/** How many times `name` (lower case) is among the request's raw headers. */
function headerLines(req: IncomingMessage, name: string): number {
  let n = 0;
  const raw = req.rawHeaders;
  for (let i = 0; i < raw.length; i += 2) if (raw[i]!.length === name.length && raw[i]!.toLowerCase() === name) n++;
  return n;
}

function plainJsonPost(req: IncomingMessage): boolean {
  const type = req.headers['content-type'];
  const length = req.headers['content-length'];
  if (type === undefined || length === undefined || req.headers['transfer-encoding'] !== undefined || !PLAIN_JSON.test(type)) return false;
  const n = Number(length);
  // One content type line: node keeps the first of several, Hono's request joins them (and refuses the result).
  return Number.isSafeInteger(n) && n <= MAX_BODY_BYTES && headerLines(req, 'content-type') === 1;
}

/** A request whose client went away before its body arrived: nobody to answer, nothing done. */
const ABORTED = new Error('request aborted before its body arrived');

/** The whole body (its length was declared and is within the limit: node's parser holds the request to it). */
function readBody(req: IncomingMessage): Promise<Buffer> {
  return new Promise((resolve, reject) => {
    if (req.destroyed && !req.complete) return reject(ABORTED); // gone while the request was authenticated
    const chunks: Buffer[] = [];
    req.on('data', (c: Buffer) => chunks.push(c));
    req.once('end', () => resolve(chunks.length === 1 ? chunks[0]! : Buffer.concat(chunks)));
    req.once('error', () => reject(ABORTED));
    req.once('close', () => { if (!req.complete) reject(ABORTED); });
  });
}

type Schema<T> = { safeParse(v: unknown): { success: true; data: T } | { success: false; error: Parameters<typeof invalidFromZod>[0] } };

/** JSON as the route's json validator reads it (400 as Hono's for malformed JSON), then the route's schema. */
function jsonOf<T>(text: string, schema: Schema<T>): T {
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

/** What a direct request ends with: its route, its answer and the node it was authenticated as. */
interface Outcome { route: string; a: Answer; node: string | undefined }

/** `next` with the stream reads and the two hot writes in front of it. */
export function directPath(opts: { d: Deps; reads: StreamReads; nodeForToken: NodeForToken; rateLimit: { take(key: string): void }; next: RequestListener }): RequestListener {
  const { d, reads, nodeForToken, rateLimit, next } = opts;
  /** The route of each read, one string each (a span name and a metric label made per request would be a new string each time). */
  const routes = new Map<string, string>();
  const routeOf = (suffix: string) => routes.get(suffix) ?? (routes.set(suffix, `/v1/streams/:id/${suffix}`), routes.get(suffix)!);
  return (req, res) => {
    const url = req.url ?? '';
    const host = req.headers.host;
    if (host === undefined || !PLAIN_HOST.test(host)) return next(req, res);
    if (req.method === 'POST') {
      if (url === VERIFY_PATH) {
        if (!plainJsonPost(req)) return next(req, res);
        return void post(req, res, VERIFY_ROUTE, async (node, span, body) => verifyAnswer(d, node, jsonOf(bodyText(await body), VerifyRequest), span));
      }
      const m = PATH.exec(url);
      if (!m || m[2] !== 'vouchers' || DOT_ID.test(m[1]!) || !plainJsonPost(req)) return next(req, res);
      const id = m[1]!;
      return void post(req, res, VOUCHER_ROUTE, async (node, span, body) => {
        const text = bodyText(await body);
        // The route's validators, in their order: the path parameter, then the JSON body.
        const p = StreamId.safeParse({ id });
        if (!p.success) throw invalidFromZod(p.error);
        return voucherAnswer(d, node, id, jsonOf(text, VoucherRequest), span);
      });
    }
    const m = req.method === 'GET' ? PATH.exec(url) : null;
    const read = m && !DOT_ID.test(m[1]!) ? reads.get(m[2]!) : undefined;
    if (!read) return next(req, res);
    void get(req, res, m![2]!, m![1]!, read);
  };

  /**
   * A direct POST: the server span, authentication, rate limit, then `handle` (the body's checks and the service). The
   * body is read from the start, while the token is looked up: a body that arrived whole is used even if the client
   * left meanwhile (as @hono/node-server does), and a request cut off before its body ends is dropped: no answer can
   * reach anyone, nothing is counted, the span ends.
   */
  async function post(req: IncomingMessage, res: ServerResponse, route: string, handle: (node: string, span: Span | undefined, body: Promise<Buffer>) => Promise<Answer>) {
    const body = readBody(req);
    body.catch(() => undefined); // refused before the body is wanted (401, 429): its end or abort is nobody's business
    const span = tracer?.server('POST', route, req.url!, req.headers.traceparent, { 'client.address': req.socket.remoteAddress, 'user_agent.original': req.headers['user-agent'] });
    const o: Outcome = { route, a: undefined as never, node: undefined };
    try {
      o.node = (await authenticate(req.headers.authorization, nodeForToken)).node;
      rateLimit.take(o.node);
      o.a = await handle(o.node, span, body);
    } catch (err) {
      if (err === ABORTED) {
        span?.end();
        return;
      }
      o.a = errorAnswer(err as Error, req.url!);
    }
    finish(res, 'POST', o, span);
  }

  /** A direct GET of a stream read: the same steps without a body (the id is checked by the route's handler). */
  async function get(req: IncomingMessage, res: ServerResponse, suffix: string, id: string, read: (node: string, id: string) => Promise<unknown>) {
    const route = routeOf(suffix);
    const span = tracer?.server('GET', route, req.url!, req.headers.traceparent); // undefined: tracing off
    const o: Outcome = { route, a: undefined as never, node: undefined };
    try {
      o.node = (await authenticate(req.headers.authorization, nodeForToken)).node;
      rateLimit.take(o.node);
      checkStreamId(id);
      o.a = jsonAnswer(await read(o.node, id));
    } catch (err) {
      o.a = errorAnswer(err as Error, req.url!);
    }
    finish(res, 'GET', o, span);
  }
}

/** The metric, the span's end and the answer. One string: Node sends the head and the body in one write. */
function finish(res: ServerResponse, method: 'GET' | 'POST', o: Outcome, span: Span | undefined): void {
  const { route } = o;
  const status = o.a.status;
  metrics.requests.incById(`${method} ${status} ${route}`, () => ({ route, method, status: String(status) }));
  if (span) endHttp(span, status, method === 'POST' ? { 'http.route': route, 'node_svc.node': o.node } : undefined);
  if (res.destroyed) return;
  res.writeHead(status, { ...o.a.headers, 'content-length': Buffer.byteLength(o.a.body) });
  res.end(o.a.body);
}
