// The single binary's SEA main with a startup snapshot, built with --snapshot (DESIGN §12, bench/cli-start): node runs this when build.ts
// makes the blob, never in the binary. It compiles the CLI bundle (entry.ts, read from the build's work dir) with
// every function compiled (--no-lazy) and runs it, so verify's modules, node:crypto among them, are loaded and
// initialized; the snapshot keeps that heap, and the binary starts from it and calls run(). Nothing here may read
// the environment, the arguments or the files of the machine that builds: cli/main.ts reads them in run().
import { dirname } from 'node:path';
import { readFileSync } from 'node:fs';
import { setFlagsFromString, startupSnapshot } from 'node:v8';
import { Script } from 'node:vm';
import { wrapCjs } from '../cli/start.js';
import { CLI_ASSET } from './manifest.js';
import { boundHeapGrowthForDaemon } from '../ops/heap.js';

const file = process.env.NODE_SVC_SEA_CLI;
if (!file || !startupSnapshot.isBuildingSnapshot()) throw new Error('src/sea/snapshot.ts only runs when build.ts builds the binary');

setFlagsFromString('--no-lazy');
let script: Script;
try {
  script = new Script(wrapCjs(readFileSync(file, 'utf8')), { filename: CLI_ASSET });
} finally {
  setFlagsFromString('--lazy');
}
const cli = { exports: {} as { run(): Promise<unknown> } };
// The bundle requires builtins only (build.ts checks): the snapshot's own require loads those, then and in the binary.
(script.runInThisContext() as (...args: unknown[]) => void)(cli.exports, require, cli, CLI_ASSET, dirname(CLI_ASSET),
  (specifier: string) => Promise.reject(new Error(`import(${specifier}) inside the node-svc binary`)));
startupSnapshot.setDeserializeMainFunction(() => {
  boundHeapGrowthForDaemon(); // in the binary, before the daemon's first allocations (ops/heap.ts)
  void cli.exports.run();
});
