// The single binary's CLI (DESIGN §12): build.ts bundles this into one CJS file, which the SEA main stub runs (start.ts,
// the default), or which a startup snapshot holds already compiled and initialized (snapshot.ts, --snapshot).
// Nothing is extracted up front: the SQLite addon (sqlite.ts) and the TUI (tui.ts) are written to the cache dir
// the first time a command needs them, so `--help` or `version` touch no disk.
// verify's modules, initialized with this one: at the stub's start, or in the snapshot when a --snapshot binary is built (bench/cli-start).
import '../cli/commands/verify.js';

/** Run the CLI: cli/main.ts does when it is first imported. */
export const run = (): Promise<unknown> => import('../cli/main.js');
