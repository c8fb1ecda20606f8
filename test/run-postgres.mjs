// `npm run test:postgres`: the PostgreSQL passes of `npm test` (test/run.mjs passes 3 and 4): the behavioural suites
// (API, webhooks, vouchers, control facts, rails, CLI) again, every daemon and CLI run on a PostgreSQL database of
// its own (test/global-setup.ts starts one server for the pass). Pass 4 also runs the container fleet's file
// (test/e2e/container.test.ts: test/run.mjs says why). Without the server binaries the PostgreSQL runs are skipped with
// the reason (the container file still runs), except in CI, which must run them (.ci/run installs them).
import { spawnSync } from 'node:child_process';

const passes = ['3', '4'].map((n) => spawnSync(process.execPath, ['test/run.mjs', '--pass', n], { stdio: 'inherit' }).status ?? 1);
process.exit(passes.some((s) => s !== 0) ? 1 : 0);
