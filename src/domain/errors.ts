import type { RequestRefusal } from './refusals.js';

// Stable error codes (jose util/errors habit): callers switch on `code`, never on messages.
export type ErrorCode =
  | 'usage'
  | 'invalid_request'
  | 'not_found'
  | 'conflict'
  | 'unauthorized'
  | 'payload_too_large'
  | 'unsupported_media_type'
  | 'rate_limited'
  | 'limit_exceeded'
  | 'credential_refused'
  | 'voucher_refused'
  | 'control_refused'
  | 'request_refused'
  | 'not_final'
  | 'unavailable'
  | 'config'
  | 'store'
  | 'internal';

/** CLI exit codes (DESIGN §11): 0 ok, 1 negative answer, 2 usage, 3 not found, 4 other. */
export const EXIT = { ok: 0, negative: 1, usage: 2, notFound: 3, other: 4 } as const;

// On every instance, so an error made by another copy of this module is still recognised (isNodeSvcError): the CLI's
// verify bundle (dist/cli/node-svc.cjs) carries its own copy, and the modules it hands every other command to theirs.
const BRAND = Symbol.for('node-svc.error');

export class NodeSvcError extends Error {
  readonly [BRAND] = true;
  readonly code: ErrorCode;
  readonly status: number;
  readonly exitCode: number;
  /** Extra fields merged into a problem body / JSON error (never secrets). */
  readonly extra: Record<string, unknown>;
  /** What the user can do about it, shown after the message in the CLI. */
  readonly hint: string | undefined;
  constructor(
    code: ErrorCode,
    message: string,
    opts: { status?: number; exitCode?: number; hint?: string; extra?: Record<string, unknown> } = {},
  ) {
    super(message);
    this.name = 'NodeSvcError';
    this.code = code;
    this.status = opts.status ?? 500;
    this.exitCode = opts.exitCode ?? EXIT.other;
    this.hint = opts.hint;
    this.extra = opts.extra ?? {};
  }
}

/** A NodeSvcError from any copy of this module (`instanceof` only knows its own copy's class). */
export const isNodeSvcError = (err: unknown): err is NodeSvcError =>
  typeof err === 'object' && err !== null && (err as { [BRAND]?: unknown })[BRAND] === true;

export const usageError = (message: string, hint?: string) =>
  new NodeSvcError('usage', message, { status: 400, exitCode: EXIT.usage, ...(hint ? { hint } : {}) });

export const invalidRequest = (message: string, extra?: Record<string, unknown>) =>
  new NodeSvcError('invalid_request', message, { status: 400, exitCode: EXIT.usage, ...(extra ? { extra } : {}) });

export const notFound = (what: string) =>
  new NodeSvcError('not_found', `${what} not found`, { status: 404, exitCode: EXIT.notFound });

export const conflict = (message: string, hint?: string) =>
  new NodeSvcError('conflict', message, { status: 409, exitCode: EXIT.other, ...(hint ? { hint } : {}) });

export const configError = (message: string, hint?: string) =>
  new NodeSvcError('config', message, { status: 500, exitCode: EXIT.other, ...(hint ? { hint } : {}) });

/** A per-node quota (subscriptions, redeliveries pending) is full: 429 naming the limit, never a silent queue. */
export const limitExceeded = (limit: string, max: number, message: string, retryAfterSeconds?: number) =>
  new NodeSvcError('limit_exceeded', message, {
    status: 429, exitCode: EXIT.other, extra: { limit, max, ...(retryAfterSeconds !== undefined ? { retryAfterSeconds } : {}) },
  });

/** A named refusal (credential, voucher, control): 422 with `refusal` in the problem body, exit 1 in the CLI. */
export const refused = (code: 'credential_refused' | 'voucher_refused' | 'control_refused', refusal: string, detail: string, extra: Record<string, unknown> = {}) =>
  new NodeSvcError(code, detail, { status: 422, exitCode: EXIT.negative, extra: { refusal, ...extra } });

/**
 * A request that matches the OpenAPI document, refused by a rule the document names (DESIGN §15): 422 `request_refused`
 * with `refusal` naming the rule. 400 `invalid_request` is only for a request the document itself does not allow.
 * In the CLI it is a usage error (exit 2): the caller asked for something the API does not do.
 */
export const requestRefused = (refusal: RequestRefusal, detail: string, extra: Record<string, unknown> = {}) =>
  new NodeSvcError('request_refused', detail, { status: 422, exitCode: EXIT.usage, extra: { refusal, ...extra } });

/** A dependency cannot be read now (the chain RPC, the card processor): 503, retriable, never a yes. */
export const unavailable = (message: string, retryAfterSeconds = 5) =>
  new NodeSvcError('unavailable', message, { status: 503, exitCode: EXIT.other, extra: { retryAfterSeconds } });
