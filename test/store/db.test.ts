import Database from 'better-sqlite3';
import { existsSync, statSync } from 'node:fs';
import { mkdtemp, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import { NodeSvcError } from '../../src/domain/errors.js';
import { DB_FILE, LATEST_VERSION, openSqliteStore as openStore, storageFault } from '../../src/store/db.js';
import { MIGRATIONS } from '../../src/store/migrations/index.js';
import { recordEvent } from '../../src/store/events.js';
import { matches, subscriptions } from '../../src/store/webhooks.js';

let root: string;
let dataDir: string;

beforeEach(async () => {
  root = await mkdtemp(join(tmpdir(), 'node-svc-db-'));
  dataDir = join(root, 'nested', 'data'); // does not exist yet
});
afterEach(async () => {
  await rm(root, { recursive: true, force: true });
});

const mode = (p: string) => statSync(p).mode & 0o777;
const tables = (db: Database.Database) =>
  (db.prepare("SELECT name FROM sqlite_master WHERE type = 'table' ORDER BY name").all() as { name: string }[]).map((r) => r.name);

describe('openStore', () => {
  it('creates the data dir 0700 and the database 0600', () => {
    const store = openStore(dataDir);
    try {
      expect(store.path).toBe(join(dataDir, DB_FILE));
      expect(mode(dataDir)).toBe(0o700);
      expect(mode(store.path)).toBe(0o600);
      for (const f of [`${store.path}-wal`, `${store.path}-shm`]) if (existsSync(f)) expect(mode(f), f).toBe(0o600);
      expect(store.db.pragma('journal_mode', { simple: true })).toBe('wal');
      expect(store.db.pragma('foreign_keys', { simple: true })).toBe(1);
    } finally {
      void store.close();
    }
  });

  it('migrates: user_version is the latest migration and the tables exist', () => {
    expect(LATEST_VERSION).toBe(MIGRATIONS[MIGRATIONS.length - 1]!.version);
    expect(LATEST_VERSION).toBeGreaterThan(0);
    const store = openStore(dataDir);
    try {
      expect(store.db.pragma('user_version', { simple: true })).toBe(LATEST_VERSION);
      expect(tables(store.db)).toEqual(expect.arrayContaining(['issuer_keys', 'meta', 'nodes', 'tokens']));
    } finally {
      void store.close();
    }
  });

  it('re-opening is idempotent: same version, same schema, data kept', () => {
    const a = openStore(dataDir);
    a.db.prepare('INSERT INTO nodes(id, created_at) VALUES (?, ?)').run('node-a', 1);
    const schema = a.db.prepare('SELECT type, name, sql FROM sqlite_master ORDER BY name').all();
    void a.close();
    for (let i = 0; i < 2; i++) {
      const b = openStore(dataDir);
      try {
        expect(b.db.pragma('user_version', { simple: true })).toBe(LATEST_VERSION);
        expect(b.db.prepare('SELECT type, name, sql FROM sqlite_master ORDER BY name').all()).toEqual(schema);
        // @operator: the owner of alert endpoints (migration 0150), not a node.
        expect(b.db.prepare('SELECT id FROM nodes').all()).toEqual([{ id: '@operator' }, { id: 'node-a' }]);
      } finally {
        void b.close();
      }
    }
  });

  it('opens an existing database read-only without writing to it', () => {
    void openStore(dataDir).close();
    const ro = openStore(dataDir, { readonly: true });
    try {
      expect(ro.db.readonly).toBe(true);
      expect(() => ro.db.prepare('INSERT INTO nodes(id, created_at) VALUES (?, ?)').run('x', 1)).toThrow();
    } finally {
      void ro.close();
    }
  });

  it('read-only on a missing database is refused, and creates nothing', () => {
    expect(() => openStore(dataDir, { readonly: true })).toThrow(/no node-svc database/);
    expect(existsSync(dataDir)).toBe(false);
  });

  it('refuses a database written by a newer node-svc, mentioning "newer", and leaves it untouched', () => {
    void openStore(dataDir).close();
    const path = join(dataDir, DB_FILE);
    const raw = new Database(path);
    raw.pragma(`user_version = ${LATEST_VERSION + 10}`);
    raw.close();
    let err: unknown;
    try {
      void openStore(dataDir).close();
    } catch (e) {
      err = e;
    }
    expect(err).toBeInstanceOf(NodeSvcError);
    expect((err as NodeSvcError).message).toMatch(/newer/);
    expect((err as NodeSvcError).code).toBe('store');
    expect(() => openStore(dataDir, { readonly: true })).toThrow(/newer/);
    const check = new Database(path, { readonly: true });
    expect(check.pragma('user_version', { simple: true })).toBe(LATEST_VERSION + 10);
    check.close();
  });
});

describe('storageFault: what SQLite says of its file or disk is a 503 that names it', () => {
  // better-sqlite3's own error class, as its statements throw it (name SqliteError, code the extended SQLite code).
  const sqliteError = (code: string) => {
    const db = new Database(':memory:');
    try {
      db.prepare("SELECT RAISE(ABORT, 'x')").get();
    } catch (e) {
      return Object.assign(e as Error, { code });
    } finally {
      db.close();
    }
    throw new Error('no SqliteError');
  };
  for (const [code, why] of [
    ['SQLITE_FULL', 'its disk is full'],
    ['SQLITE_IOERR_WRITE', 'a read or write of its file failed'],
    ['SQLITE_IOERR_FSYNC', 'a read or write of its file failed'],
    ['SQLITE_READONLY_DBMOVED', 'its file cannot be written'],
    ['SQLITE_BUSY', 'another process holds its lock'],
    ['SQLITE_CORRUPT', 'its file is damaged'],
    ['SQLITE_NOTADB', 'its file is damaged'],
    ['SQLITE_CANTOPEN', 'its file cannot be opened'],
  ] as const)
    it(`${code}: unavailable, "${why}"`, () => {
      const e = storageFault(sqliteError(code), '/data/node-svc.db') as NodeSvcError;
      expect(e).toBeInstanceOf(NodeSvcError);
      expect(e).toMatchObject({ code: 'unavailable', status: 503, message: `the store (SQLite at /data/node-svc.db) cannot do this: ${why} (${code})` });
      expect(e.extra.retryAfterSeconds).toBe(5);
    });
  it('anything else is left as it is (a statement that is wrong is ours to fix: a 500, logged)', () => {
    for (const e of [sqliteError('SQLITE_CONSTRAINT_UNIQUE'), sqliteError('SQLITE_ERROR'), new Error('SQLITE_FULL'), Object.assign(new Error('x'), { code: 'SQLITE_FULL' })])
      expect(storageFault(e, '/d')).toBe(e);
  });
});

describe('recordEvent on SQLite (the fan-out in one statement)', () => {
  it('makes exactly the deliveries matches() says, with ids of one block in the subscriptions\' creation order, and counts them', async () => {
    const store = openStore(dataDir);
    try {
      store.db.exec("INSERT INTO nodes(id, created_at) VALUES ('n1', 0), ('n2', 0)");
      // Created in an order that is not their ids' order: the ids follow the creation order (rowid), not the id.
      const subs: Array<{ id: string; events: string; schema_version: '1.0.0' | '1.1.0'; node: string; status: string }> = [];
      const kinds = ['*', '["budget.halted"]', '["stream.revoked","subscription.closed"]', '["subscription.closed"]', '["budget.released"]'];
      for (let i = 0; i < 24; i++)
        subs.push({ id: `whk_${String((i * 7) % 24).padStart(2, '0')}`, events: kinds[i % kinds.length]!, schema_version: i % 3 === 0 ? '1.0.0' : '1.1.0', node: 'n1', status: i === 13 ? 'disabled' : 'active' });
      subs.push({ id: 'whk_other', events: '*', schema_version: '1.1.0', node: 'n2', status: 'active' });
      await store.write(async (tx) => {
        for (const x of subs)
          await subscriptions.insert(tx, { id: x.id, node_id: x.node, url: 'https://r.example/h', events: x.events, schema_version: x.schema_version, description: null, status: x.status as 'active', secret: 'whsec_x', created_at: 0 });
      });
      for (const kind of ['budget.halted', 'subscription.closed', 'stream.revoked', 'stream.opened'] as const) {
        const e = await store.write((tx) => recordEvent(tx, 'n1', kind, 'ref', {}, 1000));
        const got = await store.q.all<{ subscription_id: string; id: string }>('SELECT subscription_id, id FROM deliveries WHERE event_seq = ? ORDER BY id', [e.seq]);
        const want = subs.filter((x) => x.node === 'n1' && x.status === 'active' && matches(x, kind)).map((x) => x.id);
        expect(got.map((r) => r.subscription_id), kind).toEqual(want); // ids ascending = creation order
        for (const r of got) expect(r.id).toMatch(/^dlv_[0-9A-HJKMNP-TV-Z]{26}$/); // ids as newId makes them
        if (got.length) expect(new Set(got.map((r) => r.id.slice(0, -4))).size).toBe(1); // one block
      }
      // Past 32 subscriptions the id's second digit from the end moves too: 40 more on n2, all taking it.
      await store.write(async (tx) => {
        for (let i = 0; i < 40; i++)
          await subscriptions.insert(tx, { id: `whk_n2_${String(i).padStart(2, '0')}`, node_id: 'n2', url: 'https://r.example/h', events: '*', schema_version: '1.1.0', description: null, status: 'active', secret: 'whsec_x', created_at: 0 });
      });
      const wide = await store.write((tx) => recordEvent(tx, 'n2', 'budget.halted', 'ref', {}, 1000));
      const ids = (await store.q.all<{ id: string }>('SELECT id FROM deliveries WHERE event_seq = ? ORDER BY subscription_id', [wide.seq])).map((r) => r.id);
      expect(ids.length).toBe(41);
      expect(new Set(ids).size).toBe(41);
      expect(new Set(ids.map((id) => id.slice(0, -4))).size).toBe(1);
      expect(ids.map((id) => id.slice(-4)).sort()).toEqual(Array.from({ length: 41 }, (_, k) => [32768, 1024, 32, 1].map((p) => '0123456789ABCDEFGHJKMNPQRSTVWXYZ'[Math.floor((k + 1) / p) % 32]).join('')));
      // The counters the insert trigger keeps agree with the rows.
      const counted = await store.q.value<number>("SELECT SUM(n) FROM delivery_counts WHERE state = 'pending'");
      expect(counted).toBe(await store.q.value<number>("SELECT COUNT(*) FROM deliveries WHERE status = 'pending'"));
      expect(counted).toBeGreaterThan(41);
    } finally {
      void store.close();
    }
  });
});
