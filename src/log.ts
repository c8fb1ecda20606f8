// Structured logs with pino: JSON lines on stderr, or a readable line per entry on a TTY. Callers pass fields,
// never secrets; as a second line of defence, fields named like secrets are redacted.
import pino from 'pino';

type Level = 'debug' | 'info' | 'warn' | 'error';
const LEVELS: Record<number, string> = { 20: 'debug', 30: 'info', 40: 'warn', 50: 'error', 60: 'fatal' };

/** On a TTY: `HH:MM:SS.mmm level msg key=value …`; elsewhere the JSON line as pino writes it. */
function destination(): pino.DestinationStream {
  if (!process.stderr.isTTY || process.env.NODE_SVC_LOG_FORMAT === 'json') return pino.destination({ dest: 2, sync: true });
  return {
    write(line: string) {
      try {
        const { time, level, msg, ...rest } = JSON.parse(line) as Record<string, unknown>;
        const fields = Object.entries(rest).map(([k, v]) => `${k}=${typeof v === 'string' ? v : JSON.stringify(v)}`).join(' ');
        process.stderr.write(`${new Date(String(time)).toISOString().slice(11, 23)} ${String(LEVELS[level as number] ?? level).padEnd(5)} ${String(msg)}${fields ? `  ${fields}` : ''}\n`);
      } catch {
        process.stderr.write(line);
      }
    },
  };
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
    formatters: { level: (label) => ({ level: label }) },
    redact: { paths: ['token', 'secret', 'authorization', 'key', 'walletKey', 'password', '*.token', '*.secret', '*.authorization'], censor: '[redacted]' },
  },
  destination(),
);

export const setLogLevel = (l: Level) => { logger.level = l; };

export const log = {
  debug: (msg: string, f?: Record<string, unknown>) => logger.debug(f ?? {}, msg),
  info: (msg: string, f?: Record<string, unknown>) => logger.info(f ?? {}, msg),
  warn: (msg: string, f?: Record<string, unknown>) => logger.warn(f ?? {}, msg),
  error: (msg: string, f?: Record<string, unknown>) => logger.error(f ?? {}, msg),
};
