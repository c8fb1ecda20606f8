import { defineConfig } from 'vitest/config';

export default defineConfig({
  test: {
    // NODE_SVC_TEST_STORE=postgres: one PostgreSQL server for the run (test/global-setup.ts); otherwise a no-op.
    globalSetup: ['test/global-setup.ts'],
  },
});
