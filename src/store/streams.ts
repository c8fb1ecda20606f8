// Streams, vouchers, revocations, budgets, payer subscription periods, control facts: the only SQL for them.
// Money columns are read as BigInt (safeIntegers): SQLite INTEGER holds int64, a JS number does not.
import { Lru } from '../lru.js';
import type { SqliteStore } from './db.js';
import type { PostgresStore } from './postgres.js';
import { forUpdate, type Sql, type Store } from './sql.js';

export type FundingStatus = 'none' | 'pending' | 'funded' | 'unfunded';

export interface StreamRow {
  node_id: string;
  id: string;
  budget: string;
  issuer: string;
  payer: string;
  credential_id: string;
  credential: string;
  iat: number;
  exp: number;
  cap_micro: bigint;
  asset: string;
  unit_price_micro: bigint;
  rate_micro_per_s: bigint | null;
  mode: 'escrow' | 'card';
  voucher_key: string;
  claims: string;
  status: 'open' | 'exhausted' | 'revoked';
  status_reason: string | null;
  billed_micro: bigint;
  billed_units: bigint;
  billed_voucher: string | null;
  billed_signed_at: number | null;
  checkpointed_micro: bigint;
  final_micro: bigint;
  frontier_micro: bigint;
  frontier_finality: 'none' | 'checkpointed' | 'final';
  frontier_reference: string | null;
  frontier_checkpointed_at: number | null;
  frontier_final_at: number | null;
  created_at: number;
  updated_at: number;
  /** The funding source the credential names (domain/funding.ts) and the rail's last word on it. */
  funding_source: string | null;
  funding_status: FundingStatus;
  funding_reason: string | null;
  funding_limit_micro: bigint | null;
  funding_checked_at: number | null;
  funding_released_at: number | null;
  /** Joined in the same read: a revocation (maybe ahead of the stream), the budget's status. */
  rev_ahead: bigint;
  rev_reason: string | null;
  budget_status: 'active' | 'halted' | 'released' | null;
  budget_reasons: string | null;
}

// The reads of a stream and everything its standing depends on share these pieces (the headroom path is hot).
const JOINS = `FROM streams s LEFT JOIN revocations r ON r.node_id = s.node_id AND r.stream = s.id
  LEFT JOIN budgets b ON b.node_id = s.node_id AND b.id = s.budget`;
const STANDING_COLUMNS = 'CASE WHEN r.stream IS NOT NULL THEN 1 ELSE 0 END AS rev_ahead, r.reason AS rev_reason, b.status AS budget_status, b.reasons AS budget_reasons';
/**
 * The billed amount as of the start of the rate window (bound first), for the observed rate. Accepted vouchers only
 * grow, so it is the last one received by then: one seek on (node, stream, received_at), whatever the history.
 */
const BILLED_BEFORE = `(SELECT v.amount_micro FROM vouchers v WHERE v.node_id = s.node_id AND v.stream = s.id AND v.received_at <= ?
  ORDER BY v.received_at DESC LIMIT 1) AS billed_before`;
// Only the columns headroom and verify read (not the credential's claims or the voucher texts).
const NARROW_COLUMNS = 's.node_id, s.id, s.budget, s.asset, s.cap_micro, s.billed_micro, s.unit_price_micro, s.rate_micro_per_s, s.status, s.status_reason, s.exp, ' +
  's.funding_source, s.funding_status, s.funding_reason, s.funding_limit_micro';

const LIVE = `SELECT s.*, ${STANDING_COLUMNS} ${JOINS}`;
const HEADROOM = `SELECT ${NARROW_COLUMNS}, ${STANDING_COLUMNS}, ${BILLED_BEFORE} ${JOINS} WHERE s.node_id = ? AND s.id = ?`;
// A stream's standing and the credential it was registered with: the read of every repeated verify.
/** HEADROOM, and when the next voucher after the window's start was received: the read stays right until then. */
const HEADROOM_UNTIL = `SELECT ${NARROW_COLUMNS}, ${STANDING_COLUMNS}, ${BILLED_BEFORE},
  (SELECT MIN(v.received_at) FROM vouchers v WHERE v.node_id = s.node_id AND v.stream = s.id AND v.received_at > ?) AS next_received_at
  ${JOINS} WHERE s.node_id = ? AND s.id = ?`;
/** Headroom reads remembered per SQLite store (narrow rows, a few hundred bytes each). */
const HEADROOM_ROWS = 2_000;
const remembered = new WeakMap<Store, Lru<string, { row: HeadroomRow; mark: number; from: number; until: number | null }>>();

/**
 * The headroom read of a stream (getForHeadroom), remembered so that a stream read many times a millisecond (a node
 * checking before each paid unit) costs one read:
 * - SQLite: until anything commits. The read is all SQL: the stream, its revocation and budget (which only a commit
 *   changes) and the billed amount at the window's start, which moves with time only when the window's start passes a
 *   voucher: it is remembered with the window's start it was read at and the next voucher's time after it, and read
 *   again past that. Everything else that depends on the time (expiry, funding age, the rate) is computed from the row
 *   on every request. A commit of this daemon or of another process (the store's change mark) forgets every read.
 * - PostgreSQL (pgHeadroomRow): for 1 ms of the process's own clock, never past a write of this daemon; requests that
 *   come while a read is on its way share it. Another daemon's write is seen by a read 1 ms later.
 * The same object is given for the same read: service/streams.ts headroomJson keeps its answer's text with it.
 */
export async function headroomRow(store: Store, nodeId: string, id: string, windowStart: number): Promise<HeadroomRow | undefined> {
  if (store.dialect !== 'sqlite') return pgHeadroomRow(store as PostgresStore, nodeId, id, windowStart);
  const s = store as SqliteStore;
  let rows = remembered.get(store);
  if (!rows) remembered.set(store, (rows = new Lru(HEADROOM_ROWS)));
  const mark = s.changeMark();
  const key = `${nodeId}\n${id}`;
  const hit = rows.get(key);
  if (hit && hit.mark === mark && windowStart >= hit.from && (hit.until === null || windowStart < hit.until)) return hit.row;
  const r = await s.q.get<HeadroomRow & { next_received_at: bigint | null }>(HEADROOM_UNTIL, [windowStart, windowStart, nodeId, id], true);
  if (!r) return undefined;
  r.exp = Number(r.exp);
  const until = r.next_received_at === null ? null : Number(r.next_received_at);
  delete (r as { next_received_at?: unknown }).next_received_at;
  if (s.changeMark() === mark) rows.set(key, { row: r, mark, from: windowStart, until });
  return r;
}

interface KeptRead {
  /** performance.now() and the store's change mark when the read began: good for 1 ms, and while the mark stays. */
  clock: number;
  mark: number;
  /** The window's start it was read for: given only for starts within the millisecond after (a clock that steps does
   *  not reuse a read made for another rate window). */
  from: number;
  read: Promise<HeadroomRow | undefined>;
}
const kept = new WeakMap<Store, Lru<string, KeptRead>>();

/**
 * PostgreSQL's headroom read, kept for 1 ms of performance.now() from its start (a test's fixed clock does not stretch
 * it) and not past a write of this daemon (the store's change mark): the same bound as SQLite's look at other
 * processes' commits (`PRAGMA data_version`, read at most once a millisecond). Money does not depend on it: a voucher
 * is judged on the stream as the database has it (conditional update). A failed read is not kept.
 */
function pgHeadroomRow(store: PostgresStore, nodeId: string, id: string, windowStart: number): Promise<HeadroomRow | undefined> {
  let reads = kept.get(store);
  if (!reads) kept.set(store, (reads = new Lru(HEADROOM_ROWS)));
  const key = `${nodeId}\n${id}`;
  const mark = store.changeMark();
  const clock = performance.now();
  const e = reads.get(key);
  if (e !== undefined && e.mark === mark && clock - e.clock < 1 && windowStart - e.from >= 0 && windowStart - e.from <= 1) return e.read;
  const entry: KeptRead = { clock, mark, from: windowStart, read: streams.getForHeadroom(store.q, nodeId, id, windowStart) };
  reads.set(key, entry);
  entry.read.catch(() => { if (reads.get(key) === entry) reads.delete(key); });
  return entry.read;
}

const STANDING = `SELECT ${NARROW_COLUMNS}, s.credential, ${STANDING_COLUMNS} ${JOINS} WHERE s.node_id = ? AND s.id = ?`;
const PAGE = `SELECT s.*, ${STANDING_COLUMNS}, ${BILLED_BEFORE} ${JOINS} WHERE s.node_id = ? AND s.id > ? ORDER BY s.id LIMIT ?`;
/** Not open: what `standing` calls revoked, exhausted, budget halted or released, or expired (bound: now in ms). */
const CLOSED = "(s.status != 'open' OR r.stream IS NOT NULL OR COALESCE(b.status, 'active') IN ('halted', 'released') OR s.exp * 1000 <= @now)";
const FILTER = { all: '', open: `AND NOT ${CLOSED}`, closed: `AND ${CLOSED}` } as const;
const listSql = (status: keyof typeof FILTER, sort: 'id' | 'activity') =>
  `SELECT s.*, ${STANDING_COLUMNS}, ${BILLED_BEFORE.replace('?', '@windowStart')} ${JOINS} WHERE s.node_id = @node ${FILTER[status]} ` +
  (sort === 'id'
    ? 'AND s.id > @afterId ORDER BY s.id LIMIT @limit'
    : 'AND (CAST(@afterAt AS BIGINT) IS NULL OR s.updated_at < @afterAt OR (s.updated_at = @afterAt AND s.id < @afterId)) ORDER BY s.updated_at DESC, s.id DESC LIMIT @limit');

export interface ListQuery {
  status: 'open' | 'closed' | 'all';
  sort: 'id' | 'activity';
  /** Keyset position: the last row of the previous page (its id, and its updated_at for sort=activity). */
  afterId: string;
  afterAt: number | null;
  limit: number;
  windowStart: number;
  now: number;
}

/** What a stream's standing (payable or why not) is computed from. */
export type StandingRow = Pick<StreamRow,
  'node_id' | 'id' | 'budget' | 'asset' | 'cap_micro' | 'billed_micro' | 'unit_price_micro' | 'rate_micro_per_s' | 'status' | 'status_reason' | 'exp' |
  'funding_source' | 'funding_status' | 'funding_reason' | 'funding_limit_micro' | 'rev_ahead' | 'rev_reason' | 'budget_status' | 'budget_reasons'>;
export type HeadroomRow = StandingRow & { billed_before: bigint | null };

const NUMBER_COLUMNS = ['iat', 'exp', 'billed_signed_at', 'frontier_checkpointed_at', 'frontier_final_at', 'created_at', 'updated_at', 'funding_checked_at', 'funding_released_at'] as const;

/** Timestamps back to numbers; money stays BigInt. */
function toStream(raw: Record<string, unknown> | undefined): StreamRow | undefined {
  if (!raw) return undefined;
  for (const c of NUMBER_COLUMNS) if (raw[c] !== null) raw[c] = Number(raw[c]);
  return raw as unknown as StreamRow;
}

export interface NewStream {
  node_id: string; id: string; budget: string; issuer: string; payer: string; credential_id: string; credential: string;
  iat: number; exp: number; cap_micro: bigint; asset: string; unit_price_micro: bigint; rate_micro_per_s: bigint | null;
  mode: string; voucher_key: string; claims: string; now: number;
  /** The source the credential names; the stream starts `pending` with one (not payable until the rail says so). */
  funding_source: string | null;
}

const larger = (a: string, b: string) => `CASE WHEN ${a} > ${b} THEN ${a} ELSE ${b} END`;
const toStreams = (rows: Record<string, unknown>[]) => rows.map((r) => toStream(r)!);

export const streams = {
  get: async (q: Sql, nodeId: string, id: string) => toStream(await q.get(`${LIVE} WHERE s.node_id = ? AND s.id = ?`, [nodeId, id], true)),
  /** The stream, locked until the write ends (PostgreSQL: its row only; SQLite: one writer). Inside a write. */
  getLocked: async (tx: Sql, nodeId: string, id: string) => toStream(await tx.get(`${LIVE} WHERE s.node_id = ? AND s.id = ?${forUpdate(tx, 's')}`, [nodeId, id], true)),
  /**
   * The standing of the stream a credential names, and when it is not registered yet, what registering it depends on:
   * a revocation ahead of it and the status of the budget it names (one read either way; `id` null: not registered).
   */
  getStandingFor: async (q: Sql, nodeId: string, id: string, budget: string) => {
    const r = await q.get(`SELECT ${NARROW_COLUMNS.replace(/s\.node_id, /, '')}, k.node_id, s.credential, ${STANDING_COLUMNS}
      FROM (SELECT CAST(? AS TEXT) AS node_id, CAST(? AS TEXT) AS id, CAST(? AS TEXT) AS budget) k
      LEFT JOIN streams s ON s.node_id = k.node_id AND s.id = k.id
      LEFT JOIN revocations r ON r.node_id = k.node_id AND r.stream = k.id
      LEFT JOIN budgets b ON b.node_id = k.node_id AND b.id = COALESCE(s.budget, k.budget)`, [nodeId, id, budget], true);
    if (r && r.exp !== null) r.exp = Number(r.exp);
    return r as (Omit<StandingRow, 'id'> & { id: string | null; credential: string | null });
  },
  getStanding: async (q: Sql, nodeId: string, id: string) => {
    const r = await q.get(STANDING, [nodeId, id], true);
    if (r) r.exp = Number(r.exp);
    return r as (StandingRow & { credential: string }) | undefined;
  },
  /** The narrow read of headroom, with the billed amount as of `windowStart` for the observed rate. */
  getForHeadroom: async (q: Sql, nodeId: string, id: string, windowStart: number) => {
    const r = await q.get(HEADROOM, [windowStart, nodeId, id], true);
    if (r) r.exp = Number(r.exp);
    return r as HeadroomRow | undefined;
  },
  insert: (q: Sql, s: NewStream) =>
    q.run(`INSERT INTO streams(node_id, id, budget, issuer, payer, credential_id, credential, iat, exp, cap_micro, asset, unit_price_micro,
      rate_micro_per_s, mode, voucher_key, claims, created_at, updated_at, funding_source, funding_status)
      VALUES (@node_id, @id, @budget, @issuer, @payer, @credential_id, @credential, @iat, @exp, @cap_micro, @asset, @unit_price_micro,
      @rate_micro_per_s, @mode, @voucher_key, @claims, @now, @now, @funding_source, @funding_status)`,
      { ...s, funding_status: s.funding_source === null ? 'none' : 'pending' } as unknown as Record<string, unknown>),
  /** Register a stream unless it is registered already (true: this call did). One statement (see writeOne). */
  insertIfAbsent: async (q: Sql, s: NewStream) =>
    (await q.get(`INSERT INTO streams(node_id, id, budget, issuer, payer, credential_id, credential, iat, exp, cap_micro, asset, unit_price_micro,
      rate_micro_per_s, mode, voucher_key, claims, created_at, updated_at, funding_source, funding_status)
      VALUES (@node_id, @id, @budget, @issuer, @payer, @credential_id, @credential, @iat, @exp, @cap_micro, @asset, @unit_price_micro,
      @rate_micro_per_s, @mode, @voucher_key, @claims, @now, @now, @funding_source, @funding_status) ON CONFLICT DO NOTHING RETURNING id`,
      { ...s, funding_status: s.funding_source === null ? 'none' : 'pending' } as unknown as Record<string, unknown>)) !== undefined,
  /**
   * Bill a voucher when the stream is still as `seen` read it (the billed truth, the last change, the credential (iat), the caps and funding
   * it was judged by, and no revocation or halted budget since): a conditional update, so two vouchers of one stream
   * never both win and the billed truth never goes down, with no lock held between the read and the write.
   * PostgreSQL: one statement (the update and the voucher's row, CTE), run on its own (writeOne); SQLite: two, in a
   * write. False: the stream changed meanwhile (read it again).
   */
  billIfUnchanged: async (q: Sql, seen: StreamRow, v: { amount: bigint; units: bigint; voucher: string; signedAt: number; now: number }) => {
    const p = {
      node: seen.node_id, id: seen.id, amount: v.amount, units: v.units, voucher: v.voucher, signedAt: v.signedAt, now: v.now,
      billed: seen.billed_micro, billedUnits: seen.billed_units, updated: seen.updated_at, cap: seen.cap_micro,
      funding: seen.funding_status, limit: seen.funding_limit_micro ?? -1n, iat: seen.iat,
    };
    // `iat`: a renewal (a credential with a strictly later iat) replaces the voucher key, expiry and price the voucher
    // was judged on, and its updated_at can be the very millisecond of the billing the row was remembered at.
    const update = `UPDATE streams SET billed_micro = @amount, billed_units = @units, billed_voucher = @voucher, billed_signed_at = @signedAt, updated_at = @now
      WHERE node_id = @node AND id = @id AND status = 'open' AND billed_micro = @billed AND billed_units = @billedUnits AND updated_at = @updated AND iat = @iat
        AND cap_micro = @cap AND funding_status = @funding AND COALESCE(funding_limit_micro, -1) = @limit
        AND NOT EXISTS (SELECT 1 FROM revocations r WHERE r.node_id = @node AND r.stream = @id)
        AND NOT EXISTS (SELECT 1 FROM budgets b WHERE b.node_id = @node AND b.id = streams.budget AND b.status != 'active')`;
    if (q.dialect === 'postgres')
      return (await q.get(`WITH billed AS (${update} RETURNING node_id, id)
        INSERT INTO vouchers(node_id, stream, amount_micro, units, signed_at, received_at, voucher)
        SELECT node_id, id, CAST(@amount AS BIGINT), CAST(@units AS BIGINT), CAST(@signedAt AS BIGINT), CAST(@now AS BIGINT), CAST(@voucher AS TEXT) FROM billed
        RETURNING 1 AS ok`, p)) !== undefined;
    if (!(await q.run(update, p))) return false;
    await vouchers.insert(q, { nodeId: seen.node_id, stream: seen.id, amount: v.amount, units: v.units, signedAt: v.signedAt, now: v.now, voucher: v.voucher });
    return true;
  },
  /** A newer credential renews the stream: its cap never drops below what is already billed. */
  renew: (q: Sql, s: NewStream) =>
    q.run(`UPDATE streams SET credential_id = @credential_id, credential = @credential, iat = @iat, exp = @exp,
      cap_micro = ${larger('@cap_micro', 'billed_micro')}, unit_price_micro = @unit_price_micro, rate_micro_per_s = @rate_micro_per_s,
      voucher_key = @voucher_key, claims = @claims, updated_at = @now
      WHERE node_id = @node_id AND id = @id AND iat < @iat`, s as unknown as Record<string, unknown>),
  bill: (q: Sql, nodeId: string, id: string, amount: bigint, units: bigint, voucher: string, signedAt: number, now: number, exhausted: boolean) =>
    q.run(`UPDATE streams SET billed_micro = ?, billed_units = ?, billed_voucher = ?, billed_signed_at = ?, updated_at = ?,
      status = CASE WHEN ? = 1 THEN 'exhausted' ELSE status END WHERE node_id = ? AND id = ?`, [amount, units, voucher, signedAt, now, exhausted ? 1 : 0, nodeId, id]),
  /**
   * Record the revocation (the first one's reason stays) and mark the stream revoked if it is registered (a stream
   * registered later is revoked by the revocation row: `standing`). Its budget, or undefined when not registered.
   * PostgreSQL: one statement.
   */
  revoke: async (q: Sql, nodeId: string, id: string, reason: string | null, now: number) => {
    const p = { node: nodeId, id, reason, now };
    const update = "UPDATE streams SET status = 'revoked', status_reason = @reason, updated_at = @now WHERE node_id = @node AND id = @id RETURNING budget";
    if (q.dialect === 'postgres')
      return (await q.get<{ budget: string }>(`WITH r AS (INSERT INTO revocations(node_id, stream, reason, revoked_at)
        VALUES (@node, @id, CAST(@reason AS TEXT), @now) ON CONFLICT DO NOTHING) ${update}`, p))?.budget;
    await revocations.insert(q, nodeId, id, reason, now);
    return (await q.get<{ budget: string }>(update, p))?.budget;
  },
  setStatus: (q: Sql, nodeId: string, id: string, status: 'revoked' | 'exhausted', reason: string | null, now: number) =>
    q.run('UPDATE streams SET status = ?, status_reason = ?, updated_at = ? WHERE node_id = ? AND id = ?', [status, reason, now, nodeId, id]),
  /** A page of the node's streams, each with what headroom needs (one read, not one per stream). */
  page: async (q: Sql, nodeId: string, afterId: string, limit: number, windowStart: number) =>
    toStreams(await q.all(PAGE, [windowStart, nodeId, afterId, limit], true)) as Array<StreamRow & HeadroomRow>,
  /** Record the rail's answer on the stream's funding source. */
  setFunding: (q: Sql, nodeId: string, id: string, f: { status: 'funded' | 'unfunded'; reason: string | null; limitMicro: bigint | null; now: number }) =>
    q.run('UPDATE streams SET funding_status = ?, funding_reason = ?, funding_limit_micro = ?, funding_checked_at = ? WHERE node_id = ? AND id = ? AND funding_source IS NOT NULL',
      [f.status, f.reason, f.limitMicro, f.now, nodeId, id]),
  /** The rail saw these sources change: their streams are read again first. Call inside a write. */
  fundingStale: async (tx: Sql, sources: string[]) => {
    for (const src of sources) await tx.run('UPDATE streams SET funding_checked_at = NULL WHERE funding_source = ?', [src]);
  },
  /** Open streams of a mode holding their funding source, read longest ago first (never read first), up to `limit`. */
  fundingDue: async (q: Sql, mode: string, checkedBefore: number, limit: number) =>
    toStreams(await q.all(`${LIVE} WHERE s.mode = ? AND s.funding_source IS NOT NULL AND s.status = 'open'
        AND (s.funding_checked_at IS NULL OR s.funding_checked_at < ?)
        AND EXISTS (SELECT 1 FROM funding_sources f WHERE f.source = s.funding_source AND f.node_id = s.node_id AND f.stream = s.id)
      ORDER BY CASE WHEN s.funding_checked_at IS NULL THEN 0 ELSE 1 END, s.funding_checked_at LIMIT ?`, [mode, checkedBefore, limit], true)),
  /**
   * Streams of a mode holding their funding source (never one a later stream only named) that were not released yet and are closed (exhausted, revoked,
   * budget halted or released, expired at `now`) with no settlement in flight: candidates for the rail's release().
   */
  toRelease: async (q: Sql, mode: string, now: number, limit: number) =>
    toStreams(await q.all(`${LIVE} WHERE s.mode = ? AND s.funding_source IS NOT NULL AND s.funding_released_at IS NULL
        AND (s.status != 'open' OR r.stream IS NOT NULL OR COALESCE(b.status, 'active') != 'active' OR s.exp * 1000 <= ?)
        AND NOT EXISTS (SELECT 1 FROM settlements t WHERE t.node_id = s.node_id AND t.stream = s.id AND t.status IN ('pending', 'submitted'))
        AND EXISTS (SELECT 1 FROM funding_sources f WHERE f.source = s.funding_source AND f.node_id = s.node_id AND f.stream = s.id)
      ORDER BY s.updated_at LIMIT ?`, [mode, now, limit], true)),
  released: (q: Sql, nodeId: string, id: string, now: number) =>
    q.run('UPDATE streams SET funding_released_at = ? WHERE node_id = ? AND id = ?', [now, nodeId, id]),
  /** A page filtered by open/closed and ordered by id or by last activity (newest first), keyset-paged. */
  list: async (q: Sql, nodeId: string, l: ListQuery) =>
    toStreams(await q.all(listSql(l.status, l.sort), { node: nodeId, afterId: l.afterId, afterAt: l.afterAt, limit: l.limit, windowStart: l.windowStart, now: l.now }, true)) as Array<StreamRow & HeadroomRow>,
  inBudget: async (q: Sql, nodeId: string, budget: string) =>
    toStreams(await q.all(`${LIVE} WHERE s.node_id = ? AND s.budget = ? ORDER BY s.id`, [nodeId, budget], true)),
};

export const fundingSources = {
  /** Bind `source` to the stream unless another stream holds it; returns the holder (this stream when it won). Call inside a write. */
  bind: async (tx: Sql, source: string, nodeId: string, stream: string, now: number) => {
    await tx.run('INSERT INTO funding_sources(source, node_id, stream, bound_at) VALUES (?, ?, ?, ?) ON CONFLICT DO NOTHING', [source, nodeId, stream, now]);
    return (await fundingSources.holder(tx, source))!;
  },
  holder: (q: Sql, source: string) => q.get<{ node_id: string; stream: string }>('SELECT node_id, stream FROM funding_sources WHERE source = ?', [source]),
};

export const vouchers = {
  insert: (q: Sql, v: { nodeId: string; stream: string; amount: bigint; units: bigint; signedAt: number; now: number; voucher: string }) =>
    q.run('INSERT INTO vouchers(node_id, stream, amount_micro, units, signed_at, received_at, voucher) VALUES (?, ?, ?, ?, ?, ?, ?)',
      [v.nodeId, v.stream, v.amount, v.units, v.signedAt, v.now, v.voucher]),
};

export interface BudgetRow { node_id: string; id: string; status: 'active' | 'halted' | 'released'; reasons: string; released_micro: bigint | null; updated_at: number }

export const budgets = {
  get: (q: Sql, nodeId: string, id: string) => q.get<BudgetRow>('SELECT * FROM budgets WHERE node_id = ? AND id = ?', [nodeId, id], true),
  upsert: (q: Sql, b: { nodeId: string; id: string; status: BudgetRow['status']; reasons: string[]; releasedMicro: bigint | null; now: number }) =>
    q.run(`INSERT INTO budgets(node_id, id, status, reasons, released_micro, updated_at) VALUES (?, ?, ?, ?, ?, ?)
      ON CONFLICT(node_id, id) DO UPDATE SET status = excluded.status, reasons = excluded.reasons, released_micro = excluded.released_micro, updated_at = excluded.updated_at`,
      [b.nodeId, b.id, b.status, JSON.stringify(b.reasons), b.releasedMicro, b.now]),
};

export const revocations = {
  get: (q: Sql, nodeId: string, stream: string) =>
    q.get<{ reason: string | null; revoked_at: number }>('SELECT reason, revoked_at FROM revocations WHERE node_id = ? AND stream = ?', [nodeId, stream]),
  insert: (q: Sql, nodeId: string, stream: string, reason: string | null, now: number) =>
    q.run('INSERT INTO revocations(node_id, stream, reason, revoked_at) VALUES (?, ?, ?, ?) ON CONFLICT DO NOTHING', [nodeId, stream, reason, now]),
};

export const periods = {
  upsert: (q: Sql, p: { nodeId: string; subscription: string; period: number; status: 'open' | 'renewal_declined' | 'closed'; start: number | null; end: number | null; now: number }) =>
    q.run(`INSERT INTO payer_subscription_periods(node_id, subscription, period, status, period_start, period_end, updated_at) VALUES (?, ?, ?, ?, ?, ?, ?)
      ON CONFLICT(node_id, subscription, period) DO UPDATE SET
        status = CASE WHEN payer_subscription_periods.status = 'closed' THEN 'closed'
                      WHEN excluded.status = 'open' THEN payer_subscription_periods.status ELSE excluded.status END,
        period_start = COALESCE(excluded.period_start, payer_subscription_periods.period_start),
        period_end = COALESCE(excluded.period_end, payer_subscription_periods.period_end),
        updated_at = excluded.updated_at`,
      [p.nodeId, p.subscription, p.period, p.status, p.start, p.end, p.now]),
  latest: async (q: Sql, nodeId: string, subscription: string) =>
    ({ p: (await q.value<number | null>('SELECT MAX(period) AS p FROM payer_subscription_periods WHERE node_id = ? AND subscription = ?', [nodeId, subscription])) ?? null }),
};

export const controlMessages = {
  get: (q: Sql, nodeId: string, jti: string) =>
    q.get<{ message_hash: string; kind: string; event_id: string }>('SELECT message_hash, kind, event_id FROM control_messages WHERE node_id = ? AND jti = ?', [nodeId, jti]),
  /** Claim the jti for this message (false: it was claimed already; PostgreSQL waits for a claim in flight to end). */
  claim: async (q: Sql, c: { nodeId: string; jti: string; hash: string; issuer: string; kind: string; eventId: string; now: number }) =>
    (await q.run('INSERT INTO control_messages(node_id, jti, message_hash, issuer, kind, event_id, received_at) VALUES (?, ?, ?, ?, ?, ?, ?) ON CONFLICT DO NOTHING',
      [c.nodeId, c.jti, c.hash, c.issuer, c.kind, c.eventId, c.now])) > 0,
};
