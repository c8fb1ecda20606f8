// The reference consumer's state (DESIGN §9): a join-semilattice, so duplicates and order do not matter.
// Amounts: the maximum seen (cumulative, monotone). Flags: sticky (OR). Budget status: active < halted < released.
import { HALT_REASONS, isEventKind, kindInVersion, SCHEMA_VERSIONS, type EventKind, type SchemaVersion } from './events.js';
import { EXTERNAL_ID_RE } from './ids.js';
import { parseMicro } from './amount.js';

export interface StreamState {
  checkpointedMicro: string;
  finalMicro: string;
  /** Credit: only settlement.final counts. */
  creditedMicro: string;
  capturedMicro: string;
  refundedMicro: string;
  revoked: boolean;
  exhausted: boolean;
}
export type BudgetStatus = 'active' | 'halted' | 'released';
export interface BudgetState {
  status: BudgetStatus;
  reasons: string[];
  releasedMicro: string | null;
}
export interface PeriodState {
  opened: boolean;
  renewalDeclined: boolean;
  periodStart: string | null;
  periodEnd: string | null;
}
export interface SubscriptionState {
  periods: Record<string, PeriodState>;
  closed: boolean;
}
export interface ConsumerState {
  streams: Record<string, StreamState>;
  budgets: Record<string, BudgetState>;
  subscriptions: Record<string, SubscriptionState>;
}

export const emptyState = (): ConsumerState => ({ streams: {}, budgets: {}, subscriptions: {} });

export interface CheckedEvent {
  id: string;
  type: EventKind;
  schemaVersion: SchemaVersion;
  data: Record<string, unknown>;
}

const isObj = (v: unknown): v is Record<string, unknown> => typeof v === 'object' && v !== null && !Array.isArray(v);
const isId = (v: unknown) => typeof v === 'string' && EXTERNAL_ID_RE.test(v);
const isMicro = (v: unknown) => parseMicro(v) !== undefined;
const isPeriod = (v: unknown) => typeof v === 'number' && Number.isSafeInteger(v) && v >= 0;
const isTime = (v: unknown) => typeof v === 'string' && !Number.isNaN(Date.parse(v));

/** Check an envelope: schema version, known type (and allowed in that version), data shape. A reason when bad. */
export function checkEnvelope(v: unknown): CheckedEvent | string {
  if (!isObj(v)) return 'body is not a JSON object';
  if (typeof v.id !== 'string' || !v.id || v.id.length > 128) return 'id is missing';
  if (!(SCHEMA_VERSIONS as readonly unknown[]).includes(v.schemaVersion)) return `schemaVersion ${JSON.stringify(v.schemaVersion)} is not 1.0.0 or 1.1.0`;
  if (!isEventKind(v.type)) return `unknown event type ${JSON.stringify(v.type)}`;
  const version = v.schemaVersion as SchemaVersion;
  if (!kindInVersion(v.type, version)) return `${v.type} does not exist in schema ${version}`;
  if (typeof v.occurredAt !== 'string' || typeof v.externalRef !== 'string') return 'occurredAt and externalRef must be strings';
  const d = v.data;
  if (!isObj(d)) return 'data is not an object';
  const bad = dataProblem(v.type, d);
  return bad ? `${v.type} data: ${bad}` : { id: v.id, type: v.type, schemaVersion: version, data: d };
}

function dataProblem(type: EventKind, d: Record<string, unknown>): string | undefined {
  switch (type) {
    case 'settlement.checkpointed':
    case 'settlement.final':
    case 'capture.created':
    case 'refund.final':
      if (!isId(d.stream)) return 'stream missing';
      if (!isMicro(d.amountMicro)) return 'amountMicro must be a decimal string';
      if (typeof d.asset !== 'string') return 'asset missing';
      return undefined;
    case 'stream.revoked':
      return isId(d.stream) ? undefined : 'stream missing';
    case 'stream.exhausted':
      return isId(d.stream) ? undefined : 'stream missing';
    case 'budget.halted':
      if (!isId(d.budget)) return 'budget missing';
      return (HALT_REASONS as readonly unknown[]).includes(d.reason) ? undefined : 'reason is not one of the nine codes';
    case 'budget.released':
      if (!isId(d.budget)) return 'budget missing';
      return d.amountMicro === undefined || isMicro(d.amountMicro) ? undefined : 'amountMicro must be a decimal string';
    case 'subscription.period_opened':
      if (!isId(d.subscription) || !isPeriod(d.period)) return 'subscription and period required';
      if ((d.periodStart !== undefined && !isTime(d.periodStart)) || (d.periodEnd !== undefined && !isTime(d.periodEnd))) return 'periodStart/periodEnd must be times';
      return undefined;
    case 'subscription.renewal_declined':
    case 'subscription.closed':
      return isId(d.subscription) && isPeriod(d.period) ? undefined : 'subscription and period required';
  }
}

const max = (a: string | null, b: string): string => (a === null || BigInt(b) > BigInt(a) ? b : a);
const RANK: Record<BudgetStatus, number> = { active: 0, halted: 1, released: 2 };

function stream(s: ConsumerState, id: string): StreamState {
  return (s.streams[id] ??= { checkpointedMicro: '0', finalMicro: '0', creditedMicro: '0', capturedMicro: '0', refundedMicro: '0', revoked: false, exhausted: false });
}
function budget(s: ConsumerState, id: string): BudgetState {
  return (s.budgets[id] ??= { status: 'active', reasons: [], releasedMicro: null });
}
function period(s: ConsumerState, sub: string, p: number): PeriodState {
  const x = (s.subscriptions[sub] ??= { periods: {}, closed: false });
  return (x.periods[String(p)] ??= { opened: false, renewalDeclined: false, periodStart: null, periodEnd: null });
}
const minStr = (a: string | null, b: unknown) => (typeof b !== 'string' ? a : a === null || b < a ? b : a);
const maxStr = (a: string | null, b: unknown) => (typeof b !== 'string' ? a : a === null || b > a ? b : a);

/** Join one event into the state (mutates and returns it). Commutative, associative, idempotent. */
export function merge(s: ConsumerState, e: CheckedEvent): ConsumerState {
  const d = e.data as Record<string, any>;
  switch (e.type) {
    case 'settlement.checkpointed': {
      const x = stream(s, d.stream);
      x.checkpointedMicro = max(x.checkpointedMicro, d.amountMicro);
      break;
    }
    case 'settlement.final': {
      const x = stream(s, d.stream);
      x.finalMicro = max(x.finalMicro, d.amountMicro);
      x.creditedMicro = x.finalMicro;
      break;
    }
    case 'capture.created': {
      const x = stream(s, d.stream);
      x.capturedMicro = max(x.capturedMicro, d.amountMicro);
      break;
    }
    case 'refund.final': {
      const x = stream(s, d.stream);
      x.refundedMicro = max(x.refundedMicro, d.amountMicro);
      break;
    }
    case 'stream.revoked':
      stream(s, d.stream).revoked = true;
      break;
    case 'stream.exhausted':
      stream(s, d.stream).exhausted = true;
      break;
    case 'budget.halted': {
      const b = budget(s, d.budget);
      if (RANK[b.status] < RANK.halted) b.status = 'halted';
      if (!b.reasons.includes(d.reason)) b.reasons = [...b.reasons, d.reason].sort();
      break;
    }
    case 'budget.released': {
      const b = budget(s, d.budget);
      b.status = 'released';
      if (d.amountMicro !== undefined) b.releasedMicro = max(b.releasedMicro, d.amountMicro);
      break;
    }
    case 'subscription.period_opened': {
      const p = period(s, d.subscription, d.period);
      p.opened = true;
      p.periodStart = minStr(p.periodStart, d.periodStart);
      p.periodEnd = maxStr(p.periodEnd, d.periodEnd);
      break;
    }
    case 'subscription.renewal_declined':
      period(s, d.subscription, d.period).renewalDeclined = true;
      break;
    case 'subscription.closed':
      (s.subscriptions[d.subscription] ??= { periods: {}, closed: false }).closed = true;
      break;
  }
  return s;
}
