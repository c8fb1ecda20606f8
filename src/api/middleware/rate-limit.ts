import type { MiddlewareHandler } from 'hono';
import { NodeSvcError } from '../../domain/errors.js';
import type { AuthEnv } from './auth.js';

/** Token bucket per bearer token (DESIGN §10): `rate` per second, bursts up to `burst`; 0 turns it off. */
export function rateLimit(opts: { rate: number; burst?: number; now?: () => number }): MiddlewareHandler<AuthEnv> {
  if (!(opts.rate >= 0)) throw new TypeError('rateLimit: rate must be >= 0');
  const rate = opts.rate;
  const burst = opts.burst ?? rate * 2;
  const now = opts.now ?? (() => performance.now());
  const buckets = new Map<string, { tokens: number; at: number }>();
  return async function limit(c, next) {
    if (rate === 0) return next();
    const key = c.get('node');
    const t = now();
    let b = buckets.get(key);
    if (!b) buckets.set(key, (b = { tokens: burst, at: t }));
    b.tokens = Math.min(burst, b.tokens + ((t - b.at) / 1000) * rate);
    b.at = t;
    if (b.tokens < 1) {
      const retry = Math.max(1, Math.ceil((1 - b.tokens) / rate));
      throw new NodeSvcError('rate_limited', `rate limit of ${rate} requests/s exceeded`, { status: 429, extra: { retryAfterSeconds: retry } });
    }
    b.tokens -= 1;
    return next();
  };
}
