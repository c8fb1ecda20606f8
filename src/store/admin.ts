// Nodes, tokens and issuer keys: the only SQL for the operator's admin tables.
import { stmt, type Db } from './db.js';

export interface NodeRow { id: string; created_at: number }
export interface TokenRow { id: string; node_id: string; status: 'active' | 'grace' | 'revoked'; created_at: number; expires_at: number | null; revoked_at: number | null }
export interface KeyRow { kid: string; issuer: string; alg: string; jwk: string; source: string; added_at: number; fetched_at: number }

export const nodes = {
  insert: (db: Db, id: string, now: number) => stmt(db, 'INSERT INTO nodes(id, created_at) VALUES (?, ?)').run(id, now),
  get: (db: Db, id: string) => stmt(db, 'SELECT id, created_at FROM nodes WHERE id = ?').get(id) as NodeRow | undefined,
  list: (db: Db) => stmt(db, 'SELECT id, created_at FROM nodes ORDER BY id').all() as NodeRow[],
  remove: (db: Db, id: string) => stmt(db, 'DELETE FROM nodes WHERE id = ?').run(id).changes,
  /** What keeps a node: its streams, events and webhook subscriptions, as "N streams"-style phrases. */
  history: (db: Db, id: string): string[] => {
    const count = (table: string) => (stmt(db, `SELECT COUNT(*) AS n FROM ${table} WHERE node_id = ?`).get(id) as { n: number }).n;
    return ([['streams', 'streams'], ['events', 'events'], ['webhook_subscriptions', 'webhook subscriptions'], ['control_messages', 'control messages']] as const)
      .map(([t, label]) => [count(t), label] as const)
      .filter(([n]) => n > 0)
      .map(([n, label]) => `${n} ${label}`);
  },
};

export const tokens = {
  insert: (db: Db, t: { id: string; nodeId: string; hash: string; now: number }) =>
    stmt(db, "INSERT INTO tokens(id, node_id, hash, status, created_at) VALUES (?, ?, ?, 'active', ?)").run(t.id, t.nodeId, t.hash, t.now),
  active: (db: Db, nodeId: string) => stmt(db, "SELECT * FROM tokens WHERE node_id = ? AND status = 'active'").get(nodeId) as TokenRow | undefined,
  forNode: (db: Db, nodeId: string) => stmt(db, 'SELECT * FROM tokens WHERE node_id = ? ORDER BY created_at, id').all(nodeId) as TokenRow[],
  /** Move the active token to grace until `expiresAt`, or revoke it when there is no grace. */
  retireActive: (db: Db, nodeId: string, now: number, expiresAt: number | null) =>
    expiresAt === null
      ? stmt(db, "UPDATE tokens SET status = 'revoked', revoked_at = ? WHERE node_id = ? AND status = 'active'").run(now, nodeId).changes
      : stmt(db, "UPDATE tokens SET status = 'grace', expires_at = ? WHERE node_id = ? AND status = 'active'").run(expiresAt, nodeId).changes,
  revokeAll: (db: Db, nodeId: string, now: number) =>
    stmt(db, "UPDATE tokens SET status = 'revoked', revoked_at = ? WHERE node_id = ? AND status != 'revoked'").run(now, nodeId).changes,
  /** When a token in grace stops working (undefined for an active token). */
  graceUntil: (db: Db, hash: string) =>
    (stmt(db, "SELECT expires_at FROM tokens WHERE hash = ? AND status = 'grace'").get(hash) as { expires_at: number } | undefined)?.expires_at,
  /** The node a live token belongs to: active, or in grace and not yet expired. */
  nodeFor: (db: Db, hash: string, now: number) =>
    (stmt(db, "SELECT node_id FROM tokens WHERE hash = ? AND (status = 'active' OR (status = 'grace' AND expires_at > ?))").get(hash, now) as { node_id: string } | undefined)?.node_id,
};

export const issuerKeys = {
  insert: (db: Db, k: KeyRow) =>
    stmt(db, 'INSERT INTO issuer_keys(kid, issuer, alg, jwk, source, added_at, fetched_at) VALUES (@kid, @issuer, @alg, @jwk, @source, @added_at, @fetched_at)').run(k),
  get: (db: Db, kid: string) => stmt(db, 'SELECT * FROM issuer_keys WHERE kid = ?').get(kid) as KeyRow | undefined,
  list: (db: Db) => stmt(db, 'SELECT * FROM issuer_keys ORDER BY issuer, kid').all() as KeyRow[],
  remove: (db: Db, kid: string) => stmt(db, 'DELETE FROM issuer_keys WHERE kid = ?').run(kid).changes,
  /** Distinct (issuer, source) pairs whose keys came from a URL: the daemon refreshes them. */
  urlSources: (db: Db) =>
    stmt(db, "SELECT DISTINCT issuer, source FROM issuer_keys WHERE source LIKE 'http://%' OR source LIKE 'https://%'").all() as Array<{ issuer: string; source: string }>,
  bySource: (db: Db, issuer: string, source: string) => stmt(db, 'SELECT * FROM issuer_keys WHERE issuer = ? AND source = ?').all(issuer, source) as KeyRow[],
  touch: (db: Db, kid: string, now: number) => stmt(db, 'UPDATE issuer_keys SET fetched_at = ? WHERE kid = ?').run(now, kid),
  bumpGeneration: (db: Db) => stmt(db, "UPDATE meta SET value = value + 1 WHERE key = 'keys_generation'").run(),
  generation: (db: Db) => (stmt(db, "SELECT value FROM meta WHERE key = 'keys_generation'").get() as { value: number }).value,
};
