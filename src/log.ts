// Structured logs with pino: JSON lines on stderr, or a readable line per entry on a TTY. Callers pass fields,
// never secrets; as a second line of defence, fields named like secrets are redacted.
import pino from 'pino';
import { escapeControl, redactUrls } from './domain/text.js';

type Level = 'debug' | 'info' | 'warn' | 'error';
const LEVELS: Record<number, string> = { 20: 'debug', 30: 'info', 40: 'warn', 50: 'error', 60: 'fatal' };

/** One JSON log line as a person reads it on a terminal: `HH:MM:SS.mmm level msg key=value …`, controls escaped. */
export function prettyLine(line: string): string {
  try {
    const { time, level, msg, ...rest } = JSON.parse(line) as Record<string, unknown>;
    // A terminal obeys escape sequences: values that came from outside (a URL, a receiver's error) are shown escaped.
    const fields = Object.entries(rest).map(([k, v]) => `${escapeControl(k)}=${typeof v === 'string' ? escapeControl(v) : JSON.stringify(v)}`).join(' ');
    return `${new Date(String(time)).toISOString().slice(11, 23)} ${String(LEVELS[level as number] ?? level).padEnd(5)} ${escapeControl(String(msg))}${fields ? `  ${fields}` : ''}\n`;
  } catch {
    return escapeControl(line.replace(/\n$/, '')) + '\n';
  }
}

/** On a TTY: prettyLine; elsewhere the JSON line as pino writes it (JSON escapes control characters itself). */
function destination(): pino.DestinationStream {
  if (!process.stderr.isTTY || process.env.NODE_SVC_LOG_FORMAT === 'json') return pino.destination({ dest: 2, sync: true });
  return { write: (line: string) => process.stderr.write(prettyLine(line)) };
}

const LEVEL_NAMES: Level[] = ['debug', 'info', 'warn', 'error'];
const envLevel = process.env.NODE_SVC_LOG_LEVEL;
/** A NODE_SVC_LOG_LEVEL that is not a level: the daemon refuses to start, naming it (the logger itself stays at info). */
export const LOG_LEVEL_PROBLEM: string | undefined =
  envLevel !== undefined && !LEVEL_NAMES.includes(envLevel as Level) ? `NODE_SVC_LOG_LEVEL must be one of ${LEVEL_NAMES.join(', ')}, got "${envLevel}"` : undefined;

const logger = pino(
  {
    level: envLevel && !LOG_LEVEL_PROBLEM ? envLevel : 'info',
    base: undefined,
    timestamp: pino.stdTimeFunctions.isoTime,
    formatters: { level: (label) => ({ level: label }), log: (fields) => redactFields(fields) as Record<string, unknown> },
    redact: { paths: ['token', 'secret', 'authorization', 'key', 'walletKey', 'password', '*.token', '*.secret', '*.authorization'], censor: '[redacted]' },
  },
  destination(),
);

/** Second line of defence: no URL reaches a log line with its query string or userinfo (JWKS sources, RPC and
 *  processor URLs, webhook targets, library errors quoting them). */
function redactFields(v: unknown, depth = 0): unknown {
  if (typeof v === 'string') return redactUrls(v);
  if (depth > 3 || v === null || typeof v !== 'object') return v;
  if (Array.isArray(v)) return v.map((x) => redactFields(x, depth + 1));
  return Object.fromEntries(Object.entries(v).map(([k, x]) => [k, redactFields(x, depth + 1)]));
}

export const setLogLevel = (l: Level) => { logger.level = l; };

export const log = {
  debug: (msg: string, f?: Record<string, unknown>) => logger.debug(f ?? {}, redactUrls(msg)),
  info: (msg: string, f?: Record<string, unknown>) => logger.info(f ?? {}, redactUrls(msg)),
  warn: (msg: string, f?: Record<string, unknown>) => logger.warn(f ?? {}, redactUrls(msg)),
  error: (msg: string, f?: Record<string, unknown>) => logger.error(f ?? {}, redactUrls(msg)),
};
