// Operator admin use cases: nodes, bearer tokens, trusted issuer keys. Shared by the CLI and the daemon.
import { hasControl } from '../domain/text.js';
import { OPERATOR } from '../domain/alerts.js';
import { createHash, randomBytes } from 'node:crypto';
import { ALLOWED_ALGORITHMS, type AllowedAlgorithm } from '../domain/credential.js';
import { conflict, NodeSvcError, notFound, usageError } from '../domain/errors.js';
import { NODE_ID_RE, newId } from '../domain/ids.js';
import { iso } from '../domain/time.js';
import type { SqliteStore } from '../store/db.js';
import { lockKey, type Sql, type Store } from '../store/sql.js';
import { issuerKeys, nodes, tokens } from '../store/admin.js';
import { Lru } from '../lru.js';
import { jwkProblems, publicMembers, type Jwk, type TrustedKey } from '../sdk/keys.js';
import { connectionProblem } from '../sdk/client.js';

export function checkNodeId(id: string): void {
  if (!NODE_ID_RE.test(id))
    throw usageError(`"${id}" is not a valid node id`, 'a node id is 1-128 characters: a letter or digit, then letters, digits, ".", "_", ":" or "-"');
}

export async function addNode(store: Store, id: string, now = Date.now()) {
  checkNodeId(id);
  await store.write(async (tx) => {
    await lockKey(tx, `node:${id}`); // PostgreSQL: admin writes of one node, one daemon or CLI at a time
    if (await nodes.get(tx, id)) throw conflict(`node "${id}" already exists`, 'pick another id, or `node-svc nodes list` to see them');
    await nodes.insert(tx, id, now);
    await store.invalidate(tx, { topic: 'nodes', key: id });
  });
  return { id, createdAt: iso(now) };
}

export async function listNodes(store: Store) {
  const out = [];
  for (const n of await nodes.list(store.q)) out.push({ id: n.id, createdAt: iso(n.created_at), hasToken: !!(await tokens.active(store.q, n.id)) });
  return out;
}

export async function removeNode(store: Store, id: string) {
  const removed = id === OPERATOR ? 0 : await store.write(async (tx) => {
    await lockKey(tx, `node:${id}`);
    if (!(await nodes.get(tx, id))) return 0;
    // Money history is never deleted with a node: streams, events and subscriptions keep it.
    const history = await nodes.history(tx, id);
    if (history.length)
      throw conflict(`node "${id}" has ${history.join(', ')}; it cannot be removed`, `revoke its token instead: node-svc tokens revoke ${id}`);
    await store.invalidate(tx, { topic: 'nodes', key: id });
    return nodes.remove(tx, id);
  });
  if (!removed) throw notFound(`node "${id}"`);
  return { id, removed: true };
}

/** The node exists; its admin writes are serialised from here to the commit (PostgreSQL keyed lock). */
async function requireNode(tx: Sql, id: string) {
  await lockKey(tx, `node:${id}`);
  // The owner of alert endpoints is no node: it never gets a bearer token.
  if (id === OPERATOR || !(await nodes.get(tx, id))) throw notFound(`node "${id}"`);
}

/** `nsv_` + 32 random bytes, base64url (DESIGN §3). */
const newToken = () => `nsv_${randomBytes(32).toString('base64url')}`;
export const hashToken = (token: string) => createHash('sha256').update(token, 'utf8').digest('hex');

export function issueToken(store: Store, nodeId: string, now = Date.now()) {
  return store.write(async (tx) => {
    await requireNode(tx, nodeId);
    if (await tokens.active(tx, nodeId))
      throw conflict(`node "${nodeId}" already has an active token`, `use \`node-svc tokens rotate ${nodeId}\` to replace it`);
    const token = newToken();
    const id = newId('tok');
    await tokens.insert(tx, { id, nodeId, hash: hashToken(token), now });
    await store.invalidate(tx, { topic: 'tokens', key: nodeId });
    return { node: nodeId, tokenId: id, token, createdAt: iso(now) };
  });
}

/** Replace the active token; the old one keeps working for `graceMs` (0: stops at once). */
export function rotateToken(store: Store, nodeId: string, graceMs = 0, now = Date.now()) {
  return store.write(async (tx) => {
    await requireNode(tx, nodeId);
    const retired = await tokens.retireActive(tx, nodeId, now, graceMs > 0 ? now + graceMs : null);
    const token = newToken();
    const id = newId('tok');
    await tokens.insert(tx, { id, nodeId, hash: hashToken(token), now });
    await store.invalidate(tx, { topic: 'tokens', key: nodeId });
    return { node: nodeId, tokenId: id, token, createdAt: iso(now), previousValidUntil: retired ? iso(graceMs > 0 ? now + graceMs : now) : null };
  });
}

export function revokeTokens(store: Store, nodeId: string, now = Date.now()) {
  return store.write(async (tx) => {
    await requireNode(tx, nodeId);
    const revoked = await tokens.revokeAll(tx, nodeId, now);
    await store.invalidate(tx, { topic: 'tokens', key: nodeId });
    return { node: nodeId, revoked };
  });
}

/** The node a bearer token belongs to, or undefined (unknown, revoked, grace expired). */
export const nodeForToken = (store: Store, token: string, now = Date.now()) => tokens.nodeFor(store.q, hashToken(token), now);

/** Tokens remembered by the daemon (one entry each, least recently used evicted first). */
export const TOKEN_CACHE_SIZE = 10_000;

/**
 * nodeForToken for the daemon's hot path, remembering answers. Tokens change only through the admin commands.
 * SQLite: they commit from another connection, and `PRAGMA data_version` of the daemon's writer connection moves
 * on every such commit. PostgreSQL: every token change notifies every daemon (store.invalidate). Either way the
 * memory is dropped then, so a revoked or rotated token is refused on the next request (SQLite: data_version is
 * read at most once a millisecond; PostgreSQL: once the notification arrives, well within a second). A token in its grace period is remembered only until its grace ends.
 * PostgreSQL, when the daemon cannot be sure the notifications reach it (its LISTEN connection has not answered a ping
 * for LISTEN_FRESH_MS: store.invalidationsCurrent), nothing is remembered: every request reads its token, so a
 * revocation is refused from the next request whatever became of that connection (fail closed).
 */
export function tokenResolver(store: Store) {
  const known = new Lru<string, { node: string; until: number }>(TOKEN_CACHE_SIZE);
  let version: unknown;
  let generation = 0; // moves on every drop, so a read that started before one is not remembered after it
  const drop = () => { known.clear(); generation++; };
  const dataVersion = store.dialect === 'sqlite' ? (store as SqliteStore).externalVersion : undefined;
  const current = store.invalidationsCurrent ? () => store.invalidationsCurrent!() : () => true;
  store.onInvalidate((inv) => { if (inv.topic === 'tokens' || inv.topic === 'nodes' || inv.topic === '*') drop(); });
  return async (token: string, now = Date.now()): Promise<string | undefined> => {
    if (dataVersion) {
      const v = dataVersion();
      if (v !== version) {
        drop();
        version = v;
      }
    }
    if (!current()) drop();
    const hit = known.get(token);
    if (hit && now < hit.until) return hit.node;
    const hash = hashToken(token);
    const gen = generation;
    const node = await tokens.nodeFor(store.q, hash, now);
    if (node) {
      const until = (await tokens.graceUntil(store.q, hash)) ?? Number.MAX_SAFE_INTEGER;
      if (gen === generation && current()) known.set(token, { node, until });
    }
    return node;
  };
}

const MAX_JWKS_BYTES = 1024 * 1024;

/** Read a JWKS (or a single JWK) from a file path or an http(s) URL. */
const isLoopback = (host: string) => {
  const h = host.replace(/^\[|\]$/g, '').toLowerCase();
  return h === 'localhost' || h === '::1' || /^127\.\d{1,3}\.\d{1,3}\.\d{1,3}$/.test(h);
};

/** Keys fetched over cleartext are not trust (anyone on the path can swap them): http only to this machine. */
function cleartextRefusal(url: string): void {
  const u = new URL(url);
  if (u.protocol === 'http:' && !isLoopback(u.hostname))
    throw usageError(`refusing ${url}: keys fetched over plain http are not trust (anyone on the path can swap them)`, 'use https://, or download the JWKS and add the file');
}

export async function readJwksSource(source: string): Promise<unknown> {
  let text: string;
  if (/^https?:\/\//i.test(source)) {
    cleartextRefusal(source);
    let res: Response;
    try {
      res = await fetch(source, { signal: AbortSignal.timeout(10_000), headers: { accept: 'application/json, application/jwk-set+json' } });
    } catch (err) {
      throw new NodeSvcError('unavailable', `cannot fetch ${source}: ${connectionProblem(err, 10_000)}`, { hint: 'check the URL, or save the JWKS to a file and add that' });
    }
    if (res.redirected) cleartextRefusal(res.url); // an https URL that redirects to cleartext is cleartext
    if (!res.ok) throw new NodeSvcError('unavailable', `fetching ${source} answered HTTP ${res.status}`);
    text = await res.text();
  } else {
    try {
      const { readFile } = await import('node:fs/promises'); // not on the verify path
      text = await readFile(source, 'utf8');
    } catch (err) {
      throw usageError(`cannot read ${source}: ${(err as NodeJS.ErrnoException).code ?? (err as Error).message}`, 'give a JWKS file path or an http(s) URL');
    }
  }
  if (text.length > MAX_JWKS_BYTES) throw usageError(`${source} is larger than 1 MiB; that is not a JWKS`);
  try {
    return JSON.parse(text);
  } catch {
    throw usageError(`${source} is not JSON`, 'expected a JWKS: {"keys": [ ... ]}');
  }
}

/**
 * Trust the keys of a JWKS for `issuer`. All or nothing: every problem of every key is reported at once
 * and nothing is stored unless all are fine. Re-adding the same key for the same issuer changes nothing.
 */
export function addKeys(store: Store, issuer: string, jwks: unknown, source: string, now = Date.now()) {
  if (!issuer || issuer.length > 512) throw usageError('--issuer must be a non-empty string of at most 512 characters');
  if (hasControl(issuer)) throw usageError('--issuer must not contain control characters');
  const list: unknown[] | undefined =
    typeof jwks === 'object' && jwks !== null && Array.isArray((jwks as { keys?: unknown }).keys)
      ? (jwks as { keys: unknown[] }).keys
      : typeof jwks === 'object' && jwks !== null && 'kty' in jwks
        ? [jwks]
        : undefined;
  if (!list) throw usageError(`${source} is not a JWKS`, 'expected {"keys": [ ... ]} or a single JWK object');
  if (!list.length) throw usageError(`${source} has no keys`);
  const problems: string[] = [];
  const seen = new Set<string>();
  list.forEach((k, i) => {
    const kid = (k as Jwk)?.kid;
    const label = typeof kid === 'string' && kid ? `key "${kid}"` : `key #${i + 1}`;
    for (const p of jwkProblems(k)) problems.push(`${label} ${p}`);
    if (typeof kid === 'string') {
      if (seen.has(kid)) problems.push(`${label} appears twice`);
      seen.add(kid);
    }
  });
  if (problems.length)
    throw new NodeSvcError('invalid_request', `refused ${source}, nothing was added:\n  - ${problems.join('\n  - ')}`, { status: 400, exitCode: 2 });
  return store.write(async (tx) => {
    await lockKey(tx, 'keys'); // PostgreSQL: trusted-key changes one at a time (each reads what is trusted, then decides)
    const added: string[] = [];
    const unchanged: string[] = [];
    for (const k of list as Jwk[]) {
      const kid = k.kid as string;
      const pub = publicJwk(k);
      const existing = await issuerKeys.get(tx, kid);
      if (existing) {
        if (existing.issuer === issuer && existing.jwk === JSON.stringify(pub)) { unchanged.push(kid); continue; }
        throw conflict(
          existing.issuer === issuer ? `kid "${kid}" is already trusted for ${issuer} with a different key; nothing was added` : `kid "${kid}" is already trusted for another issuer (${existing.issuer}); nothing was added`,
          `remove it first with \`node-svc keys rm ${kid}\` if it is meant to be replaced`,
        );
      }
      await issuerKeys.insert(tx, { kid, issuer, alg: k.alg as string, jwk: JSON.stringify(pub), source, added_at: now, fetched_at: now });
      added.push(kid);
    }
    if (added.length) await keysChanged(store, tx, issuer);
    return { issuer, source, added, unchanged };
  });
}

/** What is stored of a trusted JWK: the public members plus kid, alg and use. */
const publicJwk = (k: Jwk): Jwk => ({ ...publicMembers(k), kid: k.kid, alg: k.alg, use: 'sig' });

/**
 * The daemon's refresh of keys trusted from a URL (DESIGN §3): each (issuer, URL) is fetched again and its keys
 * replaced as a whole: new kids added, kids gone from the JWKS removed (a rotation), the rest touched. A fetch
 * that fails or a JWKS with any problem changes nothing (the keys in the store stay trusted); a kid that another
 * issuer already holds refuses that whole source. Verification itself never touches the network.
 */
export async function refreshUrlKeys(store: Store, now = Date.now()) {
  const report: Array<{ issuer: string; source: string; added: string[]; removed: string[]; error?: string }> = [];
  for (const { issuer, source } of await issuerKeys.urlSources(store.q)) {
    const r = { issuer, source, added: [] as string[], removed: [] as string[] };
    try {
      const jwks = await readJwksSource(source);
      const list = (jwks as { keys?: unknown })?.keys;
      if (!Array.isArray(list) || !list.length) throw new Error('not a JWKS with keys');
      const problems = list.flatMap((k) => jwkProblems(k).map((p) => `${String((k as Jwk)?.kid ?? '?')} ${p}`));
      if (problems.length) throw new Error(problems.join('; '));
      await store.write(async (tx) => {
        await lockKey(tx, 'keys');
        r.added = [];
        r.removed = [];
        const have = new Map((await issuerKeys.bySource(tx, issuer, source)).map((k) => [k.kid, k]));
        const want = new Map((list as Jwk[]).map((k) => [k.kid as string, k]));
        for (const [kid, k] of want) {
          const pub = JSON.stringify(publicJwk(k));
          const existing = have.get(kid) ?? (await issuerKeys.get(tx, kid));
          if (existing && (existing.issuer !== issuer || existing.source !== source || existing.jwk !== pub))
            throw new Error(`kid "${kid}" is already trusted with other key material or for another issuer`);
          if (existing) await issuerKeys.touch(tx, kid, now);
          else {
            await issuerKeys.insert(tx, { kid, issuer, alg: k.alg as string, jwk: pub, source, added_at: now, fetched_at: now });
            r.added.push(kid);
          }
        }
        for (const kid of have.keys()) if (!want.has(kid)) { await issuerKeys.remove(tx, kid); r.removed.push(kid); }
        if (r.added.length || r.removed.length) await keysChanged(store, tx, issuer);
      });
      report.push(r);
    } catch (err) {
      report.push({ ...r, error: (err as Error).message.slice(0, 300) });
    }
  }
  return report;
}

export async function listKeys(store: Store) {
  return (await issuerKeys.list(store.q)).map((k) => ({ kid: k.kid, issuer: k.issuer, alg: k.alg, source: k.source, addedAt: iso(k.added_at), fetchedAt: iso(k.fetched_at) }));
}

export function removeKey(store: Store, kid: string) {
  return store.write(async (tx) => {
    await lockKey(tx, 'keys');
    if (!(await issuerKeys.remove(tx, kid))) throw notFound(`key "${kid}"`);
    await keysChanged(store, tx, kid);
    return { kid, removed: true };
  });
}

/** Trusted keys changed: the generation every daemon's keyring watches moves, and every daemon is told now. */
async function keysChanged(store: Store, tx: Sql, key: string) {
  await issuerKeys.bumpGeneration(tx);
  await store.invalidate(tx, { topic: 'keys', key });
}

export async function trustedKeys(store: Store): Promise<TrustedKey[]> {
  return (await issuerKeys.list(store.q))
    .filter((k) => (ALLOWED_ALGORITHMS as readonly string[]).includes(k.alg))
    .map((k) => ({ kid: k.kid, issuer: k.issuer, alg: k.alg as AllowedAlgorithm, jwk: JSON.parse(k.jwk) as Jwk }));
}

export const keysGeneration = (store: Store) => issuerKeys.generation(store.q);

/** Who a bearer token speaks for (GET /v1/node): the node, and when a token in its grace period stops working. */
export async function tokenStanding(store: Store, nodeId: string, token: string) {
  const until = await tokens.graceUntil(store.q, hashToken(token));
  return { node: nodeId, tokenGraceUntil: until === undefined ? null : iso(until) };
}
