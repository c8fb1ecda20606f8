import { createRoute, type OpenAPIHono, type RouteConfig } from '@hono/zod-openapi';
import type { Context } from 'hono';
import { invalidRequest } from '../../domain/errors.js';
import { lengthOver } from '../../domain/text.js';
import type { AuthEnv } from '../middleware/auth.js';
import type { Deps } from '../../service/deps.js';
import { finality, headroomJson, listStreams, streamVerify, submitVoucher } from '../../service/streams.js';
import { verifyCredential } from '../../service/streams.js';
import {
  CredentialRefusal, FinalityView, Headroom, StreamListQuery, StreamId, StreamList, StreamVerify, ValidCredential, VerifyRequest,
  VoucherAccepted, VoucherRefusal, VoucherRequest, problemResponses, requestRefusedResponse,
} from '../schemas.js';
import { jsonAnswer, problemAnswer, type Answer } from '../problem.js';
import { metrics } from '../../ops/metrics.js';
import { causes, inSpan, type Span } from '../../ops/tracing.js';

const security = [{ bearer: [] }];
const json = <T>(schema: T, description: string) => ({ description, content: { 'application/json': { schema } } });

/** A read of one stream by the calling node: what GET /v1/streams/{id}/<suffix> answers with 200 (an object, or its
 *  JSON text when the read keeps it serialized: the headroom read). */
export type StreamRead = (node: string, id: string) => Promise<unknown>;

/** The stream reads by path suffix (verify, headroom, finality): served by Hono and by src/api/fast.ts alike. */
export type StreamReads = Map<string, StreamRead>;

/** The one check of the path parameter (the route's StreamId schema, 1 to 256 characters): a 400 naming it. */
export function checkStreamId(id: string): void {
  if (id.length < 1 || lengthOver(id, 256)) {
    const message = 'must be 1 to 256 characters';
    throw invalidRequest(`invalid request: id: ${message}`, { issues: [{ path: 'id', message }] });
  }
}

/**
 * GET /v1/streams/{id}/…, the reads a node makes on its paid path. Declared like every route (the same route
 * object documents it in /openapi.json), but the one path parameter is checked here rather than by the zod
 * validator, whose async parse cost ~15 % of the headroom throughput (bench/http). Same answers: 400 for a bad id.
 * The same read serves the daemon's direct path (src/api/fast.ts), which answers the common request without Hono.
 */
function streamRead<R extends RouteConfig>(app: OpenAPIHono<AuthEnv>, reads: StreamReads, route: R, read: StreamRead) {
  app.openAPIRegistry.registerPath(route);
  reads.set(route.path.slice(route.path.lastIndexOf('/') + 1), read);
  app.get(route.path.replace('{id}', ':id'), async (c) => {
    const id = c.req.param('id') ?? '';
    checkStreamId(id);
    const r = await read(c.get('node'), id);
    return typeof r === 'string' ? c.body(r, 200, { 'content-type': 'application/json' }) : c.json(r as never, 200);
  });
}

export function streamRoutes(app: OpenAPIHono<AuthEnv>, d: Deps): StreamReads {
  const reads: StreamReads = new Map();
  app.openapi(
    createRoute({
      method: 'post', path: '/v1/allowances/verify', tags: ['allowances'], security, operationId: 'verifyAllowance',
      summary: 'Verify an allowance credential aimed at the caller (fails closed)',
      request: { body: { required: true, content: { 'application/json': { schema: VerifyRequest } } } },
      responses: {
        200: json(ValidCredential, 'Valid, live and aimed at the caller: the payload'),
        422: { description: 'A named refusal; never a payload', content: { 'application/problem+json': { schema: CredentialRefusal } } },
        ...problemResponses(400, 401, 413, 415, 429, 503),
      },
    }),
    async (c) => answer(c, await verifyAnswer(d, c.get('node'), c.req.valid('json'), c.get('span'))),
  );

  app.openapi(
    createRoute({
      method: 'get', path: '/v1/streams', tags: ['streams'], security, operationId: 'listStreams', summary: "The caller's streams, by id or by last activity, open or closed, cursor-paginated",
      request: { query: StreamListQuery },
      responses: { 200: json(StreamList, 'A page of streams'), ...problemResponses(400, 401, 429), ...requestRefusedResponse('cursor_unknown') },
    }),
    async (c) => {
      const q = c.req.valid('query');
      return c.json(await listStreams(d, c.get('node'), q.cursor, q.limit, { status: q.status, sort: q.sort }), 200);
    },
  );

  streamRead(app, reads,
    createRoute({
      method: 'get', path: '/v1/streams/{id}/verify', tags: ['streams'], security, operationId: 'verifyStream', summary: 'Is the stream open and payable to the caller',
      request: { params: StreamId },
      responses: { 200: json(StreamVerify, 'Stream standing'), ...problemResponses(400, 401, 404, 429, 503) },
    }),
    (node, id) => streamVerify(d, node, id),
  );

  streamRead(app, reads,
    createRoute({
      method: 'get', path: '/v1/streams/{id}/headroom', tags: ['streams'], security, operationId: 'getHeadroom', summary: 'Remaining cap, remaining network units, rate, degradation stage',
      request: { params: StreamId },
      responses: { 200: json(Headroom, 'Headroom'), ...problemResponses(400, 401, 404, 429, 503) },
    }),
    (node, id) => headroomJson(d, node, id),
  );

  streamRead(app, reads,
    createRoute({
      method: 'get', path: '/v1/streams/{id}/finality', tags: ['streams'], security, operationId: 'getFinality', summary: 'Settled-frontier finality and billed truth (the last signed voucher)',
      request: { params: StreamId },
      responses: { 200: json(FinalityView, 'Finality; only finality "final" is a credit signal'), ...problemResponses(400, 401, 404, 429) },
    }),
    (node, id) => finality(d, node, id),
  );

  app.openapi(
    createRoute({
      method: 'post', path: '/v1/streams/{id}/vouchers', tags: ['streams'], security, operationId: 'submitVoucher', summary: "Submit the payer's signed voucher: the new billed truth",
      request: { params: StreamId, body: { required: true, content: { 'application/json': { schema: VoucherRequest } } } },
      responses: {
        200: json(VoucherAccepted, 'Accepted, or accepted:false reason "stale" at or below the billed truth (idempotent)'),
        422: { description: 'voucher_refused (or credential_refused for the optional credential)', content: { 'application/problem+json': { schema: VoucherRefusal } } },
        ...problemResponses(400, 401, 404, 413, 415, 429, 503),
      },
    }),
    async (c) => answer(c, await voucherAnswer(d, c.get('node'), c.req.valid('param').id, c.req.valid('json'), c.get('span'))),
  );
  return reads;
}

/** What Hono sends for an Answer (the same bytes as c.json and problem()). */
const answer = (c: Context, a: Answer) => c.body(a.body, a.status as never, a.headers) as never;

/**
 * POST /v1/allowances/verify for `node` and the validated body: served by the route above and by the direct path
 * (src/api/fast.ts) alike. The span names the refusal, never the JWS.
 */
export async function verifyAnswer(d: Deps, node: string, body: { credential: string }, parent: Span | undefined): Promise<Answer> {
  const r = await inSpan(parent, 'credential.verify', { 'node_svc.node': node }, () => verifyCredential(d, node, body.credential), (r, span) =>
    span.set(r.valid ? { 'node_svc.credential.valid': true, 'node_svc.stream': r.stream, 'node_svc.credential.id': r.credentialId } : { 'node_svc.credential.valid': false, 'node_svc.refusal': r.refusal }));
  metrics.verify.inc({ result: r.valid ? 'valid' : r.refusal });
  if (r.valid) return jsonAnswer(r);
  return problemAnswer(422, 'credential_refused', r.detail, { valid: false, refusal: r.refusal });
}

/**
 * POST /v1/streams/{id}/vouchers for `node`, the stream id and the validated body: served by the route above and by
 * the direct path alike. An accepted voucher's span is remembered for the settlement that will settle it (a span
 * link: ops/tracing.ts), before the commit (the settler may take the stream as soon as it is billed), and forgotten
 * if the voucher is not accepted.
 */
export async function voucherAnswer(d: Deps, node: string, id: string, body: { voucher: unknown; credential?: string | undefined }, parent: Span | undefined): Promise<Answer> {
  const r = await inSpan(parent, 'voucher.accept', { 'node_svc.node': node, 'node_svc.stream': id }, async (span) => {
    if (span) causes.voucher(node, id, span.ref);
    try {
      return await submitVoucher(d, node, id, body.voucher, body.credential);
    } catch (err) {
      if (span) causes.forgetVoucher(node, id, span.ref);
      throw err;
    }
  }, (r, span) => {
    if (r.accepted) return span.set({ 'node_svc.voucher.accepted': true, 'node_svc.billed_micro': r.billedMicro, 'node_svc.stream.exhausted': r.exhausted });
    causes.forgetVoucher(node, id, span.ref);
    span.set({ 'node_svc.voucher.accepted': false, 'node_svc.voucher.reason': r.reason });
  });
  return jsonAnswer(r);
}
