import { configError, usageError } from '../../domain/errors.js';
import { startDaemon } from '../../daemon.js';
import { resolveDataDir } from '../../store/db.js';
import { checkStoreUrl, isPostgresUrl, resolveStoreUrl } from '../../store/open.js';
import { readConfigFile } from '../config-file.js';
import { log, LOG_LEVEL_PROBLEM, setLogLevel } from '../../log.js';
import { parseSchedule } from '../../delivery/schedule.js';
import { parseDuration } from '../../domain/duration.js';
import { parseCidrs, targetPolicy } from '../../delivery/target.js';
import { railFromFlags, type RailFlags } from '../../rails/config.js';
import type { CommandResult, GlobalOptions } from '../output.js';
import { exitOnceStopped, logFatalFaults } from '../stop.js';

export interface DaemonFlags extends RailFlags {
  host: string;
  port: string;
  rateLimit?: string;
  retrySchedule?: string;
  deliveryTimeout?: string;
  retention?: string;
  webhookAllow?: string;
  webhookDeny?: string;
  maxSubscriptions?: string;
  maxRedeliveries?: string;
  storePool?: string;
  storeTimeout?: string;
  keepAliveTimeout?: string;
  alertFailingAfter?: string;
  alertWalletMin?: string;
}

function int(name: string, v: string, min: number, max: number): number {
  const n = Number(v);
  if (!/^\d+$/.test(v) || n < min || n > max) throw usageError(`${name} must be an integer from ${min} to ${max}, got "${v}"`);
  return n;
}

/** Runs until SIGTERM/SIGINT: stop accepting, finish in-flight work, close the store, exit 0. */
export async function daemon(g: GlobalOptions, flags: DaemonFlags, sources: Record<string, string | undefined> = {}): Promise<CommandResult> {
  if (LOG_LEVEL_PROBLEM) throw configError(LOG_LEVEL_PROBLEM);
  const dataDir = resolveDataDir(g.dataDir);
  const file = readConfigFile(dataDir);
  const f = { ...flags } as DaemonFlags & Record<string, string | undefined>;
  for (const [k, v] of Object.entries(file)) if (sources[k] === undefined || sources[k] === 'default') f[k] = v;
  if (file.logLevel && !process.env.NODE_SVC_LOG_LEVEL) setLogLevel(file.logLevel as never);
  const port = int('--port', f.port, 0, 65535);
  const rate = int('--rate-limit', f.rateLimit ?? '1000', 0, 10_000_000);
  const schedule = f.retrySchedule === undefined ? undefined : parseSchedule(f.retrySchedule);
  if (schedule === null || (f.retrySchedule !== undefined && !schedule))
    throw usageError(`--retry-schedule "${f.retrySchedule}" is not a list of seconds`, 'e.g. 5,300,1800,7200 (each an integer; one retry per entry)');
  const timeout = f.deliveryTimeout === undefined ? undefined : int('--delivery-timeout', f.deliveryTimeout, 1, 300);
  const retentionMs = f.retention === undefined ? undefined : parseDuration(f.retention);
  if (retentionMs === undefined && f.retention !== undefined)
    throw usageError(`--retention "${f.retention}" is not a duration`, 'e.g. 30d, 90d, 720h (0 keeps all history)');
  if (retentionMs !== undefined && retentionMs !== 0 && retentionMs < 3_600_000) throw usageError('--retention must be at least 1h (or 0 to keep all history)');
  const maxSubscriptionsPerNode = f.maxSubscriptions === undefined ? undefined : int('--max-subscriptions', f.maxSubscriptions, 1, 10_000);
  const maxRedeliveriesPerNode = f.maxRedeliveries === undefined ? undefined : int('--max-redeliveries', f.maxRedeliveries, 1, 10_000_000);
  const allow = f.webhookAllow ? parseCidrs(f.webhookAllow) : [];
  const deny = f.webhookDeny ? parseCidrs(f.webhookDeny) : [];
  if (typeof allow === 'string') throw usageError(`--webhook-allow: ${allow}`);
  if (typeof deny === 'string') throw usageError(`--webhook-deny: ${deny}`);
  const keepAlive = f.keepAliveTimeout === undefined ? undefined : int('--keep-alive-timeout', f.keepAliveTimeout, 1, 3600);
  const alertFailingAfter = f.alertFailingAfter === undefined ? undefined : int('--alert-failing-after', f.alertFailingAfter, 1, 1000);
  if (f.alertWalletMin !== undefined && !/^\d{1,30}$/.test(f.alertWalletMin)) throw usageError(`--alert-wallet-min "${f.alertWalletMin}" is not a whole number of wei`, 'e.g. 10000000000000000 (0.01 ETH)');
  // The store URL: flag > env > config `store` > SQLite in the data dir. A secret: never printed.
  const store = resolveStoreUrl(g.store) ?? (file.store || undefined);
  const storeProblem = checkStoreUrl(store);
  if (storeProblem) throw usageError(storeProblem);
  const storePool = f.storePool === undefined ? undefined : int('--store-pool', f.storePool, 1, 100);
  if (storePool !== undefined && !(store && isPostgresUrl(store)))
    throw usageError('--store-pool applies to a PostgreSQL store only (--store postgres://…); this daemon uses SQLite, whose writes always share one queue', 'remove --store-pool (NODE_SVC_STORE_POOL, config storePool), or name a PostgreSQL store');
  const storeTimeout = f.storeTimeout === undefined ? undefined : int('--store-timeout', f.storeTimeout, 1, 3600);
  if (storeTimeout !== undefined && !(store && isPostgresUrl(store)))
    throw usageError('--store-timeout applies to a PostgreSQL store only (--store postgres://…); this daemon uses SQLite, a file on this machine', 'remove --store-timeout (NODE_SVC_STORE_TIMEOUT, config storeTimeout), or name a PostgreSQL store');
  const rail = await railFromFlags(f); // refuses to start on any doubt (chain id, keys vs rail)
  logFatalFaults(log);
  const d = await startDaemon({
    dataDir, store, host: f.host, port, rateLimit: rate, ...(storePool ? { storePool } : {}), ...(storeTimeout ? { storeTimeoutMs: storeTimeout * 1000 } : {}),
    ...(schedule ? { retrySchedule: schedule } : {}),
    ...(timeout ? { deliveryTimeoutMs: timeout * 1000 } : {}),
    ...(keepAlive ? { keepAliveTimeoutMs: keepAlive * 1000 } : {}),
    webhookPolicy: targetPolicy({ allow, deny }),
    service: {
      ...(retentionMs !== undefined ? { retentionMs } : {}),
      ...(maxSubscriptionsPerNode ? { maxSubscriptionsPerNode } : {}),
      ...(maxRedeliveriesPerNode ? { maxRedeliveriesPerNode } : {}),
    },
    ...(rail ? { rail } : {}),
    alerts: {
      ...(alertFailingAfter ? { failingAfter: alertFailingAfter } : {}),
      ...(f.alertWalletMin !== undefined ? { walletMinWei: BigInt(f.alertWalletMin) } : {}),
    },
  });
  // The signal handlers first: a supervisor may send SIGTERM the moment it reads the line (without a handler, the
  // signal's default action would end the process without draining).
  const stopped = new Promise<void>((resolve) => {
    const stop = (signal: string) => {
      process.stdout.write(`${signal}: draining and stopping\n`);
      d.stop().then(resolve, resolve);
    };
    process.once('SIGTERM', () => stop('SIGTERM'));
    process.once('SIGINT', () => stop('SIGINT'));
  });
  process.stdout.write(`listening on ${d.url}\n`);
  await stopped;
  exitOnceStopped();
  return { data: undefined, human: '' };
}
