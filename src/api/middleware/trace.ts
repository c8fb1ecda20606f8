import type { MiddlewareHandler } from 'hono';
import type { IncomingMessage } from 'node:http';
import { endHttp, type Tracer } from '../../ops/tracing.js';
import { routeLabel } from '../route-label.js';
import type { AuthEnv } from './auth.js';

/**
 * The HTTP server span of every /v1 request Hono answers (the direct stream reads make theirs in fast.ts), mounted
 * only when tracing is on. Route handlers hang their own spans under it (`c.get('span')`).
 */
export function traceRequests(t: Tracer): MiddlewareHandler<AuthEnv> {
  return async function traceRequest(c, next) {
    const incoming = (c.env as { incoming?: IncomingMessage } | undefined)?.incoming;
    const span = t.server(c.req.method, '', c.req.path, incoming ? incoming.headers.traceparent : c.req.header('traceparent'), {
      'client.address': incoming?.socket.remoteAddress,
      'user_agent.original': incoming ? incoming.headers['user-agent'] : c.req.header('user-agent'),
    });
    c.set('span', span);
    try {
      await next();
    } finally {
      const route = routeLabel(c);
      if (route) span.rename(`${c.req.method} ${route}`);
      endHttp(span, c.res.status, { 'http.route': route, 'node_svc.node': c.get('node') });
    }
  };
}
