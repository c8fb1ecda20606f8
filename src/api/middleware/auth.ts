import type { MiddlewareHandler } from 'hono';
import { NodeSvcError } from '../../domain/errors.js';
import type { Span } from '../../ops/tracing.js';

/** `span`: the request's server span, set only while tracing is on (middleware/trace.ts). */
export type AuthEnv = { Variables: { node: string; token: string; span?: Span } };

const unauthorized = (detail: string) => new NodeSvcError('unauthorized', detail, { status: 401 });

/** Bearer token → node. Missing, unknown, revoked or expired-grace tokens: 401 with WWW-Authenticate. */
export type NodeForToken = (token: string) => string | undefined | Promise<string | undefined>;

/** The node and token of an Authorization header's value; throws the 401 that names what is wrong. */
export async function authenticate(raw: string | string[] | undefined, nodeForToken: NodeForToken): Promise<{ node: string; token: string }> {
  const h = Array.isArray(raw) ? raw[0] : raw;
  if (!h) throw unauthorized('missing bearer token: send Authorization: Bearer <ACCESS_TOKEN>');
  const m = /^Bearer[ ]+([A-Za-z0-9._~+/=-]+)$/i.exec(h);
  if (!m) throw unauthorized('Authorization header must be "Bearer <ACCESS_TOKEN>"');
  const node = await nodeForToken(m[1]!);
  if (!node) throw unauthorized('bearer token is not valid (unknown, revoked or expired)');
  return { node, token: m[1]! };
}

export function bearerAuth(opts: { nodeForToken: NodeForToken }): MiddlewareHandler<AuthEnv> {
  if (typeof opts.nodeForToken !== 'function') throw new TypeError('bearerAuth needs nodeForToken');
  return async function bearer(c, next) {
    // On @hono/node-server the Node request's own header map is cheaper than building a Headers object.
    const incoming = (c.env as { incoming?: { headers?: Record<string, string | string[] | undefined> } } | undefined)?.incoming;
    const { node, token } = await authenticate(incoming?.headers ? incoming.headers.authorization : c.req.header('authorization'), opts.nodeForToken);
    c.set('node', node);
    c.set('token', token);
    await next();
  };
}
