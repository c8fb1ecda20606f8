// A typed client for every /v1 operation. Errors are thrown as NodeSvcError with the problem's code and status.
import { EXIT, NodeSvcError } from '../domain/errors.js';

export interface ClientOptions {
  url: string;
  token?: string;
  /** Milliseconds (default 15 s). */
  timeout?: number;
}

export interface Problem {
  type: string;
  title: string;
  status: number;
  detail: string;
  code: string;
  [k: string]: unknown;
}

const EXIT_BY_STATUS: Record<number, number> = { 400: EXIT.usage, 404: EXIT.notFound, 422: EXIT.negative };

export class ApiError extends NodeSvcError {
  constructor(readonly problem: Problem) {
    const { type: _t, title: _ti, status: _s, detail: _d, code: _c, ...extra } = problem;
    // request_refused (422) is the caller's request refused by a documented rule: a usage error, like a 400.
    const exitCode = problem.code === 'request_refused' ? EXIT.usage : EXIT_BY_STATUS[problem.status] ?? EXIT.other;
    super(problem.code as never, problem.detail, { status: problem.status, exitCode, extra });
  }
}

/** What went wrong reaching the daemon, in words: fetch itself only says "TypeError: fetch failed". */
export function connectionProblem(err: unknown, timeoutMs: number): string {
  const e = err as { name?: string; cause?: { code?: string; errors?: Array<{ code?: string }>; message?: string } };
  if (e?.name === 'TimeoutError' || e?.name === 'AbortError') return `no answer within ${timeoutMs / 1000} s`;
  const code = e?.cause?.code ?? e?.cause?.errors?.find((x) => x?.code)?.code;
  const words: Record<string, string> = {
    ECONNREFUSED: 'connection refused: nothing is listening there',
    ENOTFOUND: 'host not found',
    EAI_AGAIN: 'host name lookup failed',
    ECONNRESET: 'the connection was reset',
    EHOSTUNREACH: 'host unreachable',
    ENETUNREACH: 'network unreachable',
    ETIMEDOUT: 'connection timed out',
    UND_ERR_CONNECT_TIMEOUT: 'connection timed out',
    UND_ERR_SOCKET: 'the connection was closed',
  };
  if (code) return words[code] ?? code;
  return e?.cause?.message ?? (err instanceof Error ? err.message : String(err));
}

const unreachable = (base: string, err: unknown, timeoutMs: number) =>
  new NodeSvcError('unavailable', `cannot reach the daemon at ${base} (${connectionProblem(err, timeoutMs)})`, {
    exitCode: EXIT.other,
    hint: 'start it with `node-svc daemon`, or point --url / NODE_SVC_URL at it',
  });

/** GET /healthz (no token, outside the /v1 contract): the daemon's verdict, also when it answers 503 (down). */
export async function fetchHealth(url: string, timeoutMs = 15_000): Promise<Record<string, any>> {
  const base = url.replace(/\/+$/, '');
  let res: Response;
  try {
    res = await fetch(`${base}/healthz`, { headers: { accept: 'application/json' }, signal: AbortSignal.timeout(timeoutMs), redirect: 'error' });
  } catch (err) {
    throw unreachable(base, err, timeoutMs);
  }
  const text = await res.text();
  try {
    const v = JSON.parse(text) as Record<string, any>;
    if (v && typeof v === 'object' && typeof v.status === 'string') return v;
  } catch { /* below */ }
  throw new NodeSvcError('unavailable', `${base}/healthz answered HTTP ${res.status} without a verdict: is this a node-svc daemon?`);
}

export function createClient(opts: ClientOptions) {
  const base = opts.url.replace(/\/+$/, '');
  async function call<T>(method: string, path: string, body?: unknown): Promise<T> {
    const headers: Record<string, string> = { accept: 'application/json' };
    if (opts.token) headers.authorization = `Bearer ${opts.token}`;
    if (body !== undefined) headers['content-type'] = 'application/json';
    let res: Response;
    try {
      res = await fetch(`${base}${path}`, {
        method,
        headers,
        ...(body !== undefined ? { body: JSON.stringify(body) } : {}),
        signal: AbortSignal.timeout(opts.timeout ?? 15_000),
        redirect: 'error',
      });
    } catch (err) {
      throw unreachable(base, err, opts.timeout ?? 15_000);
    }
    if (res.status === 204) return undefined as T;
    const text = await res.text();
    let parsed: unknown;
    try {
      parsed = text ? JSON.parse(text) : undefined;
    } catch {
      throw new NodeSvcError('internal', `the daemon at ${base} answered HTTP ${res.status} with a body that is not JSON`);
    }
    if (!res.ok) {
      const p = parsed as Problem | undefined;
      if (p && typeof p.code === 'string') throw new ApiError(p);
      throw new NodeSvcError('internal', `the daemon at ${base} answered HTTP ${res.status}`);
    }
    return parsed as T;
  }
  const enc = encodeURIComponent;
  const qs = (q: Record<string, string | number | undefined>) => {
    const p = new URLSearchParams();
    for (const [k, v] of Object.entries(q)) if (v !== undefined) p.set(k, String(v));
    const s = p.toString();
    return s ? `?${s}` : '';
  };
  return {
    call,
    node: () => call<{ node: string; tokenGraceUntil: string | null; version: string }>('GET', '/v1/node'),
    verifyAllowance: (credential: string) => call<Record<string, unknown>>('POST', '/v1/allowances/verify', { credential }),
    listStreams: (q: { cursor?: string; limit?: number; status?: 'open' | 'closed' | 'all'; sort?: 'id' | 'activity' } = {}) => call<{ data: Record<string, unknown>[]; nextCursor: string | null }>('GET', `/v1/streams${qs(q)}`),
    verifyStream: (id: string) => call<{ stream: string; open: boolean; payable: boolean; status: string; reason: string | null }>('GET', `/v1/streams/${enc(id)}/verify`),
    headroom: (id: string) => call<Record<string, unknown>>('GET', `/v1/streams/${enc(id)}/headroom`),
    finality: (id: string) => call<Record<string, unknown>>('GET', `/v1/streams/${enc(id)}/finality`),
    receipt: (id: string) => call<{ stream: string; amountMicro: string; finalAt: string; kid: string; receipt: string }>('GET', `/v1/streams/${enc(id)}/receipt`),
    receiptJwks: () => call<{ keys: Record<string, unknown>[] }>('GET', '/v1/receipts/jwks.json'),
    /** x402 facilitator (README, "Accepting x402 payments"): the v2 request and response shapes. */
    x402Supported: () => call<{ kinds: Record<string, unknown>[]; extensions: string[]; signers: Record<string, string[]> }>('GET', '/v1/x402/supported'),
    x402Verify: (body: { x402Version: number; paymentPayload: unknown; paymentRequirements: unknown }) => call<{ isValid: boolean; invalidReason?: string; invalidMessage?: string; payer?: string }>('POST', '/v1/x402/verify', body),
    x402Settle: (body: { x402Version: number; paymentPayload: unknown; paymentRequirements: unknown }) =>
      call<{ success: boolean; errorReason?: string; errorMessage?: string; payer?: string; transaction: string; network: string; amount?: string }>('POST', '/v1/x402/settle', body),
    submitVoucher: (id: string, voucher: unknown, credential?: string) =>
      call<Record<string, unknown>>('POST', `/v1/streams/${enc(id)}/vouchers`, credential === undefined ? { voucher } : { voucher, credential }),
    control: (message: string) => call<Record<string, unknown>>('POST', '/v1/control', { message }),
    createWebhook: (body: { url: string; events?: string[]; schemaVersion?: '1.0.0' | '1.1.0'; description?: string }) =>
      call<Record<string, any>>('POST', '/v1/webhooks', body),
    listWebhooks: () => call<{ data: Record<string, any>[] }>('GET', '/v1/webhooks'),
    deleteWebhook: (id: string) => call<void>('DELETE', `/v1/webhooks/${enc(id)}`),
    listDeliveries: (id: string, q: { cursor?: string; limit?: number } = {}) => call<Record<string, any>>('GET', `/v1/webhooks/${enc(id)}/deliveries${qs(q)}`),
    rotateWebhookSecret: (id: string, overlapSeconds?: number) =>
      call<Record<string, any>>('POST', `/v1/webhooks/${enc(id)}/rotate-secret`, overlapSeconds === undefined ? {} : { overlapSeconds }),
    redeliverEvent: (id: string, subscription?: string) => call<{ event: string; queued: { subscription: string; deliveryId: string }[] }>('POST', `/v1/events/${enc(id)}/redeliver`, subscription ? { subscription } : {}),
    listEvents: (q: { cursor?: string; limit?: number; type?: string; since?: string } = {}) =>
      call<{ data: Record<string, any>[]; nextCursor: string | null; hasMore: boolean; retentionHorizon: string | null; sincePruned: boolean }>('GET', `/v1/events${qs(q)}`),
  };
}
export type Client = ReturnType<typeof createClient>;
