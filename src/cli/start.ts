// What bin/node-svc runs (src/build/cli-bundle.ts bundles a call of start() into dist/cli/node-svc.cjs): the CLI bundle
// dist/cli/bundle.cjs, compiled with the V8 code cache the build made beside it, which holds every function of the
// bundle already compiled, so a verify start parses and compiles none of its code (bench/cli-start). Node 20 has no
// compile cache of its own (module.enableCompileCache is Node 22). V8 refuses a cache made by another node, with other
// flags or for another source, and the bundle is then compiled like any script: slower, never wrong.
import { readFileSync } from 'node:fs';
import { createRequire } from 'node:module';
import { join } from 'node:path';
import { Script } from 'node:vm';
import { boundHeapGrowthForDaemon } from '../ops/heap.js';

export const BUNDLE = 'bundle.cjs';
export const CACHE_SUFFIX = '.cache';
export const BUNDLE_CACHE = `${BUNDLE}${CACHE_SUFFIX}`;
/** What the CLI bundle leaves to `__nodeSvcImport`: program.js and the admin commands, packages inlined. */
export const REST = 'rest.cjs';
/** What rest.cjs leaves: the daemon, dev and receipts commands. */
export const DAEMON_BUNDLE = 'daemon.cjs';
/** Where `__nodeSvcImport` looks, in this order, before node's own import(). */
const MORE = [REST, DAEMON_BUNDLE];

/**
 * The CommonJS wrapper the bundle runs in, here and when the build makes its cache (the same source, byte for byte).
 * `__nodeSvcImport` stands for import(): the bundler rewrites every dynamic import left to node to call it.
 */
export const wrapCjs = (source: string): string => `(function (exports, require, module, __filename, __dirname, __nodeSvcImport) {${source}\n})`;

/** Compile `source` as `filename` (with `cachedData` when there is one) and run it as a CommonJS module. */
export function runCjs(
  source: string, filename: string, dirname: string, cachedData: Uint8Array | undefined, require: NodeJS.Require, importer: (specifier: string, byNode?: boolean) => Promise<unknown>,
): { exports: unknown; rejected: boolean } {
  const script = new Script(wrapCjs(source), { filename, ...(cachedData ? { cachedData } : {}) });
  const module = { exports: {} };
  (script.runInThisContext() as (...args: unknown[]) => void)(module.exports, require, module, filename, dirname, importer);
  return { exports: module.exports, rejected: !!cachedData && script.cachedDataRejected === true };
}

function readCache(file: string): Buffer | undefined {
  try {
    return readFileSync(file);
  } catch {
    return undefined; // none made (another build step): compiled without
  }
}

type Modules = { modules: Record<string, (() => Promise<unknown>) | undefined> };

/**
 * The bundles' import(): a module of rest.cjs or daemon.cjs from there (each compiled on first use, with its code
 * cache), anything else (the TUI, a package, a build without those bundles) by node's own import() from `dir`.
 */
export function bundleImporter(dir: string): (specifier: string, byNode?: boolean) => Promise<unknown> {
  const loaded = new Map<string, Modules | null>();
  const load = (name: string): Modules | null => {
    const file = join(dir, name);
    let source: string;
    try {
      source = readFileSync(file, 'latin1'); // ASCII, as bundle.cjs (the build makes it so: asciiBundle)
    } catch {
      return null;
    }
    return runCjs(source, file, dir, readCache(`${file}${CACHE_SUFFIX}`), createRequire(file), importer).exports as Modules;
  };
  // `byNode`: the build marked the module as one no bundle holds (the TUI, ops/otel.js)
  const importer = (specifier: string, byNode?: boolean): Promise<unknown> => {
    if (!byNode && specifier.startsWith('.'))
      for (const name of MORE) {
        if (!loaded.has(name)) loaded.set(name, load(name));
        const get = loaded.get(name)?.modules[specifier];
        if (get) return get();
      }
    return import(specifier);
  };
  return importer;
}

export function start(dir: string): void {
  boundHeapGrowthForDaemon(); // before the bundle loads: its loading would grow the young generation first
  const file = join(dir, BUNDLE);
  // ASCII (the build checks): read as latin1, its bytes as they are, not decoded as UTF-8.
  runCjs(readFileSync(file, 'latin1'), file, dir, readCache(join(dir, BUNDLE_CACHE)), createRequire(file), bundleImporter(dir));
}
