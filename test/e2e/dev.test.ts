// `node-svc dev` end to end (README "The sandbox"): the real CLI starts the local chain (ganache), deploys the escrow,
// runs the daemon, a webhook receiver and a simulated payer; a second run reuses it all. Also the card sandbox, and
// `dev credential` feeding the real offline `verify`. Everything on 127.0.0.1, temp data dirs.
import { spawn, type ChildProcess } from 'node:child_process';
import { existsSync, readFileSync } from 'node:fs';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it, vi } from 'vitest';
import { BIN, json, REPO_ROOT, runCli, tempDataDir, type TempDataDir } from '../helpers/cli.js';
import { http } from '../helpers/daemon.js';
import { pgUrlOf } from '../helpers/inspect.js';
import { storeUrlFor } from '../helpers/postgres.js';

vi.setConfig({ testTimeout: 90_000, hookTimeout: 30_000 });

interface DevRun {
  child: ChildProcess;
  readonly stdout: string;
  readonly stderr: string;
  /** Resolve once `re` matches stdout (bounded); the output is in the error. */
  waitFor(re: RegExp, timeoutMs?: number): Promise<RegExpExecArray>;
  /** Send SIGINT (Ctrl-C) and resolve with the exit code. */
  interrupt(): Promise<number | null>;
  kill(): void;
}

function startDev(dataDir: string, extra: string[] = []): DevRun {
  const env: NodeJS.ProcessEnv = {};
  for (const [k, v] of Object.entries(process.env)) if (!k.startsWith('NODE_SVC_')) env[k] = v;
  // The run's PostgreSQL database for this data dir, when the run has one (created by tempDataDir's first use below).
  const store = pgUrlOf(dataDir);
  if (store) env.NODE_SVC_STORE = store;
  const child = spawn(process.execPath, [BIN, 'dev', '--port', '0', '--pace', '0.5', '--data-dir', dataDir, ...extra], {
    cwd: REPO_ROOT, env, stdio: ['ignore', 'pipe', 'pipe'],
  });
  let out = '';
  let err = '';
  child.stdout!.setEncoding('utf8').on('data', (s: string) => { out += s; });
  child.stderr!.setEncoding('utf8').on('data', (s: string) => { err += s; });
  const exited = new Promise<number | null>((r) => child.once('exit', (code) => r(code)));
  return {
    child,
    get stdout() { return out; },
    get stderr() { return err; },
    waitFor(re, timeoutMs = 60_000) {
      return new Promise((resolve, reject) => {
        const check = () => {
          const m = re.exec(out);
          if (!m) return false;
          cleanup();
          resolve(m);
          return true;
        };
        const timer = setTimeout(() => { cleanup(); reject(new Error(`dev: ${re} not printed within ${timeoutMs} ms\nstdout: ${out}\nstderr: ${err.slice(-3000)}`)); }, timeoutMs);
        const onExit = (code: number | null) => { cleanup(); reject(new Error(`dev exited (${code}) before printing ${re}\nstdout: ${out}\nstderr: ${err.slice(-3000)}`)); };
        const cleanup = () => { clearTimeout(timer); child.stdout!.off('data', check); child.off('exit', onExit); };
        if (check()) return;
        child.stdout!.on('data', check);
        child.once('exit', onExit);
      });
    },
    interrupt() {
      if (child.exitCode === null && child.signalCode === null) child.kill('SIGINT');
      return Promise.race([exited, new Promise<number | null>((_, reject) => setTimeout(() => reject(new Error(`dev did not exit within 20 s of SIGINT\n${out.slice(-2000)}\n${err.slice(-2000)}`)), 20_000))]);
    },
    kill() {
      if (child.exitCode === null && child.signalCode === null) child.kill('SIGKILL');
    },
  };
}

const URL_RE = /node-svc sandbox is running: (http:\/\/127\.0\.0\.1:\d+)/;
const TOKEN_RE = /^ {2}token {4}(nsv_[A-Za-z0-9_-]+)$/m;
const FINAL_RE = /^webhook {2}settlement\.final +(\S+) .*<- final: money$/m;

interface Sandbox { sandboxJson: { runs: number; node: string; chain?: { escrow: string; token: string } } }
const sandboxState = (dataDir: string) => JSON.parse(readFileSync(join(dataDir, 'sandbox.json'), 'utf8')) as Sandbox['sandboxJson'];

type StreamSummary = { stream: string; finality: string; status: string; billedMicro: string; finalMicro: string };
async function listStreams(url: string, token: string): Promise<StreamSummary[]> {
  const r = await runCli(['streams', 'list', '--all', '--url', url, '--token', token]);
  expect(r.code, r.stderr).toBe(0);
  return json<{ data: StreamSummary[] }>(r.stdout).data;
}

/** `streams list` (real CLI) until at least one stream's finality is "final" (bounded). */
async function finalStreams(url: string, token: string, timeoutMs = 30_000): Promise<StreamSummary[]> {
  const end = Date.now() + timeoutMs;
  for (;;) {
    const streams = await listStreams(url, token);
    if (streams.some((s) => s.finality === 'final')) return streams;
    if (Date.now() > end) throw new Error(`no stream final within ${timeoutMs} ms: ${JSON.stringify(streams.map((s) => [s.stream, s.finality, s.finalMicro]))}`);
    await new Promise((r) => setTimeout(r, 500));
  }
}

describe('node-svc dev (escrow sandbox)', () => {
  let dir: TempDataDir;
  const runs: DevRun[] = [];

  beforeAll(async () => {
    dir = await tempDataDir('node-svc-dev-');
    await storeUrlFor(dir.dataDir); // its database exists before `dev` opens it
  });
  afterAll(async () => {
    for (const r of runs) r.kill();
    await dir?.cleanup();
  });

  let firstToken = '';
  let firstChain: { escrow: string; token: string } | undefined;
  let firstStreams: string[] = [];

  it('starts chain, daemon, receiver and payer; streams reach final; Ctrl-C exits 0 and frees the data dir', async () => {
    const run = startDev(dir.dataDir);
    runs.push(run);
    const url = (await run.waitFor(URL_RE))[1]!;
    const token = (await run.waitFor(TOKEN_RE))[1]!;
    expect(run.stdout).toContain(`export NODE_SVC_URL=${url} NODE_SVC_TOKEN=${token}`);
    const final = await run.waitFor(FINAL_RE, 60_000);
    expect(final[1]).toMatch(/^run1-stream-\d+$/);
    expect(existsSync(join(dir.dataDir, 'daemon.pid'))).toBe(!pgUrlOf(dir.dataDir)); // SQLite: one daemon per data dir

    // `finality` is that of the latest settled frontier: a stream still billing moves on to a newer checkpoint,
    // while a capped one stays final. Poll (bounded) until one is final right now.
    const streams = await finalStreams(url, token);
    expect(streams.length).toBeGreaterThanOrEqual(3);
    for (const s of streams) expect(s.stream).toMatch(/^run1-stream-\d+$/);
    expect(BigInt(streams.find((s) => s.stream === final[1])!.finalMicro)).toBeGreaterThan(0n);

    // The state file holds the chain's contracts; the token is rotated in the store, never written there.
    const st = sandboxState(dir.dataDir);
    expect(st.runs).toBe(1);
    expect(st.node).toBe('dev-node');
    expect(st.chain?.escrow).toMatch(/^0x[0-9a-fA-F]{40}$/);
    expect(st.chain?.token).toMatch(/^0x[0-9a-fA-F]{40}$/);
    expect(readFileSync(join(dir.dataDir, 'sandbox.json'), 'utf8')).not.toContain(token);
    expect(run.stderr).not.toContain(token);

    expect(await run.interrupt()).toBe(0);
    expect(existsSync(join(dir.dataDir, 'daemon.pid'))).toBe(false);
    firstToken = token;
    firstChain = st.chain;
    firstStreams = streams.map((s) => s.stream);
  });

  it('a second run reuses the sandbox (runs 2, same contracts, run-1 streams kept) with a new token; the old one gets 401', async () => {
    expect(firstToken).toMatch(/^nsv_/);
    const run = startDev(dir.dataDir);
    runs.push(run);
    const url = (await run.waitFor(URL_RE))[1]!;
    const token = (await run.waitFor(TOKEN_RE))[1]!;
    expect(token).not.toBe(firstToken);
    await run.waitFor(/^payer {4}opened run2-stream-1:/m);

    const st = sandboxState(dir.dataDir);
    expect(st.runs).toBe(2);
    expect(st.chain).toEqual(firstChain);

    const old = await http(url, '/v1/streams', { token: firstToken });
    expect(old.status).toBe(401);
    expect(old.body.code).toBe('unauthorized');
    const fresh = await http(url, '/v1/streams', { token });
    expect(fresh.status).toBe(200);

    const streams = (await listStreams(url, token)).map((s) => s.stream);
    expect(streams).toEqual(expect.arrayContaining(firstStreams));
    expect(streams).toContain('run2-stream-1');
    // The reused chain (same contracts, persisted by ganache) still settles: a run-2 stream reaches final.
    await run.waitFor(/^webhook {2}settlement\.final +run2-stream-\d+ /m, 45_000);

    expect(await run.interrupt()).toBe(0);
    expect(existsSync(join(dir.dataDir, 'daemon.pid'))).toBe(false);
  });

  it('dev credential mints a JWS that the offline verify accepts for dev-node', async () => {
    expect(existsSync(join(dir.dataDir, 'sandbox.json'))).toBe(true);
    const minted = await runCli(['dev', 'credential', '--stream', 'x', '--data-dir', dir.dataDir, '--json']);
    expect(minted.code, minted.stderr).toBe(0);
    const jws = json<{ credential: string }>(minted.stdout).credential;
    expect(jws).toMatch(/^[\w-]+\.[\w-]+\.[\w-]+$/);
    // Piped without --json: the bare JWS, so JWS=$(node-svc dev credential …) works.
    const bare = await runCli(['dev', 'credential', '--stream', 'x', '--data-dir', dir.dataDir]);
    expect(bare.stdout).toMatch(/^[\w-]+\.[\w-]+\.[\w-]+\n$/);
    const v = await runCli(['verify', jws, '--node', 'dev-node', '--data-dir', dir.dataDir]);
    expect(v.code, v.stdout + v.stderr).toBe(0);
    const out = json(v.stdout);
    expect(out.valid).toBe(true);
    expect(out.stream).toBe('x');
    expect(out.node).toBe('dev-node');
    // Aimed at another node: refused (exit 1), so the 0 above means something.
    const other = await runCli(['verify', jws, '--node', 'other-node', '--data-dir', dir.dataDir]);
    expect(other.code).toBe(1);
  });
});

describe('node-svc dev --mode card', () => {
  it('reaches settlement.final on the local card processor, then Ctrl-C exits 0', async () => {
    const dir = await tempDataDir('node-svc-dev-card-');
    await storeUrlFor(dir.dataDir);
    const run = startDev(dir.dataDir, ['--mode', 'card']);
    try {
      const url = (await run.waitFor(URL_RE))[1]!;
      const token = (await run.waitFor(TOKEN_RE))[1]!;
      expect(run.stdout).toMatch(/local card processor, card rail/);
      const final = await run.waitFor(FINAL_RE, 60_000);
      expect(final[0]).toMatch(/USD/);
      const streams = await finalStreams(url, token);
      expect(streams.length).toBeGreaterThanOrEqual(3);
      expect(BigInt(streams.find((s) => s.stream === final[1])!.finalMicro)).toBeGreaterThan(0n);
      expect(await run.interrupt()).toBe(0);
      expect(existsSync(join(dir.dataDir, 'daemon.pid'))).toBe(false);
    } finally {
      run.kill();
      await dir.cleanup();
    }
  });
});
