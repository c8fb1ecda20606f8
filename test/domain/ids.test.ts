// ulid: sortable, unique and in creation order, also when many are made in one millisecond (an event's fan-out takes
// eight at once) and when the clock steps back; its time part is the millisecond it was made in.
import { describe, expect, it } from 'vitest';
import { newId, plusOne, ulid } from '../../src/domain/ids.js';

const CROCKFORD = '0123456789ABCDEFGHJKMNPQRSTVWXYZ';
const decode = (text: string): bigint => [...text].reduce((n, c) => n * 32n + BigInt(CROCKFORD.indexOf(c)), 0n);
const ULID_RE = /^[0-9A-HJKMNP-TV-Z]{26}$/;

describe('ulid', () => {
  it('is 26 Crockford digits whose first ten are the millisecond, and ids of later milliseconds sort after', () => {
    const t = Date.now() + 1_000_000; // ahead of any id this process made before
    const ids = Array.from({ length: 600 }, (_, k) => ulid(t + k)); // more new milliseconds than one draw of random bytes serves
    for (const [k, id] of ids.entries()) {
      expect(id).toMatch(ULID_RE);
      expect(Number(decode(id.slice(0, 10)))).toBe(t + k);
    }
    // Each new millisecond draws fresh random digits: 600 random parts, all different.
    expect(new Set(ids.map((id) => id.slice(10))).size).toBe(600);
    expect(newId('dlv')).toMatch(/^dlv_[0-9A-HJKMNP-TV-Z]{26}$/);
  });

  it('in one millisecond: each id is the last one plus one (carries included), so they are unique and in order', () => {
    const t = Date.now() + 2_000_000;
    const ids = Array.from({ length: 5_000 }, () => ulid(t)); // past 32 and 1,024: carries into the 15th and 14th digits
    for (let k = 1; k < ids.length; k++) {
      expect(ids[k]!.slice(0, 10)).toBe(ids[0]!.slice(0, 10));
      expect(decode(ids[k]!.slice(10)) - decode(ids[k - 1]!.slice(10)), `id ${k}`).toBe(1n);
    }
  });

  it('plusOne carries from the last digit, and says when the random part has no larger value (ulid then takes the next millisecond)', () => {
    const d = Uint8Array.from([0, 5, 31, 31]);
    expect(plusOne(d)).toBe(1);
    expect([...d]).toEqual([0, 6, 0, 0]);
    expect(plusOne(d)).toBe(3);
    expect([...d]).toEqual([0, 6, 0, 1]);
    const full = new Uint8Array(16).fill(31);
    expect(plusOne(full)).toBe(-1);
    expect([...full]).toEqual(new Array(16).fill(0));
  });

  it('a clock that steps back keeps ids in order (they stay on the latest millisecond seen)', () => {
    const t = Date.now() + 3_000_000;
    const a = ulid(t);
    const b = ulid(t - 5_000);
    const c = ulid(t);
    expect(a < b && b < c).toBe(true);
    expect(b.slice(0, 10)).toBe(a.slice(0, 10));
  });
});
