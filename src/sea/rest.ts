// The binary's code beyond `verify` (DESIGN §12, bench/cli-start). build.ts makes the SEA main small: cli/main.ts with
// what verify runs; every other dynamic import of ours (`./program.js`, the postgres store, `verify --remote`) becomes
// importRest('<path under dist>'), answered from a second CJS bundle embedded as an asset, compiled only when a command
// needs it, with a V8 code cache made at build time. A start deserializes ~0.15 MB of code instead of ~3.7 MB.
// That bundle carries its own copies of the modules main has too: errors cross over by isNodeSvcError, and the SQLite
// addon is loaded once whichever copy asks first (sqlite.ts).
import { createRequire } from 'node:module';
import { dirname } from 'node:path';
import * as sea from 'node:sea';
import { compileFunction } from 'node:vm';
import { NodeSvcError } from '../domain/errors.js';

export const REST_ASSET = 'rest.cjs';
export const REST_CACHE_ASSET = 'rest.cjs.cache';

/** The CommonJS parameters the rest bundle runs with, here and when build.ts makes its code cache (the same function). */
export const REST_PARAMS = ['exports', 'require', 'module', '__filename', '__dirname'];

type Rest = { modules: Record<string, () => Promise<unknown>> };
let rest: Rest | undefined;

function load(): Rest {
  // Both read in place (getRawAsset), not copied first: 0.8 MB of code and 1 MB of cache.
  // ASCII (build.ts makes it so: asciiBundle): read as latin1, a one-byte string, not decoded as UTF-8.
  const source = Buffer.from(sea.getRawAsset(REST_ASSET) as ArrayBuffer).toString('latin1');
  let cachedData: Uint8Array | undefined;
  try {
    cachedData = new Uint8Array(sea.getRawAsset(REST_CACHE_ASSET) as ArrayBuffer);
  } catch {
    // built with --no-code-cache
  }
  // The file name stack traces show; the bundle only requires builtins (build.ts checks), which any require loads.
  const filename = `${process.execPath}#${REST_ASSET}`;
  const fn = compileFunction(source, REST_PARAMS, { filename, ...(cachedData ? { cachedData } : {}) }) as (...args: unknown[]) => void;
  const module = { exports: {} as Rest };
  fn(module.exports, createRequire(process.execPath), module, process.execPath, dirname(process.execPath));
  return module.exports;
}

/** The module at `key` (its path under dist, e.g. `cli/program.js`), as `import()` would have returned it. */
export function importRest(key: string): Promise<unknown> {
  const get = (rest ??= load()).modules[key];
  if (!get) return Promise.reject(new NodeSvcError('internal', `the module ${key} is not in this binary`));
  return get();
}
