// The headroom read remembered on SQLite (store/streams.ts headroomRow): never older than the last commit of this
// store or of another process, and read again when the rate window's start passes a voucher. And the headroom answer's
// JSON (service/streams.ts headroomJson), kept for the millisecond it was made in: never across a commit or a tick.
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterEach, describe, expect, it } from 'vitest';
import { addNode } from '../../src/service/admin.js';
import { openSqliteStore, type SqliteStore } from '../../src/store/db.js';
import { headroomJson } from '../../src/service/streams.js';
import { DEFAULT_SERVICE_CONFIG, type Deps } from '../../src/service/deps.js';
import { headroomRow, streams } from '../../src/store/streams.js';
import { sleep } from '../helpers/wait.js';

describe('headroomRow (SQLite)', () => {
  const dirs: string[] = [];
  const stores: SqliteStore[] = [];
  afterEach(async () => {
    for (const s of stores.splice(0)) await s.close();
    for (const d of dirs.splice(0)) rmSync(d, { recursive: true, force: true });
  });
  const fresh = async () => {
    const dir = mkdtempSync(join(tmpdir(), 'node-svc-headroom-read-'));
    dirs.push(dir);
    const daemon = openSqliteStore(dir);
    const other = openSqliteStore(dir); // another process's connection (the CLI)
    stores.push(daemon, other);
    await addNode(daemon, 'node-a');
    await daemon.write((tx) => streams.insert(tx, {
      node_id: 'node-a', id: 's1', budget: 'b1', issuer: 'https://issuer.test', payer: 'p1', credential_id: 'c1', credential: 'x', iat: 0, exp: 4_000_000_000,
      cap_micro: 1_000_000n, asset: 'USDC', unit_price_micro: 1n, rate_micro_per_s: null, mode: 'escrow', voucher_key: '{}', claims: '{}', now: 1_000, funding_source: null,
    }));
    const voucher = (store: SqliteStore, amount: number, at: number) => store.write(async (tx) => {
      await tx.run('INSERT INTO vouchers(node_id, stream, amount_micro, units, signed_at, received_at, voucher) VALUES (?, ?, ?, ?, ?, ?, ?)', ['node-a', 's1', amount, amount, at, at, 'v']);
      await tx.run('UPDATE streams SET billed_micro = ? WHERE node_id = ? AND id = ?', [amount, 'node-a', 's1']);
    });
    return { daemon, other, voucher };
  };

  it('is read again after any commit: of this store, and of another connection', async () => {
    const { daemon, other, voucher } = await fresh();
    const first = await headroomRow(daemon, 'node-a', 's1', 5_000);
    expect(first?.billed_micro).toBe(0n);
    expect(await headroomRow(daemon, 'node-a', 's1', 5_000)).toBe(first); // remembered: the same row
    await voucher(daemon, 100, 2_000);
    expect((await headroomRow(daemon, 'node-a', 's1', 5_000))?.billed_micro).toBe(100n);
    // Another process revokes the stream: the next read (a millisecond on: data_version is asked once a ms) sees it.
    await other.write((tx) => tx.run("UPDATE streams SET status = 'revoked', status_reason = 'by hand' WHERE id = 's1'"));
    await sleep(2);
    const after = await headroomRow(daemon, 'node-a', 's1', 5_000);
    expect(after?.status).toBe('revoked');
    expect(await headroomRow(daemon, 'node-a', 'nope', 5_000)).toBeUndefined();
  });

  it("follows the rate window's start past a voucher with no commit in between", async () => {
    const { daemon, voucher } = await fresh();
    await voucher(daemon, 100, 2_000);
    await voucher(daemon, 300, 4_000);
    // Window starting at 1,000: nothing received by then. At 3,000: the voucher of 2,000. At 4,000 and after: 300.
    expect((await headroomRow(daemon, 'node-a', 's1', 1_000))?.billed_before).toBeNull();
    expect((await headroomRow(daemon, 'node-a', 's1', 1_999))?.billed_before).toBeNull();
    expect((await headroomRow(daemon, 'node-a', 's1', 2_000))?.billed_before).toBe(100n);
    expect((await headroomRow(daemon, 'node-a', 's1', 3_999))?.billed_before).toBe(100n);
    expect((await headroomRow(daemon, 'node-a', 's1', 4_000))?.billed_before).toBe(300n);
    expect((await headroomRow(daemon, 'node-a', 's1', 9_000))?.billed_before).toBe(300n);
    // A clock that steps back is read again too.
    expect((await headroomRow(daemon, 'node-a', 's1', 1_500))?.billed_before).toBeNull();
    // Each answer is what the uncached read gives.
    for (const ws of [500, 2_000, 2_500, 4_000, 10_000]) {
      const fromMemory = await headroomRow(daemon, 'node-a', 's1', ws);
      const direct = await streams.getForHeadroom(daemon.q, 'node-a', 's1', ws);
      expect(fromMemory).toEqual(direct);
    }
  });

  it('headroomJson: the same text within one millisecond and one row, a new one after a commit, a tick or a funding outage', async () => {
    const { daemon, other, voucher } = await fresh();
    let now = 10_000;
    let outage: string | undefined;
    const d = {
      store: daemon, config: DEFAULT_SERVICE_CONFIG, now: () => now, keyring: undefined as never,
      funding: { check: async () => { throw new Error('not used'); }, unavailable: () => outage },
    } as Deps;
    const first = await headroomJson(d, 'node-a', 's1');
    expect(JSON.parse(first)).toEqual({ // the whole answer, as the contract's Headroom schema has it
      stream: 's1', asset: 'USDC', source: 'credential', capMicro: '1000000', effectiveCapMicro: '1000000', fundedMicro: null,
      billedMicro: '0', remainingCapMicro: '1000000', unitPriceMicro: '1', remainingUnits: '1000000',
      rate: { limitMicroPerSecond: null, observedMicroPerSecond: '0' }, degradationStage: 'normal', status: 'open', asOf: new Date(10_000).toISOString(),
    });
    expect(await headroomJson(d, 'node-a', 's1')).toBe(first); // same ms, same row: the same text
    now = 10_001;
    const tick = await headroomJson(d, 'node-a', 's1');
    expect(JSON.parse(tick).asOf).toBe(new Date(10_001).toISOString());
    // A voucher committed in the same millisecond: the next read says so (the row is read again after any commit).
    await voucher(daemon, 400, 10_001);
    expect(JSON.parse(await headroomJson(d, 'node-a', 's1'))).toMatchObject({ billedMicro: '400', remainingCapMicro: '999600' });
    // Another connection (the CLI) revokes: seen from the next millisecond (data_version is asked once a ms).
    await other.write((tx) => tx.run("UPDATE streams SET status = 'revoked', status_reason = 'by hand' WHERE id = 's1'"));
    await sleep(2);
    expect(JSON.parse(await headroomJson(d, 'node-a', 's1')).status).toBe('revoked');
    // The funding check is asked on every read, never remembered with the text (a stream with a funding source).
    await daemon.write((tx) => tx.run("UPDATE streams SET status = 'open', funding_source = 'escrow:0xabc', funding_status = 'funded' WHERE id = 's1'"));
    const funded = await headroomJson(d, 'node-a', 's1');
    expect(JSON.parse(funded).status).not.toBe('revoked');
    outage = 'the chain has not answered for 2 minutes';
    await expect(headroomJson(d, 'node-a', 's1')).rejects.toThrow(/funding cannot be confirmed now/);
    outage = undefined;
    expect(await headroomJson(d, 'node-a', 's1')).toBe(funded);
    await expect(headroomJson(d, 'node-a', 'nope')).rejects.toThrow(/stream/);
  });
});
