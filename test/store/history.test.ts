// Cost that does not grow with history (issue 14): every query the daemon ran is indexed for its access path,
// counters match a recount, retention deletes only delivered history, a restart releases only unrecorded claims,
// and concurrent writes share one durable commit.
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import Database from 'better-sqlite3';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { startDaemon, type Daemon } from '../../src/daemon.js';
import { bodyV100, envelopeBody, EVENT_KIND_LIST, kindInVersion } from '../../src/domain/events.js';
import { Lru } from '../../src/lru.js';
import { Pruner } from '../../src/ops/retention.js';
import { addKeys, addNode, issueToken } from '../../src/service/admin.js';
import { migrate, openSqliteStore as openStore, preparedSql, SqliteSql, WriteQueue, type SqliteStore as Store } from '../../src/store/db.js';
import { MIGRATIONS } from '../../src/store/migrations/index.js';
import { recordEvent } from '../../src/store/events.js';
import { claimDue, deliveries, recordAttempt, releaseStaleLeases, subscriptions } from '../../src/store/webhooks.js';
import { clientOf } from '../helpers/daemon.js';
import { ISSUER, issuerKeyPair, mintCredential, nowSeconds, payerKeyPair, publicJwks, signCompact, signVoucher, type KeyPair } from '../helpers/issuer.js';
import { always, ack, startReceiver, type Receiver } from '../helpers/receiver.js';
import { waitFor } from '../helpers/wait.js';

const DAY = 86_400_000;
const dirs: string[] = [];
const tempDir = () => {
  const d = mkdtempSync(join(tmpdir(), 'node-svc-history-'));
  dirs.push(d);
  return d;
};
afterAll(() => {
  for (const d of dirs) rmSync(d, { recursive: true, force: true });
});

/** Counts by health bucket recounted from the deliveries themselves. */
function recount(db: Database.Database) {
  return db.prepare(`SELECT subscription_id, CASE WHEN status = 'pending' THEN CASE WHEN last_error IS NULL THEN 'pending' ELSE 'retrying' END ELSE status END AS state,
    COUNT(*) AS n FROM deliveries GROUP BY 1, 2 ORDER BY 1, 2`).all();
}
const counters = (db: Database.Database) => db.prepare('SELECT subscription_id, state, n FROM delivery_counts WHERE n != 0 ORDER BY 1, 2').all();

// Tables that grow with history (or with streams): a run-time query may not read all of them.
const GROWING = ['events', 'deliveries', 'delivery_attempts', 'vouchers', 'streams', 'settlements', 'control_messages', 'card_refunds', 'revocations', 'budgets', 'payer_subscription_periods'];

/** The query plan of `sql` with every parameter bound to NULL (the plan does not depend on the values). */
function planOf(db: Database.Database, sql: string): string[] {
  const s = db.prepare(`EXPLAIN QUERY PLAN ${sql}`);
  const named = [...new Set([...sql.matchAll(/@(\w+)/g)].map((m) => m[1]!))];
  if (named.length) return (s.all(Object.fromEntries(named.map((n) => [n, null]))) as Array<{ detail: string }>).map((r) => r.detail);
  for (let n = 0; n < 64; n++) {
    try {
      return (s.all(...Array(n).fill(null)) as Array<{ detail: string }>).map((r) => r.detail);
    } catch (err) {
      if (!(err instanceof RangeError)) throw err;
    }
  }
  throw new Error(`cannot bind ${sql}`);
}

/** Full scans of a growing table and sorts of one in a temp B-tree: what makes a query cost grow with history. */
function problems(db: Database.Database, sql: string): string[] {
  const aliases = new Map<string, string>();
  for (const m of sql.matchAll(/\b(?:FROM|JOIN|UPDATE|INTO)\s+(\w+)(?:\s+(?:AS\s+)?(\w+))?/gi)) {
    aliases.set(m[1]!, m[1]!);
    if (m[2] && !/^(WHERE|SET|ON|JOIN|LEFT|ORDER|GROUP|LIMIT|VALUES|USING)$/i.test(m[2])) aliases.set(m[2], m[1]!);
  }
  const growing = [...aliases.values()].some((t) => GROWING.includes(t));
  const out: string[] = [];
  for (const d of planOf(db, sql)) {
    const scan = /^SCAN (\w+)/.exec(d);
    if (scan && GROWING.includes(aliases.get(scan[1]!) ?? scan[1]!)) out.push(d);
    if (/TEMP B-TREE/.test(d) && growing) out.push(d);
  }
  return out;
}

describe('a daemon with history: every run-time query on an index', () => {
  let dir: string;
  let store: Store;
  let daemon: Daemon;
  let token: string;
  let issuer: KeyPair;
  let payer: KeyPair;
  let ok: Receiver;
  let failing: Receiver;

  beforeAll(async () => {
    dir = tempDir();
    issuer = await issuerKeyPair();
    payer = await payerKeyPair();
    const admin = openStore(dir);
    await addNode(admin, 'node-a');
    token = (await issueToken(admin, 'node-a')).token;
    await addKeys(admin, ISSUER, publicJwks(issuer), 'test');
    await admin.close();
    ok = await startReceiver(ack());
    failing = await startReceiver(always(500));
    daemon = await startDaemon({ dataDir: dir, host: '127.0.0.1', port: 0, rateLimit: 0, retrySchedule: [0, 0] });
    store = daemon.deps.store as Store;
  });
  afterAll(async () => {
    await daemon?.stop();
    await ok?.close();
    await failing?.close();
  });

  it('runs the paid, webhook and operator paths, then finds no full scan or sort of a growing table in any query', async () => {
    const c = clientOf(daemon.url, token);
    expect((await c.post('/v1/webhooks', { url: ok.url })).status).toBe(201);
    expect((await c.post('/v1/webhooks', { url: ok.url, schemaVersion: '1.0.0' })).status).toBe(201);
    const bad = await c.post('/v1/webhooks', { url: failing.url });
    expect(bad.status).toBe(201);
    const credential = mintCredential({ key: issuer, payer, claims: { stream: 's-1', cap: '1000' } });
    expect((await c.post('/v1/allowances/verify', { credential })).status).toBe(200);
    expect((await c.post('/v1/allowances/verify', { credential })).status).toBe(200);
    for (const amount of ['100', '200', '1000']) {
      const v = await c.post('/v1/streams/s-1/vouchers', { voucher: signVoucher(payer, { stream: 's-1', amount, units: '1' }) });
      expect(v.status, v.text).toBe(200);
    }
    const ctl = signCompact({ alg: issuer.alg, typ: 'control+jwt', kid: issuer.kid }, { iss: ISSUER, aud: 'node-a', jti: 'j-1', iat: nowSeconds(), kind: 'stream.revoked', stream: 's-9' }, issuer.privateKey);
    expect((await c.post('/v1/control', { message: ctl })).status).toBe(200);
    for (const p of ['/v1/streams/s-1/headroom', '/v1/streams/s-1/verify', '/v1/streams/s-1/finality', '/v1/streams', '/v1/webhooks'])
      expect((await c.get(p)).status, p).toBe(200);
    // Both events reach the healthy subscriptions; the failing one uses up its schedule (dead).
    await waitFor(async () => (await c.get(`/v1/webhooks/${bad.body.id}/deliveries`)).body.health.dead === 2, 'dead deliveries', 20_000);
    const page = await c.get(`/v1/webhooks/${bad.body.id}/deliveries?limit=2`);
    expect(page.body.data).toHaveLength(2);
    expect((await c.get(`/v1/webhooks/${bad.body.id}/deliveries?limit=2&cursor=${page.body.nextCursor}`)).body.data.length).toBeGreaterThan(0);
    const events = await c.get('/v1/events?type=stream.exhausted');
    expect(events.body.data.map((e: { type: string }) => e.type)).toEqual(['stream.exhausted']);
    const since = await c.get(`/v1/events?since=${encodeURIComponent(new Date(Date.now() - 60_000).toISOString())}`);
    expect(since.body.data).toHaveLength(2);
    expect((await c.post(`/v1/events/${events.body.data[0].id}/redeliver`, {})).status).toBe(202);
    expect((await c.get(`/v1/events?cursor=${since.body.nextCursor}`)).status).toBe(200);
    expect((await fetch(`${daemon.url}/metrics`)).status).toBe(200);
    await daemon.pruner.runOnce(); // default retention: nothing is old enough
    // A pass whose horizon is past everything: the deleting statements run too (and are checked below).
    const pruned = await new Pruner({ store, retentionMs: 1, now: () => Date.now() + 60_000 }).runOnce();
    expect(pruned.deliveries).toBeGreaterThan(0);
    expect(pruned.events).toBe(0); // every event still has a dead delivery
    await releaseStaleLeases(store.q, Date.now());

    const sql = preparedSql(store);
    if (process.env.SHOW_PLANS) for (const q of sql) console.log(q.replace(/\s+/g, " ").slice(0, 160), "\n   ", planOf(store.db, q).join(" | "));
    expect(sql.length).toBeGreaterThan(30);
    const found = sql.map((q) => ({ q: q.replace(/\s+/g, ' '), p: problems(store.db, q) })).filter((x) => x.p.length);
    expect(found).toEqual([]);
    expect(counters(store.db)).toEqual(recount(store.db).filter((r) => (r as { n: number }).n > 0));
  });

  it('the checker itself flags a full scan and a sort of a growing table', async () => {
    expect(problems(store.db, 'SELECT * FROM events WHERE body LIKE ?')).toEqual([expect.stringMatching(/^SCAN events/)]);
    expect(problems(store.db, 'SELECT * FROM delivery_attempts a WHERE a.subscription_id = ? ORDER BY a.attempted_at')).toEqual([expect.stringMatching(/TEMP B-TREE/)]);
  });
});

describe('store rules', () => {
  const fresh = async () => {
    const s = openStore(tempDir());
    await addNode(s, 'node-a');
    return s;
  };
  const subscribe = (s: Store, id: string, version: '1.0.0' | '1.1.0' = '1.1.0') =>
    subscriptions.insert(s.q, { id, node_id: 'node-a', url: 'http://127.0.0.1:9/h', events: '*', schema_version: version, description: null, status: 'active', secret: 'whsec_x', created_at: 0 });

  it('stores one envelope body per event; the 1.0.0 envelope read back is byte-identical to the one built for 1.0.0', async () => {
    const s = await fresh();
    // The member inside data, unescaped, comes after the envelope's own: only the envelope's changes (bodyV100).
    const data = { stream: 'x', note: '"schemaVersion":"1.1.0"', schemaVersion: '1.1.0' };
    for (const type of EVENT_KIND_LIST) {
      const e = await s.write((tx) => recordEvent(tx, 'node-a', type, 'stream:x', data, 1_700_000_000_000));
      const row = s.db.prepare('SELECT body FROM events WHERE seq = ?').get(e.seq) as { body: string };
      const base = { id: e.id, type, occurredAt: new Date(1_700_000_000_000).toISOString(), externalRef: 'stream:x', data };
      expect(row.body).toBe(envelopeBody(base, '1.1.0'));
      if (kindInVersion(type, '1.0.0')) expect(bodyV100(row.body)).toBe(envelopeBody(base, '1.0.0')); // what a 1.0.0 subscription is sent
    }
    // One body stored per event (migration 0200): no second column.
    expect(s.db.prepare("SELECT name FROM pragma_table_xinfo('events') ORDER BY name").all().map((c) => (c as { name: string }).name))
      .toEqual(['body', 'external_ref', 'id', 'node_id', 'occurred_at', 'seq', 'type']);
    await s.close();
  });

  it('a restart releases only claims that were never recorded, reading no attempt history', async () => {
    const s = await fresh();
    await subscribe(s, 'whk_1');
    const now = 1_000_000;
    for (let i = 0; i < 3; i++) await s.write((tx) => recordEvent(tx, 'node-a', 'budget.halted', `budget:b${i}`, { budget: `b${i}`, reason: 'sla' }, now));
    const claimed = await s.write((tx) => claimDue(tx, now, 60_000, 10, { concurrency: 256, perNode: 128, perSubscription: 10 }, { bySubscription: {}, byNode: {} }));
    expect(claimed).toHaveLength(3);
    // One failed and was recorded (due again at now + 5 min), one delivered, one's process died mid-send.
    const rec = (i: number, outcome: 'failed' | 'delivered', next: number | null) =>
      s.write((tx) => recordAttempt(tx, { deliveryId: claimed[i]!.id, subscriptionId: 'whk_1', eventSeq: claimed[i]!.event_seq, attempt: 1, at: now, durationMs: 5, statusCode: outcome === 'failed' ? 500 : 200, error: outcome === 'failed' ? 'HTTP 500' : null, outcome, nextAttemptAt: next }));
    expect(await rec(0, 'failed', now + 300_000)).toBe(true);
    expect(await rec(1, 'delivered', null)).toBe(true);
    expect(await releaseStaleLeases(s.q, now + 1000)).toBe(1);
    const due = s.db.prepare("SELECT id, next_attempt_at FROM deliveries WHERE status = 'pending' ORDER BY id").all() as Array<{ id: string; next_attempt_at: number }>;
    expect(Object.fromEntries(due.map((d) => [d.id, d.next_attempt_at]))).toEqual({ [claimed[0]!.id]: now + 300_000, [claimed[2]!.id]: now + 1000 });
    expect(await releaseStaleLeases(s.q, now + 2000)).toBe(0);
    await s.close();
  });

  it('retention deletes delivered and cancelled deliveries, their attempts and unreferenced events older than the horizon; nothing else', async () => {
    const s = await fresh();
    await subscribe(s, 'whk_1');
    await subscribe(s, 'whk_2');
    const old = 1_000 * DAY;
    const now = old + 31 * DAY;
    s.db.prepare(`INSERT INTO streams(node_id, id, budget, issuer, payer, credential_id, credential, iat, exp, cap_micro, asset, unit_price_micro, mode, voucher_key, claims, created_at, updated_at, billed_micro)
      VALUES ('node-a', 's', 'b', 'i', 'p', 'c', 'jws', 0, 0, 100, 'USDC', 1, 'escrow', '{}', '{}', ?, ?, 50)`).run(old, old);
    s.db.prepare("INSERT INTO vouchers(node_id, stream, amount_micro, units, signed_at, received_at, voucher) VALUES ('node-a', 's', 50, 1, 0, ?, 'v')").run(old);
    const mk = (t: number) => s.write((tx) => recordEvent(tx, 'node-a', 'budget.halted', 'budget:b', { budget: 'b', reason: 'sla' }, t));
    const e = { delivered: await mk(old), dead: await mk(old), pending: await mk(old), mixed: await mk(old), recent: await mk(now - DAY) };
    const dl = (seq: number) => s.db.prepare('SELECT id, subscription_id FROM deliveries WHERE event_seq = ? ORDER BY subscription_id').all(seq) as Array<{ id: string; subscription_id: string }>;
    const attempt = async (id: string, sub: string, seq: number, outcome: 'delivered' | 'failed', next: number | null) => {
      s.db.prepare('UPDATE deliveries SET attempts = attempts + 1 WHERE id = ?').run(id); // the claim
      const n = s.db.prepare('SELECT attempts FROM deliveries WHERE id = ?').pluck().get(id) as number; // its fence
      await s.write((tx) => recordAttempt(tx, { deliveryId: id, subscriptionId: sub, eventSeq: seq, attempt: n, at: old, durationMs: 1, statusCode: outcome === 'delivered' ? 200 : 500, error: outcome === 'delivered' ? null : 'HTTP 500', outcome, nextAttemptAt: next }));
    };
    for (const d of dl(e.delivered.seq)) await attempt(d.id, d.subscription_id, e.delivered.seq, 'delivered', null);
    for (const d of dl(e.dead.seq)) await attempt(d.id, d.subscription_id, e.dead.seq, 'failed', null);
    const [m1, m2] = dl(e.mixed.seq);
    await attempt(m1!.id, m1!.subscription_id, e.mixed.seq, 'delivered', null);
    await attempt(m2!.id, m2!.subscription_id, e.mixed.seq, 'failed', now + DAY); // still retrying
    for (const d of dl(e.recent.seq)) s.db.prepare("UPDATE deliveries SET status = 'delivered', delivered_at = ? WHERE id = ?").run(now - DAY, d.id);
    // An old event nobody subscribed to (no delivery at all).
    s.db.prepare('DELETE FROM deliveries WHERE event_seq = ?').run(e.pending.seq);
    const lonely = e.pending;

    let clock = now;
    const pruner = new Pruner({ store: s, retentionMs: 30 * DAY, now: () => clock });
    const got = await pruner.runOnce();
    expect(got).toEqual({ deliveries: 3, attempts: 3, events: 2 });
    const left = s.db.prepare('SELECT seq FROM events ORDER BY seq').all().map((r) => (r as { seq: number }).seq);
    expect(left).toEqual([e.dead.seq, e.mixed.seq, e.recent.seq]); // delivered one and the lonely one gone
    expect(left).not.toContain(lonely.seq);
    expect(s.db.prepare('SELECT COUNT(*) AS n FROM deliveries WHERE event_seq = ?').get(e.dead.seq)).toEqual({ n: 2 });
    expect(s.db.prepare('SELECT status FROM deliveries WHERE event_seq = ?').all(e.mixed.seq)).toEqual([{ status: 'pending' }]);
    expect(s.db.prepare('SELECT COUNT(*) AS n FROM delivery_attempts WHERE event_seq = ?').get(e.dead.seq)).toEqual({ n: 2 });
    // Money is never pruned.
    expect(s.db.prepare('SELECT COUNT(*) AS n FROM vouchers').get()).toEqual({ n: 1 });
    expect(s.db.prepare('SELECT billed_micro FROM streams').get()).toEqual({ billed_micro: 50 });
    expect(counters(s.db)).toEqual(recount(s.db));
    // A second pass has nothing left to do. When the retrying delivery ends up delivered, the daily walk from the
    // start finds it, and its event goes too (the recent event is still inside the retention period).
    expect(await pruner.runOnce()).toEqual({ deliveries: 0, attempts: 0, events: 0 });
    await attempt(m2!.id, m2!.subscription_id, e.mixed.seq, 'delivered', null);
    expect(await pruner.runOnce()).toEqual({ deliveries: 0, attempts: 0, events: 0 }); // resumes after what it kept
    clock += DAY;
    expect(await pruner.runOnce()).toEqual({ deliveries: 1, attempts: 2, events: 1 });
    expect(s.db.prepare('SELECT seq FROM events ORDER BY seq').all().map((r) => (r as { seq: number }).seq)).toEqual([e.dead.seq, e.recent.seq]);
    // Retention 0 keeps everything.
    s.db.prepare("UPDATE deliveries SET status = 'delivered', delivered_at = 0, created_at = 0").run();
    expect(await new Pruner({ store: s, retentionMs: 0, now: () => now }).runOnce()).toEqual({ deliveries: 0, attempts: 0, events: 0 });
    await s.close();
  });

  it('counters follow every transition: claim, failure, retry, success, dead, cancel, prune', async () => {
    const s = await fresh();
    await subscribe(s, 'whk_1');
    await subscribe(s, 'whk_2', '1.0.0');
    const now = 5_000;
    for (let i = 0; i < 6; i++) await s.write((tx) => recordEvent(tx, 'node-a', 'budget.halted', `budget:${i}`, { budget: String(i), reason: 'sla' }, now));
    expect(counters(s.db)).toEqual([{ subscription_id: 'whk_1', state: 'pending', n: 6 }, { subscription_id: 'whk_2', state: 'pending', n: 6 }]);
    const claimed = await s.write((tx) => claimDue(tx, now, 1000, 100, { concurrency: 256, perNode: 128, perSubscription: 100 }, { bySubscription: {}, byNode: {} }));
    for (const [i, d] of claimed.entries()) {
      const outcome = i % 3 === 0 ? 'delivered' : 'failed';
      await s.write((tx) => recordAttempt(tx, { deliveryId: d.id, subscriptionId: d.subscription_id, eventSeq: d.event_seq, attempt: 1, at: now, durationMs: 1, statusCode: outcome === 'delivered' ? 200 : 500, error: outcome === 'delivered' ? null : 'x', outcome, nextAttemptAt: i % 3 === 1 ? now + 10 : null }));
    }
    expect(counters(s.db)).toEqual(recount(s.db));
    await deliveries.cancelPending(s.q, 'whk_2');
    expect(counters(s.db)).toEqual(recount(s.db));
    s.db.prepare("DELETE FROM deliveries WHERE status = 'dead' AND subscription_id = 'whk_1' AND id NOT IN (SELECT delivery_id FROM delivery_attempts)").run();
    s.db.prepare("DELETE FROM delivery_attempts WHERE subscription_id = 'whk_1'").run();
    s.db.prepare("DELETE FROM deliveries WHERE subscription_id = 'whk_1' AND status = 'delivered'").run();
    expect(counters(s.db)).toEqual(recount(s.db));
    await s.close();
  });

  it('the unsettled-streams gauge follows billed and final amounts', async () => {
    const s = await fresh();
    const gauge = () => (s.db.prepare("SELECT n FROM store_gauges WHERE name = 'unsettled_streams'").get() as { n: number }).n;
    const ins = s.db.prepare(`INSERT INTO streams(node_id, id, budget, issuer, payer, credential_id, credential, iat, exp, cap_micro, asset, unit_price_micro, mode, voucher_key, claims, created_at, updated_at)
      VALUES ('node-a', ?, 'b', 'i', 'p', 'c', 'jws', 0, 0, 100, 'USDC', 1, 'escrow', '{}', '{}', 0, 0)`);
    ins.run('a');
    ins.run('b');
    expect(gauge()).toBe(0);
    s.db.prepare("UPDATE streams SET billed_micro = 10 WHERE id IN ('a', 'b')").run();
    expect(gauge()).toBe(2);
    s.db.prepare("UPDATE streams SET billed_micro = 20 WHERE id = 'a'").run();
    expect(gauge()).toBe(2);
    s.db.prepare("UPDATE streams SET final_micro = 10 WHERE id = 'b'").run();
    expect(gauge()).toBe(1);
    expect(gauge()).toBe((s.db.prepare('SELECT COUNT(*) AS n FROM streams WHERE billed_micro > final_micro').get() as { n: number }).n);
    await s.close();
  });
});

describe('upgrading a store written before migration 90', () => {
  it('backfills counters, gauges and recorded attempts, and the 1.0.0 body made from the stored one equals the one that was stored', async () => {
    const db = new Database(join(tempDir(), 'old.db'));
    db.pragma('foreign_keys = ON');
    db.transaction(() => {
      for (const m of MIGRATIONS.filter((x) => x.version <= 50)) m.up(db);
      db.pragma('user_version = 50');
    })();
    db.exec(`INSERT INTO nodes(id, created_at) VALUES ('node-a', 0);
      INSERT INTO webhook_subscriptions(id, node_id, url, events, schema_version, status, secret, created_at, updated_at)
        VALUES ('whk_1', 'node-a', 'http://127.0.0.1:9/h', '*', '1.0.0', 'active', 'whsec_x', 0, 0);
      INSERT INTO streams(node_id, id, budget, issuer, payer, credential_id, credential, iat, exp, cap_micro, asset, unit_price_micro, mode, voucher_key, claims, created_at, updated_at, billed_micro, final_micro)
        VALUES ('node-a', 's1', 'b', 'i', 'p', 'c', 'jws', 0, 0, 100, 'USDC', 1, 'escrow', '{}', '{}', 0, 0, 50, 10),
               ('node-a', 's2', 'b', 'i', 'p', 'c', 'jws', 0, 0, 100, 'USDC', 1, 'escrow', '{}', '{}', 0, 0, 50, 50);`);
    const bodies: Array<[string, string]> = [];
    const ins = db.prepare('INSERT INTO events(id, node_id, type, external_ref, occurred_at, body, body_v100) VALUES (?, ?, ?, ?, ?, ?, ?)');
    for (let i = 0; i < 4; i++) {
      const base = { id: `evt_${i}`, type: 'budget.halted' as const, occurredAt: new Date(i).toISOString(), externalRef: 'budget:b', data: { budget: 'b', reason: 'sla' } };
      ins.run(base.id, 'node-a', base.type, base.externalRef, i, envelopeBody(base, '1.1.0'), envelopeBody(base, '1.0.0'));
      bodies.push([base.id, envelopeBody(base, '1.0.0')]);
    }
    const dl = db.prepare("INSERT INTO deliveries(id, event_seq, subscription_id, status, attempts, next_attempt_at, created_at, last_error) VALUES (?, ?, 'whk_1', ?, ?, ?, 0, ?)");
    dl.run('dlv_ok', 1, 'delivered', 1, 0, null);
    dl.run('dlv_retry', 2, 'pending', 1, 9_999_999, 'HTTP 500');
    dl.run('dlv_crashed', 3, 'pending', 2, 9_999_999, 'HTTP 500'); // claimed a second time, never recorded
    dl.run('dlv_dead', 4, 'dead', 9, 0, 'HTTP 500');
    const at = db.prepare("INSERT INTO delivery_attempts(id, delivery_id, subscription_id, event_seq, attempt, attempted_at, duration_ms, outcome) VALUES (?, ?, 'whk_1', ?, 1, 0, 1, ?)");
    at.run('atm_1', 'dlv_ok', 1, 'delivered');
    at.run('atm_2', 'dlv_retry', 2, 'failed');
    at.run('atm_3', 'dlv_crashed', 3, 'failed');
    migrate(db);
    expect(db.pragma('user_version', { simple: true })).toBe(MIGRATIONS.at(-1)!.version);
    expect(counters(db)).toEqual(recount(db));
    expect(counters(db)).toEqual([
      { subscription_id: 'whk_1', state: 'dead', n: 1 }, { subscription_id: 'whk_1', state: 'delivered', n: 1 }, { subscription_id: 'whk_1', state: 'retrying', n: 2 },
    ]);
    expect(db.prepare("SELECT n FROM store_gauges WHERE name = 'unsettled_streams'").get()).toEqual({ n: 1 });
    expect(await releaseStaleLeases(new SqliteSql(() => db), 1000)).toBe(1);
    expect(db.prepare('SELECT id FROM deliveries WHERE next_attempt_at = 1000').all()).toEqual([{ id: 'dlv_crashed' }]);
    for (const [id, v100] of bodies) expect(bodyV100((db.prepare('SELECT body FROM events WHERE id = ?').get(id) as { body: string }).body)).toBe(v100);
    db.close();
  });
});

describe('group commit', () => {
  it('concurrent writes share one transaction; each resolves after commit; a failing write rolls back only itself', async () => {
    const s = openStore(tempDir());
    s.db.exec('CREATE TABLE t (k TEXT PRIMARY KEY, v INTEGER NOT NULL) STRICT');
    const q = new WriteQueue(s.db);
    const ins = s.db.prepare('INSERT INTO t(k, v) VALUES (?, ?)');
    const reader = new Database(s.path, { readonly: true });
    const seen: number[] = [];
    const writes = Array.from({ length: 50 }, (_, i) =>
      q.write(async () => {
        ins.run(`k${i}`, i);
        if (i === 7) ins.run('k3', 0); // duplicate key: this write fails
        return i;
      }).then((v) => {
        // Resolved only once the batch is committed: another connection already sees the row.
        seen.push((reader.prepare('SELECT COUNT(*) AS n FROM t WHERE k = ?').get(`k${v}`) as { n: number }).n);
        return v;
      }),
    );
    const results = await Promise.allSettled(writes);
    expect(results.filter((r) => r.status === 'rejected')).toHaveLength(1);
    expect((results[7] as PromiseRejectedResult).reason.code).toBe('SQLITE_CONSTRAINT_PRIMARYKEY');
    expect(seen).toEqual(Array(49).fill(1));
    expect(q.stats).toEqual({ commits: 1, jobs: 50 });
    expect((s.db.prepare('SELECT COUNT(*) AS n FROM t').get() as { n: number }).n).toBe(49);
    expect(s.db.prepare("SELECT v FROM t WHERE k = 'k7'").get()).toBeUndefined();
    // Writes queued in different turns of the event loop are different commits.
    await q.write(async () => ins.run('a', 1));
    await q.write(async () => ins.run('b', 1));
    expect(q.stats.commits).toBe(3);
    expect(s.db.pragma('synchronous', { simple: true })).toBe(2); // FULL: a commit is on disk
    reader.close();
    await s.close();
  });
});

describe('Lru', () => {
  it('evicts the least recently used entry, one at a time', async () => {
    const c = new Lru<string, number>(4);
    for (const [k, v] of [['a', 1], ['b', 2], ['c', 3], ['d', 4]] as const) c.set(k, v);
    expect(c.get('a')).toBe(1); // aged past half the capacity: a is now the most recent
    c.set('e', 5);
    expect(['a', 'b', 'c', 'd', 'e'].map((k) => c.has(k))).toEqual([true, false, true, true, true]);
    c.set('f', 6);
    expect(['a', 'c', 'd', 'e', 'f'].map((k) => c.has(k))).toEqual([true, false, true, true, true]);
    expect(c.size).toBe(4);
  });

  it('a hot entry survives any number of cold ones passing through', async () => {
    const c = new Lru<number, number>(100);
    c.set(-1, -1);
    for (let i = 0; i < 10_000; i++) {
      c.set(i, i);
      expect(c.get(-1)).toBe(-1);
    }
    expect(c.size).toBe(100);
  });
});

describe('upgrading a store written before migration 180 (dead deliveries resolved)', () => {
  it('resolves the dead deliveries whose event reached their subscription later, counts them, and resolves from then on as replays are delivered', () => {
    const db = new Database(join(tempDir(), 'old180.db'));
    db.pragma('foreign_keys = ON');
    db.transaction(() => {
      for (const m of MIGRATIONS.filter((x) => x.version < 180)) m.up(db);
      db.pragma('user_version = 170');
    })();
    db.exec(`INSERT INTO nodes(id, created_at) VALUES ('node-a', 0);
      INSERT INTO webhook_subscriptions(id, node_id, url, events, schema_version, status, secret, created_at, updated_at)
        VALUES ('whk_1', 'node-a', 'http://127.0.0.1:9/h', '*', '1.1.0', 'active', 'whsec_x', 0, 0);`);
    const ins = db.prepare("INSERT INTO events(id, node_id, type, external_ref, occurred_at, body) VALUES (?, 'node-a', 'budget.halted', 'budget:b', ?, ?)");
    for (let i = 1; i <= 2; i++) ins.run(`evt_${i}`, i, envelopeBody({ id: `evt_${i}`, type: 'budget.halted', occurredAt: new Date(i).toISOString(), externalRef: 'budget:b', data: { budget: 'b', reason: 'sla' } }, '1.1.0'));
    const dl = db.prepare("INSERT INTO deliveries(id, event_seq, subscription_id, status, attempts, next_attempt_at, created_at, last_error, delivered_at, redelivery) VALUES (?, ?, 'whk_1', ?, 1, 0, ?, ?, ?, ?)");
    dl.run('dlv_dead1', 1, 'dead', 0, 'HTTP 500', null, 0);
    dl.run('dlv_replay1', 1, 'delivered', 10, null, 11, 1); // replayed and delivered before the upgrade
    dl.run('dlv_dead2', 2, 'dead', 0, 'HTTP 500', null, 0);
    migrate(db);
    const resolved = () => db.prepare('SELECT id, resolved_at FROM deliveries WHERE status = \'dead\' ORDER BY id').all();
    const count = () => (db.prepare("SELECT COALESCE(SUM(n), 0) AS n FROM delivery_counts WHERE state = 'dead_resolved'").get() as { n: number }).n;
    expect(resolved()).toEqual([{ id: 'dlv_dead1', resolved_at: 11 }, { id: 'dlv_dead2', resolved_at: null }]);
    expect(count()).toBe(1);
    // A replay of evt_2 that fails changes nothing; delivered, it resolves dlv_dead2 (the trigger), counted once.
    db.prepare("INSERT INTO deliveries(id, event_seq, subscription_id, status, next_attempt_at, created_at, redelivery) VALUES ('dlv_replay2', 2, 'whk_1', 'pending', 0, 20, 1)").run();
    db.prepare("UPDATE deliveries SET last_error = 'HTTP 500' WHERE id = 'dlv_replay2'").run();
    expect(count()).toBe(1);
    db.prepare("UPDATE deliveries SET status = 'delivered', delivered_at = 30, last_error = NULL WHERE id = 'dlv_replay2'").run();
    expect(resolved()).toEqual([{ id: 'dlv_dead1', resolved_at: 11 }, { id: 'dlv_dead2', resolved_at: 30 }]);
    expect(count()).toBe(2);
    db.close();
  });
});
