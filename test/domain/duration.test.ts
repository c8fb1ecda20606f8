// Durations as flags and config.json take them (domain/duration.ts): the forms accepted, and --settle-poll's range.
import { describe, expect, it } from 'vitest';
import { parseDuration, parseSettlePoll } from '../../src/domain/duration.js';

describe('parseDuration', () => {
  it('reads ms, s, m, h, d and plain seconds; anything else is undefined', () => {
    expect(parseDuration('250ms')).toBe(250);
    expect(parseDuration('90s')).toBe(90_000);
    expect(parseDuration('15m')).toBe(900_000);
    expect(parseDuration('24h')).toBe(86_400_000);
    expect(parseDuration('7d')).toBe(604_800_000);
    expect(parseDuration('30')).toBe(30_000);
    expect(parseDuration(' 5s ')).toBe(5000);
    for (const bad of ['', 's', '1.5s', '-1s', '1 s', '1w', '10sec', '1e3', '1234567890s']) expect(parseDuration(bad), bad).toBeUndefined();
  });
});

describe('parseSettlePoll (--settle-poll, config settlePoll)', () => {
  it('takes 100ms to 60s', () => {
    expect(parseSettlePoll('100ms')).toBe(100);
    expect(parseSettlePoll('200ms')).toBe(200);
    expect(parseSettlePoll('1s')).toBe(1000);
    expect(parseSettlePoll('60s')).toBe(60_000);
    expect(parseSettlePoll('1m')).toBe(60_000);
  });
  it('refuses what is outside the range or not a duration', () => {
    for (const bad of ['99ms', '0', '0s', '61s', '2m', '1h', 'soon', '']) expect(parseSettlePoll(bad), bad).toBeUndefined();
  });
});
