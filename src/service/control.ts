// POST /v1/control: signed facts from a trusted issuer (DESIGN §7). Verified, idempotent on jti, applied
// together with the event of the same name in one transaction; a refusal changes nothing.
import { createHash } from 'node:crypto';
import { ALLOWED_ALGORITHMS } from '../domain/credential.js';
import { parseMicro } from '../domain/amount.js';
import { refused } from '../domain/errors.js';
import { HALT_REASONS, type EventKind } from '../domain/events.js';
import { EXTERNAL_ID_RE, newId } from '../domain/ids.js';
import type { ControlRefusal } from '../domain/refusals.js';
import { iso } from '../domain/time.js';
import { checkHeader, decodeHeader, decodePart, splitCompact, verifySignature } from '../sdk/jws.js';
import { recordEvent } from '../store/events.js';
import { budgets, controlMessages, periods, streams } from '../store/streams.js';
import { lockKey, type Sql } from '../store/sql.js';
import type { Deps } from './deps.js';

export const CONTROL_TYP = 'control+jwt';
export const CONTROL_KINDS = [
  'stream.revoked',
  'budget.halted',
  'budget.released',
  'subscription.period_opened',
  'subscription.renewal_declined',
  'subscription.closed',
] as const;
export type ControlKind = (typeof CONTROL_KINDS)[number];

const no = (refusal: ControlRefusal, detail: string) => refused('control_refused', refusal, detail);
const ALGS = new Set<string>(ALLOWED_ALGORITHMS);
const isDate = (v: unknown): v is number => typeof v === 'number' && Number.isSafeInteger(v) && v >= 0;

function need(c: Record<string, unknown>, name: string): unknown {
  if (c[name] === undefined || c[name] === null) throw no('missing_claim', `claim "${name}" is required for ${String(c.kind)}`);
  return c[name];
}
function id(c: Record<string, unknown>, name: string): string {
  const v = need(c, name);
  if (typeof v !== 'string' || !EXTERNAL_ID_RE.test(v)) throw no('malformed', `claim "${name}" must be an id of letters, digits and ._:@+=-`);
  return v;
}
function period(c: Record<string, unknown>, required: boolean): number | null {
  if (!required && c.period === undefined) return null;
  const v = need(c, 'period');
  if (typeof v !== 'number' || !Number.isSafeInteger(v) || v < 1) throw no('malformed', 'claim "period" must be an integer >= 1');
  return v;
}

export async function applyControl(d: Deps, nodeId: string, message: unknown) {
  if (typeof message !== 'string' || message.length > 16 * 1024) throw no('malformed', 'message must be a compact JWS string of at most 16 KiB');
  const parts = splitCompact(message);
  const header = parts && decodeHeader(parts[0]);
  if (!parts || !header) throw no('malformed', 'message is not a compact JWS (or its header repeats a member name)');
  const keyring = await d.keyring.current();
  const entry = checkHeader(header, CONTROL_TYP, ALGS, [keyring.keys]);
  if ('refusal' in entry) throw no(entry.refusal as ControlRefusal, entry.detail);
  if (!verifySignature(entry, parts)) throw no('bad_signature', `signature does not verify with key "${entry.kid}"`);
  const c = decodePart(parts[1]);
  if (!c) throw no('malformed', 'payload is not a JSON object with unique member names');
  for (const n of ['iss', 'aud', 'jti', 'iat', 'kind']) need(c, n);
  if (c.iss !== entry.issuer) throw no('untrusted_issuer', `iss ${JSON.stringify(c.iss)} is not the issuer key "${entry.kid}" is trusted for`);
  if (c.aud !== nodeId) throw no('wrong_audience', `message is aimed at ${JSON.stringify(c.aud)}, not this node`);
  if (typeof c.jti !== 'string' || !c.jti || c.jti.length > 256) throw no('malformed', 'claim "jti" must be a string of 1 to 256 characters');
  if (!isDate(c.iat)) throw no('malformed', 'claim "iat" must be a NumericDate');
  const t = d.now() / 1000;
  const tol = d.config.clockTolerance;
  if (c.iat > t + tol) throw no('not_yet_valid', 'message is issued in the future');
  if (c.exp !== undefined && (!isDate(c.exp) || t - tol >= c.exp)) throw no('expired', 'message has expired');
  if (!(CONTROL_KINDS as readonly unknown[]).includes(c.kind)) throw no('unknown_kind', `kind ${JSON.stringify(c.kind)} is not one of ${CONTROL_KINDS.join(', ')}`);
  const kind = c.kind as ControlKind;
  const hash = createHash('sha256').update(message).digest('hex');

  // What the message does, its claims checked before anything is written: `effect` changes the state (issuing its first
  // statement at once) and says what event to record.
  const effect = plan(nodeId, kind, c);
  // A message applies once: its jti is claimed by the insert of its control_messages row, issued together with the
  // effect's first statements (PostgreSQL: BEGIN, the claim and those travel in one packet; a concurrent claim of the
  // same jti waits for this one to end, then finds it). A claim that finds the jti taken rolls everything back.
  // A budget's reasons merge and a subscription's latest period are read and then written: those take a keyed lock
  // on the thing first (one per budget or subscription, never database-wide). A revocation needs none.
  const eventId = newId('evt');
  try {
    return await d.store.write(async (db: Sql) => { // group commit: shares one durable commit with concurrent writes
      const now = d.now();
      const [claimed, e] = await Promise.all([
        controlMessages.claim(db, { nodeId, jti: c.jti as string, hash, issuer: entry.issuer, kind, eventId, now }),
        effect(db, now),
      ]);
      if (!claimed) {
        const seen = (await controlMessages.get(db, nodeId, c.jti as string))!;
        if (seen.message_hash !== hash) throw no('replayed', `jti ${String(c.jti)} was already used by a different message`);
        throw new Duplicate({ applied: false, duplicate: true, kind, eventId: seen.event_id });
      }
      // The write's last statement: on PostgreSQL its COMMIT goes with it (one round trip fewer per fact).
      await recordEvent(db, nodeId, e.type ?? kind, e.ref, e.data, now, eventId, { last: true });
      return { applied: true, duplicate: false, kind, eventId };
    });
  } catch (err) {
    if (err instanceof Duplicate) return err.answer; // nothing of this one was kept
    throw err;
  }
}

/** A message applied before: the write is rolled back (undoing what its effect did) and this is the answer. */
class Duplicate {
  constructor(readonly answer: { applied: false; duplicate: true; kind: ControlKind; eventId: string }) {}
}

type Effect = (db: Sql, now: number) => Promise<{ type?: EventKind; ref: string; data: Record<string, unknown> }>;

/** The message's claims checked (a refusal thrown now), and what applying it does. */
function plan(nodeId: string, kind: ControlKind, c: Record<string, unknown>): Effect {
  switch (kind) {
    case 'stream.revoked': {
      const stream = id(c, 'stream');
      const reason = c.reason === undefined ? null : String(c.reason).slice(0, 256);
      return async (db, now) => {
        const budget = await streams.revoke(db, nodeId, stream, reason, now); // undefined: not registered (yet)
        return { ref: `stream:${stream}`, data: { stream, ...(budget !== undefined ? { budget } : {}), ...(reason !== null ? { reason } : {}) } };
      };
    }
    case 'budget.halted': {
      const budget = id(c, 'budget');
      const reason = need(c, 'reason');
      if (!(HALT_REASONS as readonly unknown[]).includes(reason)) throw no('malformed', `reason must be one of ${HALT_REASONS.join(', ')}`);
      return async (db, now) => {
        const [, b] = await Promise.all([lockKey(db, `budget:${nodeId}:${budget}`), budgets.get(db, nodeId, budget)]);
        const reasons = new Set<string>(b ? (JSON.parse(b.reasons) as string[]) : []);
        reasons.add(reason as string);
        // Precedence active < halted < released: a released budget stays released.
        await budgets.upsert(db, { nodeId, id: budget, status: b?.status === 'released' ? 'released' : 'halted', reasons: [...reasons].sort(), releasedMicro: b?.released_micro ?? null, now });
        return { ref: `budget:${budget}`, data: { budget, reason } };
      };
    }
    case 'budget.released': {
      const budget = id(c, 'budget');
      const amount = c.amount === undefined ? undefined : parseMicro(c.amount);
      if (c.amount !== undefined && amount === undefined) throw no('malformed', 'claim "amount" must be a decimal string of micro units');
      return async (db, now) => {
        const [, b] = await Promise.all([lockKey(db, `budget:${nodeId}:${budget}`), budgets.get(db, nodeId, budget)]);
        const released = amount === undefined ? (b?.released_micro ?? null) : b?.released_micro != null && b.released_micro > amount ? b.released_micro : amount;
        const [, inBudget] = await Promise.all([
          budgets.upsert(db, { nodeId, id: budget, status: 'released', reasons: b ? (JSON.parse(b.reasons) as string[]) : [], releasedMicro: released, now }),
          streams.inBudget(db, nodeId, budget),
        ]);
        const asset = inBudget[0]?.asset;
        return { ref: `budget:${budget}`, data: { budget, ...(asset ? { asset } : {}), ...(amount !== undefined ? { amountMicro: amount.toString() } : {}) } };
      };
    }
    case 'subscription.period_opened': {
      const sub = id(c, 'subscription');
      const p = period(c, true)!;
      const start = need(c, 'periodStart');
      const end = need(c, 'periodEnd');
      if (!isDate(start) || !isDate(end) || end <= start) throw no('malformed', 'periodStart and periodEnd must be NumericDates with periodEnd after periodStart');
      return async (db, now) => {
        await periods.upsert(db, { nodeId, subscription: sub, period: p, status: 'open', start, end, now }); // one upsert: no lock
        return { ref: `subscription:${sub}`, data: { subscription: sub, period: p, periodStart: iso(start * 1000), periodEnd: iso(end * 1000) } };
      };
    }
    case 'subscription.renewal_declined': {
      const sub = id(c, 'subscription');
      const p = period(c, true)!;
      return async (db, now) => {
        await periods.upsert(db, { nodeId, subscription: sub, period: p, status: 'renewal_declined', start: null, end: null, now });
        return { ref: `subscription:${sub}`, data: { subscription: sub, period: p } };
      };
    }
    case 'subscription.closed': {
      const sub = id(c, 'subscription');
      const given = period(c, false);
      return async (db, now) => {
        let p = given;
        if (p === null) {
          // The latest period, read under the subscription's lock: a period opened meanwhile is not passed over.
          const [, latest] = await Promise.all([lockKey(db, `subscription:${nodeId}:${sub}`), periods.latest(db, nodeId, sub)]);
          p = latest.p ?? 0;
        }
        await periods.upsert(db, { nodeId, subscription: sub, period: p, status: 'closed', start: null, end: null, now });
        return { ref: `subscription:${sub}`, data: { subscription: sub, period: p } };
      };
    }
  }
}
