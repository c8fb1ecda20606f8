// Durations as flags and config.json take them (domain/duration.ts): the forms accepted, and --settle-poll's range.
import { describe, expect, it } from 'vitest';
import { parseDuration, parseSettlePoll } from '../../src/domain/duration.js';

describe('parseDuration', () => {
  it('reads ms, s, m, h, d and plain seconds; anything else is undefined', () => {
    const read: Array<[string, number]> = [['250ms', 250], ['90s', 90_000], ['15m', 900_000], ['24h', 86_400_000], ['7d', 604_800_000], ['30', 30_000], [' 5s ', 5000]];
    for (const [text, ms] of read) expect(parseDuration(text), text).toBe(ms);
    for (const bad of ['', 's', '1.5s', '-1s', '1 s', '1w', '10sec', '1e3', '1234567890s']) expect(parseDuration(bad), bad).toBeUndefined();
  });
});

describe('parseSettlePoll (--settle-poll, config settlePoll)', () => {
  it('takes 100ms to 60s', () => {
    const read: Array<[string, number]> = [['100ms', 100], ['200ms', 200], ['1s', 1000], ['60s', 60_000], ['1m', 60_000]];
    for (const [text, ms] of read) expect(parseSettlePoll(text), text).toBe(ms);
  });
  it('refuses what is outside the range or not a duration', () => {
    for (const bad of ['99ms', '0', '0s', '61s', '2m', '1h', 'soon', '']) expect(parseSettlePoll(bad), bad).toBeUndefined();
  });
});
