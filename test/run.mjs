// `npm test` after the build: the suites in five passes, every pass run even when one before it failed, and a
// non-zero exit when any failed (CI fails on any failed test).
//   1. SQLite, two test files at a time: most of a file's time is spent waiting on a daemon, a chain or a timer,
//      not on a core (vitest's default on two cores is one file at a time). Each file has its own data dirs and ports.
//   2. SQLite, the files that time a chain's miner against the settler or the x402 tracker (SERIAL), one at a time:
//      two of them beside two other files on two cores were seen to shift a settlement's rebroadcast timing
//      (escrow-funding's stalled-miner case, before the nonce fix of escrow-nonces).
//   3. and 4. The same split on PostgreSQL (test/run-postgres.mjs: the behavioural suites, a database per daemon).
//   5. The container fleet's file (CONTAINER below), alone.
// Each store's suites run beside the other store's chain-timing files, one file at a time: passes 1, 4 and 5 side by
// side, then 3 and 2 ("1+4+5,3+2"). The chain files mostly wait on a miner or a timer, so they fill the cores the
// suites leave.
// Each pass's output is kept and printed whole when it ends, never interleaved. NODE_SVC_TEST_PHASES spells out another
// order (phases one after another separated by commas, passes side by side joined by +). Measured on fresh clones
// here: on 2026-11-27 "1,3,2+4" 353 + 274 + 151 s and "1+2,3+4" 408 + 312 s then 417 + 353 s; on 2026-11-28, with the
// rails polled every 200 ms in the tests (--settle-poll), "1,3,2+4" 334 + 254 + 145 s (733 s) and "1+4,3+2" 392 + 289 s
// (681 s), both passing. NODE_SVC_TEST_SIDE_BY_SIDE=1
// is "1+3+5,2+4" (without pass 5, under that load four CI runs in a row each failed a different timing-sensitive
// test, each fixed since);
// NODE_SVC_TEST_SEQUENTIAL=1 runs the five one after another, printing as they go. Hooks and tests get 60 s
// (a beforeAll that seeds a store and starts a daemon took over vitest's default 10 s under load).
// `node test/run.mjs --pass 1` (or 2 to 5) runs one pass; NODE_SVC_TEST_WORKERS sets pass 1 and 3's files at a time.
import { spawn } from 'node:child_process';
import { existsSync } from 'node:fs';

const SERIAL = ['test/e2e/escrow-funding.test.ts', 'test/e2e/escrow.test.ts', 'test/e2e/escrow-nonces.test.ts', 'test/e2e/x402.test.ts', 'test/e2e/x402-nonces.test.ts'];
const WORKERS = process.env.NODE_SVC_TEST_WORKERS ?? '2';
const PG_CTL = '/usr/lib/postgresql/15/bin/pg_ctl';
const SEQUENTIAL = process.env.NODE_SVC_TEST_SEQUENTIAL === '1';
const SIDE_BY_SIDE = process.env.NODE_SVC_TEST_SIDE_BY_SIDE === '1';
const exclude = (files) => files.flatMap((f) => ['--exclude', f]);
// test/e2e/multi-daemon.test.ts and test/e2e/alerts-store.test.ts start PostgreSQL servers of their own, and
// test/e2e/container.test.ts a PostgreSQL container of its own: they run once, outside the PostgreSQL suites
// (alerts-store and multi-daemon in pass 2's process: ALERTS_STORE and MULTI below; the container file in pass 5, a
// process of its own: CONTAINER). PG_OWN, below them, names them (and test/e2e/pg-partition.test.ts).
const PG_SUITES = ['test/e2e', 'test/api', 'test/rails'];
const postgres = (n) => {
  if (existsSync(PG_CTL) || process.env.CI) return true;
  console.log(`skipped pass ${n} on PostgreSQL: ${PG_CTL} is missing (install Debian's postgresql package, or run .ci/run)`);
  return false;
};
const PG = { NODE_SVC_TEST_STORE: 'postgres' };
// test/e2e/container.test.ts builds the images and runs a fleet of its own (about 170 s on a fresh machine, most of it
// the image build; no store environment reaches it): pass 5, its own process, side by side with passes 1 and 4. Most
// of its time waits on the Debian mirror and on podman, not on a core. In pass 4's queue (one file at a time with the
// PostgreSQL chain files) it made pass 4 the long side of the first phase: a fresh clone of 174c1f3 on 2026-12-02,
// container 233 s of pass 4's 495 s beside pass 1's 421 s.
const CONTAINER = 'test/e2e/container.test.ts';
// test/e2e/multi-daemon.test.ts (#15's faults on PostgreSQL servers of its own, 155-180 s, 80 s of it the kill -9
// burst) runs in pass 2's process, one file at a time with the SQLite chain files: in pass 1 it was the longest file of
// the long phase (fresh clones of 1310f84: pass 1 422 s beside pass 4's 300 s, then pass 3 312 s beside pass 2's 158 s).
// It needs no store environment, and without PostgreSQL here it skips itself, saying so.
const MULTI = 'test/e2e/multi-daemon.test.ts';
// test/e2e/alerts-store.test.ts (two PostgreSQL outages of its own, 20 s) likewise, since the fresh-clone runs 73-77
// of 4d5a877: pass 1 (356-430 s) was the long side of the first phase, pass 2 (302-406 s) the short one of the second.
const ALERTS_STORE = 'test/e2e/alerts-store.test.ts';
// test/e2e/pg-partition.test.ts (a PostgreSQL server of its own behind a proxy that stops forwarding, 20 s) runs in
// pass 1 only: it needs no store environment, and in pass 3 it would run a second time.
const PG_PARTITION = 'test/e2e/pg-partition.test.ts';
const PG_OWN = [MULTI, ALERTS_STORE, CONTAINER, PG_PARTITION];
// test/e2e/dev.test.ts on PostgreSQL (the sandbox, 40-61 s) runs in pass 4's process, one file at a time with the
// PostgreSQL chain files, not in pass 3: on fresh clones of b49a112 pass 3 (372-404 s) was the long side of its phase
// beside pass 2 (305-333 s), while pass 4 (240-252 s) ended 80-100 s before pass 1 (333-348 s): npm test 737 s. Same
// store, same environment (NODE_SVC_TEST_STORE=postgres); on SQLite it stays in pass 1.
// test/e2e/card.test.ts on PostgreSQL (the card rail against its local processor, 36-40 s there) likewise, since
// fresh-clone run 61 of 0747e65: pass 3 389 s (the long side of its phase, beside pass 2's 347 s) while pass 4 ended
// 57 s before pass 1 (271 and 328 s).
const PG_DEV = 'test/e2e/dev.test.ts';
const PG_CARD = 'test/e2e/card.test.ts';
const passes = {
  1: { args: ['test/', ...exclude([...SERIAL, CONTAINER, MULTI, ALERTS_STORE]), `--maxWorkers=${WORKERS}`] },
  2: { args: [...SERIAL, MULTI, ALERTS_STORE, '--maxWorkers=1'] },
  3: { args: [...PG_SUITES, ...exclude([...PG_OWN, ...SERIAL, PG_DEV, PG_CARD]), `--maxWorkers=${WORKERS}`], env: PG, postgres: true },
  4: { args: [...SERIAL, PG_DEV, PG_CARD, '--maxWorkers=1'], env: PG, postgres: true },
  5: { args: [CONTAINER, '--maxWorkers=1'] },
};

/**
 * vitest's lines naming a failed test or file (its summary's FAIL lines, else the × lines), without colours; under
 * each FAIL line its error's first line and where it was thrown (the ❯ line), so that a CI log that keeps only its
 * tail still says why.
 */
function failuresIn(text) {
  const lines = text.replace(/\x1b\[[0-9;]*m/g, '').split('\n');
  const fail = [];
  lines.forEach((l, k) => {
    if (!/^\s*FAIL\s/.test(l)) return;
    const why = [];
    for (let j = k + 1; j < Math.min(lines.length, k + 40) && !/^\s*FAIL\s|⎯⎯/.test(lines[j]); j++) {
      const t = lines[j].trim();
      if (!why.length && t) why.push(`    ${t.slice(0, 300)}`);
      else if (/^❯ /.test(t)) { why.push(`    ${t}`); break; }
    }
    fail.push([l.trim(), ...why].join('\n'));
  });
  const named = [...new Set(fail.length ? fail : lines.filter((l) => /^\s*×\s/.test(l)).map((l) => l.trim()))];
  return named.length > 40 ? [...named.slice(0, 40), `… and ${named.length - 40} more (above)`] : named;
}

/**
 * The environment the passes run in: this one, without NODE_EXTRA_CA_CERTS (NODE_SVC_TEST_KEEP_EXTRA_CA_CERTS=1 keeps
 * it). Node 20 reads and parses that file as every process starts, before any of its code runs: where it names the
 * system's whole bundle (this machine sets /etc/ssl/certs/ca-certificates.crt, for npm's registry access) that is ~65 ms
 * more per node process (`node -e 0` 155.6 against 85.2 ms, medians of 15 alternated, 2026-12-02), and a run starts
 * over a thousand of them (CLI runs, daemons, vitest's workers) that reach no TLS server but the tests' own. The one
 * test that needs the variable (test/e2e/webhooks.test.ts, a receiver's own certificate) sets it for its daemon.
 */
function testEnv() {
  const e = { ...process.env };
  if (process.env.NODE_SVC_TEST_KEEP_EXTRA_CA_CERTS !== '1') delete e.NODE_EXTRA_CA_CERTS;
  return e;
}

/** Pass n in its own vitest process; resolves with its exit status and seconds. `show`: print as it goes, else kept and printed at the end. */
function run(n, show) {
  const p = passes[n];
  if (!p) throw new Error(`no pass ${n} (1 to 5)`);
  const t0 = Date.now();
  if (p.postgres && !postgres(n)) return Promise.resolve({ n, status: 0, s: 0 });
  const [args, env] = [p.args, p.env ?? {}];
  return new Promise((resolve) => {
    const child = spawn(process.execPath, ['node_modules/vitest/vitest.mjs', 'run', ...args, '--testTimeout=60000', '--hookTimeout=60000'], {
      stdio: ['ignore', 'pipe', 'pipe'], env: { ...testEnv(), ...env },
    });
    const out = [];
    for (const [s, to] of [[child.stdout, process.stdout], [child.stderr, process.stderr]]) s.on('data', (b) => {
      out.push(b);
      if (show) to.write(b);
    });
    child.on('close', (code, signal) => {
      if (!show) process.stdout.write(Buffer.concat([Buffer.from(`\n[npm test] ---- pass ${n}'s output ----\n`), ...out]));
      const status = code ?? (signal ? 1 : 0);
      const s = Math.round((Date.now() - t0) / 1000);
      console.log(`[npm test] pass ${n}: ${status === 0 ? 'passed' : `FAILED (exit ${status}${signal ? `, ${signal}` : ''})`} in ${s} s`);
      resolve({ n, status, s, failures: status === 0 ? [] : failuresIn(Buffer.concat(out).toString()) });
    });
  });
}

const i = process.argv.indexOf('--pass');
// NODE_SVC_TEST_PHASES: the order spelled out, phases one after another separated by commas, passes side by side
// joined by + (the default is "1+4,3+2").
const PHASES = process.env.NODE_SVC_TEST_PHASES;
if (PHASES !== undefined && !/^[1-5](\+[1-5])*(,[1-5](\+[1-5])*)*$/.test(PHASES)) {
  console.error(`[npm test] NODE_SVC_TEST_PHASES="${PHASES}" is not a list of phases such as "1,3,2+4+5" (passes 1 to 5; + side by side, comma one after the other)`);
  process.exit(2);
}
const phases = i > 0 ? [[process.argv[i + 1]]] : PHASES ? PHASES.split(',').map((ph) => ph.split('+')) : SEQUENTIAL ? [['1'], ['2'], ['3'], ['4'], ['5']] : SIDE_BY_SIDE ? [['1', '3', '5'], ['2', '4']] : [['1', '4', '5'], ['3', '2']];
const failed = [];
for (const phase of phases) {
  const t0 = Date.now();
  if (phase.length > 1) console.log(`[npm test] passes ${phase.join(' and ')} side by side (their output follows each one's end)`);
  const done = await Promise.all(phase.map((n) => run(n, phase.length === 1)));
  for (const d of done) if (d.status !== 0) failed.push(d);
  if (phase.length > 1) console.log(`[npm test] passes ${phase.join(' and ')}: ${Math.round((Date.now() - t0) / 1000)} s`);
}
// What failed, again at the very end (a CI log is often read from its tail, and a pass's output can be long).
for (const d of failed) console.log(`[npm test] pass ${d.n} failed:${d.failures.length ? d.failures.map((l) => `\n  ${l}`).join('') : ' (no failed test named: see its output above)'}`);
if (failed.length) console.log(`[npm test] failed passes: ${failed.map((d) => d.n).join(', ')}`);
process.exit(failed.length ? 1 : 0);
