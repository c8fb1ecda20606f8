// ulid: sortable, unique and in creation order, also when many are made in one millisecond and when the clock steps
// back; its time part is the millisecond it was made in. newIdBlock: ids that nothing else in the process makes (an
// event's fan-out makes one per matching subscription from it, in SQL).
import { describe, expect, it } from 'vitest';
import { BLOCK_DIGITS, newId, newIdBlock, plusOne, ulid } from '../../src/domain/ids.js';

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

  it('newIdBlock: every id of the block sorts after the ids made before it and before the ids made after it, in the same millisecond or a new one', () => {
    const t = Date.now() + 4_000_000;
    const block = (b: string) => ({ lo: `${b}${'0'.repeat(BLOCK_DIGITS)}`, hi: `${b}${'Z'.repeat(BLOCK_DIGITS)}` });
    for (const before of [1, 7, 40]) {
      // In one millisecond, after ids whose last digits are not zero (so a block taken from the last one's digits would
      // hold ids already made): the block starts a new prefix, and the next id comes after all of it.
      const made = Array.from({ length: before }, () => `dlv_${ulid(t)}`);
      const b = newIdBlock('dlv', t);
      const next = `dlv_${ulid(t)}`;
      expect(b).toMatch(new RegExp(`^dlv_[0-9A-HJKMNP-TV-Z]{${26 - BLOCK_DIGITS}}$`));
      const { lo, hi } = block(b);
      for (const id of made) expect(id < lo, `${id} before ${lo}`).toBe(true);
      expect(hi < next, `${hi} before ${next}`).toBe(true);
      expect(next.slice(4, 14)).toBe(b.slice(4, 14)); // still that millisecond
    }
    // A new millisecond: the block takes its time part, and the ids after it (same millisecond) sort after it.
    const b = newIdBlock('dlv', t + 10);
    expect(decode(b.slice(4, 14))).toBe(BigInt(t + 10));
    const after = Array.from({ length: 3 }, () => `dlv_${ulid(t + 10)}`);
    for (const id of after) expect(block(b).hi < id).toBe(true);
    // Two blocks in a row never overlap.
    const b2 = newIdBlock('dlv', t + 10);
    expect(block(b).hi < block(b2).lo).toBe(true);
    // A clock behind the last id: the block stays on the latest millisecond seen, after every id before it.
    const last = `dlv_${ulid(t + 20)}`;
    const behind = newIdBlock('dlv', t - 5_000);
    expect(behind.slice(4, 14)).toBe(last.slice(4, 14));
    expect(last < block(behind).lo && block(behind).hi < `dlv_${ulid(t + 20)}`).toBe(true);
  });
});
