// `npm run build` (after tsc): dist/cli/node-svc.cjs, what bin/node-svc loads. `verify` in one CommonJS file, so its
// cold start resolves and compiles one module instead of ~35 ES modules (and skips the ES module loader: bench/cli-start).
//   - inlined: cli/main.js, everything it imports statically, and the modules of FAST_PATH (its one dynamic import);
//   - better-sqlite3's JavaScript, for store/db.ts, through src/cli/module-shim.ts (which checks the installed version);
//   - left to node at run time: packages (better-sqlite3's native addon among them), and every other dynamic import of
//     ours (`./program.js`, the postgres store, `verify --remote`), which loads the ES modules tsc wrote beside it.
// Those modules carry their own copies of what the bundle inlined: errors cross over by isNodeSvcError, not instanceof.
import { build, type Plugin } from 'esbuild';
import { readFileSync, statSync } from 'node:fs';
import { createRequire, isBuiltin } from 'node:module';
import { dirname, join, relative, resolve, sep } from 'node:path';
import { fileURLToPath } from 'node:url';

const DIST = resolve(fileURLToPath(new URL('..', import.meta.url))); // dist/build/cli-bundle.js → dist
export const ENTRY = join(DIST, 'cli', 'main.js');
export const OUT = join(DIST, 'cli', 'node-svc.cjs');

/** The dynamic imports of ours on the `verify` path, relative to dist: bundled (lazily evaluated), not left to node. */
export const FAST_PATH = ['cli/commands/verify.js'];

const DB = join(DIST, 'store', 'db.js');
const SHIM = join(DIST, 'cli', 'module-shim.js');
const require = createRequire(import.meta.url);

const isOurs = (path: string) => path.startsWith(DIST + sep) && !path.includes(`${sep}node_modules${sep}`);

/**
 * Every dynamic import of one of our modules that is not in `inline` stays an import() of the file tsc wrote, its
 * specifier rewritten relative to `outDir` (where the bundle runs from).
 */
export function onlyFastPath(outDir: string, inline: string[] = FAST_PATH): Plugin {
  const keep = new Set(inline.map((p) => join(DIST, p)));
  return {
    name: 'node-svc-only-fast-path',
    setup(b) {
      b.onResolve({ filter: /^\.{1,2}\// }, (a) => {
        if (a.kind !== 'dynamic-import' || !isOurs(a.importer)) return undefined;
        const target = resolve(a.resolveDir, a.path);
        if (keep.has(target)) return undefined;
        const spec = relative(outDir, target).split(sep).join('/');
        return { path: spec.startsWith('.') ? spec : `./${spec}`, external: true };
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

export async function bundleCli(): Promise<{ out: string; bytes: number; modules: number }> {
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
  return { out: OUT, bytes: out.bytes, modules: Object.keys(out.inputs).length };
}

if (import.meta.url === `file://${process.argv[1]}`) {
  bundleCli().then(
    (r) => process.stdout.write(`${relative(process.cwd(), r.out)}: ${r.modules} modules, ${(r.bytes / 1024).toFixed(0)} kB\n`),
    (err: unknown) => {
      process.stderr.write(`CLI bundle failed: ${err instanceof Error ? err.message : String(err)}\n`);
      process.exitCode = 1;
    },
  );
}
