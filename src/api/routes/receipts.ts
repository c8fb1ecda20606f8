// Signed settlement receipts (issue #24): the receipt JWKS and a stream's receipt. Both bearer-authenticated like every
// /v1 operation (the contract: all operations except the contract document are); a third party that checks receipts
// gets the JWKS from the operator (`node-svc receipts jwks`, published wherever they like), not from this API.
import { createRoute, type OpenAPIHono } from '@hono/zod-openapi';
import type { Deps } from '../../service/deps.js';
import { receiptJwks, streamReceipt } from '../../service/receipts.js';
import type { AuthEnv } from '../middleware/auth.js';
import { Problem, problemResponses, ReceiptJwks, StreamId, StreamReceipt } from '../schemas.js';

const security = [{ bearer: [] }];
const json = <T>(schema: T, description: string) => ({ description, content: { 'application/json': { schema } } });

export function receiptRoutes(app: OpenAPIHono<AuthEnv>, d: Deps) {
  app.openapi(
    createRoute({
      method: 'get', path: '/v1/receipts/jwks.json', tags: ['receipts'], security, operationId: 'getReceiptJwks',
      summary: 'The public keys that sign settlement receipts (JWKS)',
      description: 'Bearer-authenticated like every /v1 operation. To let anyone check receipts, publish the output of `node-svc receipts jwks` ' +
        '(the same keys, read from the store) where they can fetch it.',
      responses: { 200: json(ReceiptJwks, 'The receipt JWKS'), ...problemResponses(400, 401, 429) },
    }),
    async (c) => c.json((await receiptJwks(d.store)) as never, 200),
  );
  app.openapi(
    createRoute({
      method: 'get', path: '/v1/streams/{id}/receipt', tags: ['streams', 'receipts'], security, operationId: 'getStreamReceipt',
      summary: "The signed receipt of the stream's highest final settlement",
      request: { params: StreamId },
      responses: {
        200: json(StreamReceipt, 'The receipt (check it with `node-svc receipts verify` or the SDK verifyReceipt)'),
        409: { description: 'not_final: nothing of the stream is final yet (or only before receipts were issued); ask again after settlement.final', content: { 'application/problem+json': { schema: Problem } } },
        ...problemResponses(400, 401, 404, 429),
      },
    }),
    async (c) => c.json(await streamReceipt(d, c.get('node'), c.req.valid('param').id), 200),
  );
}
