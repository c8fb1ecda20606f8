// The x402 facilitator (issue #24): POST /v1/x402/verify, POST /v1/x402/settle, GET /v1/x402/supported, with x402 v2's
// request and response shapes; bearer-authenticated like every /v1 operation (x402's HTTPFacilitatorClient sends the
// header from createAuthHeaders). A refused payment is 200 with isValid/success false and x402's named reason, as x402's
// client expects; a body that does not match the document is 400.
import { createRoute, type OpenAPIHono } from '@hono/zod-openapi';
import type { Deps } from '../../service/deps.js';
import type { AuthEnv } from '../middleware/auth.js';
import { problemResponses, X402Request, X402SettleResponse, X402SupportedResponse, X402VerifyResponse } from '../schemas.js';
import type { VerifyRequest } from '../../service/x402.js';

const security = [{ bearer: [] }];
const json = <T>(schema: T, description: string) => ({ description, content: { 'application/json': { schema } } });
const NO_RAIL = 'this daemon settles on no escrow rail (start it with --mode escrow): it facilitates no x402 network';

export function x402Routes(app: OpenAPIHono<AuthEnv>, d: Deps) {
  app.openapi(
    createRoute({
      method: 'get', path: '/v1/x402/supported', tags: ['x402'], security, operationId: 'x402Supported',
      summary: 'x402: the scheme and network this facilitator settles (exact on the configured chain) and its signer',
      responses: { 200: json(X402SupportedResponse, 'x402 SupportedResponse (no kinds without an escrow rail)'), ...problemResponses(400, 401, 429) },
    }),
    (c) => c.json(d.x402 ? d.x402.supported() : { kinds: [], extensions: [], signers: {} }, 200),
  );
  app.openapi(
    createRoute({
      method: 'post', path: '/v1/x402/verify', tags: ['x402'], security, operationId: 'x402Verify',
      summary: 'x402: check a payment (exact, EIP-3009) against this chain, asset token and wallet; nothing is sent',
      request: { body: { required: true, content: { 'application/json': { schema: X402Request } } } },
      responses: { 200: json(X402VerifyResponse, 'x402 VerifyResponse: isValid, or invalidReason'), ...problemResponses(400, 401, 413, 415, 429) },
    }),
    async (c) => c.json(d.x402 ? await d.x402.verify(c.req.valid('json') as VerifyRequest) : { isValid: false, invalidReason: 'invalid_network', invalidMessage: NO_RAIL }, 200),
  );
  app.openapi(
    createRoute({
      method: 'post', path: '/v1/x402/settle', tags: ['x402'], security, operationId: 'x402Settle',
      summary: 'x402: settle a payment with transferWithAuthorization from the daemon\'s wallet; success once mined, else settlement_pending',
      description: 'The authorization is claimed in the store before anything is sent: the same one settled twice (concurrently, or by two daemons on one ' +
        'database) sends one transaction, and every answer names it. success is true only once it is mined (settlement.checkpointed); ' +
        'settlement.final follows at --confirmations, with a signed receipt. Refusals send nothing.',
      request: { body: { required: true, content: { 'application/json': { schema: X402Request } } } },
      responses: { 200: json(X402SettleResponse, 'x402 SettleResponse'), ...problemResponses(400, 401, 413, 415, 429) },
    }),
    async (c) => c.json(d.x402 ? await d.x402.settle(c.get('node'), c.req.valid('json') as VerifyRequest)
      : { success: false, errorReason: 'invalid_network', errorMessage: NO_RAIL, transaction: '', network: '' }, 200),
  );
}
