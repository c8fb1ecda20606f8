import type { OpenAPIHono } from '@hono/zod-openapi';
import { EVENT_KIND_LIST, EVENT_KINDS } from '../domain/events.js';
import { envelopeOf } from './schemas.js';

export const CONTRACT_VERSION = '1.4.0';

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
      description: 'Node-facing allowance verification, stream finality and webhook delivery service. Money is in micro units of the asset, as decimal strings.\n\n' +
        'How requests are refused, on every operation: **400** `invalid_request` means the request does not match this document ' +
        '(malformed JSON or UTF-8, a missing or unknown field or query parameter, a value outside its schema: type, enum, length, pattern, range), and names each problem in `issues`. ' +
        'A request that matches this document and is refused by a rule it names is **422** with a named `code` and `refusal`: ' +
        '`credential_refused`, `voucher_refused` and `control_refused` for what is signed, `request_refused` for the rest (a cursor this API never gave out, ' +
        '`cursor` together with `since`, a `since` that is no real time, an events filter naming a kind its `schemaVersion` does not have, a webhook URL the rules refuse). ' +
        'A request about state that is not there yet is **409** with a named `code` (`not_final`: a stream with nothing final has no receipt). ' +
        'Every error body is RFC 9457 `application/problem+json` with a stable `code`; clients switch on `code` and `refusal`, never on `detail`.',
    },
    servers: [{ url: 'http://127.0.0.1:8787' }],
  });
}
