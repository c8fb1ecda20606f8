// Money is integers: micro units as BigInt, decimal strings on the wire. Never a float.
export const INT64_MAX = 9223372036854775807n;
const DECIMAL_RE = /^(0|[1-9][0-9]{0,18})$/;

/** Parse a decimal string of a non-negative integer that fits SQLite's INTEGER (int64). */
export function parseMicro(value: unknown): bigint | undefined {
  if (typeof value !== 'string' || !DECIMAL_RE.test(value)) return undefined;
  const n = BigInt(value);
  return n <= INT64_MAX ? n : undefined;
}

/** Same, but > 0. */
export function parsePositiveMicro(value: unknown): bigint | undefined {
  const n = parseMicro(value);
  return n !== undefined && n > 0n ? n : undefined;
}

/** Render micro units as a human decimal with 6 places, for TTY output only. */
export function formatMicro(micro: bigint | string, asset?: string): string {
  const n = typeof micro === 'bigint' ? micro : BigInt(micro);
  const neg = n < 0n;
  const abs = neg ? -n : n;
  const whole = abs / 1_000_000n;
  const frac = (abs % 1_000_000n).toString().padStart(6, '0');
  return `${neg ? '-' : ''}${whole}.${frac}${asset ? ` ${asset}` : ''}`;
}
