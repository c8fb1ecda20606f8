// The machine's CPU counters, for the scripts that judge how busy it is (bench/run's quiet wait, bench/postgres's
// scale part). No imports of dist/: bench/run loads it before it knows there is a build.
import { readFileSync } from 'node:fs';

/** /proc/stat's first line (all cores), in clock ticks: idle, iowait and the total. */
export function cpuMark() {
  const f = readFileSync('/proc/stat', 'utf8').split('\n', 1)[0].trim().split(/\s+/).slice(1).map(Number);
  return { idle: f[3], iowait: f[4] ?? 0, total: f.reduce((a, b) => a + b, 0) };
}

/**
 * Busy % of the machine between two marks, 1 - idle / total. `iowait`: 'idle' (a CPU waiting on the disk could run
 * something else: how loaded the machine is) or 'busy' (a disk still writing back is not quiet: before a measurement).
 */
export function busyPct(a, b, iowait = 'idle') {
  if (!(b.total > a.total)) return NaN;
  const idle = b.idle - a.idle + (iowait === 'idle' ? b.iowait - a.iowait : 0);
  return 100 * (1 - idle / (b.total - a.total));
}
