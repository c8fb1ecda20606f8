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

const MB = 1024 * 1024;
let watching = false;

/** NODE_SVC_SEMI_SPACE_MB: a whole number of MB from 1 to 16 (V8's largest semi-space), 4 when unset; throws a RangeError naming a bad value. */
export function semiSpaceMb(env: NodeJS.ProcessEnv = process.env): number {
  const raw = env.NODE_SVC_SEMI_SPACE_MB;
  if (raw === undefined || raw === '') return 4;
  const mb = Number(raw);
  if (!/^\d+$/.test(raw) || mb < 1 || mb > 16) throw new RangeError(`NODE_SVC_SEMI_SPACE_MB must be a whole number of MB from 1 to 16 (got ${JSON.stringify(raw)})`);
  return mb;
}

/**
 * Once the daemon serves, its young generation may grow under load up to NODE_SVC_SEMI_SPACE_MB (default 4) MB per
 * semi-space, and no further: V8 cannot be given a new maximum once its heap exists (--max-semi-space-size is read
 * when the process starts), so after every garbage collection (a `gc` PerformanceObserver) the growth factor is set
 * to 2 while doubling stays within that size and to 1 otherwise. V8 shrinks the young generation again when the
 * allocation rate falls, and it may grow once more when load returns. Without this it stays at its first 1 MB
 * semi-space, which V8 empties every MB allocated: under vouchers (bench/commit, `--min-semi-space-size`, three
 * alternated runs each) the daemon used 271-278 µs of CPU per voucher at 4 MB against 298-334 µs at 1 MB, and
 * 4,989-5,429 vouchers/s against 4,305-5,098; its peak RSS in bench/memory 110 MB against 105 (8 MB: 116-119 MB, too
 * close to the 120 MB target). 1 keeps the first size. Not set when NODE_SVC_SEMI_SPACE_GROWTH_FACTOR is (that factor
 * then holds). The observer stays for the process's life (a daemon started in-process and stopped leaves it: it only
 * sets a flag after each collection); set once however many daemons a process starts.
 */
export function growYoungGeneration(mb: number, env: NodeJS.ProcessEnv = process.env): void {
  if (watching || env.NODE_SVC_SEMI_SPACE_GROWTH_FACTOR !== undefined || mb <= 1) return;
  watching = true;
  const v8 = process.getBuiltinModule('node:v8');
  const { PerformanceObserver } = process.getBuiltinModule('node:perf_hooks');
  let factor = 1;
  const check = (): void => {
    // The semi-space's usable capacity (used + available; `space_size` counts what is committed, which after V8
    // shrinks it is one semi-space only). Doubling is allowed only where it lands at or below the cap: V8 doubles
    // the capacity it has, and after a shrink that can be any number of 256 kB pages.
    const young = v8.getHeapSpaceStatistics().find((sp) => sp.space_name === 'new_space');
    const want = young && 2 * (young.space_used_size + young.space_available_size) <= mb * MB ? 2 : 1;
    if (want !== factor) {
      factor = want;
      v8.setFlagsFromString(`--semi-space-growth-factor=${want}`);
    }
  };
  new PerformanceObserver(check).observe({ entryTypes: ['gc'] });
  check();
}

/**
 * boundHeapGrowth when the command line names the daemon (any argument `daemon`: a false positive, such as a data dir
 * of that name, only tunes that process's garbage collector). Other commands keep V8's defaults: a `verify` start is
 * measured (bench/cli-start).
 */
export function boundHeapGrowthForDaemon(argv: readonly string[] = process.argv.slice(2)): void {
  if (argv.includes('daemon')) boundHeapGrowth();
}
