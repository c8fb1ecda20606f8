import { describe, expect, it } from 'vitest';
import { tokenBuckets } from '../../src/api/middleware/rate-limit.js';

describe('tokenBuckets', () => {
  const limited = (f: () => void) => {
    try {
      f();
    } catch (err) {
      return (err as { code?: string }).code;
    }
    return undefined;
  };

  it('drops buckets that refilled to their burst, and only those: the map does not keep every node ever seen', () => {
    let t = 0;
    const b = tokenBuckets({ rate: 10, burst: 20, now: () => t });
    for (let i = 0; i < 20; i++) b.take('busy'); // drained to 0 at t = 0
    expect(limited(() => b.take('busy'))).toBe('rate_limited');
    for (let i = 0; i < 5000; i++) b.take(`node-${i}`); // one token each: 19 left, not full
    expect(b.size).toBe(5001); // nothing was full: every sweep kept all
    t = 1000; // 1 s later: every node-i bucket is back to its burst (19 + 10 ≥ 20); 'busy' has 10
    for (let i = 0; i < 10_000; i++) b.take(`other-${i}`);
    // The 5,000 full buckets went at the sweep; 'busy' (10 tokens, not full) stayed with the new ones.
    expect(b.size).toBeLessThan(10_000 + 2);
    expect(b.size).toBeGreaterThanOrEqual(10_000 + 1);
    // 'busy' kept its count: 10 tokens, not a fresh burst of 20.
    for (let i = 0; i < 10; i++) b.take('busy');
    expect(limited(() => b.take('busy'))).toBe('rate_limited');
  });

  it('a key dropped while full starts again with a full bucket (the same as if it had been kept)', () => {
    let t = 0;
    const b = tokenBuckets({ rate: 1, burst: 3, now: () => t });
    b.take('a');
    t = 5000; // 'a' is full again
    for (let i = 0; i < 3000; i++) b.take(`k-${i}`); // sweeps: 'a' goes
    for (let i = 0; i < 3; i++) b.take('a');
    expect(limited(() => b.take('a'))).toBe('rate_limited');
  });

  it('rate 0 turns the limit off and holds nothing', () => {
    const b = tokenBuckets({ rate: 0 });
    for (let i = 0; i < 100; i++) b.take('x');
    expect(b.size).toBe(0);
  });
});
