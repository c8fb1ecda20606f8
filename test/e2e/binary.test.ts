// The single binary (DESIGN §12): dist/node-svc, copied alone into an empty directory, runs the CLI and the daemon
// with nothing else on disk: no node_modules, no dist, its SQLite addon extracted from itself.
import { execFile, spawn } from 'node:child_process';
import { copyFile, mkdtemp, readdir, rm, stat } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it, vi } from 'vitest';
import { BINARY, DIST, ensureBinary } from '../helpers/binary.js';
import { json, REPO_ROOT, type CliResult } from '../helpers/cli.js';
import { ISSUER, keyPair, mintCredential, publicJwks, writeJwks } from '../helpers/issuer.js';

// Building takes ~5-10 s (most of it postject), more on a busy machine.
vi.setConfig({ testTimeout: 60_000, hookTimeout: 180_000 });

const ADDON = join(REPO_ROOT, 'node_modules', 'better-sqlite3', 'build', 'Release', 'better_sqlite3.node');

let dir: string; // the empty directory the binary runs in
let cache: string; // its XDG_CACHE_HOME, elsewhere, so `dir` holds only what the commands create
let exe: string;
let env: NodeJS.ProcessEnv;

beforeAll(async () => {
  await ensureBinary();
  dir = await mkdtemp(join(tmpdir(), 'node-svc-bin-'));
  cache = await mkdtemp(join(tmpdir(), 'node-svc-bin-cache-'));
  exe = join(dir, 'node-svc');
  await copyFile(BINARY, exe);
  env = {};
  // Nothing from the host that could let it find code or config elsewhere.
  for (const [k, v] of Object.entries(process.env))
    if (!k.startsWith('NODE_SVC_') && !k.startsWith('NODE_') && !k.startsWith('VITEST') && k !== 'DEBUG') env[k] = v;
  env.XDG_CACHE_HOME = cache;
});

afterAll(async () => {
  await Promise.all([dir, cache].filter(Boolean).map((d) => rm(d, { recursive: true, force: true })));
});

/** `./node-svc ...args` in the temp dir, stdout piped (so JSON output), stdin closed. */
function run(args: string[], timeoutMs = 30_000, bin = exe): Promise<CliResult> {
  return new Promise((resolve, reject) => {
    const child = execFile(bin, args, { cwd: dir, env, timeout: timeoutMs, encoding: 'utf8' }, (err, stdout, stderr) => {
      if (err && typeof (err as { code?: unknown }).code !== 'number') return reject(new Error(`${args.join(' ')}: ${err.message}\n${stderr}`));
      resolve({ code: err ? (err as { code: number }).code : 0, stdout, stderr });
    });
    child.stdin?.end();
  });
}

describe('the single binary, alone in an empty directory', () => {
  it('is a real executable next to nothing else', async () => {
    expect(await readdir(dir)).toEqual(['node-svc']);
    expect((await stat(exe)).mode & 0o111).toBeTruthy();
  });

  it('--help → 0 without the experimental warning, writing nothing to disk', async () => {
    const r = await run(['--help']);
    expect(r.code).toBe(0);
    expect(r.stdout).toMatch(/^Usage: node-svc/);
    for (const cmd of ['nodes', 'tokens', 'keys', 'verify', 'daemon']) expect(r.stdout).toMatch(new RegExp(`\\n  ${cmd}\\b`));
    expect(r.stderr).toBe('');
    expect(await readdir(cache)).toEqual([]);
  });

  it('nodes add n1 --data-dir d → 0, with the embedded SQLite addon extracted to the cache dir', async () => {
    const r = await run(['nodes', 'add', 'n1', '--data-dir', 'd']);
    expect(r).toMatchObject({ code: 0, stderr: '' });
    expect(json(r.stdout)).toMatchObject({ id: 'n1' });
    expect((await readdir(dir)).sort()).toEqual(['d', 'node-svc']);
    const extracted = (await readdir(join(cache, 'node-svc'))).filter((f) => f.endsWith('better_sqlite3.node'));
    expect(extracted).toHaveLength(1);
    expect((await stat(join(cache, 'node-svc', extracted[0]!))).size).toBe((await stat(ADDON)).size);
    expect((await stat(join(cache, 'node-svc'))).mode & 0o777).toBe(0o700);
  });

  it('tokens issue n1 → 0 with the token shown once', async () => {
    const r = await run(['tokens', 'issue', 'n1', '--data-dir', 'd']);
    expect(r.code).toBe(0);
    expect(json(r.stdout)).toMatchObject({ node: 'n1', token: expect.stringMatching(/^nsv_[A-Za-z0-9_-]{43}$/) });
  });

  it('keys add --issuer ISS jwks.json, then verify <jws> → 0 valid:true', async () => {
    const key = await keyPair('EdDSA', 'bin-ed-1');
    await writeJwks(join(dir, 'jwks.json'), publicJwks(key));
    const add = await run(['keys', 'add', '--issuer', ISSUER, 'jwks.json', '--data-dir', 'd']);
    expect(add.code).toBe(0);
    const jws = mintCredential({ key, claims: { aud: 'n1', jti: 'cred-bin-1' } });
    const r = await run(['verify', jws, '--data-dir', 'd']);
    expect(r).toMatchObject({ code: 0, stderr: '' });
    expect(json(r.stdout)).toMatchObject({ valid: true, credentialId: 'cred-bin-1', issuer: ISSUER, node: 'n1' });
  });

  it('daemon --port 0: GET /healthz → 200, SIGTERM → exit 0', () => daemonHealthz(exe));

  it('dev (which needs ganache, not in the binary) fails with a clear message', async (ctx) => {
    if (!/\n  dev\b/.test((await run(['--help'])).stdout)) ctx.skip();
    const r = await run(['dev', '--data-dir', 'sandbox', '--port', '0'], 30_000);
    expect(r.code).not.toBe(0);
    expect(json(r.stderr).error).toMatchObject({ code: 'config', message: expect.stringMatching(/does not include the "ganache" package/) });
  });
});

// The other form of the binary (src/sea/build.ts --snapshot: the CLI compiled and verify's modules initialized in a
// startup snapshot; the stub above is the default since 2026-11-29): still built and run, on the same data dir.
describe('the single binary built with --snapshot', () => {
  let snap: string;
  let built: string; // what the build printed
  beforeAll(async () => {
    snap = join(dir, 'node-svc-snapshot');
    built = await new Promise<string>((resolve, reject) => {
      execFile(process.execPath, [join(DIST, 'sea', 'build.js'), '--snapshot', '--out', snap], { cwd: REPO_ROOT, timeout: 170_000, encoding: 'utf8' }, (err, _out, stderr) =>
        err ? reject(new Error(`build --snapshot: ${err.message}\n${stderr}`)) : resolve(stderr));
    });
  });

  it('says so when built, and verify <jws> → 0 valid:true', async () => {
    expect(built).toMatch(/startup snapshot on/);
    const key = await keyPair('EdDSA', 'bin-ed-2');
    await writeJwks(join(dir, 'jwks2.json'), publicJwks(key));
    expect((await run(['keys', 'add', '--issuer', ISSUER, 'jwks2.json', '--data-dir', 'd'], 30_000, snap)).code).toBe(0);
    const r = await run(['verify', mintCredential({ key, claims: { aud: 'n1', jti: 'cred-bin-2' } }), '--data-dir', 'd'], 30_000, snap);
    expect(r).toMatchObject({ code: 0, stderr: '' });
    expect(json(r.stdout)).toMatchObject({ valid: true, credentialId: 'cred-bin-2', node: 'n1' });
  });

  it('daemon --port 0: GET /healthz → 200, SIGTERM → exit 0 (its heap flags set from the snapshot\'s main)', () => daemonHealthz(snap));
});

/** `bin daemon --port 0` in the temp dir on data dir d: GET /healthz answers, SIGTERM ends it with 0. */
async function daemonHealthz(bin: string): Promise<void> {
  const child = spawn(bin, ['daemon', '--port', '0', '--host', '127.0.0.1', '--data-dir', 'd'], { cwd: dir, env, stdio: ['ignore', 'pipe', 'pipe'] });
  let out = '';
  let err = '';
  child.stdout.setEncoding('utf8').on('data', (s: string) => { out += s; });
  child.stderr.setEncoding('utf8').on('data', (s: string) => { err += s; });
  const exited = new Promise<number | null>((resolve) => child.once('exit', (code) => resolve(code)));
  try {
    const url = await new Promise<string>((resolve, reject) => {
      const timer = setTimeout(() => reject(new Error(`no "listening on" within 30 s\nstdout: ${out}\nstderr: ${err}`)), 30_000);
      child.stdout.on('data', () => {
        const m = /listening on (http:\/\/127\.0\.0\.1:\d+)/.exec(out);
        if (m) { clearTimeout(timer); resolve(m[1]!); }
      });
      void exited.then((code) => { clearTimeout(timer); reject(new Error(`daemon exited with ${code}\nstdout: ${out}\nstderr: ${err}`)); });
    });
    const res = await fetch(`${url}/healthz`);
    expect(res.status).toBe(200);
    expect(await res.json()).toMatchObject({ status: expect.stringMatching(/^(ok|degraded)$/), checks: expect.any(Array) });
    child.kill('SIGTERM');
    expect(await exited).toBe(0);
  } finally {
    if (child.exitCode === null && child.signalCode === null) child.kill('SIGKILL');
  }
}
