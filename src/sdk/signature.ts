// Receiver-side check of x-service-signature: constant time, a length difference is a mismatch.
import { createHmac, timingSafeEqual } from 'node:crypto';

const HEADER_RE = /^sha256=[0-9a-f]{64}$/;

/**
 * True when `header` is exactly `sha256=` + the lowercase hex HMAC-SHA256 of `rawBody` keyed with the
 * secret's UTF-8 bytes. Anything else — uppercase hex, a truncated value, another prefix — is false.
 */
export function verifyWebhookSignature(secret: string, rawBody: string | Uint8Array, header: string | null | undefined): boolean {
  if (typeof secret !== 'string' || !secret || typeof header !== 'string') return false;
  const expected = Buffer.from(`sha256=${createHmac('sha256', Buffer.from(secret, 'utf8')).update(rawBody).digest('hex')}`, 'utf8');
  const given = Buffer.from(header, 'utf8');
  // Compare equal-length buffers always, so the time does not depend on where a shape check failed.
  const same = given.length === expected.length ? timingSafeEqual(given, expected) : (timingSafeEqual(expected, expected), false);
  return same && HEADER_RE.test(header);
}
