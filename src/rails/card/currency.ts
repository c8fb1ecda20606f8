// Micro units ↔ the processor's minor units, exactly (BigInt only). A stream's asset label names an ISO 4217
// currency (`USD` ↔ `usd`); anything else (e.g. `USDC`) is not a card currency and is refused.

// The processor's zero-decimal and three-decimal currencies; every other currency has two decimals.
const ZERO_DECIMAL = new Set(['bif', 'clp', 'djf', 'gnf', 'jpy', 'kmf', 'krw', 'mga', 'pyg', 'rwf', 'ugx', 'vnd', 'vuv', 'xaf', 'xof', 'xpf']);
const THREE_DECIMAL = new Set(['bhd', 'jod', 'kwd', 'omr', 'tnd']);

/** The card currency of a stream's asset label, or undefined when the label is not an ISO 4217 code. */
export function currencyOfAsset(asset: string): string | undefined {
  return /^[A-Z]{3}$/.test(asset) ? asset.toLowerCase() : undefined;
}

/** How many micro units make one minor unit of `currency` (USD: 1 cent = 10,000 micro). */
export function microPerMinor(currency: string): bigint {
  if (ZERO_DECIMAL.has(currency)) return 1_000_000n;
  if (THREE_DECIMAL.has(currency)) return 1_000n;
  return 10_000n;
}

/** Whole minor units in `micro` (floored: a remainder below one minor unit is never captured). */
export const toMinor = (micro: bigint, currency: string): bigint => micro / microPerMinor(currency);
export const toMicro = (minor: bigint, currency: string): bigint => minor * microPerMinor(currency);
/** `micro` floored to a minor-unit boundary. */
export const floorToMinor = (micro: bigint, currency: string): bigint => toMicro(toMinor(micro, currency), currency);
