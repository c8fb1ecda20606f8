// Duplicate member names in a JWS header or payload are refused (issue #12): the detector must find every
// duplicate JSON.parse would silently resolve, and nothing else.
import fc from 'fast-check';
import { describe, expect, it } from 'vitest';
import { decodeJson, hasDuplicateMembers } from '../../src/sdk/jws.js';

describe('hasDuplicateMembers', () => {
  it('finds duplicates at any depth and spelled with escapes', () => {
    for (const t of ['{"a":1,"a":2}', '{"a":1,"b":{"c":1,"c":2}}', '{"x":[{"k":1,"k":1}]}', '{"a":1,"\\u0061":2}', '{"a\\"b":1,"a\\"b":2}', '{"":1,"":2}'])
      expect(hasDuplicateMembers(t), t).toBe(true);
  });

  it('does not see duplicates where there are none', () => {
    for (const t of ['{"a":1,"b":2}', '{"a":{"a":1}}', '[{"a":1},{"a":1}]', '{"a":"{\\"a\\":1,\\"a\\":2}","b":[1,{"a":2}],"c":"a,b"}', '{"a":[1,2],"b":[{"b":1}]}', '{}', '"s"'])
      expect(hasDuplicateMembers(t), t).toBe(false);
  });

  it('agrees with a reference on generated JSON (no false positives on unique members)', () => {
    fc.assert(fc.property(fc.jsonValue({ maxDepth: 4 }), (v) => !hasDuplicateMembers(JSON.stringify(v))), { seed: 12, numRuns: 500 });
  });

  it('decodeJson answers undefined for a base64url object with a duplicate member', () => {
    const b = (s: string) => Buffer.from(s).toString('base64url');
    expect(decodeJson(b('{"alg":"EdDSA","alg":"none"}'))).toBeUndefined();
    expect(decodeJson(b('{"alg":"EdDSA"}'))).toEqual({ alg: 'EdDSA' });
  });

  it('decodeJson refuses bytes that are not UTF-8, and a byte-order mark, and keeps multi-byte text', () => {
    const raw = (bytes: number[]) => Buffer.from(bytes).toString('base64url');
    expect(decodeJson(raw([0x7b, 0x22, 0x61, 0x22, 0x3a, 0x22, 0xff, 0x22, 0x7d]))).toBeUndefined(); // {"a":"\xff"}
    expect(decodeJson(raw([0x7b, 0x22, 0x61, 0x22, 0x3a, 0x22, 0xc3, 0x22, 0x7d]))).toBeUndefined(); // a truncated sequence
    expect(decodeJson(Buffer.from('\uFEFF{"a":1}').toString('base64url'))).toBeUndefined();
    expect(decodeJson(Buffer.from('{"a":"é€😀"}').toString('base64url'))).toEqual({ a: 'é€😀' });
  });
});
