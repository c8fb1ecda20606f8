// Stream use cases: credential verify with live state, stream verify, headroom, finality, vouchers, listing.
import { createHash, createPublicKey, type KeyObject } from 'node:crypto';
import { parseMicro, parsePositiveMicro } from '../domain/amount.js';
import type { VerifiedClaims, VerifyResult } from '../domain/credential.js';
import { notFound, refused, requestRefused, unavailable } from '../domain/errors.js';
import { effectiveCap, fundingSource, FundingUnavailable, type FundingCheck } from '../domain/funding.js';
import type { Refusal, VoucherRefusal } from '../domain/refusals.js';
import { degradationStage, type Stage } from '../domain/stages.js';
import { headroomEntered, raiseHeadroom, type HeadroomMove } from '../ops/alerts.js';
import { iso } from '../domain/time.js';
import { hasControl, lengthOver } from '../domain/text.js';
import { finalityReason } from './finality-reason.js';
import { decodeHeader, decodePart, isTyp, splitCompact, verifySignature, verifySignatureAsync } from '../sdk/jws.js';
import { recordEvent } from '../store/events.js';
import { settlements } from '../store/settlements.js';
import { recoverVoucherSigner, UINT128_MAX } from '../rails/escrow/voucher.js';
import { budgets, fundingSources, headroomRow, revocations, streams, vouchers, type HeadroomRow, type StandingRow, type StreamRow } from '../store/streams.js';
import { NO_RAIL, type Deps } from './deps.js';
import { lockKey, writeOne, type Sql } from '../store/sql.js';
import { Lru } from '../lru.js';
import { x402Finality, x402Headroom, x402Page, x402StreamRow, x402Summary, x402Verify } from './x402-streams.js';

export type StreamStatus = 'open' | 'exhausted' | 'revoked' | 'expired' | 'budget_halted' | 'budget_released' | 'unfunded';

interface Standing {
  status: StreamStatus;
  reason: string | null;
}

/** Why a stream is or is not payable now: revoked > exhausted > budget > expiry > funding. */
function standing(d: Deps, row: StandingRow): Standing {
  if (row.status === 'revoked') return { status: 'revoked', reason: row.status_reason };
  if (row.rev_ahead) return { status: 'revoked', reason: row.rev_reason };
  if (row.status === 'exhausted') return { status: 'exhausted', reason: 'billed truth reached the cap' };
  if (row.budget_status === 'halted') return { status: 'budget_halted', reason: (JSON.parse(row.budget_reasons ?? '[]') as string[]).join(',') };
  if (row.budget_status === 'released') return { status: 'budget_released', reason: `budget ${row.budget} was released` };
  if (d.now() >= row.exp * 1000) return { status: 'expired', reason: `credential expired at ${iso(row.exp * 1000)}` };
  if (row.funding_status === 'unfunded') return { status: 'unfunded', reason: row.funding_reason };
  if (row.funding_status === 'pending') return { status: 'unfunded', reason: 'its funding source has not been read on the rail yet' };
  return { status: 'open', reason: null };
}

/** A stream backed by a funding source is judged by the rail's word: when the rail has been unreadable for too long, 503. */
function requireFundingFresh(d: Deps, row: Pick<StandingRow, 'funding_source'>): void {
  if (row.funding_source === null) return;
  const why = (d.funding ?? NO_RAIL).unavailable();
  if (why) throw unavailable(`the stream's funding cannot be confirmed now: ${why}`);
}

/** The stream's cap as far as its funding source can pay it. */
const capOf = (row: Pick<StandingRow, 'cap_micro' | 'funding_limit_micro'>) => effectiveCap(row.cap_micro, row.funding_limit_micro);

async function requireStream(q: Sql, nodeId: string, id: string): Promise<StreamRow> {
  const row = await streams.get(q, nodeId, id);
  if (!row) throw notFound('stream'); // same answer for unknown and another node's: never 403
  return row;
}

const LIVE_REFUSAL: Partial<Record<StreamStatus, Refusal>> = { revoked: 'revoked', exhausted: 'exhausted', budget_halted: 'budget_halted', budget_released: 'budget_halted', unfunded: 'unfunded' };

/**
 * POST /v1/allowances/verify: the offline verifier plus live state. A valid credential aimed at the caller
 * registers its stream, or renews it when its iat is newer (the cap never drops below what is billed).
 * A new stream whose credential names a funding source (escrow channel, card authorization) is registered with the
 * rail's reading of that source, taken before the write: a rail that cannot be read is a 503, nothing registered.
 */
export async function verifyCredential(d: Deps, nodeId: string, jws: unknown): Promise<VerifyResult> {
  const out = await (await d.keyring.current()).verifier.verifyClaimsAsync(jws, { audience: nodeId, now: d.now() });
  if (!('ok' in out)) return out;
  const c = out.claims.result;
  // One read: the stream's standing, or (not registered yet) the revocation and budget that registering depends on.
  const found = await streams.getStandingFor(d.store.q, nodeId, c.stream, c.budget);
  const known = found.id === null ? undefined : (found as StandingRow & { credential: string });
  // The same credential again (every paid request of a stream): that read only, no write.
  if (known && known.credential === jws) {
    requireFundingFresh(d, known);
    const refusal = liveRefusal(d, known);
    return refusal ?? c;
  }
  const source = fundingSource(c.mode, out.claims.claims);
  if (!known) {
    const no = notRegistrable(c, found.rev_ahead ? { reason: found.rev_reason } : undefined, found.budget_status);
    if (no) return no;
    // A new stream without a funding source: one statement registers it (open: nothing above refused it; a revocation
    // or a halt committed meanwhile applies from the next read, as if it came just after). Lost a race: below.
    if (!source && (await writeOne(d.store, (q) => streams.insertIfAbsent(q, streamFields(d, nodeId, jws as string, out.claims, source))))) return c;
  }
  let check: FundingCheck | undefined;
  if (source && !known && !(await fundingSources.holder(d.store.q, source))) {
    try {
      check = await (d.funding ?? NO_RAIL).check({ nodeId, stream: c.stream, payer: c.payer, asset: c.asset, mode: c.mode, claims: out.claims.claims });
    } catch (err) {
      if (err instanceof FundingUnavailable) throw unavailable(`cannot read the credential's funding source on the rail: ${err.message}`);
      throw err;
    }
  }
  if (known) requireFundingFresh(d, known);
  return d.store.write(async (tx: Sql): Promise<VerifyResult> => { // group commit: shares one durable commit with concurrent writes
    const r = await register(d, tx, nodeId, jws as string, out.claims, source, check);
    return r ?? c;
  });
}

/** A stream is not registered under a revocation that came ahead of it, nor in a budget that is halted or released. */
function notRegistrable(c: VerifiedClaims['result'], rev: { reason: string | null } | undefined, budget: string | null | undefined): VerifyResult | undefined {
  if (rev) return { valid: false, refusal: 'revoked', detail: `stream ${c.stream} was revoked${rev.reason ? ` (${rev.reason})` : ''}` };
  if (budget && budget !== 'active') return { valid: false, refusal: 'budget_halted', detail: `budget ${c.budget} is ${budget}` };
  return undefined;
}

const streamFields = (d: Deps, nodeId: string, jws: string, v: VerifiedClaims, source: string | undefined) => {
  const c = v.result;
  return {
    node_id: nodeId, id: c.stream, budget: c.budget, issuer: c.issuer, payer: c.payer, credential_id: c.credentialId, credential: jws,
    iat: v.iat, exp: v.exp, cap_micro: BigInt(c.capMicro), asset: c.asset, unit_price_micro: BigInt(c.unitPriceMicro),
    rate_micro_per_s: c.rateMicroPerSecond === null ? null : BigInt(c.rateMicroPerSecond), mode: c.mode,
    voucher_key: JSON.stringify(v.cnf), claims: JSON.stringify(v.claims), now: d.now(), funding_source: source ?? null,
  };
};

/** Register or renew the credential's stream; a refusal when live state says no. Call inside a write. */
async function register(d: Deps, db: Sql, nodeId: string, jws: string, v: VerifiedClaims, source: string | undefined, check: FundingCheck | undefined): Promise<VerifyResult | undefined> {
  const c = v.result;
  // PostgreSQL: one registration or renewal of this stream at a time, among all daemons (the reads below decide the write).
  await lockKey(db, `stream:${nodeId}:${c.stream}`);
  const no = notRegistrable(c, await revocations.get(db, nodeId, c.stream), (await budgets.get(db, nodeId, c.budget))?.status);
  if (no) return no;
  const row = await streams.get(db, nodeId, c.stream);
  const fields = streamFields(d, nodeId, jws, v, source);
  if (!row) {
    await streams.insert(db, fields);
    if (source) await bindSource(db, nodeId, c.stream, source, check, fields.now);
    return liveRefusal(d, (await streams.getStanding(db, nodeId, c.stream))!);
  }
  if (row.issuer !== c.issuer || row.payer !== c.payer || row.budget !== c.budget || row.asset !== c.asset || row.mode !== c.mode || row.funding_source !== (source ?? null))
    return { valid: false, refusal: 'malformed', detail: `stream ${c.stream} is already registered with another issuer, payer, budget, asset, mode or funding source` };
  const refused = liveRefusal(d, row);
  if (refused) return refused;
  await streams.renew(db, fields);
  return undefined;
}

/**
 * One source backs one stream (its vouchers are cumulative for the source): the first stream registered with it holds
 * it; a later one is unfunded, naming the holder only when it is the same node's (404 rules: never another node's id).
 */
async function bindSource(db: Sql, nodeId: string, stream: string, source: string, check: FundingCheck | undefined, now: number): Promise<void> {
  const holder = await fundingSources.bind(db, source, nodeId, stream, now);
  const what = source.startsWith('escrow:') ? `escrow channel ${source.split(':')[3]}` : `card authorization ${source.slice(5)}`;
  if (holder.node_id !== nodeId || holder.stream !== stream) {
    const whose = holder.node_id === nodeId ? `stream ${holder.stream} of this node` : 'a stream of another node';
    await streams.setFunding(db, nodeId, stream, { status: 'unfunded', reason: `${what} already backs ${whose}; one funding source backs one stream`, limitMicro: null, now });
  } else if (check) {
    await streams.setFunding(db, nodeId, stream, check.funded
      ? { status: 'funded', reason: null, limitMicro: check.limitMicro, now }
      : { status: 'unfunded', reason: check.reason, limitMicro: null, now });
  }
}

function liveRefusal(d: Deps, row: StandingRow): VerifyResult | undefined {
  const live = standing(d, row);
  const refusal = LIVE_REFUSAL[live.status];
  return refusal ? { valid: false, refusal, detail: `stream ${row.id} is ${live.status.replace('_', ' ')}${live.reason ? ` (${live.reason})` : ''}` } : undefined;
}

export async function streamVerify(d: Deps, nodeId: string, id: string) {
  const row = await streams.get(d.store.q, nodeId, id);
  if (!row) {
    const x = await x402StreamRow(d, nodeId, id);
    if (x) return x402Verify(x);
    throw notFound('stream'); // same answer for unknown and another node's: never 403
  }
  requireFundingFresh(d, row);
  const s = standing(d, row);
  const remaining = capOf(row) - row.billed_micro;
  const open = s.status === 'open';
  return { stream: row.id, open, payable: open && remaining > 0n, status: s.status, reason: s.reason, source: 'credential' as const };
}

/** Start of the window the observed rate is measured over (at `now`, the clock's reading by default). */
const windowStart = (d: Deps, now = d.now()) => now - d.config.rateWindowSeconds * 1000;

function observedRate(d: Deps, row: HeadroomRow): bigint {
  const w = d.config.rateWindowSeconds;
  if (row.billed_micro === 0n) return 0n;
  const before = row.billed_before ?? 0n;
  return (row.billed_micro - before) / BigInt(w);
}

function headroomOf(d: Deps, row: HeadroomRow) {
  const s = standing(d, row);
  const cap = capOf(row);
  const left = cap - row.billed_micro;
  const remaining = left > 0n ? left : 0n;
  const observed = observedRate(d, row);
  const stage: Stage = degradationStage({
    payable: s.status === 'open',
    capMicro: cap,
    remainingMicro: remaining,
    limitMicroPerSecond: row.rate_micro_per_s,
    observedMicroPerSecond: observed,
    lowPercentLeft: d.config.lowPercentLeft,
    criticalPercentLeft: d.config.criticalPercentLeft,
    lowRatePercent: d.config.lowRatePercent,
  });
  return {
    stream: row.id,
    asset: row.asset,
    source: 'credential' as const,
    capMicro: row.cap_micro.toString(),
    effectiveCapMicro: cap.toString(),
    fundedMicro: row.funding_limit_micro === null ? null : row.funding_limit_micro.toString(),
    billedMicro: row.billed_micro.toString(),
    remainingCapMicro: remaining.toString(),
    unitPriceMicro: row.unit_price_micro.toString(),
    remainingUnits: (remaining / row.unit_price_micro).toString(),
    rate: { limitMicroPerSecond: row.rate_micro_per_s?.toString() ?? null, observedMicroPerSecond: observed.toString() },
    degradationStage: stage,
    status: s.status,
    asOf: iso(d.now()),
  };
}

/**
 * The headroom answer as its JSON text: what GET /v1/streams/{id}/headroom sends. The answer is a function of the
 * stream's row and the clock's millisecond (config is fixed for the process); the row is the one object remembered
 * for a read (store/streams.ts headroomRow: on SQLite until anything commits, on PostgreSQL for 1 ms and not past a
 * write of this daemon), so a stream read many times in one millisecond (a node checking before each paid unit) is
 * computed and serialized once for that millisecond. The rail's funding check runs on every request (its answer is
 * not the row's). bench/http: about 4 µs of the ~28 µs a read cost; bench/postgres: one database read per stream per
 * millisecond instead of one per request.
 */
const headroomBodies = new WeakMap<HeadroomRow, { at: number; body: string }>();
export async function headroomJson(d: Deps, nodeId: string, id: string): Promise<string> {
  const now = d.now();
  const row = await headroomRow(d.store, nodeId, id, windowStart(d, now));
  if (!row) return x402HeadroomJson(d, nodeId, id);
  requireFundingFresh(d, row);
  const hit = headroomBodies.get(row);
  if (hit !== undefined && hit.at === now) return hit.body;
  const body = JSON.stringify(headroomOf({ ...d, now: () => now }, row)); // one clock reading throughout
  headroomBodies.set(row, { at: now, body });
  return body;
}

async function x402HeadroomJson(d: Deps, nodeId: string, id: string): Promise<string> {
  const x = await x402StreamRow(d, nodeId, id);
  if (x) return JSON.stringify(x402Headroom(d, x));
  throw notFound('stream');
}

export async function finalityOf(d: Deps, row: StreamRow) {
  const settlement = await inProgress(d, row);
  return {
    stream: row.id,
    asset: row.asset,
    source: 'credential' as const,
    finality: row.frontier_finality,
    finalMicro: row.final_micro.toString(),
    checkpointedMicro: row.checkpointed_micro.toString(),
    frontier: {
      amountMicro: row.frontier_micro.toString(),
      finality: row.frontier_finality,
      reference: row.frontier_reference,
      checkpointedAt: row.frontier_checkpointed_at === null ? null : iso(row.frontier_checkpointed_at),
      finalAt: row.frontier_final_at === null ? null : iso(row.frontier_final_at),
    },
    billedTruth: {
      amountMicro: row.billed_micro.toString(),
      units: row.billed_units.toString(),
      signedAt: row.billed_signed_at === null ? null : iso(row.billed_signed_at * 1000),
      voucher: row.billed_voucher,
    },
    unsettledMicro: (row.billed_micro - row.checkpointed_micro).toString(),
    reason: finalityReason(d, row),
    funding: { status: row.funding_status, reason: row.funding_reason, fundedMicro: row.funding_limit_micro === null ? null : row.funding_limit_micro.toString() },
    settlement,
    asOf: iso(d.now()),
  };
}

/** The newest settlement when it is not final yet: amount, reference, attempts, last error, stuck past the limit. */
async function inProgress(d: Deps, row: StreamRow) {
  const s = await settlements.latestUnfinished(d.store.q, row.node_id, row.id);
  if (!s) return null;
  const sentAt = s.submitted_at === null ? null : Number(s.submitted_at);
  return {
    amountMicro: s.amount_micro.toString(),
    status: s.status,
    reference: s.reference,
    createdAt: iso(Number(s.created_at)),
    submittedAt: sentAt === null ? null : iso(sentAt),
    attempts: Number(s.attempts),
    lastError: s.error,
    stuck: (s.status === 'pending' || s.status === 'submitted') && d.now() - (sentAt ?? Number(s.created_at)) > d.config.settlementStuckMs,
  };
}

export async function finality(d: Deps, nodeId: string, id: string) {
  const row = await streams.get(d.store.q, nodeId, id);
  if (row) return finalityOf(d, row);
  const x = await x402StreamRow(d, nodeId, id);
  if (x) return x402Finality(d, nodeId, x);
  throw notFound('stream');
}

export interface ListOptions { status?: 'open' | 'closed' | 'all'; sort?: 'id' | 'activity' }

/**
 * The cursor is the page's last position: its id (sort=id, as before), or `updated_at:id` (sort=activity), base64url.
 * Only a cursor this API gave out is read: canonical base64url of UTF-8 text of that sort's shape; anything else
 * (matching the document's `string`, refused by its description) is 422 `cursor_unknown`.
 */
function readCursor(cursor: string | undefined, sort: 'id' | 'activity'): { afterId: string; afterAt: number | null } {
  if (!cursor) return { afterId: '', afterAt: null };
  const unknown = (why: string) => requestRefused('cursor_unknown', `cursor is not a cursor this API gave out for sort=${sort} (${why}; use nextCursor of a previous page)`);
  const bytes = Buffer.from(cursor, 'base64url');
  if (bytes.toString('base64url') !== cursor) throw unknown('not base64url');
  let text: string;
  try {
    text = new TextDecoder('utf-8', { fatal: true }).decode(bytes);
  } catch {
    throw unknown('not UTF-8');
  }
  // A stream id: 1 to 256 characters, no control characters (whatever registered it).
  const isId = (id: string) => id.length > 0 && !lengthOver(id, 256) && !hasControl(id);
  if (sort === 'id') {
    if (!isId(text)) throw unknown('not a stream id');
    return { afterId: text, afterAt: null };
  }
  const m = /^(\d{1,16}):(.*)$/s.exec(text);
  if (!m || !isId(m[2]!)) throw unknown('not a position of this sort');
  return { afterId: m[2]!, afterAt: Number(m[1]) };
}

export async function listStreams(d: Deps, nodeId: string, cursor: string | undefined, limit: number, o: ListOptions = {}) {
  const sort = o.sort ?? 'id';
  const status = o.status ?? 'all';
  const at = readCursor(cursor, sort);
  // Credential streams and x402 streams (x402-streams.ts), each paged from the same keyset position, merged in order.
  const [rows, x402] = await Promise.all([
    streams.list(d.store.q, nodeId, { status, sort, ...at, limit: limit + 1, windowStart: windowStart(d), now: d.now() }),
    x402Page(d, nodeId, { status, sort, ...at, limit: limit + 1 }),
  ]);
  const merged = [
    ...rows.map((row) => ({ id: row.id, at: row.updated_at, view: () => summaryOf(d, row) })),
    ...x402.map((x) => ({ id: x.stream, at: x.updated_at, view: () => x402Summary(x) })),
  ].sort(sort === 'id' ? (a, b) => (a.id < b.id ? -1 : a.id > b.id ? 1 : 0) : (a, b) => b.at - a.at || (a.id < b.id ? 1 : a.id > b.id ? -1 : 0));
  const page = merged.slice(0, limit);
  const last = page[page.length - 1];
  return {
    data: page.map((p) => p.view()),
    nextCursor: merged.length > limit && last ? Buffer.from(sort === 'id' ? last.id : `${last.at}:${last.id}`, 'utf8').toString('base64url') : null,
  };
}

function summaryOf(d: Deps, row: StreamRow & HeadroomRow) {
  const h = headroomOf(d, row);
  return {
    stream: row.id, budget: row.budget, payer: row.payer, issuer: row.issuer, mode: row.mode, asset: row.asset, source: 'credential' as const,
    status: h.status, degradationStage: h.degradationStage, capMicro: h.capMicro, billedMicro: h.billedMicro,
    remainingCapMicro: h.remainingCapMicro, finality: row.frontier_finality, finalMicro: row.final_micro.toString(),
    checkpointedMicro: row.checkpointed_micro.toString(),
    unsettledMicro: (row.billed_micro - row.checkpointed_micro).toString(), expiresAt: iso(row.exp * 1000),
    lastActivityAt: iso(row.updated_at),
  };
}

// ---- vouchers ----

export const VOUCHER_TYP = 'voucher+jwt';
// Bounded for daemon memory (a KeyObject each): hot streams stay, a cold one costs one key import (~20 µs).
const keyCache = new Lru<string, KeyObject>(2_000);
function voucherKey(jwkJson: string): KeyObject {
  let k = keyCache.get(jwkJson);
  if (!k) {
    const { jwk } = JSON.parse(jwkJson) as { jwk: Record<string, unknown> };
    k = createPublicKey({ key: { kty: jwk.kty, crv: jwk.crv, x: jwk.x, y: jwk.y } as never, format: 'jwk' });
    keyCache.set(jwkJson, k);
  }
  return k;
}

const vRefuse = (refusal: VoucherRefusal, detail: string, extra: Record<string, unknown> = {}) => refused('voucher_refused', refusal, detail, extra);

export interface ParsedVoucher {
  stream: string;
  amount: bigint;
  units: bigint;
  iat: number;
}

/** A JWS voucher's parts and the key and algorithm of the stream's `cnf.jwk` it must be signed with; throws the refusal. */
function jwsVoucherKey(row: StreamRow, voucher: string): { parts: [string, string, string]; alg: 'EdDSA' | 'ES256'; key: KeyObject } {
  const parts = splitCompact(voucher);
  const header = parts && decodeHeader(parts[0]);
  if (!parts || !header) throw vRefuse('malformed', 'voucher is not a compact JWS');
  const cnf = JSON.parse(row.voucher_key) as { jwk?: Record<string, unknown> };
  if (!cnf.jwk) throw vRefuse('bad_signature', `stream ${row.id} takes EIP-712 vouchers signed by its cnf.addr, not JWS`);
  const alg = cnf.jwk.kty === 'OKP' ? 'EdDSA' : cnf.jwk.kty === 'EC' && cnf.jwk.crv === 'P-256' ? 'ES256' : undefined;
  if (!alg || header.alg !== alg) throw vRefuse('bad_signature', `voucher alg must be ${alg ?? 'EdDSA or ES256'} for the stream's voucher key`);
  if (!isTyp(header.typ, VOUCHER_TYP)) throw vRefuse('malformed', `voucher typ must be "${VOUCHER_TYP}"`);
  if (header.crit !== undefined || header.b64 !== undefined) throw vRefuse('malformed', 'critical or b64 header parameters are not supported');
  try {
    return { parts, alg, key: voucherKey(row.voucher_key) };
  } catch {
    throw vRefuse('bad_signature', "the stream's voucher key is not usable");
  }
}

/**
 * A voucher whose signature was found good, off the event loop, for one stream key (verifySignatureAsync): the judge
 * then does not verify it again. Only a good signature is carried; anything else (a refusal to name, a bad signature)
 * is left to the judge's own synchronous check, which gives the same answer and names it.
 */
export interface SignatureChecked {
  readonly voucher: string;
  readonly voucherKey: string;
  /** What jwsVoucherKey found for this voucher and key (parts, algorithm, key object): the judge does not parse again. */
  readonly signed: ReturnType<typeof jwsVoucherKey>;
}

/** The signature of a JWS voucher checked in the thread pool, before the voucher is judged on `row`. */
async function checkSignatureAhead(row: StreamRow, voucher: unknown): Promise<SignatureChecked | undefined> {
  if (typeof voucher !== 'string') return undefined;
  let signed: ReturnType<typeof jwsVoucherKey>;
  try {
    signed = jwsVoucherKey(row, voucher);
  } catch {
    return undefined; // refused: the judge names why
  }
  if (!(await verifySignatureAsync(signed, signed.parts))) return undefined;
  const checked = { voucher, voucherKey: row.voucher_key, signed };
  madeHere.add(checked);
  return checked;
}
/** Only what checkSignatureAhead made is trusted (an object of the same shape from elsewhere is not). */
const madeHere = new WeakSet<SignatureChecked>();

/** Check a JWS voucher against the stream's `cnf.jwk`. Throws a voucher_refused error. `checked`: its signature was
 *  found good for this voucher and this key already (checkSignatureAhead). */
export function checkJwsVoucher(row: StreamRow, voucher: string, checked?: SignatureChecked): ParsedVoucher {
  const known = checked !== undefined && madeHere.has(checked) && checked.voucher === voucher && checked.voucherKey === row.voucher_key;
  const { parts, alg, key } = known ? checked.signed : jwsVoucherKey(row, voucher);
  if (!known && !verifySignature({ alg, key }, parts)) throw vRefuse('bad_signature', "voucher signature does not verify with the credential's cnf key");
  const c = decodePart(parts[1]);
  if (!c) throw vRefuse('malformed', 'voucher payload is not a JSON object');
  const amount = parsePositiveMicro(c.amount);
  const units = parseMicro(c.units);
  if (typeof c.stream !== 'string') throw vRefuse('malformed', 'voucher claim "stream" is missing');
  if (amount === undefined) throw vRefuse('malformed', 'voucher claim "amount" must be a decimal string of a positive integer (cumulative micro units)');
  if (units === undefined) throw vRefuse('malformed', 'voucher claim "units" must be a decimal string of a non-negative integer (cumulative network units)');
  if (typeof c.iat !== 'number' || !Number.isSafeInteger(c.iat) || c.iat < 0) throw vRefuse('malformed', 'voucher claim "iat" must be a NumericDate');
  return { stream: c.stream, amount, units, iat: c.iat };
}

export type VoucherChecker = (row: StreamRow, voucher: unknown, now: number, checked?: SignatureChecked) => ParsedVoucher;

/** Voucher encodings by the stream's cnf (jwk: JWS; addr: EIP-712, added by the escrow rail). */
export const voucherCheckers: { jws: VoucherChecker; eip712: VoucherChecker } = {
  jws: (row, v, _now, checked) => {
    if (typeof v !== 'string') throw vRefuse('malformed', 'this stream takes JWS vouchers (a compact JWS string)');
    return checkJwsVoucher(row, v, checked);
  },
  eip712: checkEip712Voucher,
};

/** An escrow voucher `{stream, amount, units, signature}`: EIP-712 Voucher(channelId, cumulativeAmount) signed by cnf.addr. */
export function checkEip712Voucher(row: StreamRow, v: unknown, now = Date.now()): ParsedVoucher {
  if (typeof v !== 'object' || v === null || Array.isArray(v)) throw vRefuse('malformed', 'this stream takes EIP-712 vouchers: {stream, amount, units, signature}');
  const o = v as Record<string, unknown>;
  const amount = parsePositiveMicro(o.amount);
  const units = parseMicro(o.units);
  if (typeof o.stream !== 'string') throw vRefuse('malformed', 'voucher field "stream" is missing');
  if (amount === undefined || amount > UINT128_MAX) throw vRefuse('malformed', 'voucher field "amount" must be a decimal string of a positive integer (cumulative micro units)');
  if (units === undefined) throw vRefuse('malformed', 'voucher field "units" must be a decimal string of a non-negative integer');
  if (typeof o.signature !== 'string') throw vRefuse('malformed', 'voucher field "signature" is missing');
  const claims = JSON.parse(row.claims) as { chainId: number; escrow: `0x${string}`; channel: `0x${string}`; cnf: { addr: string } };
  const signer = recoverVoucherSigner({ chainId: claims.chainId, escrow: claims.escrow, channel: claims.channel }, amount, o.signature);
  if ('error' in signer) throw vRefuse('bad_signature', `voucher signature: ${signer.error}`);
  if (signer.address !== claims.cnf.addr.toLowerCase()) throw vRefuse('bad_signature', "voucher is not signed by the credential's cnf.addr");
  return { stream: o.stream, amount, units, iat: Math.floor(now / 1000) }; // not signed by EIP-712: the time it was received
}

/**
 * POST /v1/streams/{id}/vouchers: a new billed truth, or `stale` (idempotent) at or below it, or a refusal.
 * Reaching the cap marks the stream exhausted and records stream.exhausted in the same transaction.
 */
export async function submitVoucher(d: Deps, nodeId: string, id: string, voucher: unknown, credential?: string) {
  if (credential !== undefined && !(await streams.get(d.store.q, nodeId, id))) {
    const r = await verifyCredential(d, nodeId, credential);
    // A credential that registered its stream as unfunded: the voucher is refused as for any stream not payable.
    if (!r.valid && r.refusal !== 'unfunded') throw refused('credential_refused', r.refusal, r.detail, { valid: false });
    if (r.valid && r.stream !== id) throw vRefuse('wrong_stream', `the credential is for stream ${r.stream}, not ${id}`);
  }
  const encoded = typeof voucher === 'string' ? voucher : JSON.stringify(voucher);
  // The common case, without a lock: judge the voucher on the stream as this daemon last billed it (or as read now),
  // the signature checked outside any transaction, then bill it by a conditional update that holds only if the stream
  // is still exactly that (PostgreSQL: one statement; an accepted voucher costs one round trip when the stream was
  // billed here last, two otherwise). Lost to a change of the stream (another daemon billed it, a renewal, a
  // revocation): judged again on a fresh read. A judgment on the remembered row counts only when it is an acceptance.
  const cache = lastBilled(d);
  const key = `${nodeId}\n${id}`;
  for (let attempt = 0; attempt < 3; attempt++) {
    const remembered = attempt === 0 ? cache?.get(key) : undefined;
    const row = remembered ?? (await requireStream(d.store.q, nodeId, id));
    // The signature first, in the thread pool (JWS vouchers): the event loop serves other requests meanwhile.
    const checked = await checkSignatureAhead(row, voucher);
    let j: ReturnType<typeof judgeVoucher>;
    try {
      j = judgeVoucher(d, row, voucher, checked);
    } catch (err) {
      if (!remembered) throw err;
      cache?.delete(key);
      continue;
    }
    if (!('v' in j) || j.exhausted) {
      if (remembered) { cache?.delete(key); continue; }
      if (!('v' in j)) return j;
      break; // reaching the cap also closes the stream and records an event: the locked path below
    }
    const now = d.now();
    const v = { amount: j.v.amount, units: j.v.units, voucher: encoded, signedAt: j.v.iat, now };
    if (await writeOne(d.store, (q) => streams.billIfUnchanged(q, row, v))) {
      // Without the texts the judge never reads (the credential, the last voucher): a row is remembered narrow.
      cache?.set(key, { ...row, credential: '', billed_micro: v.amount, billed_units: v.units, billed_voucher: null, billed_signed_at: v.signedAt, updated_at: now });
      // Rarely (a stream entering low or critical): the operational alert, a write of its own after the voucher's.
      const move = headroomMove(nodeId, row, j);
      const stage = headroomEntered(move, d.config);
      if (stage) await d.store.write((tx) => raiseHeadroom(tx, move, stage, d.config, now));
      return accepted(row, j, encoded);
    }
    cache?.delete(key);
  }
  cache?.delete(key);
  // The stream's row locked (PostgreSQL: that row only; SQLite: the one writer) from the read to the commit.
  return d.store.write(async (db: Sql) => { // group commit: shares one durable commit with concurrent writes
    const row = await streams.getLocked(db, nodeId, id);
    if (!row) throw notFound('stream');
    const j = judgeVoucher(d, row, voucher);
    if (!('v' in j)) return j;
    const now = d.now();
    await streams.bill(db, nodeId, id, j.v.amount, j.v.units, encoded, j.v.iat, now, j.exhausted);
    await vouchers.insert(db, { nodeId, stream: id, amount: j.v.amount, units: j.v.units, signedAt: j.v.iat, now, voucher: encoded });
    const move = headroomMove(nodeId, row, j);
    const stage = headroomEntered(move, d.config);
    if (stage) await raiseHeadroom(db, move, stage, d.config, now);
    if (j.exhausted)
      await recordEvent(db, nodeId, 'stream.exhausted', `stream:${id}`, { stream: id, budget: row.budget, asset: row.asset, capMicro: row.cap_micro.toString(), billedMicro: j.v.amount.toString() }, now);
    return accepted(row, j, encoded);
  });
}

/** Streams as this daemon last billed them (per store), to judge the next voucher on without reading first. */
const billedRows = new WeakMap<object, Lru<string, StreamRow>>();
/**
 * Streams remembered per daemon. PostgreSQL: the read it saves is a network round trip. SQLite: an in-process read
 * (~14 µs of a voucher's ~250 µs of main thread, bench/commit), for the hottest streams only: 10,000 rows cost the
 * daemon ~20 MB (bench/memory: 132 MB against its 120 MB target), 1,000 narrow ones 2-3 MB: 256 are kept. Either way a
 * remembered row only lets the voucher try the conditional update, which holds only if the stream is still exactly
 * that row in the database (billIfUnchanged); otherwise the stream is read again.
 */
export const BILLED_CACHE_SIZE = 10_000;
export const BILLED_CACHE_SIZE_SQLITE = 256;
const lastBilled = (d: Deps) => {
  let c = billedRows.get(d.store);
  if (!c) billedRows.set(d.store, (c = new Lru(d.store.dialect === 'postgres' ? BILLED_CACHE_SIZE : BILLED_CACHE_SIZE_SQLITE)));
  return c;
};

interface Judged { v: ParsedVoucher; cap: bigint; exhausted: boolean }

/** The voucher against the stream as read: a refusal (thrown), `stale` at or below the billed truth, or what to bill. */
function judgeVoucher(d: Deps, row: StreamRow, voucher: unknown, checked?: SignatureChecked): Judged | { accepted: false; reason: 'stale'; stream: string; billedMicro: string; billedUnits: string } {
  requireFundingFresh(d, row);
  const v = (JSON.parse(row.voucher_key).addr ? voucherCheckers.eip712 : voucherCheckers.jws)(row, voucher, d.now(), checked);
  if (v.stream !== row.id) throw vRefuse('wrong_stream', `voucher is for stream ${v.stream}, not ${row.id}`);
  const billed = { billedMicro: row.billed_micro.toString(), billedUnits: row.billed_units.toString() };
  if (v.amount <= row.billed_micro) return { accepted: false as const, reason: 'stale' as const, stream: row.id, ...billed };
  const s = standing(d, row);
  if (s.status !== 'open') throw vRefuse('not_payable', `stream ${row.id} is not payable: ${s.status}${s.reason ? ` (${s.reason})` : ''}`, { streamStatus: s.status });
  if (v.units < row.billed_units) throw vRefuse('not_monotone', `voucher units ${v.units} are below the billed ${row.billed_units}`, billed);
  if (v.amount > row.cap_micro) throw vRefuse('over_cap', `voucher amount ${v.amount} is above the cap ${row.cap_micro}`, { capMicro: row.cap_micro.toString(), ...billed });
  const cap = capOf(row);
  if (v.amount > cap)
    throw vRefuse('over_cap', `voucher amount ${v.amount} is above what the funding source can pay: ${row.funding_source?.startsWith('escrow:') ? 'the channel deposit' : 'the authorization'} is ${cap}`, { capMicro: row.cap_micro.toString(), effectiveCapMicro: cap.toString(), ...billed });
  return { v, cap, exhausted: v.amount === row.cap_micro };
}

const headroomMove = (node: string, row: StreamRow, j: Judged): HeadroomMove => ({
  node, stream: row.id, budget: row.budget, asset: row.asset, unitPriceMicro: row.unit_price_micro, capMicro: j.cap, beforeMicro: row.billed_micro, afterMicro: j.v.amount,
});

const accepted = (row: StreamRow, j: Judged, encoded: string) => ({
  accepted: true as const,
  stream: row.id,
  billedMicro: j.v.amount.toString(),
  billedUnits: j.v.units.toString(),
  remainingCapMicro: (j.cap - j.v.amount).toString(),
  exhausted: j.exhausted,
  voucherHash: createHash('sha256').update(encoded).digest('hex'),
});
