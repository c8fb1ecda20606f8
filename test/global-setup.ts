// Global setup: with NODE_SVC_TEST_STORE=postgres, one PostgreSQL server for the whole run. Its base URL reaches the
// test files (and their helpers, which give every daemon and CLI run a database of its own) through an environment
// variable set before the workers start, and through vitest's provide/inject.
import type { TestProject } from 'vitest/node';
import { PG_URL_ENV, pgAvailable, startPostgres, type PostgresServer } from './helpers/postgres.js';

declare module 'vitest' {
  export interface ProvidedContext {
    /** The run's PostgreSQL server (`postgres://node_svc:…@127.0.0.1:PORT/postgres`), '' when there is none. */
    pgBaseUrl: string;
  }
}

let server: PostgresServer | undefined;

export default async function setup(project: TestProject): Promise<() => Promise<void>> {
  project.provide('pgBaseUrl', '');
  if (process.env.NODE_SVC_TEST_STORE !== 'postgres') return async () => {};
  const avail = pgAvailable();
  let why = avail.reason;
  if (avail.ok) {
    try {
      server = await startPostgres();
    } catch (err) {
      why = (err as Error).message;
    }
  }
  if (!server) {
    if (process.env.CI) throw new Error(`NODE_SVC_TEST_STORE=postgres but no PostgreSQL server can be started: ${why}`);
    console.warn(`[global-setup] NODE_SVC_TEST_STORE=postgres: no PostgreSQL server (${why}); the run uses SQLite`);
    return async () => {};
  }
  process.env[PG_URL_ENV] = server.baseUrl;
  project.provide('pgBaseUrl', server.baseUrl);
  console.log(`[global-setup] PostgreSQL store for this run on 127.0.0.1:${server.port}`);
  return async () => {
    delete process.env[PG_URL_ENV];
    await server?.stop();
    server = undefined;
  };
}
