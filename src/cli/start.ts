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
export const BUNDLE_CACHE = 'bundle.cjs.cache';

/**
 * The CommonJS wrapper the bundle runs in, here and when the build makes its cache (the same source, byte for byte).
 * `__nodeSvcImport` stands for import(): the bundler rewrites every dynamic import left to node to call it.
 */
export const wrapCjs = (source: string): string => `(function (exports, require, module, __filename, __dirname, __nodeSvcImport) {${source}\n})`;

/** Compile `source` as `filename` (with `cachedData` when there is one) and run it as a CommonJS module. */
export function runCjs(
  source: string, filename: string, dirname: string, cachedData: Uint8Array | undefined, require: NodeJS.Require, importer: (specifier: string) => Promise<unknown>,
): { exports: unknown; rejected: boolean } {
  const script = new Script(wrapCjs(source), { filename, ...(cachedData ? { cachedData } : {}) });
  const module = { exports: {} };
  (script.runInThisContext() as (...args: unknown[]) => void)(module.exports, require, module, filename, dirname, importer);
  return { exports: module.exports, rejected: !!cachedData && script.cachedDataRejected === true };
}

export function start(dir: string): void {
  boundHeapGrowthForDaemon(); // before the bundle loads: its loading would grow the young generation first
  const file = join(dir, BUNDLE);
  let cachedData: Buffer | undefined;
  try {
    cachedData = readFileSync(join(dir, BUNDLE_CACHE));
  } catch {
    // none made (another build step): compiled without
  }
  // This module's import() (a real module's, in the same directory as the bundle) for the bundle's.
  runCjs(readFileSync(file, 'utf8'), file, dir, cachedData, createRequire(file), (specifier) => import(specifier));
}
