// How the daemon bounds V8's heap growth (DESIGN §13 memory; README "Memory"). Set from the process's first line when
// the command is the daemon (cli/start.ts, sea/start.ts, sea/snapshot.ts), and again by startDaemon for a daemon
// started in-process (setting them twice costs nothing): the young generation grows while the CLI's modules load, and
// a factor set after that (as startDaemon alone did until 2026-11-27) no longer keeps it small (bench/memory: 118-122
// MB peak against 105-106 MB with the flags set at the start).
/**
 * node:v8, loaded when a flag is set, not imported: it loads node's heap utilities (internal/heap_utils,
 * promise_hooks, stream_base_commons; about 1 ms of every command's start, bench/cli-start), and only the daemon sets
 * flags.
 */
const setFlagsFromString = (flags: string): void => process.getBuiltinModule('node:v8').setFlagsFromString(flags);

/**
 * The daemon is long-running and allocates in bursts (webhook deliveries): by default V8 lets the old space grow
 * to several times the live data before collecting, which doubled RSS under bench/delivery. A smaller growing
 * step keeps it near the live size (V8 reads this at every GC, so setting it at start works).
 * NODE_SVC_HEAP_GROWING_PERCENT overrides it (0 leaves V8's default).
 * The young generation doubles under request load up to 2 x 16 MB (--max-semi-space-size cannot be changed once
 * the heap exists; its growth factor is read at each resize). Not growing it: bench/memory peak 124 → 106 MB,
 * bench/delivery 121 → 107 MB, bench/http rates unchanged. NODE_SVC_SEMI_SPACE_GROWTH_FACTOR overrides (0: V8's).
 */
export function boundHeapGrowth(env: NodeJS.ProcessEnv = process.env): void {
  const pct = Number(env.NODE_SVC_HEAP_GROWING_PERCENT ?? 20);
  if (Number.isInteger(pct) && pct > 0) setFlagsFromString(`--heap-growing-percent=${pct}`);
  const growth = Number(env.NODE_SVC_SEMI_SPACE_GROWTH_FACTOR ?? 1);
  if (Number.isInteger(growth) && growth > 0) setFlagsFromString(`--semi-space-growth-factor=${growth}`);
}

/**
 * boundHeapGrowth when the command line names the daemon (any argument `daemon`: a false positive, such as a data dir
 * of that name, only tunes that process's garbage collector). Other commands keep V8's defaults: a `verify` start is
 * measured (bench/cli-start).
 */
export function boundHeapGrowthForDaemon(argv: readonly string[] = process.argv.slice(2)): void {
  if (argv.includes('daemon')) boundHeapGrowth();
}
