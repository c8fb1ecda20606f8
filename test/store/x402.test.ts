// x402 claims (issue #24): one claim per (chain, token, payer, nonce); a claim that was never sent is taken over only
// once stale, and then its first claimant can no longer record a send (so it sends nothing).
import { mkdtemp, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import { nodes } from '../../src/store/admin.js';
import { openSqliteStore as openStore, type SqliteStore as Store } from '../../src/store/db.js';
import { x402Payments, type X402Claim } from '../../src/store/x402.js';

let root: string;
let store: Store;
const T0 = 1_800_000_000_000;
const NONCE = `0x${'ab'.repeat(32)}`;
const claimOf = (id: string, now: number, o: Partial<X402Claim> = {}): X402Claim => ({
  chainId: 1337, token: '0x00000000000000000000000000000000000000AA', payer: '0x00000000000000000000000000000000000000BB', nonce: NONCE,
  id, nodeId: 'node-a', resource: 'http://r.test/a', payTo: '0x00000000000000000000000000000000000000CC', amount: 1000n, now, ...o,
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
    expect(await store.write((tx) => x402Payments.submitted(tx, 'x4p_old', '0x01', '0x02', T0 + 200_001))).toBe(false);
    expect(await store.write((tx) => x402Payments.submitted(tx, 'x4p_new', '0x01', '0x02', T0 + 200_001))).toBe(true);
    // A sent claim is never taken over, however old.
    expect(await store.write((tx) => x402Payments.takeStale(tx, claimOf('x4p_third', T0 + 10_000_000), T0 + 9_000_000))).toBe(false);
    expect((await x402Payments.byId(store.q, 'x4p_new'))).toMatchObject({ status: 'submitted', tx_hash: '0x01', broadcasts: 1n });
  });
});
