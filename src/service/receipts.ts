// Signed settlement receipts (issue #24): the daemon's receipt keys, issuing a receipt when a settlement becomes final,
// and reading them back (GET /v1/streams/{id}/receipt, /v1/receipts/jwks.json, `node-svc receipts …`).
//
// - Keys: Ed25519, kid = the RFC 7638 thumbprint. The first is made on first use (the daemon's start, or `receipts jwks`)
//   with insert-if-absent semantics, so daemons sharing one PostgreSQL end up with the same key set. `receipts rotate`
//   makes a new active key; the previous one stays in the JWKS (its receipts still verify) until `receipts retire <kid>`.
// - Issuing: inside the write that records settlement.final (any rail, and any other path that makes money final, such
//   as an x402 payment on the escrow rail: call issueReceipt in the same transaction as its settlement.final). One
//   receipt per jti (the settlement id): a write run again keeps the first.
import { createHash, createPrivateKey, randomUUID } from 'node:crypto';
import { conflict, NodeSvcError, notFound } from '../domain/errors.js';
import { RECEIPT_ALG, RECEIPT_TYP, receiptClaims, type ReceiptFacts } from '../domain/receipts.js';
import { iso } from '../domain/time.js';
import { newEd25519KeyPair, signCompactEdDSA } from '../sdk/jws.js';
import { receiptKeys, receipts, type ReceiptKeyRow } from '../store/receipts.js';
import type { Sql, Store } from '../store/sql.js';
import { streams } from '../store/streams.js';
import type { Deps } from './deps.js';

/** RFC 7638 thumbprint of an Ed25519 public JWK (members in lexicographic order: crv, kty, x). */
const thumbprint = (jwk: { crv?: unknown; kty?: unknown; x?: unknown }) =>
  createHash('sha256').update(JSON.stringify({ crv: jwk.crv, kty: jwk.kty, x: jwk.x })).digest('base64url');

/** A new receipt key row (exported for test/sdk/keygen.test.ts, which makes thousands in a loop). */
export function newReceiptKey(issuer: string, now: number) {
  // Not generateKeyPairSync: its keys can hang the process in a JWK export (newEd25519KeyPair says why).
  const { publicKey, privateKey } = newEd25519KeyPair();
  const pub = publicKey.export({ format: 'jwk' });
  const kid = thumbprint(pub);
  return {
    kid, issuer, alg: RECEIPT_ALG, created_at: now,
    public_jwk: JSON.stringify({ kty: pub.kty, crv: pub.crv, x: pub.x, kid, alg: RECEIPT_ALG, use: 'sig' }),
    private_jwk: JSON.stringify(privateKey.export({ format: 'jwk' })),
  };
}

/** The active receipt key, made now if there is none (a concurrent maker wins: its key is the one returned). */
async function activeKey(tx: Sql, now: number): Promise<ReceiptKeyRow> {
  const k = await receiptKeys.active(tx);
  if (k) return k;
  // Every key of a store signs as one issuer: the first key's, or a new name for the first key.
  const issuer = (await receiptKeys.list(tx))[0]?.issuer ?? `urn:node-svc:receipts:${randomUUID()}`;
  await receiptKeys.insertIfNoActive(tx, newReceiptKey(issuer, now));
  const made = await receiptKeys.active(tx);
  if (!made) throw new NodeSvcError('store', 'no active receipt key after creating one');
  return made;
}

/** Make the first receipt key if there is none (the daemon's start, `receipts jwks`). */
export const ensureReceiptKey = (store: Store, now = Date.now()) => store.write(async (tx) => (await activeKey(tx, now)).kid);

/** Sign and store the receipt of a final settlement; call inside the write that records its settlement.final. */
export async function issueReceipt(tx: Sql, f: ReceiptFacts, now: number): Promise<string> {
  const done = await receipts.byJti(tx, f.jti);
  if (done) return done.jws;
  const key = await activeKey(tx, now);
  const jws = signCompactEdDSA(
    { alg: RECEIPT_ALG, typ: RECEIPT_TYP, kid: key.kid },
    receiptClaims(f, key.issuer, now) as unknown as Record<string, unknown>,
    createPrivateKey({ key: JSON.parse(key.private_jwk), format: 'jwk' }),
  );
  await receipts.insert(tx, { jti: f.jti, nodeId: f.node, stream: f.stream, amount: f.amountMicro, kid: key.kid, jws, finalAt: f.finalAt, now });
  return jws;
}

/** The receipt JWKS: the public keys that are not retired (never a private member). */
export async function receiptJwks(store: Store): Promise<{ keys: Array<Record<string, unknown>> }> {
  return { keys: (await receiptKeys.list(store.q)).filter((k) => k.status !== 'retired').map((k) => JSON.parse(k.public_jwk) as Record<string, unknown>) };
}

export async function listReceiptKeys(store: Store) {
  return (await receiptKeys.list(store.q)).map((k) => ({
    kid: k.kid, alg: k.alg, issuer: k.issuer, status: k.status, createdAt: iso(Number(k.created_at)),
    rotatedAt: k.rotated_at === null ? null : iso(Number(k.rotated_at)), retiredAt: k.retired_at === null ? null : iso(Number(k.retired_at)),
  }));
}

/** A new active key; the previous one stays published (rotated) so its receipts still verify. */
export function rotateReceiptKey(store: Store, now = Date.now()) {
  return store.write(async (tx) => {
    const old = await activeKey(tx, now);
    await receiptKeys.rotateActive(tx, now);
    const made = await activeKey(tx, now);
    return { kid: made.kid, previous: old.kid };
  });
}

/** Leave a rotated key out of the JWKS: receipts it signed no longer verify (a key that leaked). The active key cannot be retired. */
export function retireReceiptKey(store: Store, kid: string, now = Date.now()) {
  return store.write(async (tx) => {
    const k = await receiptKeys.get(tx, kid);
    if (!k) throw notFound(`receipt key "${kid}"`);
    if (k.status === 'active') throw conflict(`receipt key "${kid}" is the active one`, 'rotate first: node-svc receipts rotate');
    if (k.status === 'rotated') await receiptKeys.retire(tx, kid, now);
    return { kid, status: 'retired' as const };
  });
}

/** GET /v1/streams/{id}/receipt: the receipt of the stream's highest final amount; 404 unknown, 409 nothing final yet. */
export async function streamReceipt(d: Deps, nodeId: string, id: string) {
  const row = await streams.get(d.store.q, nodeId, id);
  const r = await receipts.latest(d.store.q, nodeId, id);
  if (!row && !r) throw notFound('stream'); // an x402 stream (x402-<payer>-<resource hash>) has receipts and no stream row
  if (!r) {
    const why = row!.final_micro > 0n ? 'its final settlements were made before this daemon issued receipts' : 'nothing of it is final yet';
    throw new NodeSvcError('not_final', `stream ${id} has no receipt: ${why}`, { status: 409, exitCode: 1 });
  }
  return { stream: id, amountMicro: r.amount_micro.toString(), finalAt: iso(Number(r.final_at)), kid: r.kid, receipt: r.jws };
}
