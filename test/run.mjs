// `npm test` after the build: the suites in four passes, every pass run even when one before it failed, and a
// non-zero exit when any failed (CI fails on any failed test).
//   1. SQLite, two test files at a time: most of a file's time is spent waiting on a daemon, a chain or a timer,
//      not on a core (vitest's default on two cores is one file at a time). Each file has its own data dirs and ports.
//   2. SQLite, the files that time a chain's miner against the settler or the x402 tracker (SERIAL), alone: with another file beside them
//      on two cores, their settlements' rebroadcast timing shifts (seen: escrow-funding's stalled-miner case).
//   3. and 4. The same split on PostgreSQL (test/run-postgres.mjs: the behavioural suites, a database per daemon).
// `node test/run.mjs --pass 1` (or 2, 3, 4) runs one pass; NODE_SVC_TEST_WORKERS sets pass 1 and 3's files at a time.
import { spawnSync } from 'node:child_process';
import { existsSync } from 'node:fs';

const SERIAL = ['test/e2e/escrow-funding.test.ts', 'test/e2e/escrow.test.ts', 'test/e2e/escrow-nonces.test.ts', 'test/e2e/x402.test.ts', 'test/e2e/x402-nonces.test.ts'];
const WORKERS = process.env.NODE_SVC_TEST_WORKERS ?? '2';
const PG_CTL = '/usr/lib/postgresql/15/bin/pg_ctl';
const vitest = (args, env = {}) => {
  const r = spawnSync(process.execPath, ['node_modules/vitest/vitest.mjs', 'run', ...args, '--testTimeout=60000'], { stdio: 'inherit', env: { ...process.env, ...env } });
  return r.status ?? 1;
};
const exclude = (files) => files.flatMap((f) => ['--exclude', f]);
// test/e2e/multi-daemon.test.ts and test/e2e/alerts-store.test.ts start PostgreSQL servers of their own, and
// test/e2e/container.test.ts a PostgreSQL container of its own: they run on the SQLite passes only.
const PG_SUITES = ['test/e2e', 'test/api', 'test/rails'];
const PG_OWN = ['test/e2e/multi-daemon.test.ts', 'test/e2e/alerts-store.test.ts', 'test/e2e/container.test.ts'];
const postgres = () => {
  if (existsSync(PG_CTL) || process.env.CI) return true;
  console.log(`skipped the PostgreSQL passes: ${PG_CTL} is missing (install Debian's postgresql package, or run .ci/run)`);
  return false;
};
const passes = {
  1: () => vitest(['test/', ...exclude(SERIAL), `--maxWorkers=${WORKERS}`]),
  2: () => vitest([...SERIAL, '--maxWorkers=1']),
  3: () => (postgres() ? vitest([...PG_SUITES, ...exclude([...PG_OWN, ...SERIAL]), `--maxWorkers=${WORKERS}`], { NODE_SVC_TEST_STORE: 'postgres' }) : 0),
  4: () => (postgres() ? vitest([...SERIAL, '--maxWorkers=1'], { NODE_SVC_TEST_STORE: 'postgres' }) : 0),
};
const i = process.argv.indexOf('--pass');
const which = i > 0 ? [process.argv[i + 1]] : Object.keys(passes);
const failed = [];
for (const n of which) {
  if (!passes[n]) throw new Error(`no pass ${n} (1 to 4)`);
  const t0 = Date.now();
  const status = passes[n]();
  console.log(`[npm test] pass ${n}: ${status === 0 ? 'passed' : `FAILED (exit ${status})`} in ${Math.round((Date.now() - t0) / 1000)} s`);
  if (status !== 0) failed.push(n);
}
if (failed.length) console.log(`[npm test] failed passes: ${failed.join(', ')}`);
process.exit(failed.length ? 1 : 0);
