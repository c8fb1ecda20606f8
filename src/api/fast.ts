// The direct path: GET /v1/streams/{id}/verify|headroom|finality answered without Hono. These are the reads a node
// makes on every paid request (bench/http: Hono's Request/Response objects and middleware chain cost more than the
// read itself). Same answers as the routes: the same authentication (authenticate), the same rate limit buckets,
// the same read functions (StreamReads) and error answers (errorAnswer), the same request metric. Only the plain
// form is taken here: a GET of exactly that path, no query string, no percent-encoding, no trailing slash; anything
// else (HEAD, a query to refuse, an encoded id) goes to Hono, which answers it as the contract says.
import type { IncomingMessage, ServerResponse } from 'node:http';
import { metrics } from '../ops/metrics.js';
import { endHttp, tracer } from '../ops/tracing.js';
import { authenticate, type NodeForToken } from './middleware/auth.js';
import { errorAnswer, type Answer } from './problem.js';
import { checkStreamId, type StreamReads } from './routes/streams.js';

const JSON_TYPE = Object.freeze({ 'content-type': 'application/json' });
const PATH = /^\/v1\/streams\/([^/?#%]+)\/([a-z]+)$/;

export type RequestListener = (req: IncomingMessage, res: ServerResponse) => void;

/** `next` with the stream reads in front of it. */
export function directReads(opts: { reads: StreamReads; nodeForToken: NodeForToken; rateLimit: { take(key: string): void }; next: RequestListener }): RequestListener {
  const { reads, nodeForToken, rateLimit, next } = opts;
  /** The route of each read, one string each (a span name and a metric label made per request would be a new string each time). */
  const routes = new Map<string, string>();
  const routeOf = (suffix: string) => routes.get(suffix) ?? (routes.set(suffix, `/v1/streams/:id/${suffix}`), routes.get(suffix)!);
  return (req, res) => {
    const m = req.method === 'GET' ? PATH.exec(req.url ?? '') : null;
    const read = m ? reads.get(m[2]!) : undefined;
    if (!read) return next(req, res);
    void answer(req, res, m![2]!, m![1]!, read);
  };
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
    if (res.destroyed) return;
    // One string: Node sends the head and the body in one write.
    res.writeHead(a.status, { ...a.headers, 'content-length': Buffer.byteLength(a.body) });
    res.end(a.body);
  }
}
