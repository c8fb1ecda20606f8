// Drive the real CLI (bin/node-svc → dist/cli/main.js) as a child process, against temp data dirs.
import { execFile } from 'node:child_process';
import { mkdtemp, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join, resolve } from 'node:path';
import { fileURLToPath } from 'node:url';
import { storeUrlFor, testServerUrl } from './postgres.js';

export const REPO_ROOT = resolve(fileURLToPath(new URL('../..', import.meta.url)));
export const BIN = join(REPO_ROOT, 'bin', 'node-svc');

export interface CliResult {
  code: number;
  stdout: string;
  stderr: string;
}

export interface RunOptions {
  /** Extra environment; every inherited NODE_SVC_* variable is dropped first so the host cannot leak in. */
  env?: Record<string, string | undefined>;
  /** Written to the child's stdin (stdin is always closed, so `verify -` never hangs). */
  input?: string;
  cwd?: string;
  timeoutMs?: number;
}

/** The data dir a CLI run uses: its --data-dir, else NODE_SVC_DATA_DIR, else ./data (as the CLI resolves it). */
export function dataDirOf(args: string[], env: Record<string, string | undefined>, cwd: string): string {
  let flag: string | undefined;
  for (let i = 0; i < args.length; i++) {
    if (args[i] === '--data-dir' && args[i + 1] !== undefined) flag = args[i + 1];
    else if (args[i]!.startsWith('--data-dir=')) flag = args[i]!.slice('--data-dir='.length);
  }
  return resolve(cwd, flag || env.NODE_SVC_DATA_DIR || 'data');
}

/** Run `node bin/node-svc ...args`; never rejects for a non-zero exit, only for failing to run at all. */
export async function runCli(args: string[], opts: RunOptions = {}): Promise<CliResult> {
  const env: NodeJS.ProcessEnv = {};
  for (const [k, v] of Object.entries(process.env)) if (!k.startsWith('NODE_SVC_')) env[k] = v;
  for (const [k, v] of Object.entries(opts.env ?? {})) if (v === undefined) delete env[k]; else env[k] = v;
  // With the run's PostgreSQL server (NODE_SVC_TEST_STORE=postgres): the data dir's own database, unless the test
  // chose a store itself.
  if (testServerUrl() && !(opts.env && 'NODE_SVC_STORE' in opts.env))
    env.NODE_SVC_STORE = await storeUrlFor(dataDirOf(args, opts.env ?? {}, opts.cwd ?? REPO_ROOT));
  return new Promise((resolvePromise, reject) => {
    const child = execFile(
      process.execPath,
      [BIN, ...args],
      { env, cwd: opts.cwd ?? REPO_ROOT, timeout: opts.timeoutMs ?? 30_000, maxBuffer: 16 * 1024 * 1024, encoding: 'utf8' },
      (err, stdout, stderr) => {
        if (err && typeof (err as { code?: unknown }).code !== 'number') {
          if ((err as { killed?: boolean }).killed) return reject(new Error(`node-svc ${args.join(' ')} timed out\n${stderr}`));
          return reject(err);
        }
        resolvePromise({ code: err ? ((err as { code: number }).code) : 0, stdout, stderr });
      },
    );
    child.stdin?.end(opts.input ?? '');
  });
}

/** Parse a JSON document from CLI output (the whole of stdout or stderr), with the output in the error. */
export function json<T = any>(text: string): T {
  try {
    return JSON.parse(text) as T;
  } catch {
    throw new Error(`not JSON: ${JSON.stringify(text)}`);
  }
}

export interface TempDataDir {
  /** The temp root (mkdtemp under os.tmpdir()), for files the test writes. */
  root: string;
  /** `<root>/data`, not created yet: the CLI creates it. */
  dataDir: string;
  cleanup(): Promise<void>;
}

export async function tempDataDir(prefix = 'node-svc-test-'): Promise<TempDataDir> {
  const root = await mkdtemp(join(tmpdir(), prefix));
  return { root, dataDir: join(root, 'data'), cleanup: () => rm(root, { recursive: true, force: true }) };
}

/** A CLI bound to one data dir: `cli('nodes', 'add', 'n1')` runs with `--data-dir <dir>` appended. */
export function cliFor(dataDir: string, base: RunOptions = {}) {
  // --data-dir goes before a '--' (after it every word is a value).
  const withDir = (args: string[]) => {
    const end = args.indexOf('--');
    return end < 0 ? [...args, '--data-dir', dataDir] : [...args.slice(0, end), '--data-dir', dataDir, ...args.slice(end)];
  };
  const run = (args: string[], opts: RunOptions = {}) =>
    runCli(withDir(args), { ...base, ...opts, env: { ...base.env, ...opts.env } });
  return Object.assign((...args: string[]) => run(args), { with: run });
}
