// `npm run build:binary`: dist/node-svc, one executable made with node's Single Executable Applications feature
// (DESIGN §12). Run after `npm run build`: it bundles what tsc wrote to dist/.
//   1. dist/sea/entry.js → one small CJS file: cli/main.ts and what `verify` runs; every other dynamic import of ours
//      becomes importRest() (src/sea/rest.ts). That file is an asset with a V8 code cache of every function (another
//      asset), run by the SEA main (a SEA main must be CJS), the stub dist/sea/start.js. With --snapshot, the SEA main
//      is dist/sea/snapshot.js instead, which node runs when it makes the blob: it compiles that file with every
//      function and initializes verify's modules, and the binary starts from that heap (a startup snapshot). The stub
//      is the default since 2026-11-29: on this machine the snapshot's larger heap now costs more to map than it saves
//      (farm-bench, 30 paired runs, three times: the stub's verify 0.89-0.91 x the snapshot's);
//   1b. those dynamically imported modules, every lazily imported command within included → a second CJS file, an
//      asset, with a V8 code cache made here for it (another asset);
//   2. each TUI module the CLI imports lazily → an ESM asset (ink's dependencies use top-level await);
//   3. those, the manifest and better-sqlite3's addon → a blob (`node --experimental-sea-config`);
//   4. the blob → a copy of this very node (the addon was built for it), with postject.
// Options: --out <file> (default dist/node-svc), --snapshot (a startup snapshot instead of the stub), --no-code-cache,
// --keep (keep and print the work dir). --no-snapshot is accepted and is the default.
import { build, type BuildResult, type Plugin } from 'esbuild';
import { spawnSync } from 'node:child_process';
import { createHash } from 'node:crypto';
import { chmodSync, copyFileSync, mkdtempSync, readFileSync, renameSync, rmSync, statSync, writeFileSync } from 'node:fs';
import { createRequire, isBuiltin } from 'node:module';
import { tmpdir } from 'node:os';
import { dirname, join, relative, resolve, sep } from 'node:path';
import { fileURLToPath } from 'node:url';
import { parseArgs } from 'node:util';
import { compileFunction } from 'node:vm';
import { asciiBundle, assertAscii, codeCache as fullCodeCache, FAST_PATH, IMPORT_META_URL } from '../build/cli-bundle.js';
import { CLI_ASSET, CLI_CACHE_ASSET, MANIFEST_ASSET, SQLITE_ADDON_ID, type EmbeddedFile, type SeaManifest } from './manifest.js';
import { REST_ASSET, REST_CACHE_ASSET, REST_PARAMS } from './rest.js';

const SENTINEL_FUSE = 'NODE_SEA_FUSE_fce680ab2cc467b6e072b8b5df1996b2';
const ROOT = resolve(fileURLToPath(new URL('../..', import.meta.url))); // dist/sea/build.js → the repo
const DIST = join(ROOT, 'dist');
const TUI_DIR = join(DIST, 'tui') + sep;
const SEA_DIR = join(DIST, 'sea') + sep;
const require = createRequire(import.meta.url);

export interface BuildOptions {
  out?: string;
  codeCache?: boolean;
  /** A startup snapshot holding the CLI compiled and verify's modules initialized (snapshot.ts); else (the default) start.ts. */
  snapshot?: boolean;
  keep?: boolean;
  log?: (line: string) => void;
}

export interface BuildReport {
  out: string;
  bytes: number;
  bundleBytes: number;
  restBytes: number;
  tui: string[];
  codeCache: boolean;
  snapshot: boolean;
  ms: number;
}

const isOurs = (path: string) => path.startsWith(DIST + sep) && !path.startsWith(SEA_DIR) && !path.includes(`${sep}node_modules${sep}`);
const sha256 = (b: Uint8Array) => createHash('sha256').update(b).digest('hex');

/** Our modules' `node:module` is src/sea/module-shim.ts, whose createRequire finds better-sqlite3 in the bundle. */
const moduleShim: Plugin = {
  name: 'node-svc-module-shim',
  setup(b) {
    b.onResolve({ filter: /^(node:)?module$/ }, (a) => (isOurs(a.importer) ? { path: join(SEA_DIR, 'module-shim.js') } : undefined));
  },
};

/** better-sqlite3 is always handed the embedded addon (sqlite.ts); its `bindings` path search must never run. */
const noBindings: Plugin = {
  name: 'node-svc-no-bindings',
  setup(b) {
    b.onResolve({ filter: /^bindings$/ }, () => ({ path: 'bindings', namespace: 'node-svc-stub' }));
    b.onLoad({ filter: /.*/, namespace: 'node-svc-stub' }, () => ({
      contents: 'module.exports = () => { throw new Error("node-svc binary: better-sqlite3 must be given the embedded addon (src/sea/sqlite.ts)"); };',
      loader: 'js',
    }));
  },
};

/**
 * pg's optional native binding (`pg.native`, libpq through pg-native) is read lazily and never used by node-svc: the
 * binary carries the pure JavaScript client only.
 */
const noPgNative: Plugin = {
  name: 'node-svc-no-pg-native',
  setup(b) {
    b.onResolve({ filter: /^pg-native$/ }, () => ({ path: 'pg-native', namespace: 'node-svc-pg-native' }));
    b.onLoad({ filter: /.*/, namespace: 'node-svc-pg-native' }, () => ({
      contents: 'throw Object.assign(new Error("pg-native is not part of the node-svc binary"), { code: "MODULE_NOT_FOUND" });',
      loader: 'js',
    }));
  },
};

/**
 * ink's DEV=true mode (react devtools, reading its own package.json) cannot work from the binary: DEV=true is off.
 * react-devtools-core itself, left external, would become a static import of the one-file ESM bundle.
 */
const noDevtools: Plugin = {
  name: 'node-svc-no-devtools',
  setup(b) {
    b.onLoad({ filter: /[\\/]ink[\\/]build[\\/]utils\.js$/ }, (a) => {
      const source = readFileSync(a.path, 'utf8');
      const contents = source.replace(/process\.env\[['"]DEV['"]\] === ['"]true['"]/, 'false');
      return contents === source ? { contents, warnings: [{ text: "ink's isDev() changed: DEV=true would break `watch` in the binary" }] } : { contents };
    });
    b.onResolve({ filter: /^react-devtools-core$/ }, () => ({ path: 'react-devtools-core', namespace: 'node-svc-devtools' }));
    b.onLoad({ filter: /.*/, namespace: 'node-svc-devtools' }, () => ({
      contents: 'throw Object.assign(new Error("react-devtools-core is not part of the node-svc binary"), { code: "ERR_MODULE_NOT_FOUND" });\nexport default undefined;',
      loader: 'js',
    }));
  },
};

// The "am I the script being run" idiom (write-openapi.ts, compile.ts): in a SEA, import.meta.url and argv[1] both
// name the binary, so a bundled one would run on every start.
const RUN_AS_SCRIPT = /import\.meta\.url\s*===\s*`file:\/\/\$\{process\.argv\[1\]\}`/;

// `import('<relative path into dist/tui>')` in one of our modules, as tsc writes it.
const DYNAMIC_IMPORT = /\bimport\(\s*(['"])(\.{1,2}\/[^'"]+)\1\s*\)/g;

/**
 * Our modules, as esbuild loads them. Outside dist/tui, `import('…/tui/x.js')` becomes `importTui('x.js')` (src/sea/tui.ts) and x.js becomes an ESM
 * entry of its own: ink cannot live in the CJS bundle. Static imports of dist/tui (ink-free helpers) stay bundled.
 * With `rest` (the SEA main), `import('…/x.js')` of any other module of ours outside FAST_PATH becomes
 * `importRest('<x.js under dist>')` (src/sea/rest.ts), and the key is added to `rest`.
 */
function ourModules(entries: Set<string>, rest?: Set<string>): Plugin {
  const fast = new Set(FAST_PATH.map((p) => join(DIST, p)));
  return {
    name: 'node-svc-our-modules',
    setup(b) {
      b.onLoad({ filter: /\.js$/ }, (a) => {
        if (!isOurs(a.path) || a.path.startsWith(TUI_DIR)) return undefined;
        const source = readFileSync(a.path, 'utf8');
        if (RUN_AS_SCRIPT.test(source))
          return { errors: [{ text: `${relative(ROOT, a.path)} runs its script part when import.meta.url is process.argv[1], which in the binary is always true: keep script modules out of the CLI's imports` }] };
        let tuiHits = 0;
        let restHits = 0;
        const contents = source.replace(DYNAMIC_IMPORT, (all, _q: string, spec: string) => {
          const target = resolve(dirname(a.path), spec);
          if (target.startsWith(TUI_DIR)) {
            const entry = relative(TUI_DIR, target).split(sep).join('/');
            entries.add(entry);
            tuiHits++;
            return `__nodeSvcImportTui(${JSON.stringify(entry)})`;
          }
          if (!rest || fast.has(target) || !isOurs(target)) return all;
          const key = relative(DIST, target).split(sep).join('/');
          rest.add(key);
          restHits++;
          return `__nodeSvcImportRest(${JSON.stringify(key)})`;
        });
        if (!tuiHits && !restHits) return undefined;
        const helpers = [
          tuiHits ? `import { importTui as __nodeSvcImportTui } from ${JSON.stringify(join(SEA_DIR, 'tui.js'))};` : '',
          restHits ? `import { importRest as __nodeSvcImportRest } from ${JSON.stringify(join(SEA_DIR, 'rest.js'))};` : '',
        ].join('');
        return { contents: `${helpers}\n${contents}`, loader: 'js', resolveDir: dirname(a.path) };
      });
    },
  };
}

const COMMON = { bundle: true, platform: 'node', target: 'node20', logLevel: 'silent', metafile: true, legalComments: 'none' } as const;

// esbuild warnings that mean code which cannot work in the binary (an empty import.meta; a require or import()
// left unbundled, with no node_modules to find it in at run time). Any other warning is only shown.
const FATAL_WARNINGS = new Set(['empty-import-meta', 'unsupported-require-call', 'unsupported-dynamic-import']);

function checkWarnings(what: string, r: BuildResult, log: (line: string) => void) {
  const text = (w: BuildResult['warnings'][number]) => `${w.location ? `${w.location.file}:${w.location.line}: ` : ''}${w.text}`;
  const fatal = r.warnings.filter((w) => FATAL_WARNINGS.has(w.id));
  for (const w of r.warnings) if (!fatal.includes(w)) log(`${what}: warning: ${text(w)}`);
  if (fatal.length) throw new Error(`${what}: code that would fail in the binary:\n${fatal.map((w) => `  ${text(w)}`).join('\n')}`);
}

/** Imports the bundle leaves to node at run time: only builtins may remain (there is no node_modules). */
function checkExternals(what: string, r: BuildResult, allowed: string[] = []) {
  const left = new Set<string>();
  for (const out of Object.values(r.metafile!.outputs))
    for (const i of out.imports) if (i.external && !isBuiltin(i.path) && !allowed.includes(i.path)) left.add(`${i.path} (${i.kind})`);
  if (left.size) throw new Error(`${what}: imports left for run time, which the binary cannot satisfy: ${[...left].join(', ')}`);
}

function run(cmd: string, args: string[], cwd: string, env?: NodeJS.ProcessEnv) {
  const r = spawnSync(cmd, args, { cwd, env: env ?? process.env, encoding: 'utf8', maxBuffer: 64 * 1024 * 1024 });
  if (r.status !== 0) throw new Error(`${[cmd, ...args].join(' ')} failed (${r.error?.message ?? `exit ${r.status}`}):\n${r.stdout}${r.stderr}`);
  return r;
}

/**
 * A single executable of `main` (a CJS file) and `assets` at `out`: node's SEA blob, injected with postject into a copy
 * of this very node; renamed into place only when done. `work` holds the blob and its config. bench/cli-start also
 * makes its baseline with it: an empty main, the same node and machinery.
 */
export function makeSea(o: {
  main: string; out: string; work: string; assets?: Record<string, string>; codeCache?: boolean; snapshot?: boolean; env?: NodeJS.ProcessEnv;
}): void {
  const blob = join(o.work, 'sea.blob');
  const config = { main: o.main, output: blob, disableExperimentalSEAWarning: true, useSnapshot: !!o.snapshot, useCodeCache: !!o.codeCache, assets: o.assets ?? {} };
  writeFileSync(join(o.work, 'sea-config.json'), JSON.stringify(config, null, 2));
  run(process.execPath, ['--experimental-sea-config', 'sea-config.json'], o.work, o.env);
  const tmpOut = `${o.out}.${process.pid}.tmp`;
  copyFileSync(process.execPath, tmpOut);
  chmodSync(tmpOut, 0o755);
  const postject = join(dirname(require.resolve('postject')), 'cli.js');
  try {
    run(process.execPath, [postject, tmpOut, 'NODE_SEA_BLOB', blob, '--sentinel-fuse', SENTINEL_FUSE], o.work);
    renameSync(tmpOut, o.out);
  } catch (err) {
    rmSync(tmpOut, { force: true });
    throw err;
  }
}

export async function buildBinary(opts: BuildOptions = {}): Promise<BuildReport> {
  const t0 = performance.now();
  const log = opts.log ?? ((line: string) => process.stderr.write(`${line}\n`));
  const out = resolve(opts.out ?? join(DIST, 'node-svc'));
  const codeCache = opts.codeCache ?? true;
  const snapshot = opts.snapshot ?? false;
  try {
    statSync(join(DIST, 'sea', 'entry.js'));
  } catch {
    throw new Error('dist/sea/entry.js is missing: run `npm run build` first');
  }
  const work = mkdtempSync(join(tmpdir(), 'node-svc-sea-'));
  try {
    // 1. the CLI as far as `verify` goes, one CJS file; and the SEA main, the stub that runs it
    const tuiEntries = new Set<string>();
    const restKeys = new Set<string>();
    const cliFile = join(work, CLI_ASSET);
    const mainFile = join(work, 'main.cjs');
    const CJS = {
      ...COMMON,
      format: 'cjs',
      // import() of a bundled module becomes require(): nothing is left for the SEA's dynamic import support.
      supported: { 'dynamic-import': false },
      // createRequire(import.meta.url) and friends: in a SEA, __filename is the binary itself (rest.ts passes it on).
      define: { 'import.meta.url': '__nodeSvcImportMetaUrl' },
      banner: { js: IMPORT_META_URL },
    } as const;
    // Whitespace and comments out: the stub reads the bundle as ASCII (start.ts: a copy of its bytes, where UTF-8
    // decoding cost 0.4 ms of every start), and esbuild writes every other character of code escaped.
    const cli = await build({ ...CJS, minifyWhitespace: true, entryPoints: [join(DIST, 'sea', 'entry.js')], outfile: cliFile, plugins: [moduleShim, noBindings, noPgNative, ourModules(tuiEntries, restKeys)] });
    checkWarnings('CLI bundle', cli, log);
    checkExternals('CLI bundle', cli);
    assertAscii('CLI bundle', cliFile);
    const bundleBytes = statSync(cliFile).size;
    // With the snapshot, the CLI is in the snapshot's heap (snapshot.ts reads cliFile when node builds it); without,
    // it is an asset that the stub start.ts runs, with its code cache.
    const assets: Record<string, string> = {};
    if (!snapshot) {
      assets[CLI_ASSET] = cliFile;
      const data = codeCache ? fullCodeCache(readFileSync(cliFile, 'utf8'), CLI_ASSET) : undefined;
      if (data) {
        writeFileSync(join(work, CLI_CACHE_ASSET), data);
        assets[CLI_CACHE_ASSET] = join(work, CLI_CACHE_ASSET);
      } else if (codeCache) log(`CLI bundle: this node refused its own code cache; the binary compiles the CLI at every start`);
    }
    const main = await build({ ...CJS, entryPoints: [join(DIST, 'sea', snapshot ? 'snapshot.js' : 'start.js')], outfile: mainFile, banner: {} });
    checkWarnings('SEA main', main, log);
    checkExternals('SEA main', main);

    // 1b. the rest: the modules the CLI imports through importRest(), each answering `modules[key]()`
    const restFile = join(work, REST_ASSET);
    const rest = await build({
      ...CJS,
      stdin: {
        contents: `export const modules = {\n${[...restKeys].map((k) => `  ${JSON.stringify(k)}: () => import(${JSON.stringify(`./${k}`)}),`).join('\n')}\n};\n`,
        resolveDir: DIST,
        sourcefile: 'sea-rest.js',
        loader: 'js',
      },
      outfile: restFile,
      plugins: [moduleShim, noBindings, noPgNative, ourModules(tuiEntries)],
    });
    checkWarnings('CLI rest bundle', rest, log);
    checkExternals('CLI rest bundle', rest);
    await asciiBundle('CLI rest bundle', restFile); // rest.ts reads it as latin1
    const restBytes = statSync(restFile).size;
    assets[REST_ASSET] = restFile;
    if (codeCache) {
      // Made by this node, the very binary the blob goes into: V8 accepts it there (rest.ts compiles without it if not).
      const cacheFile = join(work, REST_CACHE_ASSET);
      const fn = compileFunction(readFileSync(restFile, 'utf8'), REST_PARAMS, { filename: REST_ASSET, produceCachedData: true }) as { cachedData?: Buffer };
      if (!fn.cachedData) throw new Error('CLI rest bundle: V8 made no code cache');
      writeFileSync(cacheFile, fn.cachedData);
      assets[REST_CACHE_ASSET] = cacheFile;
    }

    // 2. the TUI, one ESM file per lazily imported entry
    const tui: Record<string, EmbeddedFile> = {};
    if (tuiEntries.size) {
      const ui = await build({
        ...COMMON,
        entryPoints: [...tuiEntries].map((e) => ({ in: join(TUI_DIR, e), out: e.replace(/\.js$/, '') })),
        outdir: join(work, 'tui'),
        outExtension: { '.js': '.mjs' },
        format: 'esm',
        // react's production build, as any bundled app ships it
        define: { 'process.env.NODE_ENV': '"production"' },
        // CJS dependencies (react) require builtins; esbuild renames any module-level `require` of ours around this one.
        banner: { js: 'import { createRequire as __nodeSvcCreateRequire } from "node:module"; const require = __nodeSvcCreateRequire(import.meta.url);' },
        plugins: [moduleShim, noBindings, noDevtools],
      });
      checkWarnings('TUI bundle', ui, log);
      checkExternals('TUI bundle', ui);
      for (const e of tuiEntries) {
        const file = join(work, 'tui', e.replace(/\.js$/, '.mjs'));
        const asset = `tui/${e.replace(/\.js$/, '.mjs')}`;
        const bytes = readFileSync(file);
        tui[e] = { asset, sha256: sha256(bytes), size: bytes.length };
        assets[asset] = file;
      }
    }

    // 3. the blob, and 4. a copy of this node with it injected
    const addon = require.resolve(SQLITE_ADDON_ID);
    const addonBytes = readFileSync(addon);
    const pkg = JSON.parse(readFileSync(join(ROOT, 'package.json'), 'utf8')) as { version: string };
    const manifest: SeaManifest = {
      version: pkg.version,
      sqlite: { asset: 'better_sqlite3.node', sha256: sha256(addonBytes), size: addonBytes.length },
      tui,
    };
    writeFileSync(join(work, MANIFEST_ASSET), JSON.stringify(manifest));
    assets[MANIFEST_ASSET] = join(work, MANIFEST_ASSET);
    assets[manifest.sqlite.asset] = addon;
    // NODE_SVC_SEA_CLI: what snapshot.ts compiles; nothing of the building machine's own node-svc settings.
    const env = Object.fromEntries(Object.entries(process.env).filter(([k]) => !k.startsWith('NODE_SVC_') && k !== 'NODE_OPTIONS'));
    makeSea({ main: mainFile, out, assets, codeCache: codeCache && !snapshot, snapshot, work, env: { ...env, NODE_SVC_SEA_CLI: cliFile } });
    const report: BuildReport = {
      out, bytes: statSync(out).size, bundleBytes, restBytes, tui: [...tuiEntries], codeCache, snapshot, ms: Math.round(performance.now() - t0),
    };
    log(`${relative(process.cwd(), out) || out}: ${(report.bytes / 1e6).toFixed(1)} MB (node ${process.version}, CLI bundle ${(bundleBytes / 1e6).toFixed(2)} MB + ${(restBytes / 1e6).toFixed(2)} MB on demand` +
      `, TUI ${report.tui.length ? report.tui.join(', ') : 'none'}, code cache ${codeCache ? 'on' : 'off'}, startup snapshot ${snapshot ? 'on' : 'off'}) in ${(report.ms / 1000).toFixed(1)} s`);
    return report;
  } finally {
    if (opts.keep) log(`work dir kept: ${work}`);
    else rmSync(work, { recursive: true, force: true });
  }
}

if (import.meta.url === `file://${process.argv[1]}`) {
  const { values } = parseArgs({ options: { out: { type: 'string' }, 'no-code-cache': { type: 'boolean' }, 'no-snapshot': { type: 'boolean' }, snapshot: { type: 'boolean' }, keep: { type: 'boolean' } } });
  if (values.snapshot && values['no-snapshot']) {
    process.stderr.write('build:binary: --snapshot and --no-snapshot contradict each other\n');
    process.exit(2);
  }
  buildBinary({ out: values.out, codeCache: !values['no-code-cache'], snapshot: !!values.snapshot, keep: values.keep }).catch((err: unknown) => {
    process.stderr.write(`build:binary failed: ${err instanceof Error ? err.message : String(err)}\n`);
    process.exitCode = 1;
  });
}
