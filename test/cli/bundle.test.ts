// The CLI's verify bundle (src/build/cli-bundle.ts, bench/cli-start), as `npm run build` leaves it in dist/cli: the
// code cache is one this node accepts, verify runs on the bundle alone (better-sqlite3's JavaScript bundled, the
// installed one only for another addon), and errors of the modules other commands load are still ours.
import { spawn, spawnSync } from 'node:child_process';
import { chmodSync, readFileSync, statSync, writeFileSync } from 'node:fs';
import { createRequire } from 'node:module';
import { join } from 'node:path';
import { pathToFileURL } from 'node:url';
import { Script } from 'node:vm';
import { afterAll, beforeAll, describe, expect, it, vi } from 'vitest';
import { isNodeSvcError, NodeSvcError } from '../../src/domain/errors.js';
import { asciiBundle, IMPORT_META_URL } from '../../src/build/cli-bundle.js';
import { BUNDLE, BUNDLE_CACHE, bundleImporter, CACHE_SUFFIX, DAEMON_BUNDLE, REST, wrapCjs } from '../../src/cli/start.js';
import { BIN, cliFor, json, REPO_ROOT, tempDataDir, type TempDataDir } from '../helpers/cli.js';
import { ISSUER, keyPair, mintCredential, publicJwks, writeJwks } from '../helpers/issuer.js';

vi.setConfig({ testTimeout: 60_000, hookTimeout: 60_000 });

const CLI_DIR = join(REPO_ROOT, 'dist', 'cli');
let t: TempDataDir;
let jws: string;

beforeAll(async () => {
  t = await tempDataDir();
  const cli = cliFor(t.dataDir);
  const key = await keyPair('EdDSA');
  expect((await cli('nodes', 'add', 'node-a')).code).toBe(0);
  expect((await cli('keys', 'add', '--issuer', ISSUER, await writeJwks(join(t.root, 'jwks.json'), publicJwks(key)))).code).toBe(0);
  jws = mintCredential({ key, claims: { aud: 'node-a', jti: 'cred-bundle-1' } });
});
afterAll(async () => { await t?.cleanup(); });

describe('dist/cli: the verify bundle', () => {
  it('has a code cache this node accepts (every function compiled: far more than the eager top level)', () => {
    const source = readFileSync(join(CLI_DIR, BUNDLE), 'utf8');
    const cachedData = readFileSync(join(CLI_DIR, BUNDLE_CACHE));
    expect(new Script(wrapCjs(source), { filename: BUNDLE, cachedData }).cachedDataRejected).toBe(false);
    expect(cachedData.length).toBeGreaterThan(source.length);
  });

  it('verify requires nothing but the loader and the SQLite addon (the rest is compiled from the bundle), better-sqlite3\'s JavaScript bundled; the installed package for another addon', () => {
    const args = ['verify', jws, '--node', 'node-a', '--data-dir', t.dataDir];
    const loaded = (env: Record<string, string> = {}) => {
      const hook = join(t.root, 'loaded.cjs');
      const out = join(t.root, 'loaded.json');
      writeFileSync(hook, `process.on('exit', () => require('fs').writeFileSync(${JSON.stringify(out)}, JSON.stringify({ files: Object.keys(require.cache), builtins: process.moduleLoadList })));\n`);
      // Without NODE_OPTIONS or NODE_DEBUG: a line of node's own on stderr would load node:net (a pipe's stream).
      const base = Object.fromEntries(Object.entries(process.env).filter(([k]) => !k.startsWith('NODE_SVC_') && k !== 'NODE_OPTIONS' && k !== 'NODE_DEBUG'));
      const r = spawnSync(process.execPath, ['-r', hook, BIN, ...args], { env: { ...base, ...env }, encoding: 'utf8' });
      expect(r.status, r.stderr).toBe(0);
      expect(json(r.stdout)).toMatchObject({ valid: true, credentialId: 'cred-bundle-1' });
      const { files, builtins } = JSON.parse(readFileSync(out, 'utf8')) as { files: string[]; builtins: string[] };
      // node's modules that a verify has no use for (bench/cli-start): node:v8 and its heap utilities are the daemon's
      // heap flags only; node:tty and node:net come with process.stdout or process.stderr (a terminal's or a pipe's
      // stream), which a verify does not create: it writes fd 1 with writeSync and asks fstat whether fd 1 can be a
      // terminal (here a pipe).
      expect(builtins.filter((m) => /^NativeModule (v8|tty|net|internal\/heap_utils)$/.test(m)), r.stderr).toEqual([]);
      return files.filter((f) => !f.endsWith('loaded.cjs')).map((f) => f.slice(REPO_ROOT.length + 1));
    };
    // (the native addon is loaded through require either way)
    expect(loaded()).toEqual(['bin/node-svc', 'dist/cli/node-svc.cjs', 'node_modules/better-sqlite3/build/Release/better_sqlite3.node']);
    const addon = join(REPO_ROOT, 'node_modules', 'better-sqlite3', 'build', 'Release', 'better_sqlite3.node');
    expect(loaded({ NODE_SVC_SQLITE_ADDON: addon })).toContain('node_modules/better-sqlite3/lib/database.js');
  });

  it('verify reads the store as it is: no file of the data dir gets another mode', async () => {
    const cli = cliFor(t.dataDir);
    const db = join(t.dataDir, 'node-svc.db');
    chmodSync(db, 0o640);
    chmodSync(t.dataDir, 0o750);
    const r = await cli('verify', jws, '--node', 'node-a');
    expect(r.code, r.stderr).toBe(0);
    expect(json(r.stdout)).toMatchObject({ valid: true });
    expect(statSync(db).mode & 0o777).toBe(0o640);
    expect(statSync(t.dataDir).mode & 0o777).toBe(0o750);
    chmodSync(db, 0o600);
    chmodSync(t.dataDir, 0o700);
  });
});

/**
 * The file: URLs of the ES modules node loads while running `args` (node's own ESM debug log, NODE_DEBUG=esm, names
 * each module as its loader stores it), and the run's stdout. `until` ends a long-running command (the daemon) once
 * its stdout matches, with SIGTERM. (An earlier version registered a module hook with --import: node 20 runs those
 * hooks on a thread of their own, the main module went through them too, and a fresh-clone CI run once hung there.)
 */
async function esModulesLoaded(args: string[], until?: RegExp, env: Record<string, string> = {}): Promise<{ urls: string[]; stdout: string }> {
  const base = Object.fromEntries(Object.entries(process.env).filter(([k]) => !k.startsWith('NODE_SVC_') && !k.startsWith('OTEL_') && k !== 'NODE_OPTIONS'));
  const child = spawn(process.execPath, [BIN, ...args], { env: { ...base, ...env, NODE_DEBUG: 'esm' }, stdio: ['ignore', 'pipe', 'pipe'] });
  let stdout = '';
  let stderr = '';
  let stopped = false;
  child.stdout.setEncoding('utf8').on('data', (s: string) => {
    stdout += s;
    if (!stopped && until?.test(stdout)) stopped = child.kill('SIGTERM'); // once: a second SIGTERM ends a draining daemon
  });
  child.stderr.setEncoding('utf8').on('data', (s: string) => { stderr += s; });
  // Bounded, and a hang is named with what the process printed.
  let timer: NodeJS.Timeout | undefined;
  const code = await new Promise<number | null>((resolve, reject) => {
    child.once('exit', resolve);
    timer = setTimeout(() => {
      child.kill('SIGKILL');
      reject(new Error(`node-svc ${args.join(' ')} did not exit within 40 s (${stopped ? 'SIGTERM sent after' : 'no SIGTERM yet: waiting for'} ${until ?? 'its end'})\nstdout: ${stdout.slice(-2000)}\nstderr: ${stderr.slice(-2000)}`));
    }, 40_000);
  }).finally(() => clearTimeout(timer));
  expect(code, stderr.slice(-4000)).toBe(0);
  return { urls: [...stderr.matchAll(/ESM \d+: Storing (\S+) /g)].map((m) => m[1]), stdout };
}

describe('dist/cli: the bundles of the other commands', () => {
  it('rest.cjs (every function) and daemon.cjs (the top level) have code caches this node accepts', () => {
    for (const [name, everyFunction] of [[REST, true], [DAEMON_BUNDLE, false]] as const) {
      // Read as the loader reads them: latin1, which is right only because they are ASCII.
      const bytes = readFileSync(join(CLI_DIR, name));
      expect(bytes.findIndex((b) => b > 0x7f), `${name}: a byte that is not ASCII`).toBe(-1);
      const source = bytes.toString('latin1');
      const cachedData = readFileSync(join(CLI_DIR, `${name}${CACHE_SUFFIX}`));
      expect(new Script(wrapCjs(source), { filename: name, cachedData }).cachedDataRejected, name).toBe(false);
      if (everyFunction) expect(cachedData.length).toBeGreaterThan(source.length);
    }
  });

  it('asciiBundle writes non-ASCII characters as \\u{…} where that keeps the code (comments, strings) and refuses where it would not, leaving the file as it was', async () => {
    const dir = (await tempDataDir()).root;
    const write = (name: string, text: string) => {
      const f = join(dir, name);
      writeFileSync(f, text);
      return f;
    };
    const kept = write('kept.cjs', '// a \u2014 b\n/* ≥ 𝑊 */\nmodule.exports = { a: "\\u2014", b: "≥" };\n');
    await asciiBundle('kept', kept);
    const made = readFileSync(kept, 'latin1');
    expect(made).toBe('// a \\u{2014} b\n/* \\u{2265} \\u{1d44a} */\nmodule.exports = { a: "\\u2014", b: "\\u{2265}" };\n');
    const m = { exports: {} as { a?: string; b?: string } };
    new Script(wrapCjs(made)).runInThisContext()(m.exports, require, m);
    expect(m.exports).toEqual({ a: '\u2014', b: '≥' });
    for (const [name, text] of [
      ['regex', 'module.exports = /≥/.test("≥");\n'], // /\u{2265}/ without the u flag is another expression
      ['template', 'module.exports = String.raw`≥`;\n'], // a template's raw text is what was written
      ['separator', '// a\u2028module.exports = 1;\n'], // U+2028 ends a line comment: what follows it is code
    ] as const) {
      const f = write(`${name}.cjs`, text);
      await expect(asciiBundle(name, f), name).rejects.toThrow(/would change the code/);
      expect(readFileSync(f, 'utf8'), name).toBe(text);
    }
  });

  it('an admin command and a daemon start load no ES module of ours or of a package (all from the bundles)', async () => {
    const ours = (urls: string[]) => urls.filter((u) => u.startsWith(`file://${join(REPO_ROOT, 'dist')}/`) || u.startsWith(`file://${join(REPO_ROOT, 'node_modules')}/`));
    const list = await esModulesLoaded(['nodes', 'list', '--data-dir', t.dataDir]);
    expect(json<{ data: { id: string }[] }>(list.stdout).data.map((n) => n.id)).toEqual(['node-a']);
    expect(ours(list.urls)).toEqual([]);
    const daemonArgs = ['daemon', '--port', '0', '--host', '127.0.0.1', '--data-dir', t.dataDir];
    const daemon = await esModulesLoaded(daemonArgs, /listening on http/);
    expect(daemon.stdout).toMatch(/listening on http:\/\/127\.0\.0\.1:\d+/);
    expect(ours(daemon.urls)).toEqual([]);
    // The log does see our ES modules: with tracing on, the daemon imports ops/otel.js (no bundle holds it) and its SDK.
    const traced = await esModulesLoaded(daemonArgs, /listening on http/, { OTEL_EXPORTER_OTLP_ENDPOINT: 'http://127.0.0.1:9', OTEL_TRACES_SAMPLER: 'always_off' });
    expect(ours(traced.urls)).toContain(`file://${join(REPO_ROOT, 'dist', 'ops', 'otel.js')}`);
    expect(ours(traced.urls).some((u) => u.includes('/node_modules/@opentelemetry/'))).toBe(true);
  });
});

describe('__nodeSvcImport: which modules come from the bundles', () => {
  it('the build marks the modules no bundle holds (the TUI, ops/otel.js), and those read no bundle', async () => {
    const marked = (name: string) => [...readFileSync(join(CLI_DIR, name), 'utf8').matchAll(/__nodeSvcImport\("([^"]+)", true\)/g)].map((m) => m[1]);
    expect(marked(REST)).toContain('../tui/watch.js');
    expect(marked(DAEMON_BUNDLE)).toContain('../ops/otel.js');
    for (const name of [BUNDLE, REST, DAEMON_BUNDLE]) for (const key of marked(name)) expect(key, name).toMatch(/^\.\.\/(tui\/|ops\/otel\.js$)/);
    // a directory whose rest.cjs fails when read: a marked module never gets there, an unmarked one does
    writeFileSync(join(t.root, REST), 'throw new Error("rest.cjs was read");\n');
    const importer = bundleImporter(t.root);
    expect(Object.keys((await importer('./output.js', true)) as object)).toContain('renderError');
    expect(() => importer('./output.js')).toThrow(/rest\.cjs was read/);
  });
});

describe('NodeSvcError across module copies', () => {
  it('isNodeSvcError knows an error of another copy of errors.js, which instanceof does not', async () => {
    const other = (await import(join(REPO_ROOT, 'dist', 'domain', 'errors.js'))) as typeof import('../../src/domain/errors.js');
    const foreign = new other.NodeSvcError('not_found', 'x not found', { exitCode: 3 });
    expect(foreign instanceof NodeSvcError).toBe(false);
    expect(isNodeSvcError(foreign)).toBe(true);
    expect(isNodeSvcError(new NodeSvcError('usage', 'bad'))).toBe(true);
    for (const x of [new Error('plain'), { code: 'usage', message: 'look-alike' }, null, undefined, 'NodeSvcError']) expect(isNodeSvcError(x)).toBe(false);
  });
});

describe("the bundles' import.meta.url (IMPORT_META_URL)", () => {
  // The banner's expression, run as the bundle runs it: with that __filename and a require that has node:url.
  const metaUrl = (filename: string): string =>
    new Function('__filename', 'require', `${IMPORT_META_URL}\nreturn __nodeSvcImportMetaUrl;`)(filename, createRequire(import.meta.url)) as string;

  it('is what pathToFileURL makes, for plain paths written directly and for every other path through pathToFileURL', () => {
    const paths = [
      '/work/main/dist/cli/bundle.cjs', '/usr/local/bin/node-svc#cli.cjs', '/opt/node_svc-1.2+b/dist/cli/rest.cjs',
      '/a/../b', '/a/./b', '/a//b', '/a/b/', '/a/.hidden/x', '/a b/c', '/a/%41', '/a/b#c#d', '/a/~user', '/a/é', '/a/b?c',
      '/a/b\nc', '/a/b\\c', '/', '/x#', 'relative/path.cjs', 'C:\\node-svc\\x.cjs',
    ];
    for (const p of paths) expect(metaUrl(p), p).toBe(pathToFileURL(p).href);
  });
});
