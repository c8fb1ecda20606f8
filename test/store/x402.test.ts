// x402 claims (issue #24): one claim per (chain, token, payer, nonce); a claim that was never sent is taken over only
// once stale, and then its first claimant can no longer record a send (so it sends nothing).
import { mkdtemp, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import Database from 'better-sqlite3';
import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import { nodes } from '../../src/store/admin.js';
import { migrate, openSqliteStore as openStore, type SqliteStore as Store } from '../../src/store/db.js';
import { MIGRATIONS } from '../../src/store/migrations/index.js';
import { x402Stream } from '../../src/service/x402.js';
import { x402Payments, type X402Claim } from '../../src/store/x402.js';

let root: string;
let store: Store;
const T0 = 1_800_000_000_000;
const NONCE = `0x${'ab'.repeat(32)}`;
const claimOf = (id: string, now: number, o: Partial<X402Claim> = {}): X402Claim => ({
  chainId: 1337, token: '0x00000000000000000000000000000000000000AA', payer: '0x00000000000000000000000000000000000000BB', nonce: NONCE,
  id, nodeId: 'node-a', resource: 'http://r.test/a', stream: x402Stream('0x00000000000000000000000000000000000000BB', o.resource ?? 'http://r.test/a'),
  payTo: '0x00000000000000000000000000000000000000CC', amount: 1000n, validBefore: 1_900_000_000n, now, ...o,
});

beforeEach(async () => {
  root = await mkdtemp(join(tmpdir(), 'node-svc-x402-store-'));
  store = openStore(join(root, 'data'));
  await nodes.insert(store.q, 'node-a', T0);
});
afterEach(async () => {
  await store.close();
  await rm(root, { recursive: true, force: true });
});

describe('x402 payment claims', () => {
  it('the first claim wins; the same authorization (any case of its addresses) is not claimed again', async () => {
    expect(await store.write((tx) => x402Payments.claim(tx, claimOf('x4p_1', T0)))).toBe(true);
    expect(await store.write((tx) => x402Payments.claim(tx, claimOf('x4p_2', T0, { payer: '0x00000000000000000000000000000000000000bb', nonce: NONCE.toUpperCase().replace('0X', '0x') })))).toBe(false);
    expect(await store.write((tx) => x402Payments.claim(tx, claimOf('x4p_3', T0, { nonce: `0x${'cd'.repeat(32)}` })))).toBe(true); // another nonce
  });

  it('a claim never sent is taken over only once stale; the old claimant then cannot record its send', async () => {
    await store.write((tx) => x402Payments.claim(tx, claimOf('x4p_old', T0)));
    expect(await store.write((tx) => x402Payments.takeStale(tx, claimOf('x4p_new', T0 + 1000), T0))).toBe(false); // not stale yet
    expect(await store.write((tx) => x402Payments.takeStale(tx, claimOf('x4p_new', T0 + 200_000), T0 + 1))).toBe(true);
    expect(await store.write((tx) => x402Payments.submitted(tx, 'x4p_old', '0x01', '0x02', '{}', T0 + 200_001))).toBe(false);
    expect(await store.write((tx) => x402Payments.submitted(tx, 'x4p_new', '0x01', '0x02', '{}', T0 + 200_001))).toBe(true);
    // A sent claim is never taken over, however old.
    expect(await store.write((tx) => x402Payments.takeStale(tx, claimOf('x4p_third', T0 + 10_000_000), T0 + 9_000_000))).toBe(false);
    expect((await x402Payments.byId(store.q, 'x4p_new'))).toMatchObject({ status: 'submitted', tx_hash: '0x01', broadcasts: 1n });
  });
});

describe('x402 streams (summed from payments)', () => {
  const nonce = (i: number) => `0x${i.toString(16).padStart(64, '0')}`;
  /** A payment of `amount` on `resource`, taken to `status` at time `at`. */
  async function pay(i: number, resource: string, amount: bigint, status: 'claimed' | 'submitted' | 'checkpointed' | 'final' | 'failed', at: number, nodeId = 'node-a') {
    const id = `x4p_${i}`;
    await store.write(async (tx) => {
      expect(await x402Payments.claim(tx, claimOf(id, at, { nonce: nonce(i), resource, amount, nodeId, stream: x402Stream(claimOf(id, at).payer, resource) }))).toBe(true);
      if (status === 'claimed') return;
      await x402Payments.submitted(tx, id, `0x${i}`, '0x', JSON.stringify({ nonce: i, txs: [] }), at);
      if (status === 'failed') await x402Payments.failed(tx, id, 'reverted');
      if (status === 'checkpointed' || status === 'final') await x402Payments.checkpointed(tx, id, 1n, at + 1);
      if (status === 'final') await x402Payments.final(tx, id, at + 2);
    });
  }
  const page = (o: Partial<Parameters<typeof x402Payments.streams>[2]> = {}, nodeId = 'node-a') =>
    x402Payments.streams(store.q, nodeId, { sort: 'id', afterId: '', afterAt: null, limit: 10, windowStart: 0, ...o });

  it('bill what was sent, checkpoint what mined, finalise what is final; failed payments and unsent claims bill nothing; per node', async () => {
    await nodes.insert(store.q, 'node-b', T0);
    await pay(1, 'http://r.test/a', 1000n, 'final', T0);
    await pay(2, 'http://r.test/a', 2500n, 'checkpointed', T0 + 10);
    await pay(3, 'http://r.test/a', 700n, 'submitted', T0 + 20);
    await pay(4, 'http://r.test/a', 9000n, 'failed', T0 + 30);
    await pay(5, 'http://r.test/a', 9000n, 'claimed', T0 + 40);
    await pay(6, 'http://r.test/only-failed', 50n, 'failed', T0);
    await pay(7, 'http://r.test/b', 300n, 'submitted', T0 + 5, 'node-b');
    const a = x402Stream(claimOf('x', 0).payer, 'http://r.test/a');
    expect(await page()).toEqual([expect.objectContaining({
      stream: a, payer: claimOf('x', 0).payer.toLowerCase(), resource: 'http://r.test/a', chain_id: 1337n, token: claimOf('x', 0).token.toLowerCase(),
      billed_micro: 4200n, checkpointed_micro: 3500n, final_micro: 1000n, payments: 3n, last_amount_micro: 700n, valid_before: 1_900_000_000,
      created_at: T0, updated_at: T0 + 20,
    })]);
    expect((await x402Payments.stream(store.q, 'node-a', a, T0 + 10))?.window_micro).toBe(3200n); // sent since the window's start
    expect(await x402Payments.stream(store.q, 'node-b', a, 0)).toBeUndefined(); // another node's: not there
    expect((await page({}, 'node-b')).map((r) => r.billed_micro)).toEqual([300n]);
    expect((await x402Payments.newestUnfinished(store.q, 'node-a', a))?.id).toBe('x4p_5'); // the claim not sent yet
    expect((await x402Payments.newestMined(store.q, 'node-a', a))?.id).toBe('x4p_2');
    expect(await x402Payments.pendingCount(store.q)).toBe(2);
  });

  it('pages by id and by last activity from a keyset position', async () => {
    const urls = ['http://r.test/1', 'http://r.test/2', 'http://r.test/3'];
    for (const [i, u] of urls.entries()) await pay(10 + i, u, 100n, 'submitted', T0 + [30, 10, 20][i]!);
    const ids = (await page()).map((r) => r.stream);
    expect(ids).toEqual([...ids].sort());
    expect((await page({ afterId: ids[0]!, limit: 1 })).map((r) => r.stream)).toEqual([ids[1]]);
    const byActivity = await page({ sort: 'activity' });
    expect(byActivity.map((r) => r.updated_at)).toEqual([T0 + 30, T0 + 20, T0 + 10]);
    expect((await page({ sort: 'activity', afterAt: T0 + 30, afterId: byActivity[0]!.stream })).map((r) => r.updated_at)).toEqual([T0 + 20, T0 + 10]);
  });
});

describe('migration 0170 on a store with x402 payments', () => {
  it('names each payment\'s stream as the facilitator does', () => {
    const db = new Database(join(root, 'old.db'));
    db.pragma('foreign_keys = ON');
    db.transaction(() => {
      for (const m of MIGRATIONS.filter((x) => x.version <= 160)) m.up(db);
      db.pragma('user_version = 160');
    })();
    db.exec(`INSERT INTO nodes(id, created_at) VALUES ('node-a', 0);
      INSERT INTO x402_payments(chain_id, token, payer, nonce, id, node_id, resource, pay_to, amount_micro, status, created_at)
        VALUES (1337, '0xaa', '0xbb', '0x01', 'x4p_old', 'node-a', 'http://r.test/old', '0xcc', 5, 'final', 0);`);
    migrate(db);
    expect(db.prepare('SELECT stream, detail, valid_before FROM x402_payments').get()).toEqual({ stream: x402Stream('0xbb', 'http://r.test/old'), detail: null, valid_before: null });
    db.close();
  });
});
