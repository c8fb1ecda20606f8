// `npm run build` (after tsc): what bin/node-svc loads (README, "What bin/node-svc loads").
//   dist/cli/bundle.cjs   cli/main.js, what it imports statically and FAST_PATH (`verify`), better-sqlite3's JavaScript
//                         for store/db.ts through src/cli/module-shim.ts; packages left to node;
//   dist/cli/rest.cjs     what bundle.cjs leaves to __nodeSvcImport: program.js, the admin commands, the PostgreSQL
//                         store, packages inlined (but those restPackages names);
//   dist/cli/daemon.cjs   what rest.cjs leaves: the daemon, dev and receipts commands (HEAVY);
//   *.cache               a V8 code cache beside each (see codeCache());
//   dist/cli/node-svc.cjs src/cli/start.ts: compiles bundle.cjs with its cache and runs it; its bundleImporter answers
//                         __nodeSvcImport from rest.cjs, then daemon.cjs, each compiled on first use.
// Left to node's own import(), outside every bundle: the TUI and ops/otel.js (OUTSIDE, below).
import { build, transform, type Plugin } from 'esbuild';
import { readFileSync, statSync, writeFileSync } from 'node:fs';
import { createRequire, isBuiltin } from 'node:module';
import { dirname, join, relative, resolve, sep } from 'node:path';
import { fileURLToPath } from 'node:url';
import { setFlagsFromString } from 'node:v8';
import { Script } from 'node:vm';
import { BUNDLE, CACHE_SUFFIX, DAEMON_BUNDLE, REST, wrapCjs } from '../cli/start.js';

const DIST = resolve(fileURLToPath(new URL('..', import.meta.url))); // dist/build/cli-bundle.js → dist
export const ENTRY = join(DIST, 'cli', 'main.js');
export const OUT = join(DIST, 'cli', BUNDLE);
export const LOADER = join(DIST, 'cli', 'node-svc.cjs');

/** The dynamic imports of ours on the `verify` path, relative to dist: bundled (lazily evaluated), not left to node. */
export const FAST_PATH = ['cli/commands/verify.js'];

const DB = join(DIST, 'store', 'db.js');
const SHIM = join(DIST, 'cli', 'module-shim.js');
const require = createRequire(import.meta.url);

const isOurs = (path: string) => path.startsWith(DIST + sep) && !path.includes(`${sep}node_modules${sep}`);

// `import('<literal>')` in one of our modules, as tsc writes it.
const DYNAMIC_IMPORT = /\bimport\(\s*(['"])([^'"]+)\1\s*\)/g;

/**
 * Every dynamic import in our modules except those of modules `keep` accepts becomes `__nodeSvcImport('<specifier>')`,
 * relative specifiers rewritten relative to `outDir` (and added to `left`): start.ts runs each bundle in a vm.Script,
 * whose own import() has no loader behind it (node 20's vm.constants.USE_MAIN_CONTEXT_DEFAULT_LOADER warns, and is
 * lost with a code cache), so it passes a function that answers from the rest bundle or imports the module itself.
 */
export function onlyFastPath(outDir: string, keep: (target: string) => boolean = inFastPath, left?: Set<string>): Plugin {
  return {
    name: 'node-svc-only-fast-path',
    setup(b) {
      b.onLoad({ filter: /\.js$/ }, (a) => {
        if (!isOurs(a.path)) return undefined;
        const source = readFileSync(a.path, 'utf8');
        let hits = 0;
        const contents = source.replace(DYNAMIC_IMPORT, (all, _q: string, spec: string) => {
          if (!spec.startsWith('.')) {
            hits++;
            return `__nodeSvcImport(${JSON.stringify(spec)})`;
          }
          const target = resolve(dirname(a.path), spec);
          if (keep(target)) return all;
          const rel = relative(outDir, target).split(sep).join('/');
          const key = rel.startsWith('.') ? rel : `./${rel}`;
          hits++;
          // a module no bundle holds (the TUI, ops/otel.js): node's own import(), no bundle read for it
          if (!inBundles(target)) return `__nodeSvcImport(${JSON.stringify(key)}, true)`;
          left?.add(key);
          return `__nodeSvcImport(${JSON.stringify(key)})`;
        });
        return hits ? { contents, loader: 'js', resolveDir: dirname(a.path) } : undefined;
      });
    },
  };
}

const FAST = new Set(FAST_PATH.map((p) => join(DIST, p)));
const inFastPath = (target: string) => FAST.has(target);
/**
 * Left to node as ES modules, outside every bundle: tracing's SDK (ops/otel.js imports OpenTelemetry's packages; with
 * traces off the daemon loads none of it, test/e2e/tracing.test.ts) and the TUI (ink's dependencies use top-level
 * await, which a CommonJS bundle cannot hold). Both hold no state the bundled modules share (a module in a bundle and
 * the same module loaded by node are two copies: events.ts's wakers, ids.ts's monotonic clock would be two).
 */
const OUTSIDE = [join(DIST, 'ops', 'otel.js')];
const inBundles = (target: string) => isOurs(target) && !target.startsWith(join(DIST, 'tui') + sep) && !OUTSIDE.includes(target);
/** The commands whose modules are most of the code (the HTTP server, the rails, viem): a bundle of their own. */
const HEAVY = new Set(['cli/commands/daemon.js', 'cli/commands/dev.js', 'cli/commands/receipts.js'].map((p) => join(DIST, p)));

/**
 * Packages stay external, except better-sqlite3's JavaScript imported by the shim, which store/db.ts gets for its
 * `node:module` (and `bindings`, which better-sqlite3 only calls when given no addon path: the shim always has one).
 */
const packagesButSqlite: Plugin = {
  name: 'node-svc-packages-but-sqlite',
  setup(b) {
    b.onResolve({ filter: /^(node:)?module$/ }, (a) => (a.importer === DB ? { path: SHIM } : undefined));
    b.onResolve({ filter: /^[^./]/ }, (a) => {
      if (isBuiltin(a.path)) return { path: a.path, external: true };
      if (a.path === 'better-sqlite3' && a.importer === SHIM) return undefined;
      return { path: a.path, external: true };
    });
  },
};

/**
 * The later bundles' packages: inlined (one file to compile with its code cache instead of hundreds of modules to
 * resolve and read), but better-sqlite3's `bindings` (never called: the shim always names the addon), pg's optional
 * `pg-native` (read lazily, never used), viem and Stripe's SDK, which stay node's.
 */
const restPackages: Plugin = {
  name: 'node-svc-rest-packages',
  setup(b) {
    b.onResolve({ filter: /^(node:)?module$/ }, (a) => (a.importer === DB ? { path: SHIM } : undefined));
    b.onResolve({ filter: /^(bindings|pg-native)$/ }, (a) => ({ path: a.path, external: true }));
    // Required by node when a rail needs them (their CommonJS builds): a bundle's whole source stays in memory, used
    // or not, and these two are most of it (an idle daemon without a rail: 93 MB RSS with them inlined, 79 MB from
    // the ES modules before the bundles).
    b.onResolve({ filter: /^(viem|stripe)(\/|$)/ }, (a) => ({ path: a.path, external: true }));
  },
};

/**
 * A code cache of `source` (wrapped as start.ts runs it), checked here: undefined if this node refuses it. With
 * `everyFunction`, every function compiled (with --no-lazy, serialized once the flag is back, so V8 accepts it in a
 * normal run); without, only what V8 compiles eagerly (the top level).
 */
export function codeCache(source: string, filename: string, everyFunction = true): Buffer | undefined {
  if (everyFunction) setFlagsFromString('--no-lazy');
  let script: Script;
  try {
    script = new Script(wrapCjs(source), { filename });
  } finally {
    if (everyFunction) setFlagsFromString('--lazy');
  }
  const data = script.createCachedData();
  return new Script(wrapCjs(source), { filename, cachedData: data }).cachedDataRejected ? undefined : data;
}

/** The code cache of the bundle `file` beside it; `refused` logged when this node refuses its own cache. */
function writeCodeCache(file: string, everyFunction: boolean, log: (line: string) => void, refused: string): number {
  const cache = codeCache(readFileSync(file, 'utf8'), file, everyFunction);
  if (cache) writeFileSync(`${file}${CACHE_SUFFIX}`, cache);
  else log(refused);
  return cache?.length ?? 0;
}

/**
 * The bundles' `import.meta.url`, made from `__filename` as pathToFileURL makes it. A plain absolute path (the usual
 * install dir, the binary's `<path>#cli.cjs`: segments of letters, digits and `_.+-`, none empty, none starting
 * with a dot) is written as it is, since pathToFileURL would change none of its characters but `#`: the first call
 * of pathToFileURL (node's URL, loaded then) was 0.3 ms of every verify start (bench/cli-start). Anything else goes
 * through pathToFileURL. test/cli/bundle.test.ts compares the two.
 */
export const IMPORT_META_URL = 'var __nodeSvcImportMetaUrl = /^(\\/[\\w+-][\\w.+-]*)+(#[\\w.-]*)?$/.test(__filename) ? "file://" + __filename.replace("#", "%23") : require("node:url").pathToFileURL(__filename).href;';

/**
 * Make a bundle ASCII, so that it is read as latin1 (a one-byte string: its bytes as they are) instead of decoded as
 * UTF-8 into a two-byte string. esbuild escapes every other character of code (charset ascii, its default) but keeps
 * comments as they are, and a few comments of ours and of packages hold characters such as — or ≥: those are
 * written as \u{…} in the comment's text. That this changed nothing but comments (or wrote, in a string, an escape of
 * the same character) is proven, not assumed: the bundle without whitespace and comments, as esbuild prints it
 * (minifyWhitespace), must be the same text before and after, or the build fails and the file stays as it was.
 * Measured on the daemon (dist/cli/rest.cjs and daemon.cjs, 2026-12-02, 8 starts of each alternated): RSS at
 * `listening on` 75.1-75.5 MB instead of 83.2-83.3 (the sources as one-byte strings, no UTF-8 decoding), median CPU
 * to listening 0.46 s instead of 0.50.
 */
export async function asciiBundle(what: string, file: string): Promise<void> {
  const source = readFileSync(file, 'utf8');
  if (/^[\x00-\x7f]*$/.test(source)) return;
  const ascii = source.replace(/[^\x00-\x7f]/gu, (c) => `\\u{${c.codePointAt(0)!.toString(16)}}`);
  const code = async (text: string) => (await transform(text, { loader: 'js', minifyWhitespace: true, legalComments: 'none', logLevel: 'silent' })).code;
  if ((await code(source)) !== (await code(ascii))) throw new Error(`${what}: a character that is not ASCII where \\u{…} would change the code (a regular expression, a template's raw text, a line separator ending a comment): ${file} cannot be made ASCII`);
  writeFileSync(file, ascii);
  assertAscii(what, file);
}

/** A bundle read as latin1 (cli/start.ts, sea/start.ts, sea/rest.ts) must be ASCII: any other byte would be misread. */
export function assertAscii(what: string, file: string): void {
  const at = readFileSync(file).findIndex((b) => b > 0x7f);
  if (at >= 0) throw new Error(`${what}: a byte that is not ASCII at ${at}, which would be misread (the bundle is read as latin1)`);
}

const COMMON = {
  bundle: true,
  format: 'cjs',
  platform: 'node',
  target: 'node20',
  // createRequire(import.meta.url) (store/db.ts, cli/output.ts): the bundle's own URL, so packages resolve from dist/cli.
  define: {
    'import.meta.url': '__nodeSvcImportMetaUrl',
    NODE_SVC_BUNDLED_SQLITE: JSON.stringify((JSON.parse(readFileSync(require.resolve('better-sqlite3/package.json'), 'utf8')) as { version: string }).version),
  },
  banner: { js: IMPORT_META_URL },
  metafile: true,
  legalComments: 'none',
  logLevel: 'silent',
} as const;

type Built = Awaited<ReturnType<typeof build>>;

/** The output's metafile entry; no warnings, and no import() left that the vm.Script could not run. */
function checked(what: string, r: Built, file: string) {
  if (r.warnings.length) throw new Error(`${what}: ${r.warnings.map((w) => w.text).join('; ')}`);
  const out = r.metafile!.outputs[relative(process.cwd(), file).split(sep).join('/')] ?? Object.values(r.metafile!.outputs)[0]!;
  const left = out.imports.filter((i) => i.kind === 'dynamic-import' && i.external);
  if (left.length) throw new Error(`${what}: import() left that the vm.Script cannot run: ${left.map((i) => i.path).join(', ')}`);
  return out;
}

export interface BundleFigures { file: string; bytes: number; modules: number; cacheBytes: number }
export interface BundleReport { out: string; bytes: number; modules: number; cacheBytes: number; more: BundleFigures[] }

/**
 * One bundle of what the bundle before it left to __nodeSvcImport (`entries`), each key answering `modules[key]()`
 * as import() would have; its own dynamic imports of ours that `keep` refuses are left again (added to `left`).
 */
async function moreBundle(
  name: string, entries: string[], keep: (target: string) => boolean, left: Set<string>, everyFunction: boolean, log: (line: string) => void,
): Promise<BundleFigures> {
  const outDir = dirname(OUT);
  const file = join(outDir, name);
  const out = checked(`CLI bundle ${name}`, await build({
    ...COMMON,
    stdin: {
      contents: `export const modules = {\n${entries.map((k) => `  ${JSON.stringify(k)}: () => import(${JSON.stringify(k)}),`).join('\n')}\n};\n`,
      resolveDir: outDir,
      sourcefile: name.replace(/\.cjs$/, '.js'),
      loader: 'js',
    },
    outfile: file,
    // a package's import() of a builtin (node:http in one of them) becomes require(): the vm.Script has no import()
    supported: { 'dynamic-import': false },
    plugins: [onlyFastPath(outDir, keep, left), restPackages],
  }), file);
  await asciiBundle(`CLI bundle ${name}`, file);
  const cacheBytes = writeCodeCache(file, everyFunction, log, `CLI bundle ${name}: this node refused its own code cache; it is compiled when a command needs it`);
  return { file, bytes: out.bytes, modules: Object.keys(out.inputs).length, cacheBytes };
}

export async function bundleCli(log: (line: string) => void = () => undefined): Promise<BundleReport> {
  statSync(ENTRY); // tsc first
  const outDir = dirname(OUT);
  const left = new Set<string>();
  // Whitespace and comments out, so that it is ASCII (esbuild escapes every other character of code): start.ts reads
  // it as latin1, a copy of its bytes, where decoding UTF-8 cost a verify start ~0.3 ms (bench/cli-start).
  const main = checked('CLI bundle', await build({ ...COMMON, minifyWhitespace: true, entryPoints: [ENTRY], outfile: OUT, plugins: [onlyFastPath(outDir, inFastPath, left), packagesButSqlite] }), OUT);
  assertAscii('CLI bundle', OUT);
  const cacheBytes = writeCodeCache(OUT, true, log, `CLI bundle: this node refused its own code cache; ${BUNDLE} is compiled at every start`);

  // What the CLI bundle leaves to __nodeSvcImport: `./program.js` with the admin commands (every function in the code
  // cache: they are small), then what those leave: the daemon, dev and receipts commands (hono, the API, the rails,
  // viem: only the eagerly compiled top level in its cache, as a whole one costs more to read than it saves).
  const more: BundleFigures[] = [];
  const fromRest = new Set<string>();
  more.push(await moreBundle(REST, [...left].sort(), (t) => inBundles(t) && !HEAVY.has(t), fromRest, true, log));
  more.push(await moreBundle(DAEMON_BUNDLE, [...fromRest].sort(), inBundles, new Set(), false, log));

  const loader = await build({
    stdin: { contents: 'import { start } from "./start.js";\nstart(__dirname);\n', resolveDir: dirname(LOADER), sourcefile: 'node-svc.js', loader: 'js' },
    outfile: LOADER,
    bundle: true,
    format: 'cjs',
    platform: 'node',
    target: 'node20',
    packages: 'external',
    legalComments: 'none',
    logLevel: 'silent',
  });
  if (loader.warnings.length) throw new Error(`CLI loader: ${loader.warnings.map((w) => w.text).join('; ')}`);
  return {
    out: OUT, bytes: main.bytes, modules: Object.keys(main.inputs).length, cacheBytes,
    more,
  };
}

if (import.meta.url === `file://${process.argv[1]}`) {
  bundleCli((line) => process.stderr.write(`${line}\n`)).then(
    (r) => process.stdout.write([{ file: r.out, ...r }, ...r.more].map((b) =>
      `${relative(process.cwd(), b.file)}: ${b.modules} modules, ${(b.bytes / 1024).toFixed(0)} kB, code cache ${(b.cacheBytes / 1024).toFixed(0)} kB`).join('; ') + '\n'),
    (err: unknown) => {
      process.stderr.write(`CLI bundle failed: ${err instanceof Error ? err.message : String(err)}\n`);
      process.exitCode = 1;
    },
  );
}
