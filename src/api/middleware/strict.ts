// What the contract says about requests the routes do not declare: a method a path does not serve is 405 with
// Allow (not 404), and a query parameter an operation does not declare is 400 naming it (unknown request fields
// are rejected everywhere, DESIGN §10). Both read the route table once, on first use, after every route is declared.
import type { MiddlewareHandler } from 'hono';
import { invalidRequest } from '../../domain/errors.js';

export interface RouteTable {
  /** The methods served at this path, for Allow. */
  methodsAt(path: string): string[];
  /** The query parameters the operation declares, or undefined when no declared operation matches. */
  queryFor(method: string, path: string): ReadonlySet<string> | undefined;
}

interface Entry { re: RegExp; method: string; query: ReadonlySet<string> }

const pattern = (path: string) =>
  new RegExp(`^${path.replace(/[.+?^$()[\]\\|]/g, '\\$&').replace(/\{[^}]+\}|:[A-Za-z0-9_]+/g, '[^/]+')}/?$`);

/**
 * `routes`: every concrete route (method and path, `:id` or `{id}` form); `declared`: the documented operations with
 * their query parameter names. Middleware entries (method ALL, wildcard paths) are ignored.
 */
export function routeTable(routes: () => Array<{ method: string; path: string }>, declared: () => Array<{ method: string; path: string; query: string[] }>): RouteTable {
  let served: Entry[] | undefined;
  let ops: Entry[] | undefined;
  const load = () => {
    served ??= routes().filter((r) => r.method !== 'ALL' && !r.path.includes('*')).map((r) => ({ re: pattern(r.path), method: r.method.toUpperCase(), query: new Set<string>() }));
    ops ??= declared().map((r) => ({ re: pattern(r.path), method: r.method.toUpperCase(), query: new Set(r.query) }));
  };
  return {
    methodsAt(path) {
      load();
      const m = new Set(served!.filter((e) => e.re.test(path)).map((e) => e.method));
      if (m.has('GET')) m.add('HEAD'); // Hono answers HEAD with the GET route
      return [...m].sort();
    },
    queryFor(method, path) {
      load();
      const m = method === 'HEAD' ? 'GET' : method;
      return ops!.find((e) => e.method === m && e.re.test(path))?.query;
    },
  };
}

/** 400 naming every query parameter the operation does not declare (an operation without any declares none). */
export function strictQuery(table: RouteTable): MiddlewareHandler {
  return async function rejectUnknownQuery(c, next) {
    const url = c.req.url;
    const q = url.indexOf('?');
    if (q < 0 || q === url.length - 1) return next(); // the hot path: no query string at all
    const allowed = table.queryFor(c.req.method, c.req.path);
    if (allowed) {
      const unknown = [...new Set(new URLSearchParams(url.slice(q + 1)).keys())].filter((k) => !allowed.has(k));
      if (unknown.length)
        throw invalidRequest(`unknown query parameter${unknown.length > 1 ? 's' : ''}: ${unknown.map((k) => JSON.stringify(k)).join(', ')}`, {
          issues: unknown.map((k) => ({ path: k, message: 'unknown query parameter' })),
        });
    }
    return next();
  };
}
