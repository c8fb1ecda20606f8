// Operator admin use cases: nodes, bearer tokens, trusted issuer keys. Shared by the CLI and the daemon.
import { hasControl } from '../domain/text.js';
import { createHash, randomBytes } from 'node:crypto';
import { ALLOWED_ALGORITHMS, type AllowedAlgorithm } from '../domain/credential.js';
import { conflict, NodeSvcError, notFound, usageError } from '../domain/errors.js';
import { NODE_ID_RE, newId } from '../domain/ids.js';
import { iso } from '../domain/time.js';
import type { Store } from '../store/db.js';
import { issuerKeys, nodes, tokens } from '../store/admin.js';
import { Lru } from '../lru.js';
import { jwkProblems, publicMembers, type Jwk, type TrustedKey } from '../sdk/keys.js';
import { connectionProblem } from '../sdk/client.js';

export function checkNodeId(id: string): void {
  if (!NODE_ID_RE.test(id))
    throw usageError(`"${id}" is not a valid node id`, 'a node id is 1-128 characters: a letter or digit, then letters, digits, ".", "_", ":" or "-"');
}

export function addNode(store: Store, id: string, now = Date.now()) {
  checkNodeId(id);
  if (nodes.get(store.db, id)) throw conflict(`node "${id}" already exists`, 'pick another id, or `node-svc nodes list` to see them');
  nodes.insert(store.db, id, now);
  return { id, createdAt: iso(now) };
}

export function listNodes(store: Store) {
  return nodes.list(store.db).map((n) => ({ id: n.id, createdAt: iso(n.created_at), hasToken: !!tokens.active(store.db, n.id) }));
}

export function removeNode(store: Store, id: string) {
  const removed = store.db.transaction(() => {
    if (!nodes.get(store.db, id)) return 0;
    // Money history is never deleted with a node: streams, events and subscriptions keep it.
    const history = nodes.history(store.db, id);
    if (history.length)
      throw conflict(`node "${id}" has ${history.join(', ')}; it cannot be removed`, `revoke its token instead: node-svc tokens revoke ${id}`);
    return nodes.remove(store.db, id);
  }).immediate();
  if (!removed) throw notFound(`node "${id}"`);
  return { id, removed: true };
}

function requireNode(store: Store, id: string) {
  if (!nodes.get(store.db, id)) throw notFound(`node "${id}"`);
}

/** `nsv_` + 32 random bytes, base64url (DESIGN §3). */
const newToken = () => `nsv_${randomBytes(32).toString('base64url')}`;
export const hashToken = (token: string) => createHash('sha256').update(token, 'utf8').digest('hex');

export function issueToken(store: Store, nodeId: string, now = Date.now()) {
  return store.db.transaction(() => {
    requireNode(store, nodeId);
    if (tokens.active(store.db, nodeId))
      throw conflict(`node "${nodeId}" already has an active token`, `use \`node-svc tokens rotate ${nodeId}\` to replace it`);
    const token = newToken();
    const id = newId('tok');
    tokens.insert(store.db, { id, nodeId, hash: hashToken(token), now });
    return { node: nodeId, tokenId: id, token, createdAt: iso(now) };
  }).immediate();
}

/** Replace the active token; the old one keeps working for `graceMs` (0: stops at once). */
export function rotateToken(store: Store, nodeId: string, graceMs = 0, now = Date.now()) {
  return store.db.transaction(() => {
    requireNode(store, nodeId);
    const retired = tokens.retireActive(store.db, nodeId, now, graceMs > 0 ? now + graceMs : null);
    const token = newToken();
    const id = newId('tok');
    tokens.insert(store.db, { id, nodeId, hash: hashToken(token), now });
    return { node: nodeId, tokenId: id, token, createdAt: iso(now), previousValidUntil: retired ? iso(graceMs > 0 ? now + graceMs : now) : null };
  }).immediate();
}

export function revokeTokens(store: Store, nodeId: string, now = Date.now()) {
  return store.db.transaction(() => {
    requireNode(store, nodeId);
    return { node: nodeId, revoked: tokens.revokeAll(store.db, nodeId, now) };
  }).immediate();
}

/** The node a bearer token belongs to, or undefined (unknown, revoked, grace expired). */
export const nodeForToken = (store: Store, token: string, now = Date.now()) => tokens.nodeFor(store.db, hashToken(token), now);

/** Tokens remembered by the daemon (one entry each, least recently used evicted first). */
export const TOKEN_CACHE_SIZE = 10_000;

/**
 * nodeForToken for the daemon's hot path, remembering answers. Tokens change only through the admin commands,
 * which commit from another connection, and SQLite's `PRAGMA data_version` moves on every such commit: the
 * memory is dropped then, so a revoked or rotated token is refused on the very next request. A token in its
 * grace period is remembered only until its grace ends.
 */
export function tokenResolver(store: Store) {
  const known = new Lru<string, { node: string; until: number }>(TOKEN_CACHE_SIZE);
  let version: unknown;
  const dataVersion = store.db.prepare('PRAGMA data_version').pluck();
  return (token: string, now = Date.now()): string | undefined => {
    const v = dataVersion.get();
    if (v !== version) {
      known.clear();
      version = v;
    }
    const hit = known.get(token);
    if (hit && now < hit.until) return hit.node;
    const hash = hashToken(token);
    const node = tokens.nodeFor(store.db, hash, now);
    if (node) {
      known.set(token, { node, until: tokens.graceUntil(store.db, hash) ?? Number.MAX_SAFE_INTEGER });
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
  return store.db.transaction(() => {
    const added: string[] = [];
    const unchanged: string[] = [];
    for (const k of list as Jwk[]) {
      const kid = k.kid as string;
      const pub = publicJwk(k);
      const existing = issuerKeys.get(store.db, kid);
      if (existing) {
        if (existing.issuer === issuer && existing.jwk === JSON.stringify(pub)) { unchanged.push(kid); continue; }
        throw conflict(
          existing.issuer === issuer ? `kid "${kid}" is already trusted for ${issuer} with a different key; nothing was added` : `kid "${kid}" is already trusted for another issuer (${existing.issuer}); nothing was added`,
          `remove it first with \`node-svc keys rm ${kid}\` if it is meant to be replaced`,
        );
      }
      issuerKeys.insert(store.db, { kid, issuer, alg: k.alg as string, jwk: JSON.stringify(pub), source, added_at: now, fetched_at: now });
      added.push(kid);
    }
    if (added.length) issuerKeys.bumpGeneration(store.db);
    return { issuer, source, added, unchanged };
  }).immediate();
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
  for (const { issuer, source } of issuerKeys.urlSources(store.db)) {
    const r = { issuer, source, added: [] as string[], removed: [] as string[] };
    try {
      const jwks = await readJwksSource(source);
      const list = (jwks as { keys?: unknown })?.keys;
      if (!Array.isArray(list) || !list.length) throw new Error('not a JWKS with keys');
      const problems = list.flatMap((k) => jwkProblems(k).map((p) => `${String((k as Jwk)?.kid ?? '?')} ${p}`));
      if (problems.length) throw new Error(problems.join('; '));
      store.db.transaction(() => {
        const have = new Map(issuerKeys.bySource(store.db, issuer, source).map((k) => [k.kid, k]));
        const want = new Map((list as Jwk[]).map((k) => [k.kid as string, k]));
        for (const [kid, k] of want) {
          const pub = JSON.stringify(publicJwk(k));
          const existing = have.get(kid) ?? issuerKeys.get(store.db, kid);
          if (existing && (existing.issuer !== issuer || existing.source !== source || existing.jwk !== pub))
            throw new Error(`kid "${kid}" is already trusted with other key material or for another issuer`);
          if (existing) issuerKeys.touch(store.db, kid, now);
          else {
            issuerKeys.insert(store.db, { kid, issuer, alg: k.alg as string, jwk: pub, source, added_at: now, fetched_at: now });
            r.added.push(kid);
          }
        }
        for (const kid of have.keys()) if (!want.has(kid)) { issuerKeys.remove(store.db, kid); r.removed.push(kid); }
        if (r.added.length || r.removed.length) issuerKeys.bumpGeneration(store.db);
      }).immediate();
      report.push(r);
    } catch (err) {
      report.push({ ...r, error: (err as Error).message.slice(0, 300) });
    }
  }
  return report;
}

export function listKeys(store: Store) {
  return issuerKeys.list(store.db).map((k) => ({ kid: k.kid, issuer: k.issuer, alg: k.alg, source: k.source, addedAt: iso(k.added_at), fetchedAt: iso(k.fetched_at) }));
}

export function removeKey(store: Store, kid: string) {
  return store.db.transaction(() => {
    if (!issuerKeys.remove(store.db, kid)) throw notFound(`key "${kid}"`);
    issuerKeys.bumpGeneration(store.db);
    return { kid, removed: true };
  }).immediate();
}

export function trustedKeys(store: Store): TrustedKey[] {
  return issuerKeys.list(store.db)
    .filter((k) => (ALLOWED_ALGORITHMS as readonly string[]).includes(k.alg))
    .map((k) => ({ kid: k.kid, issuer: k.issuer, alg: k.alg as AllowedAlgorithm, jwk: JSON.parse(k.jwk) as Jwk }));
}

export const keysGeneration = (store: Store) => issuerKeys.generation(store.db);

/** Who a bearer token speaks for (GET /v1/node): the node, and when a token in its grace period stops working. */
export function tokenStanding(store: Store, nodeId: string, token: string) {
  const until = tokens.graceUntil(store.db, hashToken(token));
  return { node: nodeId, tokenGraceUntil: until === undefined ? null : iso(until) };
}
