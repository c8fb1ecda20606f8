// <data-dir>/config.json: the daemon's settings between the defaults and env/flags (svix cfg layering:
// defaults → config.json → NODE_SVC_* env → flags). Every problem is reported at once, naming the key.
import { existsSync, readFileSync } from 'node:fs';
import { join } from 'node:path';
import { configError } from '../domain/errors.js';
import { parseDuration, parseSettlePoll } from '../domain/duration.js';
import { parseSchedule } from '../delivery/schedule.js';
import { parseCidrs } from '../delivery/target.js';

type Kind = 'string' | 'integer' | 'list';
export const CONFIG_KEYS: Record<string, Kind> = {
  host: 'string', port: 'integer', rateLimit: 'integer', retrySchedule: 'list', deliveryTimeout: 'integer', retention: 'string',
  webhookAllow: 'list', webhookDeny: 'list', maxSubscriptions: 'integer', maxRedeliveries: 'integer', mode: 'string', rail: 'string', rpcUrl: 'string', chainId: 'integer',
  contract: 'string', assetToken: 'string', rebroadcastAfter: 'string', x402SettleWait: 'string', settleStuckAfter: 'string', walletKeyFile: 'string', confirmations: 'integer', settleThreshold: 'integer', settleInterval: 'string', settlePoll: 'string',
  cardKeyFile: 'string', cardAccount: 'string', cardWebhookSecretFile: 'string', cardApi: 'string', logLevel: 'string', store: 'string', storePool: 'integer', storeTimeout: 'integer', keepAliveTimeout: 'integer',
  alertFailingAfter: 'integer', alertWalletMin: 'string',
};

// Values the daemon would refuse later (naming the flag, one at a time): checked here so every problem is named at once.
const RANGES: Record<string, [number, number]> = { port: [0, 65535], rateLimit: [0, 10_000_000], deliveryTimeout: [1, 300], maxSubscriptions: [1, 10_000], maxRedeliveries: [1, 10_000_000], alertFailingAfter: [1, 1000], storePool: [1, 100], storeTimeout: [1, 3600], keepAliveTimeout: [1, 3600] };
const CHOICES: Record<string, string[]> = { mode: ['escrow', 'card'], rail: ['sandbox', 'production'], logLevel: ['debug', 'info', 'warn', 'error'] };

// Values whose form the daemon checks later one at a time, naming a flag: checked here, naming the key, with every other problem.
const VALUE_CHECKS: Record<string, (v: string) => string | undefined> = {
  retrySchedule: (v) => (parseSchedule(v) ? undefined : 'must be a list of whole seconds, e.g. [5, 300, 1800]'),
  webhookAllow: (v) => { const r = parseCidrs(v); return typeof r === 'string' ? r : undefined; },
  webhookDeny: (v) => { const r = parseCidrs(v); return typeof r === 'string' ? r : undefined; },
  settleInterval: (v) => (parseDuration(v) === undefined ? 'must be a duration such as 60s, 15m or 1h' : undefined),
  settlePoll: (v) => (parseSettlePoll(v) === undefined ? 'must be a duration from 100ms to 60s, such as 250ms or 1s' : undefined),
  rpcUrl: (v) => (/^https?:\/\/[^\s]+$/.test(v) ? undefined : 'must be an http(s) URL'),
  cardApi: (v) => (/^https?:\/\/[^\s]+$/.test(v) ? undefined : 'must be an http(s) URL'),
  deliveryTimeout: (v) => (Number(v) >= 1 ? undefined : 'must be from 1 to 300'),
  alertWalletMin: (v) => (/^\d{1,30}$/.test(v) ? undefined : 'must be a whole number of wei (a decimal string)'),
};

const distance = (a: string, b: string): number => {
  const d = Array.from({ length: a.length + 1 }, (_, i) => [i, ...Array(b.length).fill(0)] as number[]);
  for (let j = 1; j <= b.length; j++) d[0]![j] = j;
  for (let i = 1; i <= a.length; i++)
    for (let j = 1; j <= b.length; j++) d[i]![j] = Math.min(d[i - 1]![j]! + 1, d[i]![j - 1]! + 1, d[i - 1]![j - 1]! + (a[i - 1] === b[j - 1] ? 0 : 1));
  return d[a.length]![b.length]!;
};

/** The file's settings as strings (the form flags take), or {} when there is no file. */
export function readConfigFile(dataDir: string): Record<string, string> {
  const path = join(dataDir, 'config.json');
  if (!existsSync(path)) return {};
  let raw: unknown;
  try {
    raw = JSON.parse(readFileSync(path, 'utf8'));
  } catch (err) {
    throw configError(`${path} is not valid JSON (${(err as Error).message})`);
  }
  if (typeof raw !== 'object' || raw === null || Array.isArray(raw)) throw configError(`${path} must hold a JSON object of settings`);
  const problems: string[] = [];
  const out: Record<string, string> = {};
  for (const [k, v] of Object.entries(raw)) {
    const kind = CONFIG_KEYS[k];
    if (!kind) {
      const near = Object.keys(CONFIG_KEYS).sort((a, b) => distance(k, a) - distance(k, b))[0]!;
      problems.push(`"${k}": unknown key${distance(k, near) <= 3 ? ` (did you mean "${near}"?)` : ''}`);
      continue;
    }
    if (kind === 'integer' && !(typeof v === 'number' && Number.isSafeInteger(v) && v >= 0) && !(typeof v === 'string' && /^\d+$/.test(v)))
      problems.push(`"${k}": must be a non-negative integer, got ${JSON.stringify(v)}`);
    else if (kind === 'list' && !(typeof v === 'string' || (Array.isArray(v) && v.every((x) => typeof x === 'string' || typeof x === 'number'))))
      problems.push(`"${k}": must be a list (array or comma-separated string), got ${JSON.stringify(v)}`);
    else if (kind === 'string' && typeof v !== 'string') problems.push(`"${k}": must be a string, got ${JSON.stringify(v)}`);
    else if (RANGES[k] && !(Number(v) >= RANGES[k]![0] && Number(v) <= RANGES[k]![1])) problems.push(`"${k}": must be from ${RANGES[k]![0]} to ${RANGES[k]![1]}, got ${JSON.stringify(v)}`);
    else if (k === 'retention' && parseDuration(v as string) === undefined) problems.push(`"${k}": must be a duration (30d, 720h; 0 keeps all), got ${JSON.stringify(v)}`);
    else if (CHOICES[k] && !CHOICES[k]!.includes(v as string)) problems.push(`"${k}": must be one of ${CHOICES[k]!.join(', ')}, got ${JSON.stringify(v)}`);
    else {
      const text = Array.isArray(v) ? v.join(',') : String(v);
      const bad = VALUE_CHECKS[k]?.(text);
      if (bad) problems.push(`"${k}": ${bad}, got ${JSON.stringify(v)}`);
      else out[k] = text;
    }
  }
  if (problems.length) throw configError(`${path} has ${problems.length} problem(s):\n  - ${problems.join('\n  - ')}`, 'fix them; keys are the camelCase names of the daemon flags (see node-svc daemon --help)');
  return out;
}
