// Delivery signatures against published vectors: GitHub's x-hub-signature-256 example and the Standard Webhooks spec.
import { createHmac } from 'node:crypto';
import { describe, expect, it } from 'vitest';
import { newWebhookSecret, safeEqual, serviceSignature, standardSignature } from '../../src/delivery/sign.js';

describe('serviceSignature (GitHub scheme)', () => {
  // https://docs.github.com/en/webhooks/using-webhooks/validating-webhook-deliveries#testing-the-webhook-payload-validation
  const secret = "It's a Secret to Everybody";
  const expected = 'sha256=757107ea0eb2509fc211221cce984b8a37570b6d7586c22c46f4379c8b043e17';

  it("matches GitHub's published vector for a string body", () => {
    expect(serviceSignature(secret, 'Hello, World!')).toBe(expected);
  });

  it('gives the same answer for the raw bytes (what a receiver sees)', () => {
    expect(serviceSignature(secret, Buffer.from('Hello, World!', 'utf8'))).toBe(expected);
    expect(serviceSignature(secret, new Uint8Array(Buffer.from('Hello, World!', 'utf8')))).toBe(expected);
  });

  it('is keyed with the UTF-8 bytes of the whole secret string, whsec_ prefix included', () => {
    const s = newWebhookSecret();
    const body = '{"id":"evt_1","data":{"note":"é ✓"}}';
    expect(serviceSignature(s, body)).toBe(`sha256=${createHmac('sha256', Buffer.from(s, 'utf8')).update(Buffer.from(body, 'utf8')).digest('hex')}`);
    expect(serviceSignature(s, body)).toMatch(/^sha256=[0-9a-f]{64}$/);
  });

  it('changes with one byte of the body or the secret', () => {
    expect(serviceSignature(secret, 'Hello, World?')).not.toBe(expected);
    expect(serviceSignature(`${secret} `, 'Hello, World!')).not.toBe(expected);
  });
});

describe('standardSignature (Standard Webhooks)', () => {
  // https://github.com/standard-webhooks/standard-webhooks/blob/main/spec/standard-webhooks.md
  const secret = 'whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw';
  const id = 'msg_p5jXN8AQM9LWM0D4loKWxJek';
  const ts = 1614265330;
  const payload = '{"test": 2432232314}';
  const expected = 'v1,g0hM9SsE+OTPJTGt/tmIKtSyZlE3uFJELVlNIOLJ1OE=';

  it("matches the spec's vector", () => {
    expect(standardSignature(secret, id, ts, payload)).toBe(expected);
    expect(standardSignature(secret, id, ts, Buffer.from(payload, 'utf8'))).toBe(expected);
  });

  it('signs id, timestamp and body together: changing any of them changes the signature', () => {
    expect(standardSignature(secret, 'msg_other', ts, payload)).not.toBe(expected);
    expect(standardSignature(secret, id, ts + 1, payload)).not.toBe(expected);
    expect(standardSignature(secret, id, ts, '{"test": 2432232315}')).not.toBe(expected);
  });

  it('keys with the base64 after whsec_ (the same key without the prefix gives the same signature)', () => {
    expect(standardSignature('MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw', id, ts, payload)).toBe(expected);
  });
});

describe('newWebhookSecret', () => {
  it('is whsec_ + base64 of 32 random bytes, different each time', () => {
    const a = newWebhookSecret();
    const b = newWebhookSecret();
    expect(a).toMatch(/^whsec_[A-Za-z0-9+/]{43}=$/);
    expect(Buffer.from(a.slice(6), 'base64')).toHaveLength(32);
    expect(a).not.toBe(b);
  });
});

describe('safeEqual', () => {
  const sig = 'sha256=757107ea0eb2509fc211221cce984b8a37570b6d7586c22c46f4379c8b043e17';

  it('is true for equal strings', () => {
    expect(safeEqual(sig, `${sig}`)).toBe(true);
    expect(safeEqual('', '')).toBe(true);
  });

  it('is false for a different string of the same length', () => {
    expect(safeEqual(sig, sig.replace(/7$/, '8'))).toBe(false);
    expect(safeEqual(sig, sig.toUpperCase())).toBe(false);
  });

  it('is false (not a throw) when the lengths differ, either way round', () => {
    expect(safeEqual(sig, sig.slice(0, -1))).toBe(false);
    expect(safeEqual(sig.slice(0, -1), sig)).toBe(false);
    expect(safeEqual(sig, `${sig}0`)).toBe(false);
    expect(safeEqual('', sig)).toBe(false);
  });

  it('compares bytes, not UTF-16 units: same length in characters but not in bytes is a mismatch', () => {
    expect(safeEqual('é', 'e')).toBe(false);
    expect(safeEqual('aé', 'aé')).toBe(true);
  });
});
