// Start the real daemon (bin/node-svc daemon) as a child process on a free loopback port, and talk HTTP to it.
import { spawn, type ChildProcess } from 'node:child_process';
import { readdirSync, readFileSync } from 'node:fs';
import { createServer } from 'node:net';
import { join } from 'node:path';
import { BIN, REPO_ROOT } from './cli.js';
import { ISSUER, publicJwks, writeJwks, type KeyPair } from './issuer.js';
import { storeUrlFor, testServerUrl } from './postgres.js';

export interface RunningDaemon {
  /** `http://127.0.0.1:PORT`, as the daemon printed it. */
  url: string;
  pid: number;
  child: ChildProcess;
  /** Everything the daemon wrote to stderr so far (its JSON log lines). */
  readonly stderr: string;
  /** Everything the daemon wrote to stdout so far. */
  readonly stdout: string;
  /** Send `signal` (SIGTERM by default) and resolve with the exit code (null when killed by a signal). */
  stop(signal?: NodeJS.Signals): Promise<number | null>;
}

export interface DaemonOptions {
  /** `--rate-limit N` (0 turns it off; default 0 so tests are not throttled). */
  rateLimit?: number;
  /** Extra environment; inherited NODE_SVC_* and OTEL_* variables are dropped first (tracing is the test's choice). */
  env?: Record<string, string>;
  /** How long to wait for `listening on URL` (default 30 s). */
  startTimeoutMs?: number;
  /** More daemon flags (rail settings), after the defaults. */
  args?: string[];
  /**
   * A command that runs the daemon's node process, which it must exec so that the child is the daemon itself (its
   * pid, its signals): node and the daemon's arguments follow it. E.g. `unshare -m sh -c '… && exec "$0" "$@"'`.
   */
  wrap?: string[];
}

const LISTENING_RE = /listening on (http:\/\/\S+)/;

/**
 * For a start that timed out: each thread of the process as Linux shows it (name, state, CPU ticks, what it sleeps
 * in), so the failure says whether the daemon was busy or stuck, and where. Fresh-clone CI on 2026-12-02 had a daemon
 * print nothing for 30 s under test/e2e/tracing.test.ts's module probe; 150 starts of the same kind under load here did not.
 */
export function threadsOf(pid: number): string {
  try {
    return readdirSync(`/proc/${pid}/task`).map((tid) => {
      const stat = readFileSync(`/proc/${pid}/task/${tid}/stat`, 'utf8');
      const name = stat.slice(stat.indexOf('(') + 1, stat.lastIndexOf(')'));
      const f = stat.slice(stat.lastIndexOf(')') + 2).split(' '); // f[0] state, f[11] utime, f[12] stime
      let wchan = '';
      try { wchan = readFileSync(`/proc/${pid}/task/${tid}/wchan`, 'utf8'); } catch { /* not shown to this user */ }
      return `${name} ${f[0]} ${Number(f[11]) + Number(f[12])} ticks${wchan && wchan !== '0' ? ` in ${wchan}` : ''}`;
    }).join('; ');
  } catch (err) {
    return `unreadable (${(err as Error).message})`;
  }
}

/** `node bin/node-svc --data-dir <dir> daemon --port 0 --rate-limit <n>`; resolves once it prints its URL. */
export async function startDaemon(dataDir: string, opts: DaemonOptions = {}): Promise<RunningDaemon> {
  const env: NodeJS.ProcessEnv = {};
  for (const [k, v] of Object.entries(process.env)) if (!k.startsWith('NODE_SVC_') && !k.startsWith('OTEL_')) env[k] = v;
  // With the run's PostgreSQL server (NODE_SVC_TEST_STORE=postgres): the data dir's own database, unless the test
  // chose a store itself.
  if (testServerUrl() && !(opts.env && 'NODE_SVC_STORE' in opts.env)) env.NODE_SVC_STORE = await storeUrlFor(dataDir);
  Object.assign(env, opts.env);
  const args = [BIN, '--data-dir', dataDir, 'daemon', '--port', '0', '--host', '127.0.0.1', '--rate-limit', String(opts.rateLimit ?? 0), ...(opts.args ?? [])];
  const [cmd, ...pre] = opts.wrap?.length ? [...opts.wrap, process.execPath] : [process.execPath];
  const child = spawn(cmd!, [...pre, ...args], { cwd: REPO_ROOT, env, stdio: ['ignore', 'pipe', 'pipe'] });
  let out = '';
  let err = '';
  child.stdout!.setEncoding('utf8');
  child.stderr!.setEncoding('utf8');
  child.stderr!.on('data', (s: string) => {
    err += s;
    // Debugging aid: with DEBUG_NODE_SVC_ERRORS set, the daemon's unhandled errors (with their message) reach the test's stderr.
    if (process.env.DEBUG_NODE_SVC_ERRORS) for (const line of s.split('\n')) if (line.includes('unhandled error')) process.stderr.write(`[daemon] ${line}\n`);
  });
  const exited = new Promise<number | null>((resolve) => child.once('exit', (code) => resolve(code)));

  return new Promise((resolve, reject) => {
    const timer = setTimeout(() => {
      const threads = threadsOf(child.pid!);
      child.kill('SIGKILL');
      reject(new Error(`daemon did not print "listening on" within ${opts.startTimeoutMs ?? 30_000} ms\nthreads: ${threads}\nstdout: ${out}\nstderr: ${err}`));
    }, opts.startTimeoutMs ?? 30_000);
    child.once('error', (e) => { clearTimeout(timer); reject(e); });
    void exited.then((code) => {
      clearTimeout(timer);
      reject(new Error(`daemon exited with ${code} before listening\nstdout: ${out}\nstderr: ${err}`));
    });
    child.stdout!.on('data', (s: string) => {
      const before = out;
      out += s;
      const m = LISTENING_RE.exec(out);
      if (!m || LISTENING_RE.test(before)) return;
      clearTimeout(timer);
      resolve({
        url: m[1]!,
        pid: child.pid!,
        child,
        get stderr() { return err; },
        get stdout() { return out; },
        stop(signal: NodeJS.Signals = 'SIGTERM') {
          if (child.exitCode === null && child.signalCode === null) child.kill(signal);
          return exited;
        },
      });
    });
  });
}

export interface NodeSetup {
  tokenA: string;
  tokenB: string;
  jwksPath: string;
}

/**
 * Register node-a and node-b, issue a token for each, and trust `keys` (the issuer's JWKS) for `issuer`: what
 * `node-svc nodes add`, `tokens issue` and `keys add --issuer` do (their service functions, in the CLI's own withStore
 * on the same store: the data dir's SQLite file, or the run's PostgreSQL database for it), in this process. Five CLI
 * processes cost about 1.1 s of CPU per setup, and the suites set up some 40 times a phase on two cores that they keep
 * busy (test/run.mjs); the CLI commands themselves are tested in test/e2e/cli-admin.test.ts and cli-trust.test.ts.
 */
export async function setupNodes(dataDir: string, keys: KeyPair | KeyPair[], issuer = ISSUER): Promise<NodeSetup> {
  const [{ withStore }, admin] = await Promise.all([import('../../src/cli/commands/context.js'), import('../../src/service/admin.js')]);
  // 'sqlite' spelled out: withStore would otherwise read NODE_SVC_STORE, which runCli drops from a CLI run's environment.
  return withStore({ dataDir, store: (await storeUrlFor(dataDir)) ?? 'sqlite' }, async (store) => {
    await admin.addNode(store, 'node-a');
    await admin.addNode(store, 'node-b');
    const tokenA = (await admin.issueToken(store, 'node-a')).token;
    const tokenB = (await admin.issueToken(store, 'node-b')).token;
    const jwksPath = await writeJwks(join(dataDir, '..', `jwks-${Date.now()}.json`), publicJwks(...(Array.isArray(keys) ? keys : [keys])));
    await admin.addKeys(store, issuer, await admin.readJwksSource(jwksPath), jwksPath);
    return { tokenA, tokenB, jwksPath };
  });
}

export interface HttpResult<T = any> {
  status: number;
  headers: Headers;
  /** Parsed JSON when the body is JSON (application/json or problem+json), else the text ('' when empty). */
  body: T;
  text: string;
}

export interface RequestOptions {
  method?: string;
  token?: string;
  /** An object is sent as JSON with content-type application/json; a string is sent as is. */
  body?: unknown;
  headers?: Record<string, string>;
}

/** A small fetch wrapper: never throws for an HTTP status, only when the daemon cannot be reached. */
export async function http<T = any>(base: string, path: string, o: RequestOptions = {}): Promise<HttpResult<T>> {
  const headers: Record<string, string> = {};
  if (o.token !== undefined) headers.authorization = `Bearer ${o.token}`;
  let body: string | undefined;
  if (o.body !== undefined) {
    body = typeof o.body === 'string' ? o.body : JSON.stringify(o.body);
    if (typeof o.body !== 'string') headers['content-type'] = 'application/json';
  }
  Object.assign(headers, o.headers);
  const res = await fetch(`${base}${path}`, { method: o.method ?? (body !== undefined ? 'POST' : 'GET'), headers, ...(body !== undefined ? { body } : {}) });
  const text = await res.text();
  const type = res.headers.get('content-type') ?? '';
  let parsed: unknown = text;
  if (/json/i.test(type) && text) parsed = JSON.parse(text);
  return { status: res.status, headers: res.headers, body: parsed as T, text };
}

/** `http` bound to a daemon URL and a token. */
export const clientOf = (base: string, token: string) => ({
  get: <T = any>(path: string, o: Omit<RequestOptions, 'token'> = {}) => http<T>(base, path, { ...o, token }),
  post: <T = any>(path: string, body: unknown, o: Omit<RequestOptions, 'token' | 'body'> = {}) => http<T>(base, path, { ...o, token, body, method: 'POST' }),
});

/** A TCP port free on 127.0.0.1 now (taken and released), for a daemon or server a test starts on a port of its choosing. */
export async function freePort(): Promise<number> {
  const s = createServer();
  await new Promise<void>((r) => s.listen(0, '127.0.0.1', r));
  const port = (s.address() as { port: number }).port;
  await new Promise((r) => s.close(r));
  return port;
}
