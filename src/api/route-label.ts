import type { Context } from 'hono';
import { matchedRoutes } from 'hono/route';

/**
 * The route a request is for: its operation's path even when a middleware refused it first (401, 429, 413, a body
 * that is not UTF-8), so that a metric or a span names what was asked, as the direct path (src/api/fast.ts) does;
 * undefined when no route matched (404, 405).
 */
export function routeLabel(c: Context): string | undefined {
  const routes = matchedRoutes(c);
  for (let i = routes.length - 1; i >= 0; i--) if (routes[i]!.method !== 'ALL') return routes[i]!.path;
  return undefined;
}
