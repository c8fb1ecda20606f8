// Retry schedule (DESIGN §8): ±20 % jitter, end of schedule = dead, Retry-After honoured within 24 h.
import { describe, expect, it } from 'vitest';
import { DEFAULT_RETRY_SCHEDULE_S, MAX_RETRY_AFTER_S, parseRetryAfter, parseSchedule, retryDelayMs } from '../../src/delivery/schedule.js';

const fixed = (v: number) => () => v;

describe('retryDelayMs', () => {
  it('is the default schedule of DESIGN §8 (5 s … 24 h, nine retries, about 3 days)', () => {
    expect(DEFAULT_RETRY_SCHEDULE_S).toEqual([5, 300, 1800, 7200, 18000, 36000, 50400, 72000, 86400]);
    const total = DEFAULT_RETRY_SCHEDULE_S.reduce((a, b) => a + b, 0);
    expect(total / 86400).toBeGreaterThan(3);
    expect(total / 86400).toBeLessThan(3.3);
  });

  it('uses the entry for the attempt that failed (attempt 1 = the first try)', () => {
    const s = [5, 300, 1800];
    expect(retryDelayMs(1, s, undefined, fixed(0.5))).toBe(5000);
    expect(retryDelayMs(2, s, undefined, fixed(0.5))).toBe(300_000);
    expect(retryDelayMs(3, s, undefined, fixed(0.5))).toBe(1_800_000);
  });

  it('jitters within ±20 % exactly at the extremes', () => {
    expect(retryDelayMs(1, [10], undefined, fixed(0))).toBe(8000);
    expect(retryDelayMs(1, [10], undefined, fixed(0.999999999))).toBe(12_000);
  });

  it('stays within ±20 % and spreads out with a real random source, always whole milliseconds', () => {
    const seen = new Set<number>();
    for (let i = 0; i < 400; i++) {
      for (const [attempt, base] of DEFAULT_RETRY_SCHEDULE_S.map((b, j) => [j + 1, b] as const)) {
        const d = retryDelayMs(attempt, DEFAULT_RETRY_SCHEDULE_S)!;
        expect(Number.isInteger(d)).toBe(true);
        expect(d).toBeGreaterThanOrEqual(base * 800);
        expect(d).toBeLessThanOrEqual(base * 1200);
        if (attempt === 1) seen.add(d);
      }
    }
    expect(seen.size).toBeGreaterThan(50);
  });

  it('is undefined past the end of the schedule (the delivery is dead)', () => {
    expect(retryDelayMs(4, [1, 2, 3])).toBeUndefined();
    expect(retryDelayMs(10, DEFAULT_RETRY_SCHEDULE_S)).toBeUndefined();
    expect(retryDelayMs(1, [])).toBeUndefined();
  });

  it('is undefined past the end even when the receiver asked for a Retry-After', () => {
    expect(retryDelayMs(3, [1, 1], 30)).toBeUndefined();
  });

  it('honours a Retry-After longer than the scheduled delay', () => {
    expect(retryDelayMs(1, [5], 120, fixed(0.5))).toBe(120_000);
  });

  it('never retries sooner than the schedule because of a short Retry-After', () => {
    expect(retryDelayMs(2, [5, 300], 1, fixed(0.5))).toBe(300_000);
  });

  it('caps Retry-After at 24 h', () => {
    expect(MAX_RETRY_AFTER_S).toBe(86400);
    expect(retryDelayMs(1, [5], 7 * 86400, fixed(0.5))).toBe(86_400_000);
    expect(retryDelayMs(1, [5], Number.MAX_SAFE_INTEGER, fixed(0.5))).toBe(86_400_000);
  });

  it('ignores a zero, negative or non-finite Retry-After', () => {
    for (const ra of [0, -10, Number.NaN, Number.POSITIVE_INFINITY]) expect(retryDelayMs(1, [5], ra, fixed(0.5)), String(ra)).toBe(5000);
  });

  it('returns whole milliseconds when Retry-After and a jittered delay compete (next_attempt_at is an INTEGER column)', () => {
    // 1 s ±20 % against Retry-After: 1 — the jittered value wins about half the time.
    for (let i = 0; i < 500; i++) {
      const d = retryDelayMs(1, [1], 1)!;
      expect(Number.isInteger(d), String(d)).toBe(true);
      expect(d).toBeGreaterThanOrEqual(1000);
      expect(d).toBeLessThanOrEqual(1200);
    }
    expect(retryDelayMs(1, [1], 1, fixed(0.77))).toBe(1108);
  });
});

describe('parseRetryAfter', () => {
  const now = Date.parse('2015-10-21T07:27:00Z');

  it('reads delta-seconds', () => {
    expect(parseRetryAfter('120', now)).toBe(120);
    expect(parseRetryAfter('0', now)).toBe(0);
    expect(parseRetryAfter(' 7 ', now)).toBe(7);
  });

  it('reads an HTTP-date as seconds from now, rounded up', () => {
    expect(parseRetryAfter('Wed, 21 Oct 2015 07:28:00 GMT', now)).toBe(60);
    expect(parseRetryAfter('Wed, 21 Oct 2015 07:28:00 GMT', now + 500)).toBe(60);
    expect(parseRetryAfter(new Date(now + 3_600_000).toUTCString(), now)).toBe(3600);
  });

  it('gives 0 for an HTTP-date in the past (retry per the schedule)', () => {
    expect(parseRetryAfter('Wed, 21 Oct 2015 07:00:00 GMT', now)).toBe(0);
  });

  it('is undefined when absent or unparseable', () => {
    expect(parseRetryAfter(undefined, now)).toBeUndefined();
    expect(parseRetryAfter('', now)).toBeUndefined();
    expect(parseRetryAfter('soon', now)).toBeUndefined();
  });

  it('feeds retryDelayMs: an HTTP-date a day and more away is capped at 24 h', () => {
    const ra = parseRetryAfter(new Date(now + 3 * 86_400_000).toUTCString(), now);
    expect(retryDelayMs(1, [5], ra, fixed(0.5))).toBe(86_400_000);
  });
});

describe('parseSchedule', () => {
  it('reads comma-separated whole seconds', () => {
    expect(parseSchedule('5,300,1800')).toEqual([5, 300, 1800]);
    expect(parseSchedule(' 1 , 2 ')).toEqual([1, 2]);
    expect(parseSchedule('1')).toEqual([1]);
    expect(parseSchedule('0,1')).toEqual([0, 1]);
  });

  it('refuses anything else', () => {
    for (const bad of ['', ',', '1,,2', '1.5', '-1', '1s', 'a,b', '99999999', '1;2']) expect(parseSchedule(bad), bad).toBeUndefined();
  });
});
