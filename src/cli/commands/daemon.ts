import { usageError } from '../../domain/errors.js';
import { startDaemon } from '../../daemon.js';
import { resolveDataDir } from '../../store/db.js';
import type { CommandResult, GlobalOptions } from '../output.js';

export interface DaemonFlags {
  host: string;
  port: string;
  rateLimit?: string;
}

function int(name: string, v: string, min: number, max: number): number {
  const n = Number(v);
  if (!/^\d+$/.test(v) || n < min || n > max) throw usageError(`${name} must be an integer from ${min} to ${max}, got "${v}"`);
  return n;
}

/** Runs until SIGTERM/SIGINT: stop accepting, finish in-flight work, close the store, exit 0. */
export async function daemon(g: GlobalOptions, f: DaemonFlags): Promise<CommandResult> {
  const port = int('--port', f.port, 0, 65535);
  const rate = int('--rate-limit', f.rateLimit ?? process.env.NODE_SVC_RATE_LIMIT ?? '1000', 0, 10_000_000);
  const d = await startDaemon({ dataDir: resolveDataDir(g.dataDir), host: f.host, port, rateLimit: rate });
  process.stdout.write(`listening on ${d.url}\n`);
  await new Promise<void>((resolve) => {
    const stop = (signal: string) => {
      process.stdout.write(`${signal}: draining and stopping\n`);
      d.stop().then(resolve, resolve);
    };
    process.once('SIGTERM', () => stop('SIGTERM'));
    process.once('SIGINT', () => stop('SIGINT'));
  });
  return { data: undefined, human: '' };
}
