// node-svc/gateway/hono: `app.use(allowance({ keys, audience }))`; the payload is `c.get('allowance')`.
import type { MiddlewareHandler } from 'hono';
import type { ValidCredential } from '../../domain/credential.js';
import { createGuard, type GatewayOptions } from './core.js';

export type AllowanceEnv = { Variables: { allowance: ValidCredential } };

export function allowance(opts: GatewayOptions): MiddlewareHandler<AllowanceEnv> {
  const guard = createGuard(opts);
  return async function allowanceGuard(c, next) {
    const r = guard.check(c.req.header(guard.header), c.req.header(guard.voucherHeader));
    if (!r.ok) return c.body(JSON.stringify(r.response.body), 402, r.response.headers);
    c.set('allowance', r.allowance);
    await next();
  };
}
export type { GatewayOptions } from './core.js';
