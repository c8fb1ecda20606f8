// Retry schedule (DESIGN §8): intervals after each failed try, ±20 % jitter; Retry-After honoured within bounds.
export const DEFAULT_RETRY_SCHEDULE_S = [5, 300, 1800, 7200, 18000, 36000, 50400, 72000, 86400];
export const MAX_RETRY_AFTER_S = 86400;
export const DISABLE_AFTER_FAILING_MS = 5 * 86400_000;

/**
 * When to try again after failed attempt number `attempt` (1 = the first try), in ms from now;
 * undefined when the schedule is used up (the delivery is dead).
 */
export function retryDelayMs(attempt: number, schedule: readonly number[], retryAfterS?: number, random: () => number = Math.random): number | undefined {
  const base = schedule[attempt - 1];
  if (base === undefined) return undefined;
  const jittered = base * 1000 * (0.8 + 0.4 * random());
  // Whole ms either way: next_attempt_at is a STRICT INTEGER column, a fraction would fail the recording transaction.
  if (retryAfterS !== undefined && Number.isFinite(retryAfterS) && retryAfterS > 0) return Math.round(Math.max(jittered, Math.min(retryAfterS, MAX_RETRY_AFTER_S) * 1000));
  return Math.round(jittered);
}

/** Parse Retry-After: delta-seconds or an HTTP date; undefined when absent or unparseable. */
export function parseRetryAfter(value: string | undefined, now: number): number | undefined {
  if (!value) return undefined;
  if (/^\d+$/.test(value.trim())) return Number(value.trim());
  const t = Date.parse(value);
  return Number.isNaN(t) ? undefined : Math.max(0, Math.ceil((t - now) / 1000));
}

export function parseSchedule(text: string): number[] | undefined {
  const parts = text.split(',').map((s) => s.trim());
  if (!parts.length || parts.some((p) => !/^\d{1,7}$/.test(p))) return undefined;
  return parts.map(Number);
}
