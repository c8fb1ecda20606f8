// Structured JSON log lines on stderr. Callers pass fields, never secrets: no tokens, keys, webhook secrets, bodies.
type Level = 'debug' | 'info' | 'warn' | 'error';
const ORDER: Record<Level, number> = { debug: 10, info: 20, warn: 30, error: 40 };
let min: number = ORDER[(process.env.NODE_SVC_LOG_LEVEL as Level) ?? 'info'] ?? ORDER.info;

export const setLogLevel = (l: Level) => { min = ORDER[l]; };

function write(level: Level, msg: string, fields: Record<string, unknown> = {}) {
  if (ORDER[level] < min) return;
  process.stderr.write(`${JSON.stringify({ time: new Date().toISOString(), level, msg, ...fields })}\n`);
}

export const log = {
  debug: (msg: string, f?: Record<string, unknown>) => write('debug', msg, f),
  info: (msg: string, f?: Record<string, unknown>) => write('info', msg, f),
  warn: (msg: string, f?: Record<string, unknown>) => write('warn', msg, f),
  error: (msg: string, f?: Record<string, unknown>) => write('error', msg, f),
};
