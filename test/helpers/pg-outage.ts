// A PostgreSQL outage of a chosen length, without blocking the test's event loop: the test keeps sending requests
// (and receiving webhooks) while the server is down. PostgresServer.restart() starts again at once and runs
// synchronously, so the daemons' 503s would only be seen for requests already in flight.
// The server's data dir and options are read from its postmaster's command line (/proc), so this works for any
// server started by test/helpers/postgres.ts; the next start uses the same options, port and directory.
import { execFile } from 'node:child_process';
import { readdirSync, readFileSync } from 'node:fs';
import { dirname, join } from 'node:path';
import { promisify } from 'node:util';
import { PG_BIN } from './postgres.js';

const run = promisify(execFile);
const isRoot = () => typeof process.getuid === 'function' && process.getuid() === 0;

/** The postmaster listening on `port`: its data dir and the `-c` settings it was started with. */
function postmasterOf(port: number): { data: string; options: string } {
  for (const pid of readdirSync('/proc').filter((p) => /^\d+$/.test(p))) {
    let argv: string[];
    try {
      argv = readFileSync(`/proc/${pid}/cmdline`, 'utf8').split('\0').filter(Boolean);
    } catch {
      continue; // gone meanwhile, or not ours to read
    }
    if (!argv[0]?.endsWith('/postgres') || !argv.includes(`port=${port}`)) continue;
    const d = argv.indexOf('-D');
    if (d < 0 || !argv[d + 1]) continue;
    const rest = argv.slice(d + 2);
    if (rest.some((a) => /\s/.test(a))) throw new Error('postmaster options with spaces are not supported here');
    return { data: argv[d + 1]!, options: rest.join(' ') };
  }
  throw new Error(`no postmaster listening on port ${port} found in /proc`);
}

async function pgCtl(args: string[]): Promise<void> {
  const cmd = join(PG_BIN, 'pg_ctl');
  const [c, a] = isRoot() ? ['runuser', ['-u', 'postgres', '--', cmd, ...args]] : [cmd, args];
  await run(c, a, { timeout: 120_000 });
}

/**
 * Stop the server on `port` (fast: sessions are ended, as in a real restart), keep it down `downMs`, start it again
 * on the same directory, port and settings. Resolves once it accepts connections again, with the times it went
 * down and came back (ms since the epoch).
 */
export async function outage(port: number, downMs: number): Promise<{ stoppingAt: number; downAt: number; upAt: number }> {
  // The server refuses new work from when the fast stop begins: under load `pg_ctl stop` took over a second to return.
  const stoppingAt = Date.now();
  const start = await stopServer(port);
  const downAt = Date.now();
  await new Promise((r) => setTimeout(r, downMs));
  await start();
  return { stoppingAt, downAt, upAt: Date.now() };
}

/** Stop the server on `port` (fast); resolves with the function that starts it again as it was (resolving once it accepts connections). */
export async function stopServer(port: number): Promise<() => Promise<void>> {
  const { data, options } = postmasterOf(port);
  await pgCtl(['-D', data, 'stop', '-m', 'fast', '-w']);
  return () => pgCtl(['-D', data, 'start', '-w', '-t', '60', '-l', join(dirname(data), 'log'), '-o', options]);
}
