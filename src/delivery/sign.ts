// Delivery signatures. Shared with the SDK's receiver-side check, so both ends compute the same bytes.
import { createHmac, randomBytes, timingSafeEqual } from 'node:crypto';

/** `whsec_` + base64 of 32 random bytes (DESIGN §8). */
export const newWebhookSecret = () => `whsec_${randomBytes(32).toString('base64')}`;

/** x-service-signature: `sha256=` + lowercase hex HMAC-SHA256 over the exact body, keyed with the secret string's UTF-8 bytes (GitHub's scheme). */
export function serviceSignature(secret: string, body: string | Uint8Array): string {
  return `sha256=${createHmac('sha256', Buffer.from(secret, 'utf8')).update(body).digest('hex')}`;
}

/** Standard Webhooks: `v1,` + base64 HMAC-SHA256 of `${id}.${timestamp}.${body}`, keyed with the base64 after `whsec_`. */
export function standardSignature(secret: string, id: string, timestamp: number, body: string | Uint8Array): string {
  const key = Buffer.from(secret.startsWith('whsec_') ? secret.slice(6) : secret, 'base64');
  const mac = createHmac('sha256', key).update(`${id}.${timestamp}.`).update(body).digest('base64');
  return `v1,${mac}`;
}

/** Constant-time comparison; a length difference is a mismatch (and is not timed differently by content). */
export function safeEqual(a: string, b: string): boolean {
  const x = Buffer.from(a, 'utf8');
  const y = Buffer.from(b, 'utf8');
  if (x.length !== y.length) {
    timingSafeEqual(x, x); // spend comparable time, then say no
    return false;
  }
  return timingSafeEqual(x, y);
}
