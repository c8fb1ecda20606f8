// node-svc/gateway/fastify: `await app.register(allowance, { keys, audience })`; the payload is `request.allowance`.
// The plugin is not encapsulated (skip-override), so its hook guards every route of the instance it is registered on.
import type { ValidCredential } from '../../domain/credential.js';
import { createGuard, type GatewayOptions } from './core.js';

interface Request { headers: Record<string, string | string[] | undefined>; allowance?: ValidCredential }
interface Reply { code(c: number): Reply; headers(h: Record<string, string>): Reply; send(body: string): unknown }
interface Instance {
  decorateRequest(name: string, value: unknown): void;
  addHook(name: 'onRequest', fn: (req: Request, reply: Reply) => Promise<unknown>): void;
  addHook(name: 'onClose', fn: () => Promise<void>): void;
}

const one = (v: string | string[] | undefined) => (Array.isArray(v) ? v[0] : v);

async function plugin(app: Instance, opts: GatewayOptions): Promise<void> {
  const guard = createGuard(opts);
  app.decorateRequest('allowance', null);
  app.addHook('onRequest', async (req, reply) => {
    const r = guard.check(one(req.headers[guard.header]), one(req.headers[guard.voucherHeader]));
    if (!r.ok) return reply.code(402).headers(r.response.headers).send(JSON.stringify(r.response.body));
    req.allowance = r.allowance;
    return undefined;
  });
  app.addHook('onClose', async () => guard.close());
}
(plugin as unknown as Record<symbol, unknown>)[Symbol.for('skip-override')] = true;
(plugin as unknown as Record<symbol, unknown>)[Symbol.for('fastify.display-name')] = 'node-svc-allowance';

export const allowance = plugin;
export type { GatewayOptions } from './core.js';
