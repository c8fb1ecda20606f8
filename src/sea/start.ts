// The single binary's SEA main (DESIGN §12; snapshot.ts when built with --snapshot): a stub that runs the CLI bundle (entry.ts and what it imports up to `verify`,
// an asset) with the V8 code cache build.ts made for it, every function compiled: a verify start parses and compiles
// none of the CLI's code (bench/cli-start). node's own SEA code cache covers only what V8 compiles eagerly.
// V8 refuses a cache of another node or source; the bundle then compiles like any script.
import { dirname } from 'node:path';
import * as sea from 'node:sea';
import { runCjs } from '../cli/start.js';
import { boundHeapGrowthForDaemon } from '../ops/heap.js';
import { CLI_ASSET, CLI_CACHE_ASSET } from './manifest.js';

boundHeapGrowthForDaemon(); // before the bundle loads (ops/heap.ts)
let cachedData: Uint8Array | undefined;
try {
  cachedData = new Uint8Array(sea.getRawAsset(CLI_CACHE_ASSET) as ArrayBuffer); // read in place, not copied: V8 only reads it
} catch {
  // built with --no-code-cache
}
// The bundle requires builtins only (build.ts checks) and has no import() left (importRest, importTui instead): its
// require answers builtins, without a module require made for it (createRequire was ~0.2 ms of a verify start).
const builtins = ((id: string): unknown => {
  const m = process.getBuiltinModule(id);
  if (m === undefined) throw new Error(`the node-svc binary's CLI asked for "${id}", which is not one of node's own modules`);
  return m;
}) as NodeJS.Require;
// ASCII (build.ts checks): its bytes made a string as they are (read in place), not decoded as UTF-8.
const { exports } = runCjs(Buffer.from(sea.getRawAsset(CLI_ASSET) as ArrayBuffer).toString('latin1'), `${process.execPath}#${CLI_ASSET}`, dirname(process.execPath), cachedData, builtins,
  (specifier) => Promise.reject(new Error(`import(${specifier}) inside the node-svc binary`)));
void (exports as { run(): Promise<unknown> }).run();
