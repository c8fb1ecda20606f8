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
    super(problem.code as never, problem.detail, { status: problem.status, exitCode: EXIT_BY_STATUS[problem.status] ?? EXIT.other, extra });
  }
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
      const cause = (err as { cause?: { code?: string } }).cause?.code ?? (err as Error).name;
      throw new NodeSvcError('unavailable', `cannot reach the daemon at ${base} (${cause})`, {
        exitCode: EXIT.other,
        hint: 'start it with `node-svc daemon`, or point --url / NODE_SVC_URL at it',
      });
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
    verifyAllowance: (credential: string) => call<Record<string, unknown>>('POST', '/v1/allowances/verify', { credential }),
    listStreams: (q: { cursor?: string; limit?: number } = {}) => call<{ data: Record<string, unknown>[]; nextCursor: string | null }>('GET', `/v1/streams${qs(q)}`),
    verifyStream: (id: string) => call<{ stream: string; open: boolean; payable: boolean; status: string; reason: string | null }>('GET', `/v1/streams/${enc(id)}/verify`),
    headroom: (id: string) => call<Record<string, unknown>>('GET', `/v1/streams/${enc(id)}/headroom`),
    finality: (id: string) => call<Record<string, unknown>>('GET', `/v1/streams/${enc(id)}/finality`),
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
