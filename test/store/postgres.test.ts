// The PostgreSQL store (issue #15) against a real PostgreSQL 15 server: the run's (NODE_SVC_TEST_STORE=postgres) or
// one started for this file. Skipped with a printed reason only where no server can start; never in CI.
import { execFileSync } from 'node:child_process';
import { mkdirSync, readFileSync, writeFileSync } from 'node:fs';
import { mkdtemp, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { connect, createServer, type AddressInfo } from 'node:net';
import pg from 'pg';
import { afterAll, beforeAll, describe, expect, it, vi } from 'vitest';
import { NodeSvcError, unavailable } from '../../src/domain/errors.js';
import { openSqliteStore } from '../../src/store/db.js';
import { MIGRATIONS } from '../../src/store/migrations/index.js';
import { SESSION_SLOTS, SLOT_LOCKS } from '../../src/store/migrations/0220-statement-counts.js';
import { compileSql, LISTEN_FRESH_MS, MIGRATE_LOCK_KEY, openPostgresStore, parsePostgresUrl, SAVEPOINTS_HOLD_MS, type PostgresStore } from '../../src/store/postgres.js';
import { blockDigitsSql, onEventRecorded, recordEvent } from '../../src/store/events.js';
import { claimDue, deliveries, matches, recordAttempt, recordAttempts, subscriptions, type AttemptRecord } from '../../src/store/webhooks.js';
import { forUpdate, lockKey, mergeable, type Invalidation, type Sql } from '../../src/store/sql.js';
import { databaseNameFor, databaseUrl, ensureDatabase, PG_URL_ENV, pgAvailable, startPostgres, storeUrlFor, testServerUrl, type PostgresServer } from '../helpers/postgres.js';
import { sleep, waitFor } from '../helpers/wait.js';
import { startFreezingProxy } from '../helpers/tcp-freeze.js';
import { addNode } from '../../src/service/admin.js';
import { headroomJson } from '../../src/service/streams.js';
import { DEFAULT_SERVICE_CONFIG, type Deps } from '../../src/service/deps.js';
import { streams } from '../../src/store/streams.js';
import { ensureReceiptKey, issueReceipt, receiptJwks } from '../../src/service/receipts.js';
import { verifyReceipt } from '../../src/sdk/receipt.js';

const LATEST = MIGRATIONS[MIGRATIONS.length - 1]!.version;
const shared = testServerUrl();
const avail = pgAvailable();
if (!shared && !avail.ok) {
  if (process.env.CI) throw new Error(`CI must run the PostgreSQL store tests, but no server can start: ${avail.reason}`);
  console.warn(`[postgres.test] skipped: ${avail.reason}`);
}

describe.skipIf(!shared && !avail.ok)('PostgreSQL store', () => {
  let server: PostgresServer | undefined;
  let base: string;
  let root: string;
  const open: PostgresStore[] = [];
  let dbs = 0;
  /** A new, empty database on the server. */
  const freshDb = () => ensureDatabase(base, `pgstore_${process.pid}_${++dbs}`);
  const openAt = async (url: string, o: { readonly?: boolean; poolSize?: number; readsPerConnection?: number; answerTimeoutMs?: number } = {}) => {
    const s = await openPostgresStore(url, { dataDir: join(root, 'data'), ...o });
    open.push(s);
    return s;
  };
  /** A promise the test opens when it chooses: a write that awaits it holds its connection (and its locks) until then. */
  const gate = () => {
    let open!: () => void;
    const p = new Promise<void>((r) => { open = r; });
    return { p, open };
  };

  /** Two stores on a new database holding `pair`: rows 1 and 2, n = 0 (the deadlock tests). */
  const twoStoresOnPair = async () => {
    const url = await freshDb();
    const a = await openAt(url);
    const b = await openAt(url);
    await a.q.run('CREATE TABLE pair (id BIGINT PRIMARY KEY, n BIGINT NOT NULL)');
    await a.q.run('INSERT INTO pair(id, n) VALUES (1, 0), (2, 0)');
    return { a, b };
  };

  beforeAll(async () => {
    root = await mkdtemp(join(tmpdir(), 'node-svc-pgstore-'));
    if (shared) base = shared;
    else base = (server = await startPostgres()).baseUrl;
  }, 120_000);
  afterAll(async () => {
    for (const s of open) await s.close().catch(() => {});
    await server?.stop();
    await rm(root, { recursive: true, force: true });
  }, 60_000);

  describe('statements', () => {
    it('rewrites ? and @name to $n, skipping quoted text and comments', () => {
      expect(compileSql('SELECT a FROM t WHERE a = ? AND b > ? LIMIT ?').text).toBe('SELECT a FROM t WHERE a = $1 AND b > $2 LIMIT $3');
      const named = compileSql('UPDATE t SET a = @a, b = @b WHERE a = @a AND c = @c_1');
      expect(named.text).toBe('UPDATE t SET a = $1, b = $2 WHERE a = $1 AND c = $3');
      expect(named.names).toEqual(['a', 'b', 'c_1']);
      expect(compileSql(`SELECT 'it''s ? @x' AS s, "odd?col" FROM t -- why? @y\nWHERE a = ?`).text).toBe(`SELECT 'it''s ? @x' AS s, "odd?col" FROM t -- why? @y\nWHERE a = $1`);
      expect(compileSql('SELECT 1 FROM t WHERE a @> b').text).toBe('SELECT 1 FROM t WHERE a @> b'); // an operator, not a name
      expect(() => compileSql('SELECT ? , @a')).toThrow(/mixes/);
      expect(() => compileSql('SELECT ?1')).toThrow(/numbered/);
    });

    it('binds both styles and gives results as SQLite does: integers, BigInt when safe, booleans 1/0', async () => {
      const s = await openAt(await freshDb());
      await s.q.run('CREATE TABLE t (id BIGINT PRIMARY KEY, name TEXT, amount BIGINT, small INTEGER, ratio DOUBLE PRECISION, at BIGINT)');
      const big = 9_223_372_036_854_775_807n; // int64 max: a JS number cannot hold it
      expect(await s.q.run('INSERT INTO t(id, name, amount, small, ratio, at) VALUES (?, ?, ?, ?, ?, ?)', [1, '123', big, 7, 0.5, undefined])).toBe(1);
      expect(await s.q.run('INSERT INTO t(id, name, amount, small, ratio, at) VALUES (@id, @name, @amount, @small, @ratio, @at)', { id: 2n, name: 'b', amount: 5n, small: 3, ratio: 2, at: 100 })).toBe(1);
      expect(await s.q.run('UPDATE t SET small = small + 1 WHERE id > ?', [0])).toBe(2);

      const plain = await s.q.get<Record<string, unknown>>('SELECT id, name, amount, small, ratio, at, id = 1 AS one, at IS NULL AS no_at FROM t WHERE id = ?', [1]);
      expect(plain).toEqual({ id: 1, name: '123', amount: Number(big), small: 8, ratio: 0.5, at: null, one: 1, no_at: 1 });
      const safe = await s.q.get<Record<string, unknown>>('SELECT id, name, amount, small, ratio FROM t WHERE id = @id', { id: 1 }, true);
      expect(safe).toEqual({ id: 1n, name: '123', amount: big, small: 8n, ratio: 0.5 });

      // Aggregates: COUNT is int8, SUM of BIGINT is numeric, AVG has a fraction.
      const agg = await s.q.get<Record<string, unknown>>('SELECT COUNT(*) AS n, SUM(small) AS total, AVG(small) AS mean, MAX(id) AS top FROM t');
      expect(agg).toEqual({ n: 2, total: 12, mean: 6, top: 2 });
      const aggSafe = await s.q.get<Record<string, unknown>>('SELECT COUNT(*) AS n, SUM(amount) AS total, AVG(ratio) AS mean FROM t', [], true);
      expect(aggSafe).toEqual({ n: 2n, total: big + 5n, mean: 1.25 });
      expect(await s.q.value('SELECT SUM(small) FROM t WHERE id IN (?, ?)', [1, 2], true)).toBe(12n); // numeric without fraction
      expect(await s.q.value('SELECT AVG(small) FROM t', [], true)).toBe(6); // AVG is a float in SQLite, safe or not
      expect(await s.q.value('SELECT SUM(small) * 1.5 FROM t')).toBe(18);

      expect(await s.q.value('SELECT name FROM t WHERE id = ?', [2])).toBe('b');
      expect(await s.q.value('SELECT name FROM t WHERE id = ?', [99])).toBeUndefined();
      expect(await s.q.get('SELECT name FROM t WHERE id = ?', [99])).toBeUndefined();
      expect(await s.q.all('SELECT id FROM t ORDER BY id', [], true)).toEqual([{ id: 1n }, { id: 2n }]);
      expect(await s.q.run('DELETE FROM t WHERE id = ?', [99])).toBe(0);
      await expect(s.q.run('UPDATE t SET name = @name WHERE id = @id', { id: 1 })).rejects.toThrow(/missing named parameter "name"/);
      // A placeholder whose type PostgreSQL cannot infer: the error names it as the portable SQL wrote it, and the fix.
      await expect(s.q.get('SELECT CASE WHEN @maybe IS NULL THEN 0 ELSE 1 END AS x FROM t WHERE id = @id', { maybe: null, id: 1 }))
        .rejects.toThrow(/parameter \$1 \(@maybe\).*CAST\(@maybe AS TEXT\)/);
      await expect(s.q.get('SELECT id FROM t WHERE id = ? AND ? IS NULL', [1, null])).rejects.toThrow(/\(the 2nd \?\)/);
      expect(await s.q.value('SELECT CASE WHEN CAST(@maybe AS TEXT) IS NULL THEN 0 ELSE 1 END AS x FROM t WHERE id = @id', { maybe: null, id: 1 })).toBe(0);
    });
  });

  describe('connections', () => {
    /** The store's connections to `url`'s database, as the server sees them (pg_stat_activity is live, not sampled). */
    const sessions = async (url: string) => {
      const c = new pg.Client({ connectionString: base });
      await c.connect();
      try {
        return Number((await c.query("SELECT COUNT(*) AS n FROM pg_stat_activity WHERE datname = $1 AND application_name = 'node-svc'", [new URL(url).pathname.slice(1)])).rows[0].n);
      } finally {
        await c.end();
      }
    };

    it('a store opened on a current schema reads on the connection it was opened on: a burst of reads logs in once', async () => {
      const url = await freshDb();
      await (await openAt(url)).close(); // migrated
      const s = await openAt(url);
      // What a CLI command does (`nodes list` reads each node's token at once): 6 reads in one turn. Before, they were
      // spread over 3 read connections opened for them, beside the idle one the store was opened on: 4 logins.
      const pids = await Promise.all(Array.from({ length: 6 }, () => s.q.value<number>('SELECT pg_backend_pid() AS p')));
      expect(new Set(pids).size).toBe(1);
      // (a closed connection's server process ends a moment after the client's close)
      await waitFor(async () => (await sessions(url)) === 1, 'one session', 5_000);
      await s.close();
      await waitFor(async () => (await sessions(url)) === 0, 'no session after close()', 5_000);
    });

    it('a daemon\'s store (readsPerConnection 1): two overlapping reads go out on two connections', async () => {
      const s = await openAt(await freshDb(), { readsPerConnection: 1 });
      const pids = await Promise.all([1, 2].map(() => s.q.value<number>('SELECT pg_backend_pid() AS p')));
      expect(new Set(pids).size).toBe(2);
    });

    it('reads under load still spread over the three read connections; writes keep their pool beside them', async () => {
      const s = await openAt(await freshDb(), { poolSize: 2 });
      const pids = await Promise.all(Array.from({ length: 100 }, () => s.q.value<number>('SELECT pg_backend_pid() AS p')));
      expect(new Set(pids).size).toBe(3);
      // Two writes at once each get a connection of their own (the pool is not short of the one lent to reads).
      let release!: () => void;
      const held = new Promise<void>((r) => { release = r; });
      let inside = 0;
      const writes = [1, 2].map(() => s.write(async (tx) => { const p = await tx.value<number>('SELECT pg_backend_pid() AS p'); inside++; await held; return p; }));
      await waitFor(() => inside === 2, 'both writes holding a connection at once (the pool short of the one lent to reads would hold the second back)', 3_000);
      release();
      const writers = await Promise.all(writes);
      expect(new Set(writers).size).toBe(2);
      for (const w of writers) expect(pids).not.toContain(w);
    });
  });

  describe('write()', () => {
    it('runs each write as a transaction of its own, concurrently: one held open does not stop the others (no global lock)', async () => {
      const s = await openAt(await freshDb());
      await s.q.run('CREATE TABLE w (id BIGINT PRIMARY KEY, tx TEXT)');
      const before = { ...s.stats };
      // Job 0 holds its transaction open until the 9 others (the rest of the pool) have committed: under a database-wide write lock (or
      // one batch at a time) they would wait for it, and this would never resolve.
      let release!: () => void;
      const held = new Promise<void>((r) => { release = r; });
      const first = s.write(async (tx) => {
        await tx.run('INSERT INTO w(id, tx) VALUES (?, txid_current()::text)', [0]);
        await held; // (a test only: a write must await nothing but tx)
        return 0;
      });
      const rest = await Promise.all(
        Array.from({ length: 9 }, (_, i) => s.write(async (tx) => {
          await tx.run('INSERT INTO w(id, tx) VALUES (?, txid_current()::text)', [i + 1]);
          return i + 1;
        })),
      );
      expect(rest).toEqual(Array.from({ length: 9 }, (_, i) => i + 1));
      expect(await s.q.value('SELECT COUNT(*) FROM w')).toBe(9); // committed while job 0 is still open
      release();
      expect(await first).toBe(0);
      expect(s.stats.commits - before.commits).toBe(10);
      expect(await s.q.value('SELECT COUNT(DISTINCT tx) FROM w')).toBe(10);
      // A run() outside write() is one statement committed on its own (autocommit): one commit with one write in it
      // (what /metrics counts as node_svc_store_commits_total and node_svc_store_writes_total).
      const mid = { ...s.stats };
      expect(await s.q.run('DELETE FROM w WHERE id < ?', [5])).toBe(5);
      expect([s.stats.commits - mid.commits, s.stats.jobs - mid.jobs]).toEqual([1, 1]);
      expect(await s.q.value('SELECT COUNT(*) FROM w')).toBe(5);
    });

    it('moves its change mark when a write of its own ends (write, transaction, a lone statement, a failed write too), before the writer goes on; reads leave it', async () => {
      const s = await openAt(await freshDb());
      await s.q.run('CREATE TABLE m (id BIGINT PRIMARY KEY)');
      let m = s.changeMark();
      const seen: number[] = [];
      await s.write(async (tx) => { await tx.run('INSERT INTO m(id) VALUES (1)'); });
      seen.push(s.changeMark()); // the first thing after the write: already moved
      expect(seen[0]).toBeGreaterThan(m);
      m = s.changeMark();
      await s.q.value('SELECT COUNT(*) FROM m');
      await s.q.get('SELECT id FROM m WHERE id = ?', [1]);
      expect(s.changeMark()).toBe(m); // reads do not move it
      await s.q.run('INSERT INTO m(id) VALUES (2)');
      expect(s.changeMark()).toBeGreaterThan(m);
      m = s.changeMark();
      await s.transaction(async (tx) => { await tx.run('INSERT INTO m(id) VALUES (3)'); });
      expect(s.changeMark()).toBeGreaterThan(m);
      m = s.changeMark();
      await expect(s.write(async (tx) => { await tx.run('INSERT INTO m(id) VALUES (1)'); })).rejects.toThrow(); // duplicate key
      expect(s.changeMark()).toBeGreaterThan(m);
    });

    it('runs the writes that find every connection busy together: one transaction and one commit; a job that fails fails alone (first without savepoints: the batch again job by job; then a savepoint each)', async () => {
      const s = await openAt(await freshDb(), { poolSize: 2 });
      await s.q.run('CREATE TABLE w (id BIGINT PRIMARY KEY, tx TEXT)');
      const boom = new Error('job B changed its mind');
      const insert = (id: number) => (tx: Sql) => tx.run('INSERT INTO w(id, tx) VALUES (?, txid_current()::text)', [id]);
      // Two writes hold both connections, so the next ones wait for one and then run as a batch. Ids from `at` up.
      const round = async (at: number) => {
        const before = { ...s.stats };
        const held = gate();
        const holders = [at + 100, at + 101].map((id) => s.write(async (tx) => {
          await insert(id)(tx);
          await held.p; // (a test only: a write must await nothing but tx)
        }));
        const queued = [
          s.write(insert(at + 1)),
          s.write(async (tx) => { await insert(at + 2)(tx); throw boom; }),
          s.write(insert(at + 1)), // duplicate key: it fails as it always would
          s.write(async (tx) => { await insert(at + 3)(tx); await insert(at + 1)(tx).catch(() => {}); return 'pretended'; }), // swallowed
          s.write(insert(at + 4)),
          // Jobs run in order, each seeing those before it as committed: 1 and 4, not 2 or 3.
          s.write((tx) => tx.value<number>('SELECT COUNT(*) FROM w WHERE id > ? AND id < ?', [at, at + 10])),
        ];
        await sleep(50);
        expect(await s.q.value('SELECT COUNT(*) FROM w WHERE id > ?', [at])).toBe(0); // nothing committed while both are held
        held.open();
        await Promise.all(holders);
        const settled = await Promise.allSettled(queued);
        // The same answers either way: each what it would have been alone.
        expect(settled.map((r) => r.status)).toEqual(['fulfilled', 'rejected', 'rejected', 'rejected', 'fulfilled', 'fulfilled']);
        expect((settled[1] as PromiseRejectedResult).reason).toBe(boom);
        expect(String((settled[2] as PromiseRejectedResult).reason)).toMatch(/duplicate key/);
        expect((settled[5] as PromiseFulfilledResult<number>).value).toBe(2);
        const rows = await s.q.all<{ id: number; tx: string }>('SELECT id, tx FROM w WHERE id > ? ORDER BY id', [at]);
        expect(rows.map((r) => r.id)).toEqual([at + 1, at + 4, at + 100, at + 101]);
        return { rows, commits: s.stats.commits - before.commits, jobs: s.stats.jobs - before.jobs, rolledBack: s.stats.rolledBack - before.rolledBack };
      };
      // A fresh store batches without savepoints: job B's throw rolls the batch back (1 is not kept), and every job
      // runs again in a transaction of its own.
      const first = await round(0);
      expect(first.rolledBack).toBe(1);
      expect(new Set(first.rows.map((r) => r.tx)).size).toBe(4); // 1 and 4 each alone, the two held
      expect(first.commits).toBe(2 + 3); // the two held; 1, 4 and the count alone
      // The hold: SAVEPOINTS_HOLD_MS from the last failure, each failure renewing it. From round 2 on, each round runs
      // with Date alone faked and frozen at `base` plus an offset (the connections' timers run as they do), so each
      // hold ends exactly SAVEPOINTS_HOLD_MS after the round that set it, however long the rounds take.
      const base = Date.now();
      const roundAt = async (at: number, offset: number) => {
        vi.useFakeTimers({ toFake: ['Date'] });
        try {
          vi.setSystemTime(base + offset);
          return await round(at);
        } finally {
          vi.useRealTimers();
        }
      };
      // Right after (within round 1's hold), a savepoint each: the batch commits once, the failing jobs fail alone.
      const second = await roundAt(1000, 0);
      expect(second.rolledBack).toBe(0);
      expect(second.rows[0]!.tx).toBe(second.rows[1]!.tx); // one transaction for the batch
      expect(new Set(second.rows.map((r) => r.tx)).size).toBe(3);
      expect(second.commits).toBe(3); // the two held, the batch
      expect(second.jobs).toBe(5);
      // 1 s before round 2's hold ends: still a savepoint each (round 3's failures renew the hold to HOLD - 1000 + HOLD).
      const third = await roundAt(2000, SAVEPOINTS_HOLD_MS - 1000);
      expect(third.rolledBack).toBe(0);
      expect(third.commits).toBe(3);
      // 0.5 s past where round 2's hold ended: round 3's renewal holds (round 4's renews it to HOLD + 500 + HOLD).
      expect((await roundAt(3000, SAVEPOINTS_HOLD_MS + 500)).rolledBack).toBe(0);
      // 1 s after the hold round 4 renewed ran out: optimistic again, so the batch is rolled back and its jobs run alone.
      const fifth = await roundAt(4000, 2 * SAVEPOINTS_HOLD_MS + 1500);
      expect(fifth.rolledBack).toBe(1);
      expect(new Set(fifth.rows.map((r) => r.tx)).size).toBe(4);
      expect(fifth.commits).toBe(2 + 3);
    });

    it('a batch without savepoints: a job that throws before any statement fails alone; a job\'s own 503 rolls the batch back like any throw (not the lost-connection path); after-commit callbacks run once, after the commit that kept them', async () => {
      const s = await openAt(await freshDb(), { poolSize: 1 });
      await s.q.run('CREATE TABLE w (id BIGINT PRIMARY KEY)');
      const insert = (id: number) => (tx: Sql) => tx.run('INSERT INTO w(id) VALUES (?)', [id]);
      const hold = async () => {
        const held = gate();
        const holder = s.write(async (tx) => { await tx.value('SELECT 1'); await held.p; });
        await sleep(20);
        return async () => { held.open(); await holder; };
      };
      // 1. A throw before any statement: nothing to undo, the batch goes on and commits once.
      let before = { ...s.stats };
      let open = await hold();
      const early = new Error('refused before any statement');
      let queued = [s.write(insert(1)), s.write(async () => { throw early; }), s.write(insert(2))];
      await open();
      let settled = await Promise.allSettled(queued);
      expect(settled.map((r) => r.status)).toEqual(['fulfilled', 'rejected', 'fulfilled']);
      expect((settled[1] as PromiseRejectedResult).reason).toBe(early);
      expect(s.stats.rolledBack - before.rolledBack).toBe(0);
      expect(s.stats.commits - before.commits).toBe(2); // the holder, the batch
      // 2. A job's own 503 (a rail that cannot confirm funding) after a statement: the batch is rolled back and each
      // job runs alone, as for any throw; it is not taken for a lost connection.
      before = { ...s.stats };
      open = await hold();
      const ran: number[] = [];
      const own = unavailable('the rail cannot confirm the funding now');
      queued = [
        s.write(async (tx) => { await insert(3)(tx); tx.afterCommit!(() => ran.push(3)); }),
        s.write(async (tx) => { await insert(4)(tx); tx.afterCommit!(() => ran.push(4)); throw own; }),
        s.write(async (tx) => { await insert(5)(tx); tx.afterCommit!(() => ran.push(5)); }),
      ];
      await open();
      settled = await Promise.allSettled(queued);
      expect(settled.map((r) => r.status)).toEqual(['fulfilled', 'rejected', 'fulfilled']);
      expect((settled[1] as PromiseRejectedResult).reason).toBe(own);
      expect(s.stats.rolledBack - before.rolledBack).toBe(1); // the batch's rollback, not a lost connection's path
      expect(ran).toEqual([3, 5]); // once each, after the commits that kept them; never for 4
      expect((await s.q.all<{ id: number }>('SELECT id FROM w ORDER BY id')).map((r) => Number(r.id))).toEqual([1, 2, 3, 5]);
    });

    it('a batch of jobs that all succeed commits once without savepoints (none sent)', async () => {
      const s = await openAt(await freshDb(), { poolSize: 1 });
      await s.q.run('CREATE TABLE w (id BIGINT PRIMARY KEY)');
      const held = gate();
      const holder = s.write(async (tx) => { await tx.run('INSERT INTO w(id) VALUES (100)'); await held.p; });
      // A savepoint that writes gives its rows an xmin of its own (its subtransaction's id): one xmin, no savepoints.
      const queued = [1, 2, 3, 4].map((id) => s.write((tx) => tx.run('INSERT INTO w(id) VALUES (?)', [id])));
      await sleep(50);
      held.open();
      await holder;
      await Promise.all(queued);
      const xmins = await s.q.all<{ x: string }>('SELECT DISTINCT CAST(xmin AS TEXT) AS x FROM w WHERE id < 100');
      expect(xmins).toHaveLength(1); // one transaction, no subtransaction of its own per job
    });

    it('a batch whose jobs end with commitWithNext: each next job starts before the last one\'s answer (one packet, not a round trip each), in order, one commit', async () => {
      const s = await openAt(await freshDb(), { poolSize: 1 });
      await s.q.run('CREATE TABLE w (id BIGINT PRIMARY KEY, seen BIGINT)');
      const held = gate();
      const holder = s.write(async (tx) => { await tx.run('INSERT INTO w(id, seen) VALUES (100, 0)'); await held.p; });
      const log: string[] = [];
      const before = { ...s.stats };
      // Each job counts the rows before it in its last statement: in order, each sees the ones before it.
      const queued = [1, 2, 3, 4].map((id) => s.write(async (tx) => {
        log.push(`start ${id}`);
        tx.commitWithNext!();
        const n = await tx.value<number>('INSERT INTO w(id, seen) SELECT ?, COUNT(*) FROM w WHERE id < 100 RETURNING seen', [id]);
        log.push(`answer ${id}`);
        return n;
      }));
      await sleep(50);
      held.open();
      await holder;
      expect(await Promise.all(queued)).toEqual([0, 1, 2, 3]);
      expect(log.indexOf('start 4')).toBeLessThan(log.indexOf('answer 1')); // all sent before the first answer came
      expect(s.stats.commits - before.commits).toBe(2); // the holder, the batch
      const xmins = await s.q.all<{ x: string }>('SELECT DISTINCT CAST(xmin AS TEXT) AS x FROM w WHERE id < 100');
      expect(xmins).toHaveLength(1);
    });

    it('a batch of such jobs where one last statement fails: nothing of the batch kept, each runs again alone, the failing one fails with its own error', async () => {
      const s = await openAt(await freshDb(), { poolSize: 1 });
      await s.q.run('CREATE TABLE w (id BIGINT PRIMARY KEY)');
      await s.q.run('INSERT INTO w(id) VALUES (3)');
      const held = gate();
      const holder = s.write(async (tx) => { await tx.run('INSERT INTO w(id) VALUES (100)'); await held.p; });
      const before = { ...s.stats };
      const runs = new Map<number, number>();
      const queued = [1, 2, 3, 4].map((id) => s.write(async (tx) => {
        runs.set(id, (runs.get(id) ?? 0) + 1);
        tx.commitWithNext!();
        return tx.run('INSERT INTO w(id) VALUES (?)', [id]); // 3 is taken
      }).then(() => 'ok', (e: { code?: string }) => e.code));
      await sleep(50);
      held.open();
      await holder;
      expect(await Promise.all(queued)).toEqual(['ok', 'ok', '23505', 'ok']);
      expect(await s.q.all('SELECT id FROM w ORDER BY id')).toEqual([{ id: 1 }, { id: 2 }, { id: 3 }, { id: 4 }, { id: 100 }]);
      expect([...runs.values()]).toEqual([2, 2, 2, 2]); // the batch, then each alone
      expect(s.stats.rolledBack - before.rolledBack).toBe(1);
      // A job that waits for its answer after ones that did not: its statement fails too (the transaction aborted by
      // the duplicate before it), and the ones still on their way run again with it. (A new store: this one now holds
      // savepoints for SAVEPOINTS_HOLD_MS after that failure, and batches with savepoints offer no commitWithNext.)
      const s2 = await openAt(await freshDb(), { poolSize: 1 });
      await s2.q.run('CREATE TABLE w (id BIGINT PRIMARY KEY)');
      await s2.q.run('INSERT INTO w(id) VALUES (3)');
      const held2 = gate();
      const holder2 = s2.write(async (tx) => { await tx.run('INSERT INTO w(id) VALUES (101)'); await held2.p; });
      runs.clear();
      const mixed = [[11, true], [3, true], [15, false]].map(([id, last]) => s2.write(async (tx) => {
        runs.set(id as number, (runs.get(id as number) ?? 0) + 1);
        if (last) tx.commitWithNext!();
        return tx.run('INSERT INTO w(id) VALUES (?)', [id]);
      }).then(() => 'ok', (e: { code?: string }) => e.code));
      await sleep(50);
      held2.open();
      await holder2;
      expect(await Promise.all(mixed)).toEqual(['ok', '23505', 'ok']);
      expect([...runs.values()]).toEqual([2, 2, 2]);
      expect(await s2.q.value('SELECT COUNT(*) FROM w WHERE id IN (11, 15)')).toBe(2);
    });

    it('lone statements (writeOne, q.run) that find every connection busy go together: one transaction sent at once, one commit, each its own answer', async () => {
      const s = await openAt(await freshDb(), { poolSize: 2 });
      await s.q.run('CREATE TABLE w (id BIGINT PRIMARY KEY, tx TEXT)');
      const held = gate();
      const holders = [100, 101].map((id) => s.write(async (tx) => {
        await tx.run('INSERT INTO w(id, tx) VALUES (?, txid_current()::text)', [id]);
        await held.p; // (a test only: a write must await nothing but tx)
      }));
      await sleep(20);
      const before = { ...s.stats };
      const lone = (id: number) => s.autocommit!.value<string>('INSERT INTO w(id, tx) VALUES (?, txid_current()::text) RETURNING id * 10', [id]);
      const queued = [lone(1), lone(2), s.q.run('INSERT INTO w(id, tx) VALUES (3, txid_current()::text)'), lone(4),
        // Each sees the ones before it: 1, 2, 3 and 4 are in.
        s.autocommit!.value<number>("INSERT INTO w(id, tx) SELECT 5, COUNT(*)::text FROM w WHERE id < 100 RETURNING CAST(tx AS INTEGER)")];
      await sleep(50);
      expect(await s.q.value('SELECT COUNT(*) FROM w')).toBe(0); // nothing committed while both are held
      held.open();
      await Promise.all(holders);
      expect(await Promise.all(queued)).toEqual([10, 20, 1, 40, 4]);
      const rows = await s.q.all<{ id: number; tx: string }>('SELECT id, tx FROM w WHERE id < 5 ORDER BY id');
      expect(rows.map((r) => r.id)).toEqual([1, 2, 3, 4]);
      expect(new Set(rows.map((r) => r.tx)).size).toBe(1); // one transaction
      expect(s.stats.commits - before.commits).toBe(3); // the two held, the lone statements
      expect(s.stats.jobs - before.jobs).toBe(7);
    });

    it('lone statements together: one that fails rolls the batch back and each runs again alone (the failing one fails with its own error); a lost connection fails the statement it cut, the others run again', async () => {
      const s = await openAt(await freshDb(), { poolSize: 1 });
      await s.q.run('CREATE TABLE w (id BIGINT PRIMARY KEY, tx TEXT)');
      const hold = async (): Promise<[Promise<void>, () => void]> => {
        const held = gate();
        const holder = s.write(async (tx) => { await tx.value('SELECT 1'); await held.p; });
        await sleep(20);
        return [holder, held.open];
      };
      const lone = (id: number) => s.autocommit!.run('INSERT INTO w(id, tx) VALUES (?, txid_current()::text)', [id]);
      let [holder, release] = await hold();
      let queued = Promise.allSettled([lone(1), lone(2), lone(1) /* duplicate key */, lone(3)]);
      release();
      await holder;
      let settled = await queued;
      expect(settled.map((r) => r.status)).toEqual(['fulfilled', 'fulfilled', 'rejected', 'fulfilled']);
      expect(String((settled[2] as PromiseRejectedResult).reason)).toMatch(/duplicate key/);
      let rows = await s.q.all<{ id: number; tx: string }>('SELECT id, tx FROM w ORDER BY id');
      expect(rows.map((r) => r.id)).toEqual([1, 2, 3]);
      expect(new Set(rows.map((r) => r.tx)).size).toBe(3); // each alone, after the batch was rolled back
      expect(s.stats.rolledBack).toBe(1);

      [holder, release] = await hold();
      queued = Promise.allSettled([lone(10), s.autocommit!.value('SELECT pg_terminate_backend(pg_backend_pid())'), lone(11)]);
      release();
      await holder;
      settled = await queued;
      expect(settled.map((r) => r.status)).toEqual(['fulfilled', 'rejected', 'fulfilled']);
      expect(((settled[1] as PromiseRejectedResult).reason as NodeSvcError).code).toBe('unavailable');
      rows = await s.q.all<{ id: number; tx: string }>('SELECT id, tx FROM w WHERE id >= 10 ORDER BY id');
      expect(rows.map((r) => r.id)).toEqual([10, 11]);
      expect(rows[0]!.tx).not.toBe(rows[1]!.tx);
      expect(s.stats.rolledBack).toBe(2);
    });

    it('lone statements together do not wait on a row lock for long: the batch gives up (lock timeout) and each runs again alone, waiting as it would alone', async () => {
      const s = await openAt(await freshDb(), { poolSize: 2 });
      await s.q.run('CREATE TABLE w (id BIGINT PRIMARY KEY, n BIGINT NOT NULL DEFAULT 0, tx TEXT)');
      await s.q.run('INSERT INTO w(id) VALUES (50)');
      const a = gate();
      const b = gate();
      // A holds row 50 (and a connection); B holds the other connection.
      const holderA = s.write(async (tx) => { await tx.run('UPDATE w SET n = n + 1 WHERE id = 50'); await a.p; });
      const holderB = s.write(async (tx) => { await tx.value('SELECT 1'); await b.p; });
      await sleep(20);
      const lone = (sql: string) => s.autocommit!.run(sql);
      const queued = Promise.allSettled([
        lone("INSERT INTO w(id, tx) VALUES (1, txid_current()::text)"),
        lone('UPDATE w SET n = n + 10 WHERE id = 50'), // waits on A's row lock
        lone("INSERT INTO w(id, tx) VALUES (2, txid_current()::text)"),
      ]);
      b.open(); // the batch runs on B's connection, and waits on row 50
      await holderB;
      // Past the batch's lock timeout (200 ms): rolled back, each statement again on its own; the first insert, alone,
      // commits before the update (which waits for A).
      await waitFor(async () => s.stats.rolledBack >= 1 && (await s.q.value('SELECT COUNT(*) FROM w WHERE id = 1')) === 1, 'the batch rolled back and the first insert run alone', 10_000, 20);
      expect(s.stats.rolledBack).toBe(1);
      a.open(); // the update, alone, waited for A as any statement would; then the last insert
      await holderA;
      const settled = await queued;
      expect(settled.map((r) => r.status)).toEqual(['fulfilled', 'fulfilled', 'fulfilled']);
      expect(await s.q.value('SELECT n FROM w WHERE id = 50')).toBe(11);
      const rows = await s.q.all<{ tx: string }>('SELECT tx FROM w WHERE id IN (1, 2)');
      expect(new Set(rows.map((r) => r.tx)).size).toBe(2);
    });

    it('a batch whose connection dies under one job: that job fails (503), the others run again alone and commit', async () => {
      const s = await openAt(await freshDb(), { poolSize: 1 });
      await s.q.run('CREATE TABLE w (id BIGINT PRIMARY KEY)');
      let release!: () => void;
      const held = new Promise<void>((r) => { release = r; });
      const holder = s.write(async (tx) => { await tx.run('INSERT INTO w(id) VALUES (100)'); await held; });
      const queued = Promise.allSettled([
        s.write((tx) => tx.run('INSERT INTO w(id) VALUES (1)')),
        s.write(async (tx) => {
          await tx.run('INSERT INTO w(id) VALUES (2)');
          await tx.value('SELECT pg_terminate_backend(pg_backend_pid())');
        }),
        s.write((tx) => tx.run('INSERT INTO w(id) VALUES (3)')),
      ]);
      release();
      await holder;
      const settled = await queued;
      expect(settled.map((r) => r.status)).toEqual(['fulfilled', 'rejected', 'fulfilled']);
      expect(((settled[1] as PromiseRejectedResult).reason as NodeSvcError).code).toBe('unavailable');
      expect(await s.q.all('SELECT id FROM w ORDER BY id', [], true)).toEqual([{ id: 1n }, { id: 3n }, { id: 100n }]);
    });

    it('rolls back a throwing job alone (its own error), the others commit', async () => {
      const s = await openAt(await freshDb());
      await s.q.run('CREATE TABLE w (id BIGINT PRIMARY KEY)');
      const boom = new Error('job 2 changed its mind');
      const settled = await Promise.allSettled([
        s.write((tx) => tx.run('INSERT INTO w(id) VALUES (1)')),
        s.write(async (tx) => {
          await tx.run('INSERT INTO w(id) VALUES (2)');
          throw boom;
        }),
        s.write(async (tx) => tx.run('INSERT INTO w(id) VALUES (1)')), // duplicate key: an error of the database
        s.write(async (tx) => {
          // Swallowing the database's error leaves the transaction failed: the job is refused, not half-committed.
          await tx.run('INSERT INTO w(id) VALUES (1)').catch(() => {});
          return 'pretended';
        }),
        s.write((tx) => tx.run('INSERT INTO w(id) VALUES (3)')),
      ]);
      expect(settled.map((r) => r.status)).toEqual(['fulfilled', 'rejected', 'rejected', 'rejected', 'fulfilled']);
      expect((settled[1] as PromiseRejectedResult).reason).toBe(boom);
      expect(String((settled[2] as PromiseRejectedResult).reason)).toMatch(/duplicate key/);
      expect(await s.q.all('SELECT id FROM w ORDER BY id')).toEqual([{ id: 1 }, { id: 3 }]);
      // The same when the swallowing job runs beside another (each is its own transaction).
      const tail = await Promise.allSettled([
        s.write((tx) => tx.run('INSERT INTO w(id) VALUES (10)')),
        s.write(async (tx) => {
          await tx.run('INSERT INTO w(id) VALUES (11)');
          await tx.run('INSERT INTO w(id) VALUES (1)').catch(() => {});
        }),
      ]);
      expect(tail.map((r) => r.status)).toEqual(['fulfilled', 'rejected']);
      expect(await s.q.all('SELECT id FROM w ORDER BY id')).toEqual([{ id: 1 }, { id: 3 }, { id: 10 }]);

      // A lone job that throws: nothing of it commits.
      await expect(s.write(async (tx) => {
        await tx.run('INSERT INTO w(id) VALUES (4)');
        throw boom;
      })).rejects.toBe(boom);
      expect(await s.q.value('SELECT COUNT(*) FROM w WHERE id = 4')).toBe(0);
      // The tx of a finished job cannot be used any more (it would write into someone else's transaction).
      let kept: { run(sql: string): Promise<number> } | undefined;
      await s.write(async (tx) => { kept = tx; });
      await expect(kept!.run('INSERT INTO w(id) VALUES (5)')).rejects.toThrow(/transaction has ended/);
    });

    it('rejects the job whose connection dies, commits nothing of it, and the others commit', async () => {
      const s = await openAt(await freshDb());
      await s.q.run('CREATE TABLE w (id BIGINT PRIMARY KEY)');
      const settled = await Promise.allSettled([
        s.write((tx) => tx.run('INSERT INTO w(id) VALUES (1)')),
        s.write(async (tx) => {
          await tx.run('INSERT INTO w(id) VALUES (2)');
          await tx.value('SELECT pg_terminate_backend(pg_backend_pid())');
        }),
        s.write((tx) => tx.run('INSERT INTO w(id) VALUES (3)')),
      ]);
      expect(settled.map((r) => r.status)).toEqual(['fulfilled', 'rejected', 'fulfilled']);
      const err = (settled[1] as PromiseRejectedResult).reason as NodeSvcError;
      expect(err).toBeInstanceOf(NodeSvcError);
      expect(err.code).toBe('unavailable');
      expect(err.status).toBe(503);
      expect(await s.q.all('SELECT id FROM w ORDER BY id', [], true)).toEqual([{ id: 1n }, { id: 3n }]);
      // The store goes on with a new connection.
      await s.write((tx) => tx.run('INSERT INTO w(id) VALUES (4)'));
      expect(await s.q.value('SELECT COUNT(*) FROM w')).toBe(3);
    });

    it('a read-modify-write guarded by its row lock (forUpdate) from two stores: 200 increments from each end make exactly +400', async () => {
      const url = await freshDb();
      const a = await openAt(url);
      const b = await openAt(url);
      await a.q.run('CREATE TABLE counter (id BIGINT PRIMARY KEY, n BIGINT NOT NULL)');
      await a.q.run('INSERT INTO counter(id, n) VALUES (1, 0), (2, 0)');
      const bump = (s: PostgresStore, id: number) => s.write(async (tx) => {
        const n = await tx.value<bigint>(`SELECT n FROM counter WHERE id = ?${forUpdate(tx)}`, [id], true);
        await tx.run('UPDATE counter SET n = ? WHERE id = ?', [n! + 1n, id]);
      });
      // The same under a keyed lock (lockKey), for what has no row yet.
      const bumpKeyed = (s: PostgresStore) => s.write(async (tx) => {
        await lockKey(tx, 'counter:2');
        const n = await tx.value<bigint>('SELECT n FROM counter WHERE id = 2', [], true);
        await tx.run('UPDATE counter SET n = ? WHERE id = 2', [n! + 1n]);
      });
      const jobs: Promise<void>[] = [];
      for (let i = 0; i < 200; i++) jobs.push(bump(a, 1), bump(b, 1), bumpKeyed(a), bumpKeyed(b));
      await Promise.all(jobs);
      expect(await a.q.all('SELECT id, n FROM counter ORDER BY id', [], true)).toEqual([{ id: 1n, n: 400n }, { id: 2n, n: 400n }]);
      expect(a.stats.commits).toBeGreaterThan(0);
      expect(b.stats.commits).toBeGreaterThan(0);
    });

    it('runs a write again after a deadlock (the database picks a victim; both end up committed)', async () => {
      const { a, b } = await twoStoresOnPair();
      let runs = 0;
      // Opposite lock orders, each waiting for the other to hold its first row: one of them is chosen as the victim.
      const aHeld = gate();
      const bHeld = gate();
      const cross = (s: PostgresStore, first: number, second: number, holds: () => void, other: Promise<void>) => s.write(async (tx) => {
        runs++;
        await tx.run('UPDATE pair SET n = n + 1 WHERE id = ?', [first]);
        holds();
        await other;
        await tx.run('UPDATE pair SET n = n + 1 WHERE id = ?', [second]);
      });
      await Promise.all([cross(a, 1, 2, aHeld.open, bHeld.p), cross(b, 2, 1, bHeld.open, aHeld.p)]);
      // Two, and the victim's second run; sometimes more: see the next test.
      expect(runs).toBeGreaterThanOrEqual(3);
      expect(await a.q.all('SELECT n FROM pair ORDER BY id', [], true)).toEqual([{ n: 2n }, { n: 2n }]);
    });

    it('two writes that deadlock a second time (the victim took its first row back before the survivor\'s server process ran: a loaded machine) are run again too; both commit', async () => {
      // CI failed once on the test above, expecting exactly three runs (its message was not kept). One way it can see
      // more: after the victim's rollback wakes the survivor, a row whose locker aborted is free to any newcomer, the
      // survivor's tuple lock notwithstanding; a victim quick to begin again takes its first row back before the
      // survivor's server process gets the CPU, and the two deadlock again. Here the survivor's server process is
      // stopped (SIGSTOP) through that window, so it happens every time.
      const { a, b } = await twoStoresOnPair();
      let aRuns = 0;
      let bRuns = 0;
      const aHeld = gate();
      const bHeld = gate();
      let aPid = 0;
      const aWaits = gate(); // a's second statement is on its way
      const job = (side: 'a' | 'b') => async (tx: Sql) => {
        const again = side === 'a' ? ++aRuns > 1 : ++bRuns > 1;
        const [first, second] = side === 'a' ? [1, 2] : [2, 1];
        if (side === 'a' && !again) aPid = (await tx.value<number>('SELECT pg_backend_pid()'))!;
        await tx.run('UPDATE pair SET n = n + 1 WHERE id = ?', [first]);
        // b's second run holds its first row again: a's server process may go on now.
        if (side === 'b' && again && bRuns === 2) process.kill(aPid, 'SIGCONT');
        (side === 'a' ? aHeld : bHeld).open();
        await (side === 'a' ? bHeld : aHeld).p;
        if (side === 'a' && !again) aWaits.open();
        if (side === 'b' && !again) {
          // a waits for b's row: stop a's server process, so that b's deadlock check is the one that runs (b the victim)
          // and a cannot take the row b lets go before b's next transaction does.
          await aWaits.p;
          await waitFor(async () => Number(await b.q.value('SELECT COUNT(*) FROM pg_locks WHERE pid = ? AND NOT granted', [aPid])) > 0, "a's server process waiting for b's row", 10_000, 10);
          process.kill(aPid, 'SIGSTOP');
        }
        await tx.run('UPDATE pair SET n = n + 1 WHERE id = ?', [second]);
      };
      try {
        await Promise.all([a.write(job('a')), b.write(job('b'))]);
      } finally {
        try { if (aPid) process.kill(aPid, 'SIGCONT'); } catch { /* gone: the error that ended the test is the one to see */ }
      }
      expect(bRuns).toBeGreaterThanOrEqual(2); // b the first victim
      expect(aRuns + bRuns).toBeGreaterThanOrEqual(4); // and a second deadlock: one of them ran once more
      expect(await a.q.all('SELECT n FROM pair ORDER BY id', [], true)).toEqual([{ n: 2n }, { n: 2n }]);
    }, 30_000);
  });

  describe('recordEvent on PostgreSQL (one statement with its fan-out)', () => {
    it('makes exactly the deliveries matches() says, however many match, with ids in the subscriptions\' order, and counts them', async () => {
      const s = await openAt(await freshDb());
      await s.q.run("INSERT INTO nodes(id, created_at) VALUES ('n1', 0), ('n2', 0)");
      const subs: Array<{ id: string; events: string; schema_version: '1.0.0' | '1.1.0'; node: string; status: string }> = [];
      const kinds = ['*', '["budget.halted"]', '["stream.revoked","subscription.closed"]', '["subscription.closed"]', '["budget.released"]'];
      for (let i = 0; i < 24; i++)
        subs.push({ id: `whk_${String(i).padStart(2, '0')}`, events: kinds[i % kinds.length]!, schema_version: i % 3 === 0 ? '1.0.0' : '1.1.0', node: 'n1', status: i === 13 ? 'disabled' : 'active' });
      subs.push({ id: 'whk_other', events: '*', schema_version: '1.1.0', node: 'n2', status: 'active' });
      await s.write(async (tx) => {
        for (const x of subs)
          await subscriptions.insert(tx, { id: x.id, node_id: x.node, url: 'https://r.example/h', events: x.events, schema_version: x.schema_version, description: null, status: x.status as 'active', secret: 'whsec_x', created_at: 0 });
      });
      for (const kind of ['budget.halted', 'subscription.closed', 'stream.revoked'] as const) {
        const e = await s.write((tx) => recordEvent(tx, 'n1', kind, 'ref', {}, 1000));
        const got = (await s.q.all<{ subscription_id: string; id: string }>('SELECT subscription_id, id FROM deliveries WHERE event_seq = ? ORDER BY subscription_id', [e.seq]));
        const want = subs.filter((x) => x.node === 'n1' && x.status === 'active' && matches(x, kind)).map((x) => x.id).sort();
        expect(got.map((r) => r.subscription_id), kind).toEqual(want);
        expect(want.length).toBeGreaterThan(0);
        for (const r of got) expect(r.id).toMatch(/^dlv_[0-9A-HJKMNP-TV-Z]{26}$/); // ids as deliveries.insert makes them
        expect(new Set(got.map((r) => r.id)).size).toBe(got.length);
        // Made in the statement from one block (newIdBlock), the k-th subscription by id the k-th id: in the same order.
        expect(got.map((r) => r.id)).toEqual(got.map((r) => r.id).sort());
      }
      // '*' and budget.halted subscriptions of both versions: more than the 8 ids the statement made ahead until
      // 2026-11-30 (past them, it inserted the rest one by one).
      expect(subs.filter((x) => x.node === 'n1' && x.status === 'active' && matches(x, 'budget.halted')).length).toBeGreaterThan(8);
      // Past 32 digits' worth of subscriptions the id's second digit from the end moves too: 40 more on n2, all taking it.
      await s.write(async (tx) => {
        for (let i = 0; i < 40; i++)
          await subscriptions.insert(tx, { id: `whk_n2_${String(i).padStart(2, '0')}`, node_id: 'n2', url: 'https://r.example/h', events: '*', schema_version: '1.1.0', description: null, status: 'active', secret: 'whsec_x', created_at: 0 });
      });
      const wide = await s.write((tx) => recordEvent(tx, 'n2', 'budget.halted', 'ref', {}, 1000));
      const ids = (await s.q.all<{ id: string }>('SELECT id FROM deliveries WHERE event_seq = ? ORDER BY subscription_id', [wide.seq])).map((r) => r.id);
      expect(ids.length).toBe(41);
      expect(new Set(ids).size).toBe(41);
      expect(ids).toEqual([...ids].sort());
      expect(new Set(ids.map((id) => id.slice(0, -4))).size).toBe(1); // one block
      // Every digit of the encoding, against the same digits made in JS (41 subscriptions move only the last two).
      const ks = [0, 1, 31, 32, 33, 1023, 1024, 32767, 32768, 1048574, 1048575];
      const crockford = '0123456789ABCDEFGHJKMNPQRSTVWXYZ';
      const js = (k: number) => [32768, 1024, 32, 1].map((p) => crockford[Math.floor(k / p) % 32]).join('');
      const sql = await s.q.all<{ k: number; d: string }>(`SELECT k, ${blockDigitsSql('k')} AS d FROM (SELECT CAST(unnest(CAST(? AS BIGINT[])) AS BIGINT) AS k) v ORDER BY k`, [ks]);
      expect(sql.map((r) => r.d)).toEqual(ks.map(js));
      // The counters the triggers keep agree with the rows, summed over their slots.
      const counted = await s.q.value<number>("SELECT CAST(SUM(n) AS BIGINT) FROM delivery_counts WHERE state = 'pending'");
      expect(Number(counted)).toBe(await s.q.value<number>("SELECT COUNT(*) FROM deliveries WHERE status = 'pending'"));
    });
  });

  describe('commitWithNext (a write\'s COMMIT sent with its last statement)', () => {
    it('commits with the last statement: the COMMIT runs as soon as it is done, before the callback returns; nothing may follow it', async () => {
      const s = await openAt(await freshDb());
      await s.q.run('CREATE TABLE c (id BIGINT PRIMARY KEY)');
      // Without it, a row the write inserted is not visible elsewhere until the write returns (its COMMIT is sent
      // then); with it, the COMMIT went right behind the statement, and the server runs it as soon as the statement is
      // done: another connection sees the row while the callback has not returned. (A test only: a write reads
      // through nothing but its tx.)
      const countOf = (id: number) => s.q.value<number>('SELECT COUNT(*) FROM c WHERE id = ?', [id]);
      const plain = await s.write(async (tx) => { await tx.run('INSERT INTO c(id) VALUES (1)'); await sleep(200); return countOf(1); });
      expect(plain).toBe(0);
      const early = await s.write(async (tx) => {
        await tx.run('INSERT INTO c(id) VALUES (2)');
        tx.commitWithNext!();
        await tx.run('INSERT INTO c(id) VALUES (3)');
        await waitFor(async () => (await countOf(3)) === 1, 'the row committed before the callback returned', 10_000);
        return countOf(2);
      });
      expect(early).toBe(1);
      expect(await s.q.value('SELECT COUNT(*) FROM c')).toBe(3);
      // A statement after the last one is refused by name (the COMMIT has gone: what came before it is kept).
      await expect(s.write(async (tx) => {
        tx.commitWithNext!();
        await tx.run('INSERT INTO c(id) VALUES (4)');
        await tx.run('INSERT INTO c(id) VALUES (5)');
      })).rejects.toThrow(/this transaction has ended/);
      expect(await s.q.all('SELECT id FROM c WHERE id >= 4 ORDER BY id')).toEqual([{ id: 4 }]);
    });

    it('a last statement that fails leaves nothing of the write, with its own error; the connection serves the next write', async () => {
      const s = await openAt(await freshDb(), { poolSize: 1 });
      await s.q.run('CREATE TABLE c (id BIGINT PRIMARY KEY)');
      await s.q.run('INSERT INTO c(id) VALUES (1)');
      const err = await s.write(async (tx) => {
        await tx.run('INSERT INTO c(id) VALUES (2)');
        tx.commitWithNext!();
        await tx.run('INSERT INTO c(id) VALUES (1)'); // a duplicate key
      }).then(() => undefined, (e: unknown) => e as { code?: string });
      expect(err?.code).toBe('23505');
      expect(await s.q.all('SELECT id FROM c ORDER BY id')).toEqual([{ id: 1 }]);
      // One connection in the pool: the next write gets the same one, in a clean state.
      expect(await s.write(async (tx) => { tx.commitWithNext!(); return tx.run('INSERT INTO c(id) VALUES (3)'); })).toBe(1);
      expect(await s.write(async (tx) => tx.run('INSERT INTO c(id) VALUES (4)'))).toBe(1);
      expect(await s.q.all('SELECT id FROM c ORDER BY id')).toEqual([{ id: 1 }, { id: 3 }, { id: 4 }]);
      // A last statement pg refuses before sending it (a value it cannot send: here a circular object) never reaches
      // the server, and the COMMIT sent with it commits what came before: the write says so, not "nothing kept".
      const circular: Record<string, unknown> = {};
      circular.self = circular;
      await expect(s.write(async (tx) => {
        await tx.run('INSERT INTO c(id) VALUES (5)');
        tx.commitWithNext!();
        await tx.run('INSERT INTO c(id) VALUES (?)', [circular]);
      })).rejects.toThrow(/the write committed, but its callback failed/);
      expect(await s.q.all('SELECT id FROM c WHERE id = 5')).toEqual([{ id: 5 }]);
      expect(await s.write(async (tx) => tx.run('INSERT INTO c(id) VALUES (6)'))).toBe(1); // and the connection goes on
    });

    it('recordEvent as the last statement: every matching subscription gets its delivery, in the one run, the event committed with it', async () => {
      const s = await openAt(await freshDb());
      await s.q.run("INSERT INTO nodes(id, created_at) VALUES ('n1', 0), ('n2', 0)");
      await s.write(async (tx) => {
        // n1: 11 subscriptions taking budget.halted (more than the 8 delivery ids the statement made ahead until 2026-11-30,
        // when past them the statement failed on purpose and the write ran again), 1 that does not; n2: 3.
        for (let i = 0; i < 12; i++)
          await subscriptions.insert(tx, { id: `whk_a${String(i).padStart(2, '0')}`, node_id: 'n1', url: 'https://r.example/h', events: i === 11 ? '["stream.revoked"]' : '*', schema_version: '1.1.0', description: null, status: 'active', secret: 'whsec_x', created_at: 0 });
        for (let i = 0; i < 3; i++)
          await subscriptions.insert(tx, { id: `whk_b${i}`, node_id: 'n2', url: 'https://r.example/h', events: '*', schema_version: '1.1.0', description: null, status: 'active', secret: 'whsec_x', created_at: 0 });
      });
      // One run each, and the event is committed before the callback returns (the COMMIT went with it).
      for (const [node, want] of [['n1', 11], ['n2', 3]] as const) {
        const id = `evt_${node}_last`;
        let runs = 0;
        let seenEarly = false;
        const e = await s.write(async (tx) => {
          runs++;
          await tx.run("INSERT INTO budgets(node_id, id, status, reasons, released_micro, updated_at) VALUES (?, 'b1', 'halted', '[]', NULL, 0)", [node]);
          const ev = await recordEvent(tx, node, 'budget.halted', 'budget:b1', { budget: 'b1' }, 1000, id, { last: true });
          // (A test only: a write reads through nothing but its tx.)
          seenEarly = !!(await waitFor(async () => (await s.q.value('SELECT COUNT(*) FROM events WHERE id = ?', [id])) === 1, 'the event committed with its statement', 10_000));
          return ev;
        });
        expect(runs).toBe(1);
        expect(seenEarly).toBe(true);
        expect(await s.q.value('SELECT COUNT(*) FROM events WHERE id = ?', [id])).toBe(1);
        expect(await s.q.value('SELECT COUNT(*) FROM deliveries WHERE event_seq = ?', [e.seq])).toBe(want);
        expect(await s.q.value('SELECT COUNT(*) FROM budgets WHERE node_id = ?', [node])).toBe(1); // the write's other statement, once
      }
    });
    it('recordEvent as the last statement of jobs that wait for a connection together: one statement for all their events, each job its own event in order, the deliveries and counts one by one would make; a bad row runs them again alone', async () => {
      // The merged statement (mergeable, sql.ts): wrapped here only to count how many events each use of it carried.
      const entry = [...mergeable.values()].find((m) => m.sql.includes('INSERT INTO events'))!;
      const merge = entry.merge;
      const carried: number[] = [];
      entry.merge = (ps) => { carried.push(ps.length); return merge(ps); };
      try {
        const kinds = ['budget.halted', 'subscription.closed', 'stream.revoked'] as const;
        const filters = ['*', '["budget.halted"]', '["stream.revoked","subscription.closed"]', '["subscription.closed"]', '["budget.released"]'];
        const subs = Array.from({ length: 14 }, (_, i) => ({ id: `whk_${String(i).padStart(2, '0')}`, node: i % 4 === 3 ? 'n2' : 'n1', events: filters[i % filters.length]!,
          schema_version: (i % 3 === 0 ? '1.0.0' : '1.1.0') as '1.0.0' | '1.1.0', status: i === 7 ? 'disabled' : 'active' }));
        // Eight events, in one batch (batched: true) or one write each: the same rows either way, ids aside.
        const run = async (batched: boolean, badAt?: number) => {
          const s = await openAt(await freshDb(), { poolSize: 1 });
          await s.q.run("INSERT INTO nodes(id, created_at) VALUES ('n1', 0), ('n2', 0)");
          await s.write(async (tx) => {
            for (const x of subs)
              await subscriptions.insert(tx, { id: x.id, node_id: x.node, url: 'https://r.example/h', events: x.events, schema_version: x.schema_version, description: null, status: x.status as 'active', secret: 'whsec_x', created_at: 0 });
          });
          if (badAt !== undefined) await s.write((tx) => recordEvent(tx, 'n1', 'budget.halted', 'taken', {}, 500, 'evt_taken'));
          const job = (i: number) => async (tx: Sql) => {
            // One job writes something of its own first: its event still comes after it, in its place among the events.
            if (i === 4) await tx.run("INSERT INTO budgets(node_id, id, status, reasons, released_micro, updated_at) VALUES ('n1', 'b4', 'halted', '[]', NULL, 0)");
            return recordEvent(tx, i % 2 ? 'n2' : 'n1', kinds[i % 3]!, `ref:${i}`, { i }, 1000 + i, i === badAt ? 'evt_taken' : `evt_${i}`, { last: true });
          };
          let got: Array<PromiseSettledResult<{ seq: number; id: string }>>;
          if (batched) {
            const held = gate();
            const holder = s.write(async (tx) => { await tx.run('SELECT 1'); await held.p; });
            const queued = Array.from({ length: 8 }, (_, i) => s.write(job(i)));
            await sleep(50);
            held.open();
            await holder;
            got = await Promise.allSettled(queued);
          } else {
            got = [];
            for (let i = 0; i < 8; i++) got.push(await s.write(job(i)).then((value) => ({ status: 'fulfilled' as const, value }), (reason: unknown) => ({ status: 'rejected' as const, reason })));
          }
          const events = await s.q.all<{ seq: number; id: string; node_id: string; type: string; external_ref: string; occurred_at: number }>("SELECT seq, id, node_id, type, external_ref, occurred_at FROM events WHERE id <> 'evt_taken' ORDER BY seq");
          const dels = await s.q.all<{ event_id: string; subscription_id: string; id: string; status: string; next_attempt_at: number }>(
            'SELECT e.id AS event_id, d.subscription_id, d.id, d.status, d.next_attempt_at FROM deliveries d JOIN events e ON e.seq = d.event_seq WHERE e.id <> \'evt_taken\' ORDER BY d.rowid');
          const counts = await s.q.all("SELECT subscription_id, CAST(SUM(n) AS BIGINT) AS n FROM delivery_counts WHERE state = 'pending' GROUP BY subscription_id HAVING SUM(n) <> 0 ORDER BY subscription_id");
          const xacts = await s.q.value<number>("SELECT COUNT(DISTINCT xmin::text) FROM events WHERE id <> 'evt_taken'");
          return { got, events, dels, counts, xacts };
        };
        const one = await run(false);
        expect(carried).toEqual([]); // one at a time: nothing to merge
        const all = await run(true);
        expect(carried).toEqual([8]); // the batch's eight events in one statement
        expect(all.xacts).toBe(1);
        // Each job its own event back, in the jobs' order.
        const seqs = all.got.map((g) => (g as PromiseFulfilledResult<{ seq: number; id: string }>).value);
        expect(seqs.map((e) => e.id)).toEqual(Array.from({ length: 8 }, (_, i) => `evt_${i}`));
        expect(seqs.map((e) => e.seq)).toEqual(all.events.map((e) => e.seq));
        // The same events, deliveries (by subscription, in order) and counts as one write each.
        const shape = (r: typeof one) => ({
          events: r.events.map(({ id, node_id, type, external_ref, occurred_at }) => ({ id, node_id, type, external_ref, occurred_at })),
          dels: r.dels.map(({ event_id, subscription_id, status, next_attempt_at }) => ({ event_id, subscription_id, status, next_attempt_at })),
          counts: r.counts,
        });
        expect(shape(all)).toEqual(shape(one));
        expect(one.dels.length).toBeGreaterThan(8);
        for (const ev of all.events) {
          const ids = all.dels.filter((d) => d.event_id === ev.id);
          const want = subs.filter((x) => x.node === ev.node_id && x.status === 'active' && matches(x, ev.type as (typeof kinds)[number])).map((x) => x.id).sort();
          expect(ids.map((d) => d.subscription_id)).toEqual(want);
          for (const d of ids) expect(d.id).toMatch(/^dlv_[0-9A-HJKMNP-TV-Z]{26}$/);
          expect(ids.map((d) => d.id)).toEqual(ids.map((d) => d.id).sort()); // one block per event, the k-th subscription the k-th id
        }
        // A row the merged statement cannot write (an event id already taken): nothing of it kept, each job again
        // alone; the bad one fails with its own error, the seven others are recorded.
        carried.length = 0;
        const bad = await run(true, 5);
        expect(carried).toEqual([8]);
        expect(bad.got.map((g) => g.status)).toEqual(['fulfilled', 'fulfilled', 'fulfilled', 'fulfilled', 'fulfilled', 'rejected', 'fulfilled', 'fulfilled']);
        expect(((bad.got[5] as PromiseRejectedResult).reason as { code?: string }).code).toBe('23505');
        expect(bad.events.map((e) => e.id)).toEqual([0, 1, 2, 3, 4, 6, 7].map((i) => `evt_${i}`));
        expect(bad.xacts).toBe(7); // each alone
      } finally {
        entry.merge = merge;
      }
    });
  });


  describe('recordAttempts on PostgreSQL (a batch of results in one statement)', () => {
    it('leaves the same deliveries, attempt rows (in order) and counters as recordAttempt one by one; a stale claim records nothing', async () => {
      const outcomes: AttemptRecord[] = [];
      const run = async (batched: boolean) => {
        const s = await openAt(await freshDb());
        await s.q.run("INSERT INTO nodes(id, created_at) VALUES ('n1', 0)");
        await s.write((tx) => subscriptions.insert(tx, { id: 'whk_1', node_id: 'n1', url: 'https://r.example/h', events: '*', schema_version: '1.1.0', description: null, status: 'active', secret: 'whsec_x', created_at: 0 }));
        const seqs: number[] = [];
        for (let i = 0; i < 6; i++) seqs.push((await s.write((tx) => recordEvent(tx, 'n1', 'budget.halted', `r${i}`, {}, 1000))).seq);
        await s.q.run('UPDATE deliveries SET attempts = 1'); // as claimed once
        const ids = await s.q.all<{ id: string; event_seq: number }>('SELECT id, event_seq FROM deliveries ORDER BY event_seq');
        const base = (i: number) => ({ deliveryId: ids[i]!.id, subscriptionId: 'whk_1', eventSeq: ids[i]!.event_seq, attempt: 1, at: 2000 + i, durationMs: 3 });
        const batch: AttemptRecord[] = [
          { ...base(0), statusCode: 204, error: null, outcome: 'delivered', nextAttemptAt: null },
          { ...base(1), statusCode: 500, error: 'HTTP 500', outcome: 'failed', nextAttemptAt: 9000 },
          { ...base(2), statusCode: 500, error: 'HTTP 500', outcome: 'failed', nextAttemptAt: null }, // dead: no retry left
          { ...base(3), statusCode: 410, error: 'HTTP 410', outcome: 'gone', nextAttemptAt: null },
          { ...base(4), attempt: 2, statusCode: 204, error: null, outcome: 'delivered', nextAttemptAt: null }, // stale: claimed again since
          { ...base(5), statusCode: null, error: 'no answer within 1 s', outcome: 'failed', nextAttemptAt: 7000 },
        ];
        outcomes.splice(0, outcomes.length, ...batch);
        const recorded = await s.write((tx) => (batched ? recordAttempts(tx, batch) : Promise.all(batch.map((a) => recordAttempt(tx, a)))));
        const rows = await s.q.all('SELECT event_seq, status, attempts, next_attempt_at, delivered_at, last_status, last_error, recorded_attempts FROM deliveries ORDER BY event_seq');
        const attemptRows = await s.q.all('SELECT delivery_id, event_seq, attempt, attempted_at, duration_ms, status_code, error, outcome, next_attempt_at FROM delivery_attempts ORDER BY rowid');
        const counts = await s.q.all("SELECT state, CAST(SUM(n) AS BIGINT) AS n FROM delivery_counts WHERE subscription_id = 'whk_1' GROUP BY state HAVING SUM(n) <> 0 ORDER BY state");
        const idOrder = await s.q.all<{ id: string }>('SELECT id FROM delivery_attempts ORDER BY rowid');
        expect(idOrder.map((r) => r.id)).toEqual([...idOrder.map((r) => r.id)].sort()); // rowid order is id order
        return { recorded, rows, attempts: attemptRows.map((r) => ({ ...(r as object), delivery_id: ids.findIndex((x) => x.id === (r as { delivery_id: string }).delivery_id) })), counts, seqs };
      };
      const one = await run(false);
      const many = await run(true);
      expect(many.recorded).toEqual([true, true, true, true, false, true]);
      expect(many.recorded).toEqual(one.recorded);
      expect(many.rows).toEqual(one.rows);
      expect(many.attempts).toEqual(one.attempts);
      expect(many.attempts.map((a) => (a as { delivery_id: number }).delivery_id)).toEqual([0, 1, 2, 3, 5]);
      expect(many.counts).toEqual(one.counts);
      expect(outcomes).toHaveLength(6);
    });
  });

  describe('the delivery worker\'s wake', () => {
    it('comes after the event\'s commit (a claim on another connection finds it), never for a rollback, only when a delivery was made', async () => {
      const s = await openAt(await freshDb());
      await s.q.run("INSERT INTO nodes(id, created_at) VALUES ('n1', 0)");
      await s.write((tx) => subscriptions.insert(tx, { id: 'whk_1', node_id: 'n1', url: 'https://r.example/h', events: '["budget.halted"]', schema_version: '1.1.0', description: null, status: 'active', secret: 'whsec_x', created_at: 0 }));
      const seen: Array<Promise<number>> = [];
      // What the worker would do when woken: read the pending deliveries through another connection.
      const off = onEventRecorded(() => { seen.push(s.q.value<number>("SELECT COUNT(*) FROM deliveries WHERE status = 'pending'").then(Number)); });
      try {
        await s.write(async (tx) => {
          await recordEvent(tx, 'n1', 'budget.halted', 'ref', {}, 1000);
          await tx.value('SELECT pg_sleep(0.2)'); // the commit comes well after the insert
        });
        expect(await Promise.all(seen)).toEqual([1]);
        await expect(s.write(async (tx) => { await recordEvent(tx, 'n1', 'budget.halted', 'ref', {}, 1000); throw new Error('rolled back'); })).rejects.toThrow('rolled back');
        await s.write((tx) => recordEvent(tx, 'n1', 'stream.revoked', 'ref', {}, 1000)); // no subscription takes it
        expect(seen).toHaveLength(1);
      } finally {
        off();
      }
    });
  });

  describe('claimDue', () => {
    it("never claims for a subscription another daemon disabled while this one's active list is cached", async () => {
      vi.useFakeTimers({ toFake: ['Date'], now: 1_800_000_000_000 }); // the cached list (good for 1 s; kept per store, as the worker passes it) stays the one read first
      try {
        const a = await openAt(await freshDb());
        await a.q.run("INSERT INTO nodes(id, created_at) VALUES ('n1', 0)");
        for (const id of ['whk_1', 'whk_2']) await a.write((tx) => subscriptions.insert(tx, { id, node_id: 'n1', url: 'https://r.example/h', events: '*', schema_version: '1.1.0', description: null, status: 'active', secret: 'whsec_x', created_at: 0 }));
        for (let i = 0; i < 5; i++) await a.write((tx) => recordEvent(tx, 'n1', 'budget.halted', `budget:b${i}`, { budget: `b${i}`, reason: 'anomaly' }, 1000));
        const limits = { concurrency: 256, perNode: 128, perSubscription: 64 };
        const none = { bySubscription: {}, byNode: {} };
        const count = (rows: Array<{ subscription_id: string }>) => rows.reduce<Record<string, number>>((m, r) => ({ ...m, [r.subscription_id]: (m[r.subscription_id] ?? 0) + 1 }), {});
        expect(count(await a.transaction((tx) => claimDue(tx, Date.now(), 60_000, 2, limits, none, 0, a)))).toEqual({ whk_1: 1, whk_2: 1 });
        await a.q.run("UPDATE webhook_subscriptions SET status = 'disabled' WHERE id = 'whk_2'"); // not through setStatus: the cache stays
        expect(count(await a.transaction((tx) => claimDue(tx, Date.now(), 60_000, 10, limits, none, 1, a)))).toEqual({ whk_1: 4 });
      } finally {
        vi.useRealTimers();
      }
    });
  });

  describe('the headroom read (service/streams.ts headroomJson on PostgreSQL)', () => {
    it('one database read for the requests that come while it is on its way; never across a write of this daemon, a millisecond, or a clock step; another daemon\'s write seen 1 ms later', async () => {
      const url = await freshDb();
      const s = await openAt(url);
      const other = await openAt(url); // another daemon on the same database
      await addNode(s, 'node-a');
      await s.write((tx) => streams.insert(tx, {
        node_id: 'node-a', id: 's1', budget: 'b1', issuer: 'https://issuer.test', payer: 'p1', credential_id: 'c1', credential: 'x', iat: 0, exp: 4_000_000_000,
        cap_micro: 1_000_000n, asset: 'USDC', unit_price_micro: 1n, rate_micro_per_s: null, mode: 'escrow', voucher_key: '{}', claims: '{}', now: 1_000, funding_source: null,
      }));
      let reads = 0;
      const get = s.q.get.bind(s.q);
      (s.q as { get: typeof get }).get = ((...a: Parameters<typeof get>) => { reads++; return get(...a); }) as typeof get;
      let now = 10_000;
      const d = {
        store: s, config: DEFAULT_SERVICE_CONFIG, now: () => now, keyring: undefined as never,
        funding: { check: async () => { throw new Error('not used'); }, unavailable: () => undefined },
      } as Deps;
      const billed = async () => JSON.parse(await headroomJson(d, 'node-a', 's1')).billedMicro as string;
      // Twenty at once: one read, one text. The process's clock (performance.now, which bounds a kept read to 1 ms) held
      // still meanwhile: on a loaded machine a pause of the process between two of the twenty calls crossed that
      // millisecond and made a second read (fresh-clone CI at 16:24: 2 reads).
      vi.useFakeTimers({ toFake: ['performance'] });
      let texts: string[];
      try {
        texts = await Promise.all(Array.from({ length: 20 }, () => headroomJson(d, 'node-a', 's1')));
      } finally {
        vi.useRealTimers();
      }
      expect(reads).toBe(1);
      expect(new Set(texts).size).toBe(1);
      expect(JSON.parse(texts[0]!)).toMatchObject({ billedMicro: '0', asOf: new Date(10_000).toISOString() });
      // A write of this daemon: the very next read sees it.
      await s.write((tx) => tx.run("UPDATE streams SET billed_micro = 400 WHERE node_id = 'node-a' AND id = 's1'"));
      expect(await billed()).toBe('400');
      await s.q.run("UPDATE streams SET billed_micro = 500 WHERE node_id = 'node-a' AND id = 's1'"); // a lone statement too
      expect(await billed()).toBe('500');
      // Another daemon's write: seen by a read 1 ms later at most.
      await other.write((tx) => tx.run("UPDATE streams SET billed_micro = 700 WHERE node_id = 'node-a' AND id = 's1'"));
      await sleep(2);
      expect(await billed()).toBe('700');
      // A clock step (the rate window moves): not served by a read begun for another time, even one still on its way.
      const later = { ...d, now: () => now + 60_000 } as Deps;
      await s.q.run("UPDATE streams SET budget = 'b1' WHERE node_id = 'node-a' AND id = 's1'"); // a write here: nothing kept
      const before = reads;
      const [x, y] = await Promise.all([headroomJson(d, 'node-a', 's1'), headroomJson(later, 'node-a', 's1')]);
      expect(reads).toBe(before + 2);
      expect(JSON.parse(y).asOf).toBe(new Date(now + 60_000).toISOString());
      expect(JSON.parse(x).asOf).toBe(new Date(now).toISOString());
      // A stream that does not exist: refused every time, never remembered as something else.
      await expect(headroomJson(d, 'node-a', 'nope')).rejects.toThrow(/stream/);
      await expect(headroomJson(d, 'node-a', 'nope')).rejects.toThrow(/stream/);
    });
  });

  describe('transaction()', () => {
    it('claims with FOR UPDATE SKIP LOCKED from two stores never hand out the same row', async () => {
      const url = await freshDb();
      const a = await openAt(url);
      const b = await openAt(url);
      await a.q.run('CREATE TABLE queue (id BIGINT PRIMARY KEY, claimed_by TEXT)');
      await a.q.run('INSERT INTO queue(id) SELECT g FROM generate_series(1, 120) g');
      const claimed: Array<[number, string]> = [];
      const worker = async (s: PostgresStore, name: string) => {
        for (let round = 0; round < 100; round++) {
          const ids = await s.transaction(async (tx) => {
            const rows = await tx.all<{ id: number }>('SELECT id FROM queue WHERE claimed_by IS NULL ORDER BY id LIMIT 3 FOR UPDATE SKIP LOCKED');
            await tx.value('SELECT pg_sleep(0.005)'); // hold the locks a while: the other workers must skip these rows
            for (const r of rows) await tx.run('UPDATE queue SET claimed_by = ? WHERE id = ?', [name, r.id]);
            return rows.map((r) => r.id);
          });
          if (!ids.length) return;
          for (const id of ids) claimed.push([id, name]);
        }
      };
      await Promise.all([worker(a, 'a1'), worker(a, 'a2'), worker(b, 'b1'), worker(b, 'b2')]);
      const ids = claimed.map(([id]) => id);
      expect(new Set(ids).size).toBe(ids.length);
      expect(ids.sort((x, y) => x - y)).toEqual(Array.from({ length: 120 }, (_, i) => i + 1));
      expect(new Set(claimed.map(([, w]) => w[0])).size).toBe(2); // both stores claimed some
    });

    it('is not blocked by a write held open elsewhere, and rolls back on throw', async () => {
      const url = await freshDb();
      const a = await openAt(url);
      const b = await openAt(url);
      await a.q.run('CREATE TABLE t (id BIGINT PRIMARY KEY)');
      let release!: () => void;
      const held = new Promise<void>((r) => { release = r; });
      let writing!: () => void;
      const inBatch = new Promise<void>((r) => { writing = r; });
      // a's write stays open until b's transaction is done; were there a lock shared by the two, neither would end.
      const w = a.write(async (tx) => {
        await tx.run('INSERT INTO t(id) VALUES (1)');
        writing();
        await held;
      });
      await inBatch;
      await b.transaction((tx) => tx.run('INSERT INTO t(id) VALUES (2)'));
      release();
      await w;
      await expect(b.transaction(async (tx) => {
        await tx.run('INSERT INTO t(id) VALUES (3)');
        throw new Error('changed my mind');
      })).rejects.toThrow('changed my mind');
      expect(await a.q.all('SELECT id FROM t ORDER BY id')).toEqual([{ id: 1 }, { id: 2 }]);
    });
  });

  describe('invalidations', () => {
    /** Subscribe and resolve once the LISTEN is in place (the listener says `*` when it starts listening). */
    const listen = async (s: PostgresStore) => {
      const got: Invalidation[] = [];
      s.onInvalidate((inv) => got.push(inv));
      await waitFor(() => got.some((i) => i.topic === '*'), 'LISTEN in place', 10_000, 10);
      got.length = 0;
      return got;
    };

    it('reach the other store within 1 s of the commit, not before it, never when rolled back', async () => {
      const url = await freshDb();
      const a = await openAt(url);
      const b = await openAt(url);
      const atB = await listen(b);
      const atA = await listen(a);

      await a.write(async (tx) => {
        await a.invalidate(tx, { topic: 'tokens', key: 'tok_1' });
        await tx.value('SELECT pg_sleep(0.3)');
        expect(atB).toEqual([]); // not before the commit
      });
      const committed = Date.now();
      await waitFor(() => atB.length > 0, 'the invalidation at the other store', 1000, 5);
      expect(Date.now() - committed).toBeLessThan(1000);
      expect(atB).toEqual([{ topic: 'tokens', key: 'tok_1' }]);
      await waitFor(() => atA.length > 0, 'the invalidation at its own store', 1000, 5); // this daemon included

      await expect(a.write(async (tx) => {
        await a.invalidate(tx, { topic: 'keys', key: 'rolled-back' });
        throw new Error('no');
      })).rejects.toThrow('no');
      await b.write((tx) => b.invalidate(tx, { topic: 'control', key: 'after' }));
      // Notifications arrive in commit order: once `after` is here, a rolled-back one would have been too.
      await waitFor(() => atB.some((i) => i.key === 'after'), 'the later invalidation', 1000, 5);
      expect(atB.map((i) => i.key)).toEqual(['tok_1', 'after']);
    });

    it('LISTEN comes back after its connection is killed, says * (caches drop), and hears later writes', async () => {
      const url = await freshDb();
      const a = await openAt(url);
      const b = await openAt(url);
      const atB = await listen(b);
      const killed = await a.q.value<number>(
        "SELECT COUNT(pg_terminate_backend(pid)) FROM pg_stat_activity WHERE datname = current_database() AND query = 'LISTEN node_svc' AND pid <> pg_backend_pid()",
      );
      expect(killed).toBe(1);
      await waitFor(() => atB.some((i) => i.topic === '*'), 'the * after the reconnect', 10_000, 10);
      await a.write((tx) => a.invalidate(tx, { topic: 'nodes', key: 'node-a' }));
      await waitFor(() => atB.some((i) => i.key === 'node-a'), 'an invalidation after the reconnect', 2000, 5);
    });

    it('a LISTEN connection cut off without a reset is found silent by its ping, not trusted meanwhile, and replaced', async () => {
      const url = await freshDb();
      const proxy = await startFreezingProxy(Number(new URL(url).port));
      try {
        const via = new URL(url);
        via.port = String(proxy.port);
        const a = await openAt(url);
        const b = await openAt(via.toString(), { answerTimeoutMs: 2000 });
        expect(b.invalidationsCurrent!()).toBe(false); // nothing listens yet
        const atB = await listen(b);
        expect(b.invalidationsCurrent!()).toBe(true);
        await sleep(LISTEN_FRESH_MS + 1500); // longer than the LISTEN's own answer counts: the pings keep it so
        expect(b.invalidationsCurrent!()).toBe(true);
        proxy.cut(); // every connection open now goes silent for good; new ones pass
        const cutAt = performance.now();
        await a.write((tx) => a.invalidate(tx, { topic: 'tokens', key: 'lost' })); // its NOTIFY never reaches b
        await waitFor(() => !b.invalidationsCurrent!(), 'b unsure of its invalidations', LISTEN_FRESH_MS + 3000, 10);
        expect(performance.now() - cutAt).toBeLessThan(LISTEN_FRESH_MS + 1500);
        // A new LISTEN connection: `*` (every cache drops, the lost one with them), trusted again, and it hears writes.
        await waitFor(() => atB.some((i) => i.topic === '*'), 'the * of a new LISTEN connection', 15_000, 10);
        await waitFor(() => b.invalidationsCurrent!(), 'b sure again', 5000, 10);
        expect(atB.some((i) => i.key === 'lost')).toBe(false);
        await a.write((tx) => a.invalidate(tx, { topic: 'nodes', key: 'after-cut' }));
        await waitFor(() => atB.some((i) => i.key === 'after-cut'), 'an invalidation on the new connection', 2000, 5);
      } finally {
        await proxy.close();
      }
    }, 30_000);
  });

  describe('migrations', () => {
    it('bring a new database to the latest version; a second open changes nothing', async () => {
      const url = await freshDb();
      const s = await openAt(url);
      expect(await s.q.all('SELECT version FROM node_svc_schema')).toEqual([{ version: LATEST }]);
      expect(LATEST).toBe(230);
      // 0230: the insert trigger counts only for sessions that do not count their inserts themselves.
      expect(await s.q.value("SELECT pg_get_triggerdef(oid) FROM pg_trigger WHERE tgname = 'deliveries_count_insert'")).toMatch(/WHEN \(\(current_setting\('node_svc\.inline_counts'::text, true\) IS DISTINCT FROM 'on'::text\)\)/);
      expect(await s.q.value("SELECT current_setting('node_svc.inline_counts', true)")).toBe('on');
      // 0220: delivery counts kept once per statement, from its transition tables.
      expect(await s.q.all("SELECT tgname FROM pg_trigger WHERE tgrelid = 'deliveries'::regclass AND tgname LIKE 'deliveries_count_%' AND tgtype & 1 = 0 ORDER BY 1")).toEqual(
        [{ tgname: 'deliveries_count_delete' }, { tgname: 'deliveries_count_insert' }, { tgname: 'deliveries_count_update' }]);
      // and every counter function writes in its session's own slot.
      for (const f of ['deliveries_count', 'deliveries_count_resolved', 'streams_asset_totals', 'streams_unsettled']) {
        const def = await s.q.value<string>(`SELECT pg_get_functiondef(CAST('${f}' AS regproc))`);
        expect([f, def.includes('node_svc_counter_slot()'), def.includes('pg_backend_pid')]).toEqual([f, true, false]);
      }
      // 0200: one stored body per event (the 1.0.0 envelope is made when a delivery is claimed).
      expect(await s.q.value("SELECT COUNT(*) FROM information_schema.columns WHERE table_name = 'events' AND column_name = 'body_v100'")).toBe(0);
      // 0190: the deliveries indexes no read uses are gone, the ones the reads use are there.
      const idx = (await s.q.all<{ indexname: string }>("SELECT indexname FROM pg_indexes WHERE tablename = 'deliveries' ORDER BY indexname")).map((r) => r.indexname);
      expect(idx).not.toContain('deliveries_event');
      expect(idx).not.toContain('deliveries_subscription');
      expect(idx).not.toContain('deliveries_due'); // 0210: claims read per subscription
      expect(idx).toEqual(expect.arrayContaining(['deliveries_subscription_due', 'deliveries_redelivery_pending', 'deliveries_event_subscription']));
      expect(await s.q.value("SELECT COUNT(*) FROM information_schema.tables WHERE table_schema = 'public' AND table_name = 'leases'")).toBe(1);
      await s.q.run("INSERT INTO nodes(id, created_at) VALUES ('kept', 1)");
      const again = await openAt(url);
      expect(await again.q.all('SELECT version FROM node_svc_schema')).toEqual([{ version: LATEST }]);
      expect(await again.q.value("SELECT COUNT(*) FROM nodes WHERE id != '@operator'")).toBe(1); // (@operator: the owner of alert endpoints, migration 0150)
    });

    it('refuse to open, by name, when the sessions lack the inline-counts setting (0230: they would count each delivery twice), on a new and on a migrated database', async () => {
      const prev = process.env.PGOPTIONS;
      process.env.PGOPTIONS = '-c node_svc.inline_counts=off'; // after ours: the last one wins, as a pooler's own would
      try {
        const migrated = await freshDb();
        delete process.env.PGOPTIONS;
        await openAt(migrated); // migrated with the setting
        process.env.PGOPTIONS = '-c node_svc.inline_counts=off';
        for (const url of [await freshDb(), migrated]) {
          const err = await openAt(url).then(() => undefined, (e: unknown) => e);
          expect(err).toBeInstanceOf(NodeSvcError);
          expect((err as NodeSvcError).code).toBe('config');
          expect(String((err as Error).message)).toMatch(/lost the setting node_svc\.inline_counts/);
        }
      } finally {
        if (prev === undefined) delete process.env.PGOPTIONS;
        else process.env.PGOPTIONS = prev;
      }
    });

    it('keep the delivery counts per statement (0220): a fan-out, a claim, a batch of attempts and a delete of several rows each add up; node-svc counts its own inserts in their statement (0230)', async () => {
      const url = await freshDb();
      const s = await openAt(url);
      await s.q.run("INSERT INTO nodes(id, created_at) VALUES ('n', 1)");
      for (const id of ['sa', 'sb']) {
        await s.q.run("INSERT INTO webhook_subscriptions(id, node_id, url, events, schema_version, status, secret, created_at, updated_at) VALUES (?, 'n', 'https://r.example/', '*', '1.1.0', 'active', 'k', 1, 1)", [id]);
      }
      const seq = await s.q.value<number>("INSERT INTO events(id, node_id, type, external_ref, occurred_at, body) VALUES ('e1', 'n', 'budget.halted', 'r', 1, '{}') RETURNING seq");
      const kept = async () => Object.fromEntries((await s.q.all<{ k: string; n: number }>(
        "SELECT subscription_id || ' ' || state AS k, CAST(SUM(n) AS INTEGER) AS n FROM delivery_counts GROUP BY subscription_id, state HAVING SUM(n) != 0")).map((r) => [r.k, r.n]));
      const row = (id: string, sub: string) => `('${id}', ${seq}, '${sub}', 'pending', 1, 1, 0)`;
      // Rows inserted by a session that does not count its inserts itself (psql, a tool, a daemon of the release before
      // 0230): the trigger counts them.
      const other = new pg.Client({ connectionString: url });
      await other.connect();
      try {
        await other.query(`INSERT INTO deliveries(id, event_seq, subscription_id, status, next_attempt_at, created_at, redelivery) VALUES ${[row('d1', 'sa'), row('d2', 'sa'), row('d3', 'sb'), row('d4', 'sb'), row('d5', 'sb')].join(', ')}`);
      } finally {
        await other.end();
      }
      expect(await kept()).toEqual({ 'sa pending': 2, 'sb pending': 3 });
      await s.q.run("UPDATE deliveries SET attempts = attempts + 1, next_attempt_at = 5 WHERE subscription_id = 'sb'"); // a claim: no state moves
      expect(await kept()).toEqual({ 'sa pending': 2, 'sb pending': 3 });
      // A batch of outcomes in one statement: delivered, dead, retrying (an error while pending), and one unchanged.
      await s.q.run(`UPDATE deliveries SET status = CASE id WHEN 'd1' THEN 'delivered' WHEN 'd3' THEN 'dead' ELSE status END,
        last_error = CASE id WHEN 'd4' THEN 'timeout' ELSE last_error END WHERE id IN ('d1', 'd3', 'd4', 'd5')`);
      expect(await kept()).toEqual({ 'sa delivered': 1, 'sa pending': 1, 'sb dead': 1, 'sb retrying': 1, 'sb pending': 1 });
      // One leaves retrying as another enters it: that state's change nets to zero in the statement.
      await s.q.run(`UPDATE deliveries SET status = CASE id WHEN 'd4' THEN 'delivered' ELSE status END,
        last_error = CASE id WHEN 'd5' THEN 'refused' ELSE last_error END WHERE id IN ('d4', 'd5')`);
      expect(await kept()).toEqual({ 'sa delivered': 1, 'sa pending': 1, 'sb dead': 1, 'sb retrying': 1, 'sb delivered': 1 });
      await s.q.run("DELETE FROM deliveries WHERE id IN ('d1', 'd2', 'd4')");
      expect(await kept()).toEqual({ 'sb dead': 1, 'sb retrying': 1 });
      // node-svc's own inserts, in its sessions (which skip the trigger): an event's fan-out to both subscriptions and
      // a lone delivery (a redelivery), each counted once, by its own statement.
      await s.write((tx) => recordEvent(tx, 'n', 'budget.halted', 'r2', { budget: 'b', reason: 'anomaly' }));
      await s.write((tx) => deliveries.insert(tx, seq, 'sa', 2, true));
      expect(await kept()).toEqual({ 'sa pending': 2, 'sb pending': 1, 'sb dead': 1, 'sb retrying': 1 });
      // A fan-out to 11 subscriptions (past the 8 ids it made ahead until 2026-11-30): each counted once, by its statement.
      for (let i = 0; i < 9; i++) {
        await s.q.run("INSERT INTO webhook_subscriptions(id, node_id, url, events, schema_version, status, secret, created_at, updated_at) VALUES (?, 'n', 'https://r.example/', '*', '1.1.0', 'active', 'k', 1, 1)", [`sx${i}`]);
      }
      await s.write((tx) => recordEvent(tx, 'n', 'budget.halted', 'r3', { budget: 'b', reason: 'anomaly' }));
      const counts = await kept();
      expect([counts['sa pending'], counts['sb pending'], ...Array.from({ length: 9 }, (_, i) => counts[`sx${i} pending`])]).toEqual([3, 2, 1, 1, 1, 1, 1, 1, 1, 1, 1]);
      expect(await s.q.value("SELECT COUNT(*) FROM deliveries WHERE status = 'pending'")).toBe(15); // d5 (retrying) and the 14 new ones
    });

    it('give each session a counter slot of its own (0220): distinct while they live, kept across a rollback, free again when one ends', async () => {
      const url = await freshDb();
      (await openAt(url)); // migrated
      const clients: pg.Client[] = [];
      const session = async () => { const c = new pg.Client({ connectionString: url }); await c.connect(); clients.push(c); return c; };
      const slotOf = async (c: pg.Client) => Number((await c.query('SELECT node_svc_counter_slot() AS s')).rows[0].s);
      const held = async (c: pg.Client) => Number((await c.query(`SELECT COUNT(*) AS n FROM pg_locks WHERE locktype = 'advisory' AND pid = pg_backend_pid() AND classid = ${SLOT_LOCKS} AND objsubid = 2`)).rows[0].n);
      try {
        const [a, b, c] = [await session(), await session(), await session()];
        const slots = [await slotOf(a), await slotOf(b), await slotOf(c)];
        expect(new Set(slots).size).toBe(3);
        expect(slots.every((x) => x >= 0 && x < SESSION_SLOTS)).toBe(true);
        // A slot taken inside a transaction that rolls back: the session's setting is undone, its lock is not. Once a
        // lower slot is free (a's), the next call still finds its own slot again (from the lock it holds) and takes
        // no second one.
        const d = await session();
        await d.query('BEGIN');
        const first = await slotOf(d);
        await d.query('ROLLBACK');
        expect(slots).not.toContain(first);
        expect((await d.query("SELECT current_setting('node_svc.counter_slot', true) AS v")).rows[0].v ?? '').toBe('');
        await a.end();
        clients.splice(clients.indexOf(a), 1);
        // (its backend lets go of its locks as it exits, a moment after the client closed)
        await waitFor(async () => Number((await b.query(`SELECT COUNT(*) AS n FROM pg_locks WHERE locktype = 'advisory' AND classid = ${SLOT_LOCKS}
          AND objsubid = 2 AND objid = ${slots[0]} AND database = (SELECT oid FROM pg_database WHERE datname = current_database())`)).rows[0].n) === 0,
        'the ended session\'s slot lock released', 10_000);
        expect(slots[0]).toBeLessThan(first);
        expect(await slotOf(d)).toBe(first);
        expect(await held(d)).toBe(1);
        // The slot of the session that ended goes to the next one.
        const e = await session();
        expect(await slotOf(e)).toBe(slots[0]);
      } finally {
        for (const c of clients) await c.end().catch(() => {});
      }
    }, 30_000);

    it('wait for another migration however long it holds the lock: the statement timeout (answerTimeoutMs) is not theirs', async () => {
      const url = await freshDb();
      const holder = new pg.Client({ connectionString: url });
      await holder.connect();
      try {
        await holder.query('BEGIN');
        await holder.query(`SELECT pg_advisory_xact_lock(${MIGRATE_LOCK_KEY})`); // as another daemon's long migration
        const opening = openAt(url, { answerTimeoutMs: 500 });
        await sleep(2000); // four times the statement timeout
        await holder.query('COMMIT');
        const s = await opening;
        expect(await s.q.value('SELECT version FROM node_svc_schema')).toBe(LATEST);
        // Its other statements keep the limit: one that runs longer is canceled by the server (statement_timeout),
        // named, and the store goes on.
        await expect(s.q.value('SELECT pg_sleep(2)')).rejects.toThrow(/did not finish a statement within 0\.5 s \(statement_timeout\); nothing of it was applied/);
        expect(await s.q.value('SELECT 1 AS one')).toBe(1);
        await expect(s.write((tx) => tx.value('SELECT pg_sleep(2)'))).rejects.toMatchObject({ code: 'unavailable', status: 503 });
        expect(await s.q.value('SELECT 2 AS two')).toBe(2);
      } finally {
        await holder.end();
      }
    });

    it('two daemons starting together migrate once', async () => {
      const url = await freshDb();
      const stores = await Promise.all([openAt(url), openAt(url), openAt(url)]);
      for (const s of stores) expect(await s.q.value('SELECT version FROM node_svc_schema')).toBe(LATEST);
      expect(await stores[0]!.q.value('SELECT COUNT(*) FROM node_svc_schema')).toBe(1);
    });

    it('daemons starting together on one database make one receipt key, and each signs receipts that verify with the shared JWKS', async () => {
      const url = await freshDb();
      const stores = await Promise.all([openAt(url), openAt(url), openAt(url)]);
      const kids = await Promise.all(stores.map((s) => ensureReceiptKey(s)));
      expect(new Set(kids).size).toBe(1);
      expect(await stores[0]!.q.value('SELECT COUNT(*) FROM receipt_keys')).toBe(1);
      const jwks = await receiptJwks(stores[2]!);
      expect(jwks.keys.map((k) => k.kid)).toEqual([kids[0]]);
      expect(JSON.stringify(jwks)).not.toMatch(/"d"/); // public members only
      const facts = (i: number) => ({ jti: `stl_${i}`, node: 'node-a', stream: 's', asset: 'USDC', amountMicro: BigInt(i), finalAt: 1_700_000_000_000, reference: { rail: 'card' as const, processor: 'stripe', captureId: `txn_${i}` } });
      const jws = await Promise.all(stores.map((s, i) => s.write((tx) => issueReceipt(tx, facts(i + 1), Date.now()))));
      for (const [i, r] of jws.entries()) expect(await verifyReceipt(r, { jwks, node: 'node-a' })).toMatchObject({ valid: true, kid: kids[0], claims: { jti: `stl_${i + 1}` } });
      // The same settlement issued again (a write run twice) keeps its first receipt.
      expect(await stores[1]!.write((tx) => issueReceipt(tx, facts(1), Date.now() + 5000))).toBe(jws[0]);
    });

    it('refuse a database written by a newer node-svc, by name', async () => {
      const url = await freshDb();
      const s = await openAt(url);
      await s.q.run('UPDATE node_svc_schema SET version = ?', [LATEST + 1000]);
      const err = await openPostgresStore(url, { dataDir: root }).catch((e: unknown) => e);
      expect(err).toBeInstanceOf(NodeSvcError);
      expect((err as NodeSvcError).code).toBe('store');
      expect((err as NodeSvcError).message).toBe(`this database was written by a newer node-svc (schema ${LATEST + 1000}; this build knows up to ${LATEST})`);
    });

    it('read-only: refuses pending migrations, reads a migrated database, cannot write', async () => {
      const url = await freshDb();
      const err = await openPostgresStore(url, { dataDir: root, readonly: true }).catch((e: unknown) => e);
      expect((err as NodeSvcError).code).toBe('store');
      expect((err as NodeSvcError).message).toMatch(/no node-svc tables/);
      expect((err as NodeSvcError).hint).toMatch(/nodes add/); // as SQLite's hint for a data dir without a database
      expect(await (await openAt(url)).q.value("SELECT COUNT(*) FROM nodes WHERE id != '@operator'")).toBe(0); // nothing was created by the refused open (@operator: migration 0150)
      const ro = await openAt(url, { readonly: true });
      expect(await ro.q.value('SELECT version FROM node_svc_schema')).toBe(LATEST);
      await expect(ro.q.run("INSERT INTO nodes(id, created_at) VALUES ('x', 1)")).rejects.toThrow(/opened read-only/);
      await expect(ro.write((tx) => tx.run("INSERT INTO nodes(id, created_at) VALUES ('x', 1)"))).rejects.toThrow(/opened read-only/);
      // Even a write disguised as a read is refused by the session itself.
      await expect(ro.q.value("INSERT INTO nodes(id, created_at) VALUES ('x', 1) RETURNING id")).rejects.toThrow(/read-only transaction/);
    });

    it('give the same tables and columns as SQLite (same SQL runs on both)', async () => {
      const s = await openAt(await freshDb());
      const pgCols = new Map<string, string[]>();
      for (const r of await s.q.all<{ t: string; c: string }>(
        "SELECT table_name AS t, column_name AS c FROM information_schema.columns WHERE table_schema = 'public' ORDER BY table_name, ordinal_position",
      )) pgCols.set(r.t, [...(pgCols.get(r.t) ?? []), r.c]);

      const liteCols = await sqliteColumns(join(root, 'sqlite-parity'));
      expect(pgCols.get('node_svc_schema')).toEqual(['version']); // PostgreSQL's PRAGMA user_version
      pgCols.delete('node_svc_schema');
      expect([...pgCols.keys()].sort()).toEqual([...liteCols.keys()].sort());
      for (const [table, cols] of liteCols) {
        // SQLite's rowid is implicit; the tables whose SQL walks it have a real column of that name here.
        // events.tx: the writing transaction, for cursors without a global write lock (migration 0120; SQLite has one writer).
        // asset_totals, delivery_counts, store_gauges .slot: counters spread over slots (migration 0130; SQLite: one writer).
        const extra = ['deliveries', 'delivery_attempts'].includes(table) ? ['rowid'] : table === 'events' ? ['tx']
          : ['asset_totals', 'delivery_counts', 'store_gauges'].includes(table) ? ['slot'] : [];
        expect([...pgCols.get(table)!].sort(), table).toEqual([...cols, ...extra].sort());
      }
    });
  });

  describe('secrets and connection errors', () => {
    const password = () => decodeURIComponent(new URL(base).password);
    const refusal = async (url: string) => {
      const err = await openPostgresStore(url, { dataDir: root }).catch((e: unknown) => e);
      expect(err).toBeInstanceOf(NodeSvcError);
      return err as NodeSvcError;
    };
    const shown = (e: NodeSvcError) => [e.message, e.hint ?? '', String(e), e.stack ?? '', JSON.stringify(e), JSON.stringify(e.extra)].join('\n');

    it('never show the password: wrong password, nothing listening, no such database', async () => {
      const url = await freshDb();
      const wrong = new URL(url);
      wrong.password = 'Wr0ng-S3cret-pw!';
      const bad = await refusal(wrong.toString());
      expect(bad.message).toMatch(/password authentication failed/);
      expect(bad.message).toContain(`127.0.0.1:${new URL(url).port}/`);
      expect(shown(bad)).not.toContain('Wr0ng-S3cret-pw');

      const closedPort = new URL(url);
      closedPort.port = String(await freeClosedPort());
      const refused = await refusal(closedPort.toString());
      expect(refused.message).toMatch(/connection refused/);
      expect(refused.message).toContain(`127.0.0.1:${closedPort.port}`);

      const nodb = await refusal(databaseUrl(base, 'no_such_database_here'));
      expect(nodb.message).toMatch(/database "no_such_database_here" does not exist/);
      for (const e of [refused, nodb]) {
        expect(shown(e)).not.toContain(password());
        expect(shown(e)).not.toContain(encodeURIComponent(password()));
      }
    });

    it("never carry a row's values (a secret in a refused row) in a statement's error", async () => {
      const s = await openAt(await freshDb());
      await s.q.run("INSERT INTO nodes(id, created_at) VALUES ('n1', 1)");
      const row = { id: 'whk_1', node_id: 'n1', url: 'http://127.0.0.1:9/', events: '*', schema_version: '9.9.9', description: null, status: 'active', secret: 'whsec_DoNotLogMe', created_at: 1, updated_at: 1 };
      const err = await s.write((tx) => tx.run(
        'INSERT INTO webhook_subscriptions(id, node_id, url, events, schema_version, description, status, secret, created_at, updated_at) VALUES (@id, @node_id, @url, @events, @schema_version, @description, @status, @secret, @created_at, @updated_at)',
        row,
      )).catch((e: unknown) => e as Error & { code?: string; constraint?: string });
      expect(err.code).toBe('23514'); // check_violation: the schema version is refused
      expect(err.name).toBe('PostgresError 23514'); // what a log that shows only the name still tells
      expect(err.constraint).toMatch(/schema_version/);
      expect([err.message, JSON.stringify(err), String(err.stack)].join('\n')).not.toContain('whsec_DoNotLogMe');
    });

    it("tell a statement's error from a lost connection by its code, not by words the error quotes", async () => {
      const s = await openAt(await freshDb());
      const bad = "SELECT CAST('connection error: Connection terminated' AS BIGINT)";
      for (const err of [
        await s.write((tx) => tx.value(bad)).catch((e: unknown) => e as { code?: string }),
        await s.autocommit!.value(bad).catch((e: unknown) => e as { code?: string }),
      ]) expect(err.code).toBe('22P02'); // invalid_text_representation, not 503 unavailable
    });

    it('describe the store without password or query', async () => {
      const url = await freshDb();
      const s = await openAt(`${url}?application_name=probe&sslmode=disable`);
      expect(s.description).toBe(`postgres://node_svc@127.0.0.1:${new URL(url).port}${new URL(url).pathname}`);
      expect(s.description).not.toContain(password());
      expect(await s.q.value('SELECT current_setting(?)', ['application_name'])).toBe('probe');
    });

    it('answer 503 naming the database while it cannot be reached, then go on', async () => {
      const url = await freshDb();
      const name = new URL(url).pathname.slice(1);
      const s = await openAt(url);
      await s.q.run('CREATE TABLE t (id BIGINT)');
      const admin = async (sql: string) => {
        const c = new pg.Client({ connectionString: base });
        await c.connect();
        await c.query(sql).finally(() => c.end());
      };
      await admin(`ALTER DATABASE ${name} ALLOW_CONNECTIONS false`);
      await admin(`SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE datname = '${name}'`);
      const down = await waitFor(async () => s.q.value('SELECT COUNT(*) FROM t').then(() => undefined, (e: unknown) => e), 'a refused query', 5000);
      expect(down).toBeInstanceOf(NodeSvcError);
      expect((down as NodeSvcError).code).toBe('unavailable');
      expect((down as NodeSvcError).status).toBe(503);
      expect((down as NodeSvcError).message).toContain(`127.0.0.1:${new URL(url).port}/${name}`);
      expect(shown(down as NodeSvcError)).not.toContain(password());
      await expect(s.write((tx) => tx.run('INSERT INTO t(id) VALUES (1)'))).rejects.toMatchObject({ code: 'unavailable' });
      await admin(`ALTER DATABASE ${name} ALLOW_CONNECTIONS true`);
      await waitFor(async () => (await s.q.value('SELECT COUNT(*) FROM t').catch(() => -1)) === 0, 'queries once the database is back', 5000);
    });

    it('a connection the server ends in the same read as its login (ReadyForQuery, then FATAL 57P01) fails a write, never the process', async () => {
      // A fast shutdown (pg_ctl stop -m fast) ends every session with FATAL 57P01. A pool connection whose login had
      // just finished can read its ReadyForQuery and that FATAL in one chunk: pg-pool hands the client over (and drops
      // its own 'error' listener) inside that read, and the FATAL is emitted before any caller could listen. Made
      // deterministic here by a proxy that, once armed, appends the FATAL to each new connection's ReadyForQuery.
      const url = await freshDb();
      const target = new URL(url);
      // Plain text only: the proxy reads the server's messages (a run's shared server with TLS would not do).
      if (/sslmode=(?!disable)/.test(target.search)) return void console.warn('[postgres.test] login-FATAL proxy skipped: the server URL asks for TLS');
      let armed = false;
      let cut = 0;
      const fatal = (() => {
        const fields = Buffer.from('SFATAL\0VFATAL\0C57P01\0Mterminating connection due to administrator command\0\0', 'latin1');
        const head = Buffer.alloc(5);
        head.write('E', 0, 'latin1');
        head.writeInt32BE(4 + fields.length, 1);
        return Buffer.concat([head, fields]);
      })();
      const sockets = new Set<import('node:net').Socket>();
      const proxy = createServer((client) => {
        const up = connect(Number(target.port || 5432), target.hostname.replace(/^\[|\]$/g, ''));
        const cutThis = armed;
        let pending = Buffer.alloc(0);
        for (const x of [client, up]) { sockets.add(x); x.on('close', () => sockets.delete(x)); x.on('error', () => undefined); }
        client.on('close', () => up.destroy());
        up.on('close', () => client.destroy());
        client.on('data', (b: Buffer) => up.write(b));
        up.on('data', (b: Buffer) => {
          if (!cutThis) return void client.write(b);
          // Server messages: type byte, int32 length (itself included), body. Through the first ReadyForQuery ('Z'):
          // that and the FATAL go out in one write, then the connection ends.
          pending = Buffer.concat([pending, b]);
          let at = 0;
          while (pending.length - at >= 5) {
            const len = pending.readInt32BE(at + 1);
            if (pending.length - at < 1 + len) break;
            const type = String.fromCharCode(pending[at]!);
            at += 1 + len;
            if (type === 'Z') {
              cut++;
              client.end(Buffer.concat([pending.subarray(0, at), fatal]));
              up.destroy();
              return;
            }
          }
          client.write(pending.subarray(0, at));
          pending = pending.subarray(at);
        });
      });
      await new Promise<void>((r) => proxy.listen(0, '127.0.0.1', r));
      try {
        const via = new URL(url);
        via.port = String((proxy.address() as AddressInfo).port);
        const s = await openAt(via.toString());
        await s.q.run('CREATE TABLE t (id BIGINT)');
        armed = true;
        // The pool's connections so far end (as at a restart); the next write opens new ones, each cut after login.
        const admin = new pg.Client({ connectionString: base });
        await admin.connect();
        await admin.query(`SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE datname = $1 AND pid <> pg_backend_pid()`, [target.pathname.slice(1)]);
        await admin.end();
        const results = await Promise.allSettled(Array.from({ length: 4 }, (_, i) => s.write((tx) => tx.run('INSERT INTO t(id) VALUES (?)', [i]))));
        expect(cut, 'connections cut right after their login').toBeGreaterThan(0);
        for (const r of results) if (r.status === 'rejected') expect(r.reason).toMatchObject({ code: 'unavailable', status: 503 });
        // Disarmed, the store goes on: new connections log in and the write commits.
        armed = false;
        await waitFor(async () => (await s.write((tx) => tx.run('INSERT INTO t(id) VALUES (9)')).then(() => true, () => false)), 'a write once connections are whole again', 10_000);
        expect(Number(await s.q.value('SELECT COUNT(*) FROM t WHERE id = 9'))).toBe(1);
      } finally {
        for (const x of sockets) x.destroy();
        await new Promise((r) => proxy.close(r));
      }
    });

    it('come back after the server restarts (pool and LISTEN)', async () => {
      // The run's shared server is not ours to restart: then a server of this test's own.
      const own = server ?? (await startPostgres());
      try {
        await restartCase(own);
      } finally {
        if (own !== server) await own.stop();
      }
    }, 60_000);

    it('reach a server on this machine through its Unix socket: ?host=/dir, or libpq\'s percent-encoded directory', async () => {
      // The run's shared server may be elsewhere: a server of this test's own (its socket is in its temp dir).
      const own = server ?? (await startPostgres());
      const mine: PostgresStore[] = [];
      const openHere = async (url: string) => { const s = await openAt(url); mine.push(s); return s; };
      try {
        const name = `pgstore_socket_${process.pid}`;
        const tcp = await openHere(await own.createDatabase(name));
        await tcp.write((tx) => tx.run('CREATE TABLE sock (id BIGINT PRIMARY KEY)'));
        const bySocket = own.socketUrl(name);
        const dir = new URL(bySocket).searchParams.get('host')!;
        const pw = encodeURIComponent(own.password);
        for (const url of [bySocket, `postgresql://node_svc:${pw}@${encodeURIComponent(dir)}:${own.port}/${name}`]) {
          const t = parsePostgresUrl(url);
          expect(t.config.host).toBe(dir);
          expect(t.config.ssl).toBe(false); // a socket is local: no TLS asked, none refused
          expect(t.where).toBe(`${dir}/.s.PGSQL.${own.port} (Unix socket), database ${name}`);
          expect(t.description).not.toContain(own.password);
          // The description is a URL (without the password) that names the same socket and database.
          const again = parsePostgresUrl(t.description).config;
          expect([again.host, again.port, again.database, again.user]).toEqual([dir, own.port, name, 'node_svc']);
          const s = await openHere(url);
          // PostgreSQL shows no client address for a Unix-socket session.
          expect(await s.q.value('SELECT client_addr FROM pg_stat_activity WHERE pid = pg_backend_pid()')).toBeNull();
          await s.write((tx) => tx.run('INSERT INTO sock(id) VALUES (?)', [own.port + url.length]));
        }
        expect(Number(await tcp.q.value('SELECT COUNT(*) FROM sock'))).toBe(2);
      } finally {
        for (const s of mine) await s.close().catch(() => {});
        if (own !== server) await own.stop();
      }
    }, 60_000);

    const restartCase = async (srv: PostgresServer) => {
      const url = await srv.createDatabase(`pgstore_restart_${process.pid}`);
      const s = await openAt(url);
      const got: Invalidation[] = [];
      s.onInvalidate((inv) => got.push(inv));
      await waitFor(() => got.some((i) => i.topic === '*'), 'LISTEN in place', 10_000, 10);
      got.length = 0;
      await srv.restart();
      await waitFor(async () => (await s.q.value('SELECT 1').catch(() => 0)) === 1, 'queries after the restart', 10_000);
      await waitFor(() => got.some((i) => i.topic === '*'), 'LISTEN again after the restart', 10_000, 10);
      await s.write((tx) => s.invalidate(tx, { topic: 'streams', key: 'after-restart' }));
      await waitFor(() => got.some((i) => i.key === 'after-restart'), 'an invalidation after the restart', 2000, 5);
      await s.close();
    };
  });

  describe('TLS against a server whose certificate names "localhost" (a private CA)', () => {
    let tls: PostgresServer | undefined;
    let certs: { ca: string; otherCa: string };
    let dbPath: string;
    beforeAll(async () => {
      certs = makeCerts(join(root, 'tls'));
      tls = await startPostgres({ tls: { cert: readFileSync(join(root, 'tls', 'server.crt'), 'utf8'), key: readFileSync(join(root, 'tls', 'server.key'), 'utf8') } });
      dbPath = new URL(await tls.createDatabase('tls_db')).pathname;
    }, 120_000);
    afterAll(async () => {
      await tls?.stop();
    }, 60_000);
    const url = (host: string, query: string) => {
      const u = new URL(tls!.baseUrl);
      u.hostname = host;
      u.pathname = dbPath;
      u.search = query;
      return u.toString();
    };
    const encrypted = async (s: PostgresStore) => s.q.value('SELECT ssl FROM pg_stat_ssl WHERE pid = pg_backend_pid()');
    const refusedBy = async (u: string) => {
      const err = await openPostgresStore(u, { dataDir: root }).catch((e: unknown) => e);
      expect(err).toBeInstanceOf(NodeSvcError);
      expect((err as Error).message).not.toContain(tls!.password);
      return (err as Error).message;
    };

    it('verify-full: TLS to the name on the certificate; refuses another name (127.0.0.1) and another CA', async () => {
      const ok = await openAt(url('localhost', `sslmode=verify-full&sslrootcert=${certs.ca}`));
      expect(await encrypted(ok)).toBe(1);
      expect(await refusedBy(url('127.0.0.1', `sslmode=verify-full&sslrootcert=${certs.ca}`))).toMatch(/does not match certificate|not in the cert's list/i);
      expect(await refusedBy(url('localhost', `sslmode=verify-full&sslrootcert=${certs.otherCa}`))).toMatch(/certificate/i);
      expect(await refusedBy(url('localhost', 'sslmode=verify-full'))).toMatch(/certificate/i); // not a public CA's
    });

    it('verify-ca checks the chain but not the name; require encrypts without checking; disable is plain text', async () => {
      expect(await encrypted(await openAt(url('127.0.0.1', `sslmode=verify-ca&sslrootcert=${certs.ca}`)))).toBe(1);
      expect(await refusedBy(url('127.0.0.1', `sslmode=verify-ca&sslrootcert=${certs.otherCa}`))).toMatch(/certificate/i);
      expect(await encrypted(await openAt(url('127.0.0.1', 'sslmode=require')))).toBe(1);
      expect(await refusedBy(url('127.0.0.1', `sslmode=require&sslrootcert=${certs.otherCa}`))).toMatch(/certificate/i); // as libpq: a root cert makes require verify-ca
      expect(await encrypted(await openAt(url('127.0.0.1', 'sslmode=disable')))).toBe(0);
    });
  });

  describe('test helpers', () => {
    it('give each data dir its own database, created once, and only when the run has a server', async () => {
      const before = process.env[PG_URL_ENV];
      try {
        delete process.env[PG_URL_ENV];
        expect(await storeUrlFor(join(root, 'd1'))).toBeUndefined(); // no server: the helpers change nothing
        process.env[PG_URL_ENV] = base;
        const one = await storeUrlFor(join(root, 'd1'));
        expect(await storeUrlFor(join(root, 'x', '..', 'd1'))).toBe(one); // the same dir, however it is spelled
        const two = await storeUrlFor(join(root, 'd2'));
        expect(two).not.toBe(one);
        const s = await openAt(two!);
        expect(await s.q.value('SELECT current_database()')).toBe(databaseNameFor(join(root, 'd2')));
      } finally {
        if (before === undefined) delete process.env[PG_URL_ENV];
        else process.env[PG_URL_ENV] = before;
      }
    });
  });

  describe('URL settings (TLS and fail-closed parsing)', () => {
    it('map sslmode as libpq does, and verify-full checks the host name', () => {
      const ssl = (q: string, host = 'db.example.com') => parsePostgresUrl(`postgres://u:p@${host}:5432/d?${q}`).config.ssl;
      expect(ssl('sslmode=disable')).toBe(false);
      expect(ssl('', '127.0.0.1')).toBe(false);
      expect(ssl('sslmode=require')).toEqual({ rejectUnauthorized: false });
      const full = ssl('sslmode=verify-full') as { rejectUnauthorized: boolean; checkServerIdentity?: unknown };
      expect(full.rejectUnauthorized).toBe(true);
      expect(full.checkServerIdentity).toBeUndefined(); // Node's own: the certificate must name the host
      const ca = join(root, 'ca.pem');
      return import('node:fs/promises').then(async ({ writeFile }) => {
        await writeFile(ca, '-----BEGIN CERTIFICATE-----\nnot checked here\n-----END CERTIFICATE-----\n');
        const vca = ssl(`sslmode=verify-ca&sslrootcert=${ca}`) as { ca: string; rejectUnauthorized: boolean; checkServerIdentity: () => unknown };
        expect(vca.ca).toContain('BEGIN CERTIFICATE');
        expect(vca.rejectUnauthorized).toBe(true);
        expect(vca.checkServerIdentity()).toBeUndefined(); // chain checked, name not
        const vfull = ssl(`sslmode=verify-full&sslrootcert=${ca}`) as { ca: string; checkServerIdentity?: unknown };
        expect(vfull.ca).toContain('BEGIN CERTIFICATE');
        expect(vfull.checkServerIdentity).toBeUndefined();
      });
    });

    it('refuse what would silently weaken the connection, without echoing the URL', () => {
      const refuse = (url: string, re: RegExp) => {
        let err: unknown;
        try {
          parsePostgresUrl(url);
        } catch (e) {
          err = e;
        }
        expect(err).toBeInstanceOf(NodeSvcError);
        expect((err as Error).message).toMatch(re);
        expect((err as Error).message).not.toContain('hunter2');
      };
      refuse('postgres://u:hunter2@db.example.com/d', /remote host db\.example\.com without sslmode/);
      refuse('postgres://u:hunter2@db.example.com/d?sslmode=prefer', /sslmode=prefer/);
      refuse('postgres://u:hunter2@db.example.com/d?sslmode=verify-ca', /verify-ca needs sslrootcert/);
      refuse('postgres://u:hunter2@db.example.com/d?ssl_mode=verify-full', /unknown parameter "ssl_mode"/);
      refuse('postgres://u:hunter2@db.example.com/d?sslmode=verify-fulll', /unknown sslmode/);
      refuse('postgres://u:hunter2@db.example.com/d?sslmode=verify-full&sslrootcert=/nonexistent/ca.pem', /cannot read .*sslrootcert/);
      refuse('mysql://u:hunter2@db.example.com/d', /must start with postgres:\/\//);
      refuse('postgres://u:hunter2@[bad', /not a valid postgres:\/\/ URL/);
      refuse('postgres://u:hunter2%zz@127.0.0.1/d', /password is not valid percent-encoding/);
    });
  });
});

/** Every table's columns in a SQLite store migrated by openSqliteStore. */
async function sqliteColumns(dataDir: string): Promise<Map<string, string[]>> {
  const store = openSqliteStore(dataDir);
  try {
    const out = new Map<string, string[]>();
    const tables = await store.q.all<{ name: string }>("SELECT name FROM sqlite_master WHERE type = 'table' AND name NOT LIKE 'sqlite_%' ORDER BY name");
    for (const { name } of tables) out.set(name, (await store.q.all<{ name: string }>(`SELECT name FROM pragma_table_xinfo('${name}')`)).map((c) => c.name));
    return out;
  } finally {
    await store.close();
  }
}

/** A CA, a server certificate for DNS:localhost signed by it, and an unrelated CA (openssl, EC P-256). */
function makeCerts(dir: string): { ca: string; otherCa: string } {
  mkdirSync(dir, { recursive: true });
  const ssl = (...args: string[]) => execFileSync('openssl', args, { cwd: dir, stdio: 'pipe' });
  const ec = ['-newkey', 'ec', '-pkeyopt', 'ec_paramgen_curve:prime256v1', '-nodes'];
  for (const ca of ['ca', 'other-ca'])
    ssl('req', '-x509', ...ec, '-keyout', `${ca}.key`, '-out', `${ca}.crt`, '-days', '2', '-subj', `/CN=node-svc test ${ca}`,
      '-addext', 'basicConstraints=critical,CA:TRUE', '-addext', 'keyUsage=critical,keyCertSign,cRLSign');
  ssl('req', ...ec, '-keyout', 'server.key', '-out', 'server.csr', '-subj', '/CN=localhost');
  writeFileSync(join(dir, 'ext.cnf'), 'subjectAltName=DNS:localhost\nbasicConstraints=CA:FALSE\nextendedKeyUsage=serverAuth\n');
  ssl('x509', '-req', '-in', 'server.csr', '-CA', 'ca.crt', '-CAkey', 'ca.key', '-CAcreateserial', '-out', 'server.crt', '-days', '2', '-extfile', 'ext.cnf');
  return { ca: join(dir, 'ca.crt'), otherCa: join(dir, 'other-ca.crt') };
}

/** A loopback port nothing listens on (bound, then released). */
async function freeClosedPort(): Promise<number> {
  const { createServer } = await import('node:net');
  return new Promise((res) => {
    const s = createServer().listen(0, '127.0.0.1', () => {
      const p = (s.address() as { port: number }).port;
      s.close(() => res(p));
    });
  });
}
