// Fair claims (issue #12 item 4, DESIGN §14): a subscription's backlog or a hanging receiver's in-flight attempts never
// keep another subscription (of this node or another) from being claimed.
import { mkdtemp, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterEach, beforeEach, describe, expect, it, vi } from 'vitest';
import { nodes } from '../../src/store/admin.js';
import { openSqliteStore as openStore, type SqliteStore as Store } from '../../src/store/db.js';
import { recordEvent } from '../../src/store/events.js';
import { budgets, claimDue, deliveries, nextDueWithRoom, subscriptions, type InFlight } from '../../src/store/webhooks.js';

let root: string;
let store: Store;
const T0 = 1_800_000_000_000;
const LIMITS = { concurrency: 256, perNode: 128, perSubscription: 64 };

beforeEach(async () => {
  root = await mkdtemp(join(tmpdir(), 'node-svc-claim-'));
  store = openStore(join(root, 'data'));
});
afterEach(async () => {
  await store.close();
  await rm(root, { recursive: true, force: true });
});

async function subscribe(node: string, id: string) {
  if (!(await nodes.get(store.q, node))) await nodes.insert(store.q, node, T0);
  await subscriptions.insert(store.q, { id, node_id: node, url: `http://127.0.0.1:9/${id}`, events: '*', schema_version: '1.1.0', description: null, status: 'active', secret: 'whsec_x', created_at: T0 });
}
let k = 0;
const emit = (node: string, n: number, at = T0) =>
  store.write(async (tx) => {
    for (let i = 0; i < n; i++) await recordEvent(tx, node, 'budget.halted', `budget:b${++k}`, { budget: `b${k}`, reason: 'anomaly' }, at);
  });
const claim = (...args: Parameters<typeof claimDue> extends [unknown, ...infer R] ? R : never) => store.write((tx) => claimDue(tx, ...args));
const none: InFlight = { bySubscription: {}, byNode: {} };
const bySub = (rows: Array<{ subscription_id: string }>) => rows.reduce<Record<string, number>>((m, r) => ({ ...m, [r.subscription_id]: (m[r.subscription_id] ?? 0) + 1 }), {});

describe('budgets', () => {
  it('add up to at most the concurrency, at least 1 each', async () => {
    const active = [
      ...Array.from({ length: 3 }, (_, i) => ({ id: `a${i}`, node_id: 'node-a' })),
      { id: 'b0', node_id: 'node-b' },
      ...Array.from({ length: 7 }, (_, i) => ({ id: `c${i}`, node_id: 'node-c' })),
    ];
    const b = budgets(active, LIMITS);
    const sum = [...b.bySubscription.values()].reduce((x, y) => x + y, 0);
    expect(sum).toBeLessThanOrEqual(LIMITS.concurrency);
    expect(b.byNode.get('node-a')).toBe(85); // 256 / 3 nodes
    expect(b.bySubscription.get('a0')).toBe(28); // 85 / 3 subscriptions
    expect(b.bySubscription.get('b0')).toBe(64); // capped per subscription
    expect(b.bySubscription.get('c0')).toBe(12);
    const many = budgets(Array.from({ length: 1000 }, (_, i) => ({ id: `s${i}`, node_id: `n${i}` })), LIMITS);
    expect(Math.min(...many.bySubscription.values())).toBe(1);
  });
});

describe('claimDue', () => {
  it("reaches another node's single event behind one node's backlog of 1,500 at its budget (the issue's case)", async () => {
    for (const s of ['a1', 'a2', 'a3']) await subscribe('node-a', s);
    await subscribe('node-b', 'b1');
    await emit('node-a', 500, T0 - 60_000); // 1,500 deliveries, all due long before node-b's event
    await emit('node-b', 1, T0);
    // node-a's three subscriptions hang with their whole budget in flight
    const b = budgets((await subscriptions.list(store.q, 'node-a')).concat(await subscriptions.list(store.q, 'node-b')), LIMITS);
    const inFlight: InFlight = { bySubscription: { a1: b.bySubscription.get('a1')!, a2: b.bySubscription.get('a2')!, a3: b.bySubscription.get('a3')! }, byNode: {} };
    inFlight.byNode['node-a'] = inFlight.bySubscription.a1! * 3;
    const got = await claim(T0, 60_000, 10, LIMITS, inFlight);
    expect(got.map((d) => d.subscription_id)).toEqual(['b1']);
    expect(got[0]!.node_id).toBe('node-b');
  });

  it("never claims for a subscription disabled since the active list was cached (another process's change)", async () => {
    // The wall clock stands still, so the cached active list (good for 1 s) is certainly still the one read first.
    vi.useFakeTimers({ toFake: ['Date'], now: T0 });
    try {
      await subscribe('node-a', 'a1');
      await subscribe('node-a', 'a2');
      await emit('node-a', 5, T0);
      expect(bySub(await claim(T0, 60_000, 2, LIMITS, none))).toEqual({ a1: 1, a2: 1 }); // both active: the list is cached
      // Disabled as another process would (not through subscriptions.setStatus, which drops the cached list).
      store.db.prepare("UPDATE webhook_subscriptions SET status = 'disabled' WHERE id = 'a2'").run();
      const got = await claim(T0, 60_000, 10, LIMITS, none);
      expect(bySub(got)).toEqual({ a1: 4 });
    } finally {
      vi.useRealTimers();
    }
  });

  it('round-robins between subscriptions and nodes instead of oldest-first', async () => {
    await subscribe('node-a', 'a1');
    await subscribe('node-a', 'a2');
    await subscribe('node-b', 'b1');
    await emit('node-a', 100, T0 - 10_000); // 100 each for a1 and a2, all older
    await emit('node-b', 100, T0);
    const got = await claim(T0, 60_000, 30, LIMITS, none);
    expect(got).toHaveLength(30);
    const counts = bySub(got);
    // node-b gets half (one node of two), node-a's half is split between its two subscriptions
    expect(counts).toEqual({ a1: 8, a2: 7, b1: 15 });
  });

  it('never claims past a subscription budget or the node budget, and leases what it claims', async () => {
    await subscribe('node-a', 'a1');
    await emit('node-a', 200, T0);
    const first = await claim(T0, 60_000, 256, LIMITS, none);
    expect(first).toHaveLength(64);
    const again = await claim(T0, 60_000, 256, LIMITS, { bySubscription: { a1: 64 }, byNode: { 'node-a': 64 } });
    expect(again).toHaveLength(0);
    const later = await claim(T0, 60_000, 256, LIMITS, { bySubscription: { a1: 60 }, byNode: { 'node-a': 60 } });
    expect(later).toHaveLength(4);
    expect(new Set([...first, ...later].map((d) => d.id)).size).toBe(68); // leased rows are not claimed twice
  });

  describe('lends spare sockets (budgets are guarantees, not limits)', () => {
    // node-a: two subscriptions with a backlog; ten other nodes, one subscription each, with nothing to send. Their
    // guarantees: 256 / 11 nodes = 23 a node, 11 for each of node-a's two subscriptions.
    async function oneBusyNodeAmongTen() {
      await subscribe('node-a', 'a1');
      await subscribe('node-a', 'a2');
      for (let i = 0; i < 10; i++) await subscribe(`node-${i}`, `x${i}`);
      await emit('node-a', 100, T0);
    }

    it('a busy node among idle ones takes the spare sockets, up to perSubscription each', async () => {
      await oneBusyNodeAmongTen();
      const b = budgets((await subscriptions.list(store.q, 'node-a')).concat(...await Promise.all(Array.from({ length: 10 }, (_, i) => subscriptions.list(store.q, `node-${i}`)))), LIMITS);
      expect(b.bySubscription.get('a1')).toBe(11);
      expect(bySub(await claim(T0, 60_000, 256, LIMITS, none))).toEqual({ a1: 64, a2: 64 });
    });

    it('a node borrows up to half the concurrency while other nodes have subscriptions (all of it when alone)', async () => {
      await oneBusyNodeAmongTen();
      await subscribe('node-a', 'a3');
      await emit('node-a', 100, T0);
      const got = bySub(await claim(T0, 60_000, 256, LIMITS, none));
      expect(got.a1! + got.a2! + got.a3!).toBe(128);
    });

    it('a node alone is not held to half: its five subscriptions take every socket (51 each guaranteed, 1 lent)', async () => {
      for (const s of ['a1', 'a2', 'a3', 'a4', 'a5']) await subscribe('node-a', s);
      await emit('node-a', 100, T0);
      const got = bySub(await claim(T0, 60_000, 256, { ...LIMITS, perNode: 256 }, none));
      expect(Object.values(got).reduce((x, y) => x + y, 0)).toBe(256);
    });

    it("keeps free what the others may need at once: a busy subscription's unused budget, one socket for each idle one", async () => {
      await oneBusyNodeAmongTen();
      // 40 free: 22 guaranteed to a1 and a2, 10 kept for the idle subscriptions, 8 lent
      expect(Object.values(bySub(await claim(T0, 60_000, 40, LIMITS, none))).reduce((x, y) => x + y, 0)).toBe(30);
    });

    it('keeps a busy subscription of another node its unused budget', async () => {
      await oneBusyNodeAmongTen();
      // x0 has one attempt in flight and nothing due: 22 of its 23 stay free, and 9 for the other idle ones
      const inFlight: InFlight = { bySubscription: { x0: 1 }, byNode: { 'node-0': 1 } };
      expect(Object.values(bySub(await claim(T0, 60_000, 60, LIMITS, inFlight))).reduce((x, y) => x + y, 0)).toBe(22 + 7);
    });

    it('a stalled subscription (an attempt in flight for long) gets its guarantee only', async () => {
      await oneBusyNodeAmongTen();
      const stalled: InFlight = { bySubscription: {}, byNode: {}, stalled: new Set(['a1']) };
      expect(bySub(await claim(T0, 60_000, 256, LIMITS, stalled))).toEqual({ a1: 11, a2: 64 });
    });
  });

  /** claimDue on a tx that counts the due rows its reads return (one read per subscription and round). */
  const counted = (...args: Parameters<typeof claimDue> extends [unknown, ...infer R] ? R : never) => {
    const reads: number[] = [];
    const got = store.write((tx) => {
      const all = tx.all.bind(tx);
      const spy = Object.assign(Object.create(tx) as typeof tx, { all: async <T>(sql: string, p?: unknown[]) => { const rows = await all<T>(sql, p as never); if (sql.startsWith('SELECT d.id FROM deliveries d')) reads.push(rows.length); return rows; } });
      return claimDue(spy, ...args);
    });
    return got.then((rows) => ({ rows, reads }));
  };

  it("reads each subscription's fair share of its node's room, not perSubscription rows each (bench/delivery's case)", async () => {
    for (let i = 0; i < 10; i++) await subscribe('node-a', `a${i}`);
    await subscribe('node-b', 'b1'); // another node with a subscription: node-a may borrow up to half the concurrency
    await emit('node-a', 100, T0 - 1000); // 1,000 deliveries, 100 per subscription
    const inFlight: InFlight = { bySubscription: Object.fromEntries(Array.from({ length: 10 }, (_, i) => [`a${i}`, 4])), byNode: { 'node-a': 40 } };
    const { rows, reads } = await counted(T0, 60_000, 256 - 40, LIMITS, inFlight);
    // node-a's room: 128 - 40 = 88, shared round-robin by its ten subscriptions (8 guaranteed each, 8 lent).
    expect(rows).toHaveLength(88);
    const counts = Object.values(bySub(rows));
    expect(counts).toHaveLength(10);
    expect(Math.max(...counts) - Math.min(...counts)).toBeLessThanOrEqual(1);
    // One round (node-b's subscription read too, nothing due): at most ceil(88 / 10) + 1 = 10 rows each of node-a's,
    // where reading the caps' worth read 60 each.
    expect(reads).toHaveLength(11);
    expect(reads.reduce((a, b) => a + b, 0)).toBeLessThanOrEqual(100);
  });

  it('reads the rest of a subscription whose share ran out while its node had room, and claims what one full read would', async () => {
    await subscribe('node-a', 'a0');
    await emit('node-a', 100, T0 - 1000); // 100 deliveries, all a0's
    for (let i = 1; i < 10; i++) await subscribe('node-a', `a${i}`); // nine with nothing to send
    const { rows, reads } = await counted(T0, 60_000, 60, LIMITS, none);
    // a0's guarantee (128 / 10 = 12), then the spare sockets lent but one kept free for each idle subscription: 60 - 12
    // - 9 = 39 more. Its first read (its guarantee: more than a tenth of 60) ran out, so it was read again in full.
    expect(bySub(rows)).toEqual({ a0: 51 });
    expect(reads).toEqual([12, 0, 0, 0, 0, 0, 0, 0, 0, 0, 60]);
  });

  it('rotates which node goes first when only one can be served', async () => {
    await subscribe('node-a', 'a1');
    await subscribe('node-b', 'b1');
    await emit('node-a', 5, T0);
    await emit('node-b', 5, T0);
    const firsts: string[] = [];
    for (const turn of [0, 1, 2, 3]) firsts.push((await claim(T0, 60_000, 1, LIMITS, none, turn))[0]!.subscription_id);
    expect(new Set(firsts)).toEqual(new Set(['a1', 'b1']));
  });

  it('nextDueWithRoom leaves out subscriptions at their budget', async () => {
    await subscribe('node-a', 'a1');
    await subscribe('node-b', 'b1');
    await emit('node-a', 3, T0 - 5_000);
    await emit('node-b', 1, T0 + 7_000);
    expect(await nextDueWithRoom(store.q, LIMITS, none)).toBe(T0 - 5_000);
    expect(await nextDueWithRoom(store.q, LIMITS, { bySubscription: { a1: 64 }, byNode: { 'node-a': 64 } })).toBe(T0 + 7_000);
  });

  it('counts pending redeliveries per node', async () => {
    await subscribe('node-a', 'a1');
    await emit('node-a', 1, T0);
    const seq = (store.db.prepare('SELECT MAX(seq) FROM events').pluck().get() as number);
    await deliveries.insert(store.q, seq, 'a1', T0, true);
    await deliveries.insert(store.q, seq, 'a1', T0, true);
    expect(await deliveries.pendingRedeliveries(store.q, 'node-a')).toBe(2);
    expect(await deliveries.pendingRedeliveries(store.q, 'node-b')).toBe(0);
  });
});
