// `npm run build` (after tsc): what bin/node-svc loads. `verify` in one CommonJS file, so its cold start resolves and
// compiles one module instead of ~35 ES modules, and skips the ES module loader (bench/cli-start):
//   dist/cli/bundle.cjs        the CLI, as below;
//   dist/cli/bundle.cjs.cache  a V8 code cache of it with every function compiled (this node's; see codeCache());
//   dist/cli/node-svc.cjs      src/cli/start.ts: compiles the bundle with that cache and runs it.
// The bundle:
//   - inlined: cli/main.js, everything it imports statically, and the modules of FAST_PATH (its one dynamic import);
//   - better-sqlite3's JavaScript, for store/db.ts, through src/cli/module-shim.ts (which checks the installed version);
//   - left to node at run time: packages (better-sqlite3's native addon among them), and every other dynamic import of
//     ours (`./program.js`, the postgres store, `verify --remote`), which loads the ES modules tsc wrote beside it.
// Those modules carry their own copies of what the bundle inlined: errors cross over by isNodeSvcError, not instanceof.
import { build, type Plugin } from 'esbuild';
import { readFileSync, statSync, writeFileSync } from 'node:fs';
import { createRequire, isBuiltin } from 'node:module';
import { dirname, join, relative, resolve, sep } from 'node:path';
import { fileURLToPath } from 'node:url';
import { setFlagsFromString } from 'node:v8';
import { Script } from 'node:vm';
import { BUNDLE, BUNDLE_CACHE, wrapCjs } from '../cli/start.js';

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
 * Every dynamic import in our modules except those of `inline` becomes `__nodeSvcImport('<specifier>')`, relative
 * specifiers rewritten relative to `outDir`: start.ts runs the bundle in a vm.Script, whose own import() has no
 * loader behind it (node 20's vm.constants.USE_MAIN_CONTEXT_DEFAULT_LOADER warns, and is lost with a code cache), so
 * it passes the import() of a real module in the same directory. Those imports load the ES modules tsc wrote.
 */
export function onlyFastPath(outDir: string, inline: string[] = FAST_PATH): Plugin {
  const keep = new Set(inline.map((p) => join(DIST, p)));
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
          if (keep.has(target)) return all;
          const rel = relative(outDir, target).split(sep).join('/');
          hits++;
          return `__nodeSvcImport(${JSON.stringify(rel.startsWith('.') ? rel : `./${rel}`)})`;
        });
        return hits ? { contents, loader: 'js', resolveDir: dirname(a.path) } : undefined;
      });
    },
  };
}

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
 * A code cache of `source` (wrapped as start.ts runs it) holding every function compiled, not only the top level V8
 * compiles eagerly: compiled with --no-lazy, serialized once the flag is back, so V8 accepts it in a normal run.
 * Checked here; undefined (and no cache written) if this node refuses it.
 */
export function codeCache(source: string, filename: string): Buffer | undefined {
  setFlagsFromString('--no-lazy');
  let script: Script;
  try {
    script = new Script(wrapCjs(source), { filename });
  } finally {
    setFlagsFromString('--lazy');
  }
  const data = script.createCachedData();
  return new Script(wrapCjs(source), { filename, cachedData: data }).cachedDataRejected ? undefined : data;
}

export async function bundleCli(log: (line: string) => void = () => undefined): Promise<{ out: string; bytes: number; modules: number; cacheBytes: number }> {
  statSync(ENTRY); // tsc first
  const r = await build({
    entryPoints: [ENTRY],
    outfile: OUT,
    bundle: true,
    format: 'cjs',
    platform: 'node',
    target: 'node20',
    // createRequire(import.meta.url) (store/db.ts, cli/output.ts): the bundle's own URL, so packages resolve from dist/cli.
    define: {
      'import.meta.url': '__nodeSvcImportMetaUrl',
      NODE_SVC_BUNDLED_SQLITE: JSON.stringify((JSON.parse(readFileSync(require.resolve('better-sqlite3/package.json'), 'utf8')) as { version: string }).version),
    },
    banner: { js: 'var __nodeSvcImportMetaUrl = require("node:url").pathToFileURL(__filename).href;' },
    plugins: [onlyFastPath(dirname(OUT)), packagesButSqlite],
    metafile: true,
    legalComments: 'none',
    logLevel: 'silent',
  });
  if (r.warnings.length) throw new Error(`CLI bundle: ${r.warnings.map((w) => w.text).join('; ')}`);
  const out = r.metafile.outputs[relative(process.cwd(), OUT).split(sep).join('/')] ?? Object.values(r.metafile.outputs)[0]!;
  const left = out.imports.filter((i) => i.kind === 'dynamic-import' && i.external);
  if (left.length) throw new Error(`CLI bundle: import() left that the vm.Script cannot run: ${left.map((i) => i.path).join(', ')}`);

  const cache = codeCache(readFileSync(OUT, 'utf8'), OUT);
  if (cache) writeFileSync(join(dirname(OUT), BUNDLE_CACHE), cache);
  else log(`CLI bundle: this node refused its own code cache; ${BUNDLE} is compiled at every start`);

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
  return { out: OUT, bytes: out.bytes, modules: Object.keys(out.inputs).length, cacheBytes: cache?.length ?? 0 };
}

if (import.meta.url === `file://${process.argv[1]}`) {
  bundleCli((line) => process.stderr.write(`${line}\n`)).then(
    (r) => process.stdout.write(`${relative(process.cwd(), r.out)}: ${r.modules} modules, ${(r.bytes / 1024).toFixed(0)} kB, code cache ${(r.cacheBytes / 1024).toFixed(0)} kB\n`),
    (err: unknown) => {
      process.stderr.write(`CLI bundle failed: ${err instanceof Error ? err.message : String(err)}\n`);
      process.exitCode = 1;
    },
  );
}
