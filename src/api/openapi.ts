import type { OpenAPIHono } from '@hono/zod-openapi';
import { EVENT_KIND_LIST, EVENT_KINDS } from '../domain/events.js';
import { envelopeOf } from './schemas.js';

export const CONTRACT_VERSION = '1.1.0';

/** The OpenAPI 3.1 document: every route as declared, plus each event kind under top-level `webhooks`. */
export function openApiDocument(app: OpenAPIHono<any>) {
  for (const kind of EVENT_KIND_LIST) {
    app.openAPIRegistry.registerWebhook({
      method: 'post',
      path: kind,
      summary: `${kind} (schema ${EVENT_KINDS[kind]}+)`,
      description:
        'Signed delivery: x-service-signature = "sha256=" + lowercase hex HMAC-SHA256 of the exact body with the subscription secret; ' +
        'x-service-event-id = envelope id (dedupe on it). At-least-once; duplicates and reordering may occur. Credit only on settlement.final.',
      request: { body: { content: { 'application/json': { schema: envelopeOf(kind) as never } } } },
      responses: { 200: { description: 'Any 2xx within the timeout acknowledges the delivery' } },
    });
  }
  return app.getOpenAPI31Document({
    openapi: '3.1.0',
    info: {
      title: 'node-svc',
      version: CONTRACT_VERSION,
      description: 'Node-facing allowance verification, stream finality and webhook delivery service. Money is in micro units of the asset, as decimal strings.',
    },
    servers: [{ url: 'http://127.0.0.1:8787' }],
  });
}
