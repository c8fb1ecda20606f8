import { createRoute, type OpenAPIHono } from '@hono/zod-openapi';
import { applyControl } from '../../service/control.js';
import type { Deps } from '../../service/deps.js';
import type { AuthEnv } from '../middleware/auth.js';
import { ControlRefusal, ControlRequest, ControlResult, problemResponses } from '../schemas.js';

export function controlRoutes(app: OpenAPIHono<AuthEnv>, d: Deps) {
  app.openapi(
    createRoute({
      method: 'post', path: '/v1/control', tags: ['control'], security: [{ bearer: [] }], operationId: 'applyControl',
      summary: 'Apply a signed control fact from a trusted issuer (revoke, halt, release, subscription periods)',
      request: { body: { required: true, content: { 'application/json': { schema: ControlRequest } } } },
      responses: {
        200: { description: 'Applied (or a duplicate of an applied jti)', content: { 'application/json': { schema: ControlResult } } },
        422: { description: 'control_refused; nothing changed', content: { 'application/problem+json': { schema: ControlRefusal } } },
        ...problemResponses(400, 401, 413, 415, 429),
      },
    }),
    async (c) => c.json(await applyControl(d, c.get('node'), c.req.valid('json').message), 200),
  );
}
