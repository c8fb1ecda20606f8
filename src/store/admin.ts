// Nodes, tokens and issuer keys: the only SQL for the operator's admin tables.
import { OPERATOR } from '../domain/alerts.js';
import type { Sql } from './sql.js';

export interface NodeRow { id: string; created_at: number }
export interface TokenRow { id: string; node_id: string; status: 'active' | 'grace' | 'revoked'; created_at: number; expires_at: number | null; revoked_at: number | null }
export interface KeyRow { kid: string; issuer: string; alg: string; jwk: string; source: string; added_at: number; fetched_at: number }

export const nodes = {
  insert: (q: Sql, id: string, now: number) => q.run('INSERT INTO nodes(id, created_at) VALUES (?, ?)', [id, now]),
  get: (q: Sql, id: string) => q.get<NodeRow>('SELECT id, created_at FROM nodes WHERE id = ?', [id]),
  /** Nodes the operator added (not the owner of alert endpoints, which is no node). */
  list: (q: Sql) => q.all<NodeRow>('SELECT id, created_at FROM nodes WHERE id != ? ORDER BY id', [OPERATOR]),
  remove: (q: Sql, id: string) => q.run('DELETE FROM nodes WHERE id = ?', [id]),
  /** What keeps a node: its streams, events and webhook subscriptions, as "N streams"-style phrases. */
  history: async (q: Sql, id: string): Promise<string[]> => {
    const out: string[] = [];
    for (const [table, label] of [['streams', 'streams'], ['events', 'events'], ['webhook_subscriptions', 'webhook subscriptions'], ['control_messages', 'control messages']] as const) {
      const n = (await q.value<number>(`SELECT COUNT(*) AS n FROM ${table} WHERE node_id = ?`, [id])) ?? 0;
      if (n > 0) out.push(`${n} ${label}`);
    }
    return out;
  },
};

export const tokens = {
  insert: (q: Sql, t: { id: string; nodeId: string; hash: string; now: number }) =>
    q.run("INSERT INTO tokens(id, node_id, hash, status, created_at) VALUES (?, ?, ?, 'active', ?)", [t.id, t.nodeId, t.hash, t.now]),
  active: (q: Sql, nodeId: string) => q.get<TokenRow>("SELECT * FROM tokens WHERE node_id = ? AND status = 'active'", [nodeId]),
  forNode: (q: Sql, nodeId: string) => q.all<TokenRow>('SELECT * FROM tokens WHERE node_id = ? ORDER BY created_at, id', [nodeId]),
  /** Move the active token to grace until `expiresAt`, or revoke it when there is no grace. */
  retireActive: (q: Sql, nodeId: string, now: number, expiresAt: number | null) =>
    expiresAt === null
      ? q.run("UPDATE tokens SET status = 'revoked', revoked_at = ? WHERE node_id = ? AND status = 'active'", [now, nodeId])
      : q.run("UPDATE tokens SET status = 'grace', expires_at = ? WHERE node_id = ? AND status = 'active'", [expiresAt, nodeId]),
  revokeAll: (q: Sql, nodeId: string, now: number) =>
    q.run("UPDATE tokens SET status = 'revoked', revoked_at = ? WHERE node_id = ? AND status != 'revoked'", [now, nodeId]),
  /** When a token in grace stops working (undefined for an active token). */
  graceUntil: (q: Sql, hash: string) => q.value<number>("SELECT expires_at FROM tokens WHERE hash = ? AND status = 'grace'", [hash]),
  /** The node a live token belongs to: active, or in grace and not yet expired. */
  nodeFor: (q: Sql, hash: string, now: number) =>
    q.value<string>("SELECT node_id FROM tokens WHERE hash = ? AND (status = 'active' OR (status = 'grace' AND expires_at > ?))", [hash, now]),
};

export const issuerKeys = {
  insert: (q: Sql, k: KeyRow) =>
    q.run('INSERT INTO issuer_keys(kid, issuer, alg, jwk, source, added_at, fetched_at) VALUES (@kid, @issuer, @alg, @jwk, @source, @added_at, @fetched_at)', k as unknown as Record<string, unknown>),
  get: (q: Sql, kid: string) => q.get<KeyRow>('SELECT * FROM issuer_keys WHERE kid = ?', [kid]),
  list: (q: Sql) => q.all<KeyRow>('SELECT * FROM issuer_keys ORDER BY issuer, kid'),
  remove: (q: Sql, kid: string) => q.run('DELETE FROM issuer_keys WHERE kid = ?', [kid]),
  /** Distinct (issuer, source) pairs whose keys came from a URL: the daemon refreshes them. */
  urlSources: (q: Sql) =>
    q.all<{ issuer: string; source: string }>("SELECT DISTINCT issuer, source FROM issuer_keys WHERE source LIKE 'http://%' OR source LIKE 'https://%'"),
  bySource: (q: Sql, issuer: string, source: string) => q.all<KeyRow>('SELECT * FROM issuer_keys WHERE issuer = ? AND source = ?', [issuer, source]),
  touch: (q: Sql, kid: string, now: number) => q.run('UPDATE issuer_keys SET fetched_at = ? WHERE kid = ?', [now, kid]),
  bumpGeneration: (q: Sql) => q.run("UPDATE meta SET value = value + 1 WHERE key = 'keys_generation'"),
  generation: async (q: Sql) => Number(await q.value("SELECT value FROM meta WHERE key = 'keys_generation'")),
};
