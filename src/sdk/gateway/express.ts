// node-svc/gateway/express: `app.use(allowance({ keys, audience }))`; the payload is `req.allowance`.
import type { ValidCredential } from '../../domain/credential.js';
import { createGuard, type GatewayOptions } from './core.js';

interface Req { headers: Record<string, string | string[] | undefined>; allowance?: ValidCredential }
interface Res { status(code: number): Res; set(headers: Record<string, string>): Res; send(body: string): unknown }

const one = (v: string | string[] | undefined) => (Array.isArray(v) ? v[0] : v);

export function allowance(opts: GatewayOptions) {
  const guard = createGuard(opts);
  return function allowanceGuard(req: Req, res: Res, next: (err?: unknown) => void): void {
    const r = guard.check(one(req.headers[guard.header]), one(req.headers[guard.voucherHeader]));
    if (!r.ok) {
      res.status(402).set(r.response.headers).send(JSON.stringify(r.response.body));
      return;
    }
    req.allowance = r.allowance;
    next();
  };
}
export type { GatewayOptions } from './core.js';
