import type { MiddlewareHandler } from 'hono';
import { NodeSvcError } from '../../domain/errors.js';

export const MAX_BODY_BYTES = 64 * 1024;
const JSON_RE = /^application\/(?:[\w.-]+\+)?json$/i;

/**
 * Requests with a body: JSON only (415 otherwise), at most 64 KiB (413, checked on the declared length
 * before reading and on the bytes actually read), parsed once; malformed JSON is a 400.
 */
export function jsonBody(opts: { maxBytes?: number } = {}): MiddlewareHandler {
  const max = opts.maxBytes ?? MAX_BODY_BYTES;
  return async function json(c, next) {
    const method = c.req.method;
    if (method !== 'POST' && method !== 'PUT' && method !== 'PATCH') return next();
    const declared = c.req.header('content-length');
    if (declared !== undefined && Number(declared) > max) throw tooLarge(max);
    const type = (c.req.header('content-type') ?? '').split(';')[0]!.trim();
    if (!JSON_RE.test(type)) {
      // A POST without any body (e.g. rotate-secret, redeliver) needs no content type.
      if (!type && (declared === undefined || declared === '0')) return next();
      throw new NodeSvcError('unsupported_media_type', `content-type must be application/json, got ${type ? JSON.stringify(type) : 'none'}`, { status: 415 });
    }
    let bytes: Buffer;
    if (declared !== undefined) {
      bytes = Buffer.from(await c.req.raw.arrayBuffer()); // length already checked
      if (bytes.length > max) throw tooLarge(max);
    } else {
      // Chunked: count while reading, stop at the limit.
      const reader = c.req.raw.body?.getReader();
      const chunks: Uint8Array[] = [];
      let size = 0;
      if (reader) {
        for (;;) {
          const { done, value } = await reader.read();
          if (done) break;
          size += value.byteLength;
          if (size > max) { await reader.cancel(); throw tooLarge(max); }
          chunks.push(value);
        }
      }
      bytes = Buffer.concat(chunks);
    }
    // Hand the bytes we read to hono's validator, which parses them (malformed JSON: 400 in onError).
    // Invalid UTF-8 is refused, never read with replacement characters (two readers would see different text).
    (c.req.bodyCache as Record<string, unknown>).text = Promise.resolve(bodyText(bytes));
    return next();
  };
}

const utf8 = new TextDecoder('utf-8', { fatal: true, ignoreBOM: true });

/** A body's text; invalid UTF-8 is a 400 (here and on the direct path of src/api/fast.ts). */
export function bodyText(bytes: Uint8Array): string {
  try {
    return utf8.decode(bytes);
  } catch {
    throw new NodeSvcError('invalid_request', 'request body is not valid UTF-8', { status: 400, exitCode: 2 });
  }
}
const tooLarge = (max: number) => new NodeSvcError('payload_too_large', `request body is larger than ${max / 1024} KiB`, { status: 413 });
