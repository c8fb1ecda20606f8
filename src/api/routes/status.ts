// GET /v1/node: which node the bearer token speaks for (what `node-svc status` shows beside the daemon's verdict).
import { createRoute, z, type OpenAPIHono } from '@hono/zod-openapi';
import type { AuthEnv } from '../middleware/auth.js';
import type { Deps } from '../../service/deps.js';
import { tokenStanding } from '../../service/admin.js';
import { VERSION } from '../../version.js';
import { problemResponses } from '../schemas.js';

export const NodeView = z.object({
  node: z.string().openapi({ description: 'The node the bearer token belongs to' }),
  tokenGraceUntil: z.string().nullable().openapi({ description: 'When the token stops working (a rotated token in its grace period); null for the active token' }),
  version: z.string().openapi({ description: 'The daemon version' }),
}).openapi('NodeView');

export function statusRoutes(app: OpenAPIHono<AuthEnv>, d: Deps) {
  app.openapi(
    createRoute({
      method: 'get', path: '/v1/node', tags: ['node'], security: [{ bearer: [] }], operationId: 'getNode',
      summary: 'The node this bearer token belongs to',
      responses: { 200: { description: 'The caller', content: { 'application/json': { schema: NodeView } } }, ...problemResponses(400, 401, 429) },
    }),
    async (c) => c.json({ ...(await tokenStanding(d.store, c.get('node'), c.get('token'))), version: VERSION }, 200),
  );
}
