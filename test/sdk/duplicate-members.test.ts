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

  it('agrees with a set-of-names reference on generated text with repeated, escaped and nested names', () => {
    // The reference: a Set of decoded names per open object (the detector before #22 counted members instead).
    const reference = (text: string): boolean => {
      const stack: Array<Set<string> | null> = [];
      let expectKey = false;
      for (let i = 0; i < text.length; i++) {
        const c = text[i];
        if (c === '"') {
          let j = i + 1;
          for (; j < text.length; j++) { if (text[j] === '\\') { j++; continue; } if (text[j] === '"') break; }
          const top = stack[stack.length - 1];
          if (expectKey && top) {
            const name = JSON.parse(text.slice(i, j + 1)) as string;
            if (top.has(name)) return true;
            top.add(name);
            expectKey = false;
          }
          i = j;
        } else if (c === '{') { stack.push(new Set()); expectKey = true; }
        else if (c === '[') { stack.push(null); expectKey = false; }
        else if (c === '}' || c === ']') { stack.pop(); expectKey = false; }
        else if (c === ',') expectKey = stack[stack.length - 1] instanceof Set;
      }
      return false;
    };
    // Names from a small alphabet (so they repeat), each written plainly or with \u escapes, values nesting objects
    // and arrays and strings that hold colons, quotes and braces.
    const name = fc.constantFrom('a', 'b', '__proto__', '', 'a:b', 'x"y', '{', 'é');
    const spelled = fc.tuple(name, fc.boolean()).map(([n, esc]) => (esc ? `"${[...n].map((ch) => `\\u${ch.charCodeAt(0).toString(16).padStart(4, '0')}`).join('')}"` : JSON.stringify(n)));
    const { value } = fc.letrec<{ value: string }>((tie) => ({
      value: fc.oneof(
        { depthSize: 'small', withCrossShrink: true },
        fc.constantFrom('1', 'null', 'true', '"a:b,{c}"', '"\\":"', '[]', '{}'),
        fc.array(tie('value'), { maxLength: 3 }).map((xs) => `[${xs.join(',')}]`),
        fc.array(fc.tuple(spelled, tie('value')), { maxLength: 4 }).map((ms) => `{${ms.map(([k, v]) => `${k}:${v}`).join(',')}}`),
      ),
    }));
    let duplicates = 0;
    fc.assert(fc.property(value, (text) => {
      const want = reference(text);
      if (want) duplicates++;
      expect(hasDuplicateMembers(text), text).toBe(want);
    }), { seed: 22, numRuns: 3000 });
    expect(duplicates).toBeGreaterThan(100); // the generator does make duplicates
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
