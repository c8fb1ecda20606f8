const UNIT_MS: Record<string, number> = { ms: 1, s: 1000, m: 60_000, h: 3_600_000, d: 86_400_000 };

/** Parse `90s`, `15m`, `24h`, `7d`, `250ms` or plain seconds; undefined when it is not one. */
export function parseDuration(text: string): number | undefined {
  const m = /^(\d{1,9})(ms|s|m|h|d)?$/.exec(text.trim());
  if (!m) return undefined;
  return Number(m[1]) * UNIT_MS[m[2] ?? 's']!;
}

/**
 * --settle-poll (config `settlePoll`): how often the settler checks the rail, from 100 ms to 60 s; undefined outside.
 * Faster costs the rail a request per open transaction each time; slower delays every stage of a settlement.
 */
export function parseSettlePoll(text: string): number | undefined {
  const ms = parseDuration(text);
  return ms !== undefined && ms >= 100 && ms <= 60_000 ? ms : undefined;
}
