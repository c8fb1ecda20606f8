// npm run bench: run every bench script (bench/*.mjs except this one; lib/ holds helpers), one after another,
// and print one summary table: each result's target, figure and PASS/MISS, and each script's run time.
// A script reports through its last stdout line (bench/README.md); one that prints none counts by its exit code.
// Usage: node bench/run.mjs [--readme] [name …]   (e.g. `node bench/run.mjs verify http`; default: all)
// --readme: also write the summary, with the date, commit, machine and load average, into README.md between the
// markers <!-- bench:begin --> and <!-- bench:end --> (its performance table comes from one run, never edited by hand).
import { spawn } from 'node:child_process';
import { execFileSync } from 'node:child_process';
import { existsSync, readdirSync, readFileSync, writeFileSync } from 'node:fs';
import { availableParallelism, cpus, loadavg, totalmem } from 'node:os';
import { basename, dirname, join, resolve } from 'node:path';
import { fileURLToPath } from 'node:url';
import { busyPct, cpuMark } from './lib/cpu.mjs';

const here = dirname(fileURLToPath(import.meta.url));
// BENCH_DIR: run the scripts of another directory (the runner's own test uses it); default bench/.
const benchDir = process.env.BENCH_DIR ? resolve(process.env.BENCH_DIR) : here;
const TIMEOUT_MS = Number(process.env.BENCH_TIMEOUT_S ?? 1800) * 1000; // one stuck script must not hold the machine

if (!existsSync(join(here, '..', 'dist', 'cli', 'main.js'))) {
  console.error('bench/run: no build yet: run `npm run build` first');
  process.exit(2);
}

const all = readdirSync(benchDir).filter((f) => f.endsWith('.mjs') && f !== 'run.mjs' && !f.startsWith('_')).sort();
const README = process.argv.includes('--readme');
const wanted = process.argv.slice(2).filter((a) => a !== '--readme');
const unknown = wanted.filter((w) => !all.includes(w.endsWith('.mjs') ? w : `${w}.mjs`));
if (unknown.length) {
  console.error(`bench/run: no such bench: ${unknown.join(', ')} (have: ${all.map((f) => basename(f, '.mjs')).join(', ')})`);
  process.exit(2);
}
const scripts = wanted.length ? all.filter((f) => wanted.some((w) => f === w || f === `${w}.mjs`)) : all;

/** Run one script, passing its output through; resolve with its exit code, run time and result line. */
function runOne(file) {
  return new Promise((resolve) => {
    const started = performance.now();
    const child = spawn(process.execPath, [join(benchDir, file)], { stdio: ['ignore', 'pipe', 'inherit'], env: process.env });
    let out = '';
    child.stdout.setEncoding('utf8');
    child.stdout.on('data', (s) => { out += s; process.stdout.write(s); });
    const timer = setTimeout(() => child.kill('SIGTERM'), TIMEOUT_MS);
    child.once('close', (code, signal) => {
      clearTimeout(timer);
      let report = null;
      for (const line of out.trimEnd().split('\n').reverse()) {
        try {
          const j = JSON.parse(line);
          if (j && typeof j.bench === 'string' && Array.isArray(j.results)) { report = j; break; }
        } catch { /* not the result line */ }
      }
      resolve({ file, code: code ?? (signal ? 128 : 1), signal, seconds: (performance.now() - started) / 1000, report });
    });
  });
}

/**
 * Before each script: the page cache's dirty pages written out (`sync`: the scripts before it leave data dirs of
 * hundreds of MB, whose writeback would land in the next script's latency tail) and the machine quiet: half a second
 * under SETTLE_BUSY % busy, SETTLE_MAX_S at most. The wait is printed; a neighbour's load can still hold it to the
 * bound. A guard, not a proven cure: bench/headroom's p99 read 9.8-12.2 ms in a full run of 2026-11-30 (13:52) and
 * 2.1 ms alone, but commit, delivery and headroom run in a row without it gave 1.9 ms too later that day.
 */
const SETTLE_BUSY = Number(process.env.BENCH_SETTLE_BUSY ?? 20);
const SETTLE_MAX_S = Number(process.env.BENCH_SETTLE_MAX_S ?? 20);
const sleep = (ms) => new Promise((r) => setTimeout(r, ms));
async function settle() {
  const t0 = performance.now();
  try { execFileSync('sync', { stdio: 'ignore', timeout: SETTLE_MAX_S * 1000 }); } catch { /* no sync here: the wait alone */ }
  let busy = 100;
  while (performance.now() - t0 < SETTLE_MAX_S * 1000) {
    const a = cpuMark();
    await sleep(500);
    const b = cpuMark();
    busy = busyPct(a, b, 'busy');
    if (busy < SETTLE_BUSY) break;
  }
  return { seconds: (performance.now() - t0) / 1000, busy };
}

const runs = [];
const startedAt = new Date();
const loadStart = loadavg();
let settledS = 0;
for (const f of scripts) {
  const q = await settle();
  settledS += q.seconds;
  console.log(`\n=== bench/${f} === (started after ${q.seconds.toFixed(1)} s of sync and quiet: machine ${q.busy.toFixed(0)} % busy${q.busy >= SETTLE_BUSY ? `, not under ${SETTLE_BUSY} % within ${SETTLE_MAX_S} s` : ''})`);
  runs.push(await runOne(f));
}

const rows = [];
let failed = 0;
for (const r of runs) {
  const name = basename(r.file, '.mjs');
  const time = `${r.seconds.toFixed(1)} s`;
  if (!r.report) {
    // No result line: the exit code is the verdict (a script that only prints figures for the record).
    const verdict = r.code === 0 ? 'ok' : r.signal ? `KILLED (${r.signal})` : `FAIL (exit ${r.code})`;
    if (r.code !== 0) failed++;
    rows.push([name, '(no result line: figures printed above)', '-', '-', verdict, time]);
    continue;
  }
  r.report.results.forEach((x, i) => {
    const verdict = x.pass === true ? 'PASS' : x.pass === false ? 'MISS' : '-';
    if (x.pass === false) failed++;
    rows.push([i ? '' : name, x.name, x.target ?? '-', `${x.figure}${x.unit && x.unit !== 'bool' ? ` ${x.unit}` : ''}`, verdict, i ? '' : time]);
  });
  if (r.code !== 0 && !r.report.results.some((x) => x.pass === false)) {
    failed++;
    rows.push(['', '(the script exited with an error)', '-', '-', `FAIL (exit ${r.code})`, '']);
  }
}
const head = ['BENCH', 'RESULT', 'TARGET', 'FIGURE', 'VERDICT', 'RUN TIME'];
const widths = head.map((h, i) => Math.max(h.length, ...rows.map((r) => String(r[i]).length)));
const line = (cells) => cells.map((c, i) => String(c).padEnd(widths[i])).join('  ').trimEnd();
console.log(`\n=== summary (${runs.length} scripts, ${runs.reduce((s, r) => s + r.seconds, 0).toFixed(0)} s) ===`);
console.log(line(head));
for (const r of rows) console.log(line(r));
console.log(failed ? `\n${failed} missed or failed` : '\nall targets met');
if (README) writeReadme();

/** The summary as a Markdown table in README.md, between its bench markers, with when and where it was measured. */
function writeReadme() {
  const file = join(here, '..', 'README.md');
  const text = readFileSync(file, 'utf8');
  const [begin, end] = ['<!-- bench:begin -->', '<!-- bench:end -->'];
  const a = text.indexOf(begin);
  const b = text.indexOf(end);
  if (a < 0 || b < a) { console.error(`bench/run: README.md has no ${begin} … ${end} section`); process.exitCode = 2; return; }
  let commit = 'unknown';
  try { commit = execFileSync('git', ['rev-parse', '--short', 'HEAD'], { cwd: here, encoding: 'utf8' }).trim(); } catch { /* not a clone */ }
  const load = (l) => l.map((x) => x.toFixed(2)).join(' / ');
  const cell = (c) => String(c).replaceAll('|', '\\|');
  const md = [
    `Measured by \`npm run bench -- --readme\` on ${startedAt.toISOString().slice(0, 16).replace('T', ' ')} UTC, commit ${commit}, Node ${process.version},`,
    `${availableParallelism()} cores (${cpus()[0]?.model ?? 'unknown CPU'}), ${Math.round(totalmem() / 2 ** 30)} GiB; load average (1/5/15 min) ${load(loadStart)} at the start,`,
    `${load(loadavg())} at the end; ${runs.length} scripts in ${Math.round(runs.reduce((s, r) => s + r.seconds, 0))} s, each started after \`sync\` and half a second under ${SETTLE_BUSY} % busy (${Math.round(settledS)} s of waiting in all). ${failed ? `${failed} missed or failed.` : 'All targets met.'}`,
    '',
    `| ${head.map((h) => h.toLowerCase()).join(' | ')} |`,
    `|${head.map(() => '---').join('|')}|`,
    ...rows.map((r) => `| ${r.map(cell).join(' | ')} |`),
  ].join('\n');
  writeFileSync(file, `${text.slice(0, a + begin.length)}\n${md}\n${text.slice(b)}`);
  console.log('bench/run: README.md performance table written');
}
process.exitCode = failed ? 1 : 0;
