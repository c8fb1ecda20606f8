import { createRoute, z, type OpenAPIHono } from '@hono/zod-openapi';
import { EVENT_KIND_LIST, SCHEMA_VERSIONS } from '../../domain/events.js';
import type { Deps } from '../../service/deps.js';
import { createSubscription, deleteSubscription, listAttempts, listEvents, listSubscriptions, redeliver, rotateSecret } from '../../service/webhooks.js';
import type { AuthEnv } from '../middleware/auth.js';
import { Envelope, noControl, problemResponses, requestRefusedResponse } from '../schemas.js';
import { SINCE_PATTERN } from '../../service/webhooks.js';

const security = [{ bearer: [] }];
const json = <T>(schema: T, description: string) => ({ description, content: { 'application/json': { schema } } });
const Time = z.string().openapi({ example: '2026-11-21T10:00:00.000Z' });

const Subscription = z
  .object({
    id: z.string().openapi({ example: 'whk_01J…' }),
    url: z.string(),
    events: z.array(z.string()).openapi({ description: 'Kinds delivered; ["*"] for all' }),
    schemaVersion: z.enum(SCHEMA_VERSIONS),
    description: z.string().nullable(),
    status: z.enum(['active', 'disabled']),
    disabledReason: z.string().nullable(),
    createdAt: Time,
    lastSuccessAt: Time.nullable(),
    failingSince: Time.nullable(),
    previousSecretExpiresAt: Time.nullable().openapi({ description: 'During a rotation overlap: deliveries also carry a signature with the previous secret until then' }),
  })
  .openapi('WebhookSubscription');
const SubscriptionWithSecret = Subscription.extend({ secret: z.string().openapi({ description: 'whsec_…: shown only in this response' }) }).openapi('WebhookSubscriptionWithSecret');
const CreateBody = z
  .strictObject({
    url: noControl(z.string().min(1).max(2048)).openapi({
      description: 'An absolute http(s) URL without userinfo or fragment, at most 2,048 characters once normalised (else 422 `url_invalid`), ' +
        "to an IP the daemon's target policy allows (else 422 `url_target_refused`); stored and answered as the WHATWG URL parser normalises it",
      example: 'https://node.example/hooks/node-svc',
    }),
    events: z.array(z.enum(EVENT_KIND_LIST as [string, ...string[]])).min(1).max(64).optional().openapi({
      description: 'Kinds to deliver (default: all). With schemaVersion 1.0.0 only the 1.0.0 kinds may be listed: ' +
        'subscription.period_opened, subscription.renewal_declined and subscription.closed are refused with 422 `kind_not_in_schema_version`.',
    }),
    schemaVersion: z.enum(SCHEMA_VERSIONS).optional().openapi({ description: 'Default 1.1.0; 1.0.0 never receives the kinds added in 1.1.0 (and may not list them in events: 422 `kind_not_in_schema_version`)' }),
    description: noControl(z.string().max(512)).optional(),
  })
  .openapi('CreateWebhook');
const SubId = z.object({ id: z.string().min(1).max(64).openapi({ param: { name: 'id', in: 'path' } }) });
const Attempt = z
  .object({
    id: z.string(), deliveryId: z.string(), eventId: z.string(), attempt: z.number().int(), attemptedAt: Time, statusCode: z.number().int().nullable(),
    durationMs: z.number().int(), error: z.string().nullable(), outcome: z.enum(['delivered', 'failed', 'gone']), nextAttemptAt: Time.nullable(),
    deliveryStatus: z.enum(['pending', 'delivered', 'dead', 'cancelled']),
  })
  .openapi('DeliveryAttempt');
const Attempts = z
  .object({
    subscription: z.string(),
    health: z.object({ pending: z.number().int(), retrying: z.number().int(), dead: z.number().int(), delivered: z.number().int() }),
    data: z.array(Attempt),
    nextCursor: z.string().nullable(),
  })
  .openapi('DeliveryAttempts');
const Page = z.object({
  cursor: z.string().max(256).optional().openapi({ param: { name: 'cursor', in: 'query', description: 'Opaque: the nextCursor of a previous page' } }),
  limit: z.coerce.number().int().min(1).max(500).default(100).openapi({ param: { name: 'limit', in: 'query' } }),
});

export function webhookRoutes(app: OpenAPIHono<AuthEnv>, d: Deps) {
  app.openapi(
    createRoute({
      method: 'post', path: '/v1/webhooks', tags: ['webhooks'], security, operationId: 'createWebhook', summary: 'Subscribe an endpoint to signed event delivery',
      request: { body: { required: true, content: { 'application/json': { schema: CreateBody } } } },
      responses: {
        201: json(SubscriptionWithSecret, 'Created; the secret is shown only here'),
        ...problemResponses(400, 401, 413, 415, 429),
        ...requestRefusedResponse('url_invalid, url_target_refused, kind_not_in_schema_version'),
      },
    }),
    async (c) => c.json(await createSubscription(d, c.get('node'), c.req.valid('json')), 201),
  );
  app.openapi(
    createRoute({
      method: 'get', path: '/v1/webhooks', tags: ['webhooks'], security, operationId: 'listWebhooks', summary: "The caller's subscriptions (never a secret)",
      responses: { 200: json(z.object({ data: z.array(Subscription) }).openapi('WebhookList'), 'Subscriptions'), ...problemResponses(400, 401, 429) },
    }),
    async (c) => c.json(await listSubscriptions(d, c.get('node')), 200),
  );
  app.openapi(
    createRoute({
      method: 'delete', path: '/v1/webhooks/{id}', tags: ['webhooks'], security, operationId: 'deleteWebhook', summary: 'Revoke a subscription; pending deliveries are cancelled',
      request: { params: SubId },
      responses: { 204: { description: 'Revoked' }, ...problemResponses(400, 401, 404, 429) },
    }),
    async (c) => {
      await deleteSubscription(d, c.get('node'), c.req.valid('param').id);
      return c.body(null, 204);
    },
  );
  app.openapi(
    createRoute({
      method: 'get', path: '/v1/webhooks/{id}/deliveries', tags: ['webhooks'], security, operationId: 'listDeliveries', summary: 'Delivery attempts, newest first, with health counts',
      request: { params: SubId, query: Page },
      responses: { 200: json(Attempts, 'Attempts'), ...problemResponses(400, 401, 404, 429) },
    }),
    async (c) => {
      const q = c.req.valid('query');
      return c.json(await listAttempts(d, c.get('node'), c.req.valid('param').id, q.cursor, q.limit), 200);
    },
  );
  app.openapi(
    createRoute({
      method: 'post', path: '/v1/webhooks/{id}/rotate-secret', tags: ['webhooks'], security, operationId: 'rotateWebhookSecret',
      summary: 'New secret; the previous one keeps signing (second signature) during the overlap',
      request: {
        params: SubId,
        body: { required: false, content: { 'application/json': { schema: z.strictObject({ overlapSeconds: z.number().int().min(0).max(604800).optional() }).openapi('RotateSecret') } } },
      },
      responses: { 200: json(SubscriptionWithSecret, 'Rotated; the new secret is shown only here'), ...problemResponses(400, 401, 404, 415, 429) },
    }),
    async (c) => {
      const body = (c.req.valid('json') ?? {}) as { overlapSeconds?: number };
      return c.json(await rotateSecret(d, c.get('node'), c.req.valid('param').id, body.overlapSeconds), 200);
    },
  );
  app.openapi(
    createRoute({
      method: 'post', path: '/v1/events/{id}/redeliver', tags: ['events'], security, operationId: 'redeliverEvent', summary: 'Queue an event again (same event id) to matching active subscriptions',
      request: {
        params: z.object({ id: z.string().min(1).max(64).openapi({ param: { name: 'id', in: 'path' } }) }),
        body: { required: false, content: { 'application/json': { schema: z.strictObject({ subscription: z.string().min(1).max(64).optional() }).openapi('Redeliver') } } },
      },
      responses: {
        202: json(z.object({ event: z.string(), queued: z.array(z.object({ subscription: z.string(), deliveryId: z.string() })) }).openapi('Redelivered'), 'Queued'),
        ...problemResponses(400, 401, 404, 415, 429),
      },
    }),
    async (c) => {
      const body = (c.req.valid('json') ?? {}) as { subscription?: string };
      return c.json(await redeliver(d, c.get('node'), c.req.valid('param').id, body.subscription), 202);
    },
  );
  app.openapi(
    createRoute({
      method: 'get', path: '/v1/events', tags: ['events'], security, operationId: 'listEvents', summary: "The caller's events, oldest first, for reconciliation",
      request: {
        query: Page.extend({
          cursor: z.string().regex(/^[A-Za-z0-9_-]{1,64}$/).optional().openapi({
            param: { name: 'cursor', in: 'query', description: 'Opaque: the nextCursor of a previous page; a cursor this API did not give out is 422 `cursor_unknown`; not with `since` (422 `cursor_with_since`)' },
          }),
          type: z.enum(EVENT_KIND_LIST as [string, ...string[]]).optional().openapi({ param: { name: 'type', in: 'query' } }),
          since: z.string().max(64).regex(new RegExp(SINCE_PATTERN), { message: 'is not an RFC 3339 time (e.g. 2026-11-21T10:00:00Z)' }).optional().openapi({
            param: { name: 'since', in: 'query' },
            description: 'RFC 3339 time: start at the first event recorded at or after it (instead of a cursor: both are 422 `cursor_with_since`); ' +
              'a value of this shape that is not a real time is 422 `since_invalid`',
            example: '2026-11-21T10:00:00Z',
          }),
        }),
      },
      responses: {
        200: json(
          z.object({
            data: z.array(Envelope),
            nextCursor: z.string().nullable(),
            hasMore: z.boolean(),
            retentionHorizon: Time.nullable().openapi({ description: 'Events that occurred before this time may have been pruned (retention); null when the daemon keeps all' }),
            sincePruned: z.boolean().openapi({ description: '`since` is before the retention horizon: events between the two may have been pruned' }),
          }).openapi('EventList'),
          'Events (envelopes as delivered at schema 1.1.0)',
        ),
        ...problemResponses(400, 401, 429),
        ...requestRefusedResponse('cursor_unknown, cursor_with_since, since_invalid'),
      },
    }),
    async (c) => {
      const q = c.req.valid('query');
      return c.json(await listEvents(d, c.get('node'), q.cursor, q.limit, q.type, q.since) as never, 200);
    },
  );
}
