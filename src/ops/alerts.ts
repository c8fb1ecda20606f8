// Raising and clearing operational alerts: each transition is a conditional write of its alert_states row and, when
// that write changed something, the operational event (outbox, to every alert endpoint), a log line and a count in
// node_svc_alerts_emitted_total{kind}. Called inside the write of the state change that caused it.
import type { AlertKind } from '../domain/alerts.js';
import { degradationStage, type Stage } from '../domain/stages.js';
import { log } from '../log.js';
import { alertStates, recordAlert, type RecordedAlert } from '../store/alerts.js';
import type { Sql } from '../store/sql.js';
import { metrics } from './metrics.js';

/** Count and log once the write commits (PostgreSQL may run a write again after a deadlock: never twice). */
function announce(tx: Sql, kind: AlertKind, r: RecordedAlert, data: Record<string, unknown>): void {
  const f = () => {
    metrics.alerts.inc({ kind });
    // The data is the event's: never a token, secret, credential or voucher (each kind's data is built to that rule).
    if (kind !== 'alert.test') (kind.endsWith('recovered') ? log.info : log.warn)(`alert ${kind}`, { ...(r.deliveries ? { event: r.id } : {}), endpoints: r.deliveries, ...data });
  };
  if (tx.afterCommit) tx.afterCommit(f);
  else f();
}

/** Record an operational event that is a transition of its own (a delivery that died, a test): no state row. */
export async function emitAlert(tx: Sql, kind: AlertKind, externalRef: string, data: Record<string, unknown>, now: number, targets?: string[]): Promise<RecordedAlert> {
  const r = await recordAlert(tx, kind, externalRef, data, now, targets);
  announce(tx, kind, r, data);
  return r;
}

/** Raise `kind` on `key` and emit it, unless it is raised already (by this daemon, another one, or before a restart). */
export async function raiseAlert(tx: Sql, a: { key: string; kind: AlertKind; node: string | null; ref: string; data: Record<string, unknown>; now: number }): Promise<boolean> {
  if (!(await alertStates.raise(tx, a.key, a.kind, a.node, a.now))) return false;
  await emitAlert(tx, a.kind, a.ref, a.data, a.now);
  return true;
}

/**
 * Clear what is raised on `key` (one of `from`) and emit `kind` (a recovery) with `data` given what was raised and
 * since when; nothing when nothing was raised.
 */
export async function recoverAlert(tx: Sql, a: { key: string; from: readonly AlertKind[]; kind: AlertKind; ref: string; now: number; data: (was: { kind: AlertKind; since: number }) => Record<string, unknown> }): Promise<boolean> {
  const was = await alertStates.clear(tx, a.key, a.from);
  if (!was) return false;
  await emitAlert(tx, a.kind, a.ref, a.data({ kind: was.kind, since: Number(was.since) }), a.now);
  return true;
}

const RANK = { normal: 0, low: 1, critical: 2, halted: 3 } as const;

/** The stage a stream's cap left puts it in (the rate criterion aside: it moves with every second, not with a voucher). */
function capStage(cap: bigint, billed: bigint, t: { lowPercentLeft: number; criticalPercentLeft: number }): Stage {
  const left = cap - billed;
  return degradationStage({ payable: true, capMicro: cap, remainingMicro: left > 0n ? left : 0n, limitMicroPerSecond: null, observedMicroPerSecond: 0n, lowPercentLeft: t.lowPercentLeft, criticalPercentLeft: t.criticalPercentLeft, lowRatePercent: 100 });
}

export interface HeadroomMove {
  node: string;
  stream: string;
  budget: string;
  asset: string;
  unitPriceMicro: bigint;
  /** The effective cap (the smaller of the credential's and what the rail can pay). */
  capMicro: bigint;
  beforeMicro: bigint;
  afterMicro: bigint;
}

/** The stage an accepted voucher moved a stream into, when that is `low` or `critical` from a better one; else undefined. */
export function headroomEntered(m: HeadroomMove, t: { lowPercentLeft: number; criticalPercentLeft: number }): 'low' | 'critical' | undefined {
  const after = capStage(m.capMicro, m.afterMicro, t);
  if (after !== 'low' && after !== 'critical') return undefined;
  return RANK[after] > RANK[capStage(m.capMicro, m.beforeMicro, t)] ? after : undefined;
}

/**
 * headroom.low, once per stream, stage and cap: a renewal with a higher cap (or a top-up) that brings the stream back
 * makes entering the stage again a new transition.
 */
export function raiseHeadroom(tx: Sql, m: HeadroomMove, stage: 'low' | 'critical', t: { lowPercentLeft: number; criticalPercentLeft: number }, now: number): Promise<boolean> {
  const left = m.capMicro - m.afterMicro;
  return raiseAlert(tx, {
    key: `headroom:${JSON.stringify([m.node, m.stream, stage, m.capMicro.toString()])}`, kind: 'headroom.low', node: m.node, ref: `stream:${m.stream}`, now,
    data: {
      node: m.node, stream: m.stream, budget: m.budget, asset: m.asset, stage, previousStage: capStage(m.capMicro, m.beforeMicro, t),
      capMicro: m.capMicro.toString(), billedMicro: m.afterMicro.toString(), remainingCapMicro: left.toString(), remainingUnits: (left / m.unitPriceMicro).toString(),
    },
  });
}
