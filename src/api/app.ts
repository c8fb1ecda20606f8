// createApp(deps): the node-facing HTTP API. Routes are declared once with zod; /openapi.json is generated from them.
import { OpenAPIHono } from '@hono/zod-openapi';
import { tokenResolver } from '../service/admin.js';
import type { Deps } from '../service/deps.js';
import { bearerAuth, type AuthEnv } from './middleware/auth.js';
import { jsonBody } from './middleware/body.js';
import { routeTable, strictQuery } from './middleware/strict.js';
import { rateLimit, tokenBuckets } from './middleware/rate-limit.js';
import { directPath, type RequestListener } from './fast.js';
import { invalidFromZod, onError, problem } from './problem.js';
import { controlRoutes } from './routes/control.js';
import { streamRoutes } from './routes/streams.js';
import { webhookRoutes } from './routes/webhooks.js';
import { receiptRoutes } from './routes/receipts.js';
import { x402Routes } from './routes/x402.js';
import { openApiDocument } from './openapi.js';
import { metrics, renderMetrics } from '../ops/metrics.js';
import { opsGauges } from '../ops/gauges.js';
import { healthVerdict } from '../service/health.js';
import { statusRoutes } from './routes/status.js';
import { tracer } from '../ops/tracing.js';
import { traceRequests } from './middleware/trace.js';
import { routeLabel } from './route-label.js';

export interface AppOptions {
  /** Requests per second per token (0: off); burst is twice that unless given. */
  rateLimit: number;
  rateBurst?: number;
  /** Routes mounted before /v1 auth (a rail's processor webhook). Not part of the node-facing contract. */
  extraRoutes?: (app: OpenAPIHono<AuthEnv>) => void;
}

export function createApp(d: Deps, opts: AppOptions) {
  const app = new OpenAPIHono<AuthEnv>({
    defaultHook: (result) => {
      if (!result.success) throw invalidFromZod(result.error);
    },
  });
  app.onError(onError);
  const routes = routeTable(
    () => app.routes,
    () => app.openAPIRegistry.definitions.flatMap((def) => {
      if (def.type !== 'route') return [];
      const query = (def.route.request?.query as { shape?: Record<string, unknown> } | undefined)?.shape;
      return [{ method: def.route.method, path: def.route.path, query: query ? Object.keys(query) : [] }];
    }),
  );
  app.notFound((c) => {
    // A path that exists with other methods: 405 with Allow (TRACE, PUT, … on a route that does not serve them).
    // Not for a path that differs from a route only by a trailing slash (Hono's routes are strict): there the method is
    // served, the path is not, and the answer is 404 (it was a 405 saying "POST is not served … (allowed: POST)").
    const allow = routes.methodsAt(c.req.path);
    if (allow.length && !allow.includes(c.req.method)) return problem(c, 405, 'method_not_allowed', `${c.req.method} is not served at this path (allowed: ${allow.join(', ')})`, {}, { allow: allow.join(', ') });
    return problem(c, 404, 'not_found', 'no such route');
  });
  app.openAPIRegistry.registerComponent('securitySchemes', 'bearer', { type: 'http', scheme: 'bearer', description: 'One token per serviceNode (nsv_…)' });

  // Requests by route pattern (never the raw path: ids would explode the label set), method and status.
  app.use('*', async (c, next) => {
    await next();
    const route = routeLabel(c) ?? (c.req.routePath || 'unmatched');
    const method = c.req.method;
    const status = c.res.status;
    metrics.requests.incById(`${method} ${status} ${route}`, () => ({ route, method, status: String(status) }));
  });
  app.get('/metrics', async (c) => c.body(await renderMetrics(opsGauges(d)), 200, { 'content-type': 'text/plain; version=0.0.4' }));

  // The same verdict as `node-svc status`: 200 while it serves (ok or degraded, with the reasons), 503 when down.
  app.get('/healthz', async (c) => {
    const v = await healthVerdict(d, d.health);
    return c.json(v, v.status === 'down' ? 503 : 200);
  });

  opts.extraRoutes?.(app);

  const resolveToken = d.store ? tokenResolver(d.store) : () => undefined; // no store when only the contract is generated
  if (tracer) app.use('/v1/*', traceRequests(tracer)); // first: the span covers authentication and refusals too
  app.use('/v1/*', bearerAuth({ nodeForToken: (t) => resolveToken(t, d.now()) }));
  const buckets = tokenBuckets({ rate: opts.rateLimit, ...(opts.rateBurst !== undefined ? { burst: opts.rateBurst } : {}) });
  app.use('/v1/*', rateLimit(buckets));
  app.use('/v1/*', jsonBody());
  app.use('/v1/*', strictQuery(routes));

  statusRoutes(app, d);
  const reads = streamRoutes(app, d);
  controlRoutes(app, d);
  webhookRoutes(app, d);
  receiptRoutes(app, d);
  x402Routes(app, d);

  // Generated on first use: most daemons never serve it, and building it costs memory (bench/delivery RSS).
  let generated: ReturnType<typeof openApiDocument> | undefined;
  let doc: string | undefined;
  const contract = () => (generated ??= openApiDocument(app));
  app.get('/openapi.json', (c) => c.body((doc ??= JSON.stringify(contract())), 200, { 'content-type': 'application/json' }));
  /** The server's request listener: the stream reads and the two hot writes answered directly (src/api/fast.ts), the rest by `hono`. */
  const listener = (hono: RequestListener) => directPath({ d, reads, nodeForToken: (t) => resolveToken(t, d.now()), rateLimit: buckets, next: hono });
  return Object.assign(app, { contract, listener });
}
