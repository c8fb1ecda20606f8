// The operator's operational events (alerts): a daemon-wide channel apart from the node-facing events of the
// contract, whose kinds and schemaVersion they never touch. Kinds, the envelope, the reserved owner of alert endpoints.

/** Operational event kinds, each raised once per transition (README "Alert endpoints" documents each `data`). */
export const ALERT_KINDS = [
  'endpoint.failing',
  'endpoint.disabled',
  'endpoint.recovered',
  'delivery.exhausted',
  'settlement.stuck',
  'settlement.failed',
  'settlement.recovered',
  'authorization.expiring',
  'wallet.low',
  'headroom.low',
  'store.unavailable',
  'store.recovered',
  'alert.test',
] as const;
export type AlertKind = (typeof ALERT_KINDS)[number];
export const isAlertKind = (k: unknown): k is AlertKind => typeof k === 'string' && (ALERT_KINDS as readonly string[]).includes(k);

/**
 * The envelope's schemaVersion on this channel: not a node schema (1.0.0 / 1.1.0 name the node-facing kinds), so a
 * receiver of either channel can never mistake one for the other.
 */
export const ALERT_SCHEMA = 'operator/1.0.0';

/**
 * Alert endpoints and their events are kept in the outbox tables (webhook_subscriptions, events, deliveries) under
 * this owner: not a valid node id (NODE_ID_RE), so no node can be added under it and no bearer token issued for it,
 * and every node-scoped read (WHERE node_id = the token's node) passes it by.
 */
export const OPERATOR = '@operator';

/** Consecutive failed attempts to one subscription before `endpoint.failing` (--alert-failing-after). */
export const DEFAULT_FAILING_AFTER = 3;

export interface AlertEnvelope {
  id: string;
  type: AlertKind;
  occurredAt: string;
  externalRef: string;
  data: Record<string, unknown>;
}

/** The exact bytes delivered: the node envelope's keys and order, the operator channel's schemaVersion. */
export const alertBody = (e: AlertEnvelope): string =>
  JSON.stringify({ id: e.id, type: e.type, schemaVersion: ALERT_SCHEMA, occurredAt: e.occurredAt, externalRef: e.externalRef, data: e.data });
