// isoSeconds (a NumericDate as RFC 3339) must write exactly what Date#toISOString writes, and refuse what it refuses.
import fc from 'fast-check';
import { describe, expect, it } from 'vitest';
import { iso, isoSeconds } from '../../src/domain/time.js';

describe('isoSeconds', () => {
  it('is Date#toISOString of whole seconds, at the edges of days, months, leap years and its fast range', () => {
    for (const s of [0, 1, 59, 60, 3599, 3600, 86_399, 86_400, 951_782_399, 951_782_400, 951_868_800, 4_107_542_400, 253_402_300_799, 253_402_300_800, 253_402_300_801, 8_640_000_000_000])
      expect(isoSeconds(s), String(s)).toBe(new Date(s * 1000).toISOString());
    fc.assert(fc.property(fc.integer({ min: 0, max: 253_402_300_799 }), (s) => isoSeconds(s) === new Date(s * 1000).toISOString()), { seed: 22, numRuns: 20_000 });
  });

  it('throws where Date does (a NumericDate out of its range)', () => {
    expect(() => isoSeconds(Number.MAX_SAFE_INTEGER)).toThrow(RangeError);
    expect(() => isoSeconds(8_640_000_000_001)).toThrow(RangeError);
  });

  it('iso() answers each millisecond with its own text, the same one twice in a row', () => {
    expect(iso(1_000)).toBe('1970-01-01T00:00:01.000Z');
    expect(iso(1_000)).toBe('1970-01-01T00:00:01.000Z');
    expect(iso(1_001)).toBe('1970-01-01T00:00:01.001Z');
    expect(() => iso(Number.NaN)).toThrow(RangeError);
    expect(() => iso(Number.NaN)).toThrow(RangeError);
  });
});
