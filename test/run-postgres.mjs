// `npm test`, second pass: the behavioural suites (API, webhooks, vouchers, control facts, rails, CLI) again, every
// daemon and CLI run on a PostgreSQL database of its own (test/global-setup.ts starts one server for the pass).
// (test/e2e/multi-daemon.test.ts and test/e2e/alerts-store.test.ts start PostgreSQL servers of their own, and
// test/e2e/container.test.ts a PostgreSQL container of its own: they run in the first pass only.)
// Without the server binaries it is skipped with the reason, except in CI, which must run it (.ci/run installs them).
import { spawnSync } from 'node:child_process';
import { existsSync } from 'node:fs';

const PG_CTL = '/usr/lib/postgresql/15/bin/pg_ctl';
if (!existsSync(PG_CTL) && !process.env.CI) {
  console.log(`skipped the PostgreSQL pass: ${PG_CTL} is missing (install Debian's postgresql package, or run .ci/run)`);
  process.exit(0);
}
const r = spawnSync(process.execPath, ['node_modules/vitest/vitest.mjs', 'run', 'test/e2e', 'test/api', 'test/rails', '--exclude', 'test/e2e/multi-daemon.test.ts', '--exclude', 'test/e2e/container.test.ts', '--exclude', 'test/e2e/alerts-store.test.ts', '--testTimeout=60000'], {
  stdio: 'inherit',
  env: { ...process.env, NODE_SVC_TEST_STORE: 'postgres' },
});
process.exit(r.status ?? 1);
