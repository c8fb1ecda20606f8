// One onError (hono/svix habit): our errors become problem+json with their status; anything else is
// logged once, without internals, and answered with a bare 500.
import type { Context } from 'hono';
import { HTTPException } from 'hono/http-exception';
import { invalidRequest, NodeSvcError } from '../domain/errors.js';
import { redactUrls } from '../domain/text.js';
import { log } from '../log.js';

const TITLES: Record<number, string> = {
  400: 'Bad Request', 401: 'Unauthorized', 404: 'Not Found', 405: 'Method Not Allowed', 409: 'Conflict', 413: 'Payload Too Large',
  415: 'Unsupported Media Type', 422: 'Unprocessable Content', 429: 'Too Many Requests', 500: 'Internal Server Error', 503: 'Service Unavailable',
};
// 429 comes from the rate limiter or a per-node limit (limit_exceeded); both carry Retry-After when waiting helps.
const CODE_BY_STATUS: Record<number, string> = {
  400: 'invalid_request', 401: 'unauthorized', 404: 'not_found', 413: 'payload_too_large', 415: 'unsupported_media_type', 429: 'rate_limited', 503: 'unavailable',
};

/** A problem answer, whatever serves it (Hono, or the read path of src/api/fast.ts). */
export interface Answer { status: number; body: string; headers: Record<string, string> }

const JSON_TYPE = Object.freeze({ 'content-type': 'application/json' });
/** A 200 with a JSON body (a value, or JSON text already made): what c.json sends, for the direct path's answers. */
export const jsonAnswer = (value: unknown): Answer => ({ status: 200, body: typeof value === 'string' ? value : JSON.stringify(value), headers: JSON_TYPE });

export function problemAnswer(status: number, code: string, detail: string, extra: Record<string, unknown> = {}, headers: Record<string, string> = {}): Answer {
  // A detail may quote a URL from a library error (an RPC or processor URL): never with its query or userinfo.
  const base = { type: `urn:node-svc:problem:${code}`, title: TITLES[status] ?? 'Error', status, detail: redactUrls(detail), code };
  // base again last: extra never overrides the RFC 9457 members (a `status` in extra once replaced the HTTP status).
  const body = { ...base, ...extra, ...base };
  return { status, body: JSON.stringify(body), headers: { 'content-type': 'application/problem+json', ...headers } };
}

export function problem(c: Context, status: number, code: string, detail: string, extra: Record<string, unknown> = {}, headers: Record<string, string> = {}) {
  const a = problemAnswer(status, code, detail, extra, headers);
  return c.body(a.body, a.status as never, a.headers);
}

/** The 400 of a request that its route's zod schema refuses (the routes' validation hook, and src/api/fast.ts). */
export function invalidFromZod(error: { issues: ReadonlyArray<{ path: ReadonlyArray<PropertyKey>; message: string }> }): NodeSvcError {
  const issues = error.issues.map((i) => ({ path: i.path.join('.') || '(body)', message: i.message }));
  return invalidRequest(`invalid request: ${issues.map((i) => `${i.path}: ${i.message}`).join('; ')}`, { issues });
}

/** What an error thrown while serving `path` answers (logged when it is ours to fix). */
export function errorAnswer(err: Error, path: string): Answer {
  if (err instanceof NodeSvcError) {
    const status = err.code === 'usage' ? 400 : err.status;
    const code = err.code === 'usage' ? 'invalid_request' : err.code;
    const headers: Record<string, string> = status === 401 ? { 'www-authenticate': 'Bearer realm="node-svc"' } : {};
    if ((status === 429 || status === 503) && typeof err.extra.retryAfterSeconds === 'number') headers['retry-after'] = String(err.extra.retryAfterSeconds);
    if (status >= 500 && status !== 503) log.error('request failed', { code, status, path });
    return problemAnswer(status, code, err.message, err.extra, headers);
  }
  if (err instanceof HTTPException) {
    const status = err.status;
    return problemAnswer(status, CODE_BY_STATUS[status] ?? 'invalid_request', status === 400 && /JSON/i.test(err.message) ? 'request body is not valid JSON' : err.message || TITLES[status] || 'error');
  }
  log.error('unhandled error', { path, error: err?.name ?? 'Error', ...(process.env.DEBUG_NODE_SVC_ERRORS ? { message: String(err?.message), stack: String(err?.stack) } : {}) });
  return problemAnswer(500, 'internal', 'internal error');
}

export function onError(err: Error, c: Context) {
  const a = errorAnswer(err, c.req.path);
  return c.body(a.body, a.status as never, a.headers);
}
