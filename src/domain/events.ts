/** Event kinds and the schema version that introduced each (seed §6). */
export const EVENT_KINDS = {
  'settlement.checkpointed': '1.0.0',
  'settlement.final': '1.0.0',
  'capture.created': '1.0.0',
  'refund.final': '1.0.0',
  'stream.revoked': '1.0.0',
  'stream.exhausted': '1.0.0',
  'budget.released': '1.0.0',
  'budget.halted': '1.0.0',
  'subscription.period_opened': '1.1.0',
  'subscription.renewal_declined': '1.1.0',
  'subscription.closed': '1.1.0',
} as const;
export type EventKind = keyof typeof EVENT_KINDS;
export const EVENT_KIND_LIST = Object.keys(EVENT_KINDS) as EventKind[];
export const isEventKind = (k: unknown): k is EventKind => typeof k === 'string' && Object.hasOwn(EVENT_KINDS, k);

export const SCHEMA_VERSIONS = ['1.1.0', '1.0.0'] as const;
export type SchemaVersion = (typeof SCHEMA_VERSIONS)[number];
export const CURRENT_SCHEMA: SchemaVersion = '1.1.0';

/** Whether a subscription pinned to `version` may receive `kind` (1.0.0 never gets the 1.1.0 kinds). */
export const kindInVersion = (kind: EventKind, version: SchemaVersion): boolean => version === '1.1.0' || EVENT_KINDS[kind] === '1.0.0';

/** The objective reason codes of budget.halted (seed §6). */
export const HALT_REASONS = ['revoked', 'anomaly', 'sla', 'budget_closed', 'exposure', 'rate', 'payer_concurrency', 'cap', 'ceiling_dead'] as const;
export type HaltReason = (typeof HALT_REASONS)[number];

export interface Envelope {
  id: string;
  type: EventKind;
  schemaVersion: SchemaVersion;
  occurredAt: string;
  externalRef: string;
  data: Record<string, unknown>;
}

/** The exact bytes delivered: key order fixed so the body is stable and signable. */
export function envelopeBody(e: Omit<Envelope, 'schemaVersion'>, schemaVersion: SchemaVersion): string {
  return JSON.stringify({ id: e.id, type: e.type, schemaVersion, occurredAt: e.occurredAt, externalRef: e.externalRef, data: e.data });
}

/**
 * The 1.0.0 envelope of a stored 1.1.0 body (what the store keeps): the same bytes as envelopeBody(e, '1.0.0'). Only
 * the envelope's own schemaVersion changes, its first occurrence: id and type come before it and, as JSON strings,
 * cannot hold the member unescaped (a member of that name inside data comes after it and is kept).
 */
export function bodyV100(body110: string): string {
  return body110.replace('"schemaVersion":"1.1.0"', '"schemaVersion":"1.0.0"');
}
