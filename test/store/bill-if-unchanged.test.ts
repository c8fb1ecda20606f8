// streams.billIfUnchanged: the conditional update a voucher is billed by after being judged on a row read earlier
// (or remembered from this daemon's last billing). It must match nothing once anything the judgment used has changed,
// including a renewal (new voucher key, expiry, price) committed in the very millisecond of the last billing, when
// updated_at alone does not move.
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterEach, describe, expect, it } from 'vitest';
import { addNode } from '../../src/service/admin.js';
import { openSqliteStore, type SqliteStore } from '../../src/store/db.js';
import { streams, type NewStream } from '../../src/store/streams.js';

describe('streams.billIfUnchanged (SQLite)', () => {
  const dirs: string[] = [];
  const stores: SqliteStore[] = [];
  afterEach(async () => {
    for (const s of stores.splice(0)) await s.close();
    for (const d of dirs.splice(0)) rmSync(d, { recursive: true, force: true });
  });
  const credential = (iat: number, key: string, now: number): NewStream => ({
    node_id: 'node-a', id: 's1', budget: 'b1', issuer: 'https://issuer.test', payer: 'p1', credential_id: `c-${iat}`, credential: 'x', iat, exp: 4_000_000_000,
    cap_micro: 1_000_000n, asset: 'USDC', unit_price_micro: 1n, rate_micro_per_s: null, mode: 'escrow', voucher_key: key, claims: '{}', now, funding_source: null,
  });
  const fresh = async () => {
    const dir = mkdtempSync(join(tmpdir(), 'node-svc-bill-'));
    dirs.push(dir);
    const store = openSqliteStore(dir);
    stores.push(store);
    await addNode(store, 'node-a');
    await store.write((tx) => streams.insert(tx, credential(10, '{"jwk":"old"}', 1_000)));
    const read = async () => (await streams.get(store.q, 'node-a', 's1'))!;
    const bill = (seen: Awaited<ReturnType<typeof read>>, amount: bigint, now: number) =>
      store.write((tx) => streams.billIfUnchanged(tx, seen, { amount, units: amount, voucher: `v-${amount}`, signedAt: 1, now }));
    return { store, read, bill };
  };

  it('bills when the row is as read, and then never on the row as it was before (billed truth only grows, one winner)', async () => {
    const { read, bill } = await fresh();
    const seen = await read();
    expect(await bill(seen, 100n, 2_000)).toBe(true);
    expect(await bill(seen, 200n, 3_000)).toBe(false); // judged on billed 0: lost to the 100 above
    expect((await read()).billed_micro).toBe(100n);
  });

  it('matches nothing after a renewal committed in the same millisecond as the billing the row was read after', async () => {
    const { store, read, bill } = await fresh();
    expect(await bill(await read(), 100n, 2_000)).toBe(true);
    const remembered = await read(); // as a daemon remembers it after billing at 2,000
    expect(remembered.updated_at).toBe(2_000);
    // A newer credential renews the stream at 2,000 too: new voucher key; billed truth, cap, status unchanged.
    expect(await store.write((tx) => streams.renew(tx, credential(20, '{"jwk":"new"}', 2_000)))).toBe(1);
    const renewed = await read();
    expect(renewed).toMatchObject({ updated_at: 2_000, billed_micro: 100n, cap_micro: 1_000_000n, status: 'open', voucher_key: '{"jwk":"new"}' });
    // A voucher judged on the remembered row (the old key) must not be billed.
    expect(await bill(remembered, 200n, 2_000)).toBe(false);
    expect((await read()).billed_micro).toBe(100n);
    // Judged again on the row as it is now: billed.
    expect(await bill(renewed, 200n, 2_001)).toBe(true);
    expect((await read()).billed_micro).toBe(200n);
  });
});
