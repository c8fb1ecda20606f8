// Alert transitions are conditional writes keyed by what they are about: raised once, cleared once, whatever races
// them (two daemons on one PostgreSQL database: two stores with pools of their own), and each transition is one
// operational event with one delivery per alert endpoint that takes it.
import { mkdtemp, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { OPERATOR } from '../../src/domain/alerts.js';
import { raiseAlert, recoverAlert } from '../../src/ops/alerts.js';
import { addAlertEndpoint } from '../../src/service/alerts.js';
import { openSqliteStore } from '../../src/store/db.js';
import { openPostgresStore, type PostgresStore } from '../../src/store/postgres.js';
import type { Store } from '../../src/store/sql.js';
import { ensureDatabase, pgAvailable, startPostgres, testServerUrl, type PostgresServer } from '../helpers/postgres.js';

const raise = (s: Store, key: string, now = Date.now()) =>
  s.write((tx) => raiseAlert(tx, { key, kind: 'endpoint.failing', node: 'n', ref: `webhook:${key}`, now, data: { subscription: key } }));
const recover = (s: Store, key: string, now = Date.now()) =>
  s.write((tx) => recoverAlert(tx, { key, from: ['endpoint.failing'], kind: 'endpoint.recovered', ref: `webhook:${key}`, now, data: (was) => ({ subscription: key, since: was.since }) }));
const operatorEvents = async (s: Store, type: string) =>
  (await s.q.all<{ id: string; body: string }>('SELECT id, body FROM events WHERE node_id = ? AND type = ? ORDER BY seq', [OPERATOR, type])).map((e) => JSON.parse(e.body) as { id: string; data: Record<string, unknown> });
const deliveriesOf = async (s: Store, endpoint: string) => Number(await s.q.value('SELECT COUNT(*) FROM deliveries WHERE subscription_id = ?', [endpoint]));

let root: string;
beforeAll(async () => { root = await mkdtemp(join(tmpdir(), 'node-svc-alerts-store-')); });
afterAll(async () => { await rm(root, { recursive: true, force: true }); });

describe('SQLite', () => {
  it('raise once, recover once, raise again after a recovery; each one event per endpoint that takes it', async () => {
    const s = openSqliteStore(join(root, 'sqlite'));
    try {
      const all = await addAlertEndpoint(s, { url: 'http://127.0.0.1:9/all' });
      const other = await addAlertEndpoint(s, { url: 'http://127.0.0.1:9/other', events: ['wallet.low'] });
      expect(await raise(s, 'endpoint:a')).toBe(true);
      expect(await raise(s, 'endpoint:a')).toBe(false);
      expect(await raise(s, 'endpoint:b')).toBe(true);
      expect(await recover(s, 'endpoint:a')).toBe(true);
      expect(await recover(s, 'endpoint:a')).toBe(false);
      expect(await recover(s, 'endpoint:never')).toBe(false);
      expect(await raise(s, 'endpoint:a')).toBe(true);
      expect((await operatorEvents(s, 'endpoint.failing')).map((e) => e.data.subscription)).toEqual(['endpoint:a', 'endpoint:b', 'endpoint:a']);
      expect(await operatorEvents(s, 'endpoint.recovered')).toHaveLength(1);
      expect(await deliveriesOf(s, all.id)).toBe(4);
      expect(await deliveriesOf(s, other.id)).toBe(0); // it chose wallet.low only
    } finally {
      await s.close();
    }
  });
});

const shared = testServerUrl();
const avail = pgAvailable();
describe.skipIf(!shared && !avail.ok)('PostgreSQL: two daemons racing one transition', () => {
  let server: PostgresServer | undefined;
  const stores: PostgresStore[] = [];
  beforeAll(async () => {
    const base = shared ?? (server = await startPostgres()).baseUrl;
    const url = await ensureDatabase(base, `alerts_${process.pid}`);
    // Two stores, each its own pool of connections: as two daemons.
    for (let i = 0; i < 2; i++) stores.push(await openPostgresStore(url, { dataDir: join(root, `pg-${i}`) }));
  }, 120_000);
  afterAll(async () => {
    for (const s of stores) await s.close().catch(() => undefined);
    await server?.stop();
  }, 60_000);

  it('of 20 concurrent raises one raises; of 20 concurrent recoveries one recovers; one event each', async () => {
    const [a, b] = stores as [PostgresStore, PostgresStore];
    const ep = await addAlertEndpoint(a, { url: 'http://127.0.0.1:9/race' });
    const raised = await Promise.all(Array.from({ length: 20 }, (_, i) => raise(i % 2 ? a : b, 'endpoint:race')));
    expect(raised.filter(Boolean)).toHaveLength(1);
    const recovered = await Promise.all(Array.from({ length: 20 }, (_, i) => recover(i % 2 ? a : b, 'endpoint:race')));
    expect(recovered.filter(Boolean)).toHaveLength(1);
    expect((await operatorEvents(a, 'endpoint.failing')).filter((e) => e.data.subscription === 'endpoint:race')).toHaveLength(1);
    expect((await operatorEvents(b, 'endpoint.recovered')).filter((e) => e.data.subscription === 'endpoint:race')).toHaveLength(1);
    expect(await deliveriesOf(a, ep.id)).toBe(2);
  });
});
