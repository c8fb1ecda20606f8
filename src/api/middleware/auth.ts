import type { MiddlewareHandler } from 'hono';
import { NodeSvcError } from '../../domain/errors.js';

export type AuthEnv = { Variables: { node: string; token: string } };

const unauthorized = (detail: string) => new NodeSvcError('unauthorized', detail, { status: 401 });

/** Bearer token → node. Missing, unknown, revoked or expired-grace tokens: 401 with WWW-Authenticate. */
export function bearerAuth(opts: { nodeForToken(token: string): string | undefined | Promise<string | undefined> }): MiddlewareHandler<AuthEnv> {
  if (typeof opts.nodeForToken !== 'function') throw new TypeError('bearerAuth needs nodeForToken');
  return async function bearer(c, next) {
    // On @hono/node-server the Node request's own header map is cheaper than building a Headers object.
    const incoming = (c.env as { incoming?: { headers?: Record<string, string | string[] | undefined> } } | undefined)?.incoming;
    const raw = incoming?.headers ? incoming.headers.authorization : c.req.header('authorization');
    const h = Array.isArray(raw) ? raw[0] : raw;
    if (!h) throw unauthorized('missing bearer token: send Authorization: Bearer <ACCESS_TOKEN>');
    const m = /^Bearer[ ]+([A-Za-z0-9._~+/=-]+)$/i.exec(h);
    if (!m) throw unauthorized('Authorization header must be "Bearer <ACCESS_TOKEN>"');
    const node = await opts.nodeForToken(m[1]!);
    if (!node) throw unauthorized('bearer token is not valid (unknown, revoked or expired)');
    c.set('node', node);
    c.set('token', m[1]!);
    await next();
  };
}
