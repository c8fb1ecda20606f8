// What `watch` shows, fetched from the daemon: no ink here, so the plain snapshot path never loads it.
import { escapeControl, redactUrls } from '../domain/text.js';
import type { Client } from '../sdk/client.js';

type Json = Record<string, any>;

export type Stage = 'normal' | 'low' | 'critical' | 'halted';

export interface StreamRow {
  stream: string;
  budget: string;
  payer: string;
  mode: string;
  asset: string;
  status: string;
  degradationStage: Stage;
  capMicro: string;
  billedMicro: string;
  remainingCapMicro: string;
  finality: 'none' | 'checkpointed' | 'final';
  finalMicro: string;
  unsettledMicro: string;
  expiresAt: string;
  /** Present from daemons with contract 1.1.0 on. */
  checkpointedMicro?: string;
  lastActivityAt?: string;
}

export interface LastError {
  at: string;
  eventId: string;
  statusCode: number | null;
  error: string | null;
}

export interface WebhookRow {
  id: string;
  url: string;
  status: string;
  disabledReason: string | null;
  events: string[];
  schemaVersion: string;
  lastSuccessAt: string | null;
  failingSince: string | null;
  /** null when the deliveries could not be read this time (see `error`). */
  health: { pending: number; retrying: number; dead: number; delivered: number } | null;
  /** The newest attempt that did not deliver, among the latest ones. */
  lastError: LastError | null;
  error?: string;
}

export interface Snapshot {
  streams: StreamRow[];
  /** More streams exist than the one page shown. */
  moreStreams: boolean;
  webhooks: WebhookRow[];
  at: string;
}

export interface StreamDetail {
  stream: string;
  headroom: Json;
  finality: Json;
  at: string;
}

/** Streams shown per refresh: one page, so a refresh stays one request however many streams there are. */
export const STREAM_PAGE = 500;
/** Attempts read per subscription to find its latest failure. */
const ATTEMPTS_PAGE = 50;

const message = (err: unknown) => (err instanceof Error ? err.message : String(err));

/** Everything the daemon answers may carry what a caller stored: shown escaped, URLs redacted (ink prints raw). */
export function screenSafe<T>(v: T, depth = 0): T {
  if (typeof v === 'string') return escapeControl(redactUrls(v)) as T;
  if (depth > 6 || v === null || typeof v !== 'object') return v;
  if (Array.isArray(v)) return v.map((x) => screenSafe(x, depth + 1)) as T;
  return Object.fromEntries(Object.entries(v).map(([k, x]) => [k, screenSafe(x, depth + 1)])) as T;
}

export interface SnapshotOptions {
  /** Closed streams too (revoked, exhausted, budget halted or released, expired); default: open ones only. */
  closed?: boolean;
}

/**
 * Streams come from the daemon newest activity first and filtered there (open, or all), so the view never depends
 * on which 500 ids sort first as text; then those needing attention (critical, halted) move to the top.
 */
export async function fetchSnapshot(client: Client, o: SnapshotOptions = {}): Promise<Snapshot> {
  const [page, hooks] = await Promise.all([client.listStreams({ limit: STREAM_PAGE, sort: 'activity', status: o.closed ? 'all' : 'open' }), client.listWebhooks()]);
  const webhooks = await Promise.all(
    hooks.data.map(async (s: Json): Promise<WebhookRow> => {
      const row: WebhookRow = {
        id: s.id, url: s.url, status: s.status, disabledReason: s.disabledReason ?? null, events: s.events, schemaVersion: s.schemaVersion,
        lastSuccessAt: s.lastSuccessAt ?? null, failingSince: s.failingSince ?? null, health: null, lastError: null,
      };
      try {
        const d = await client.listDeliveries(s.id, { limit: ATTEMPTS_PAGE });
        row.health = d.health;
        const failed = (d.data as Json[]).find((a) => a.outcome !== 'delivered');
        if (failed) row.lastError = { at: failed.attemptedAt, eventId: failed.eventId, statusCode: failed.statusCode ?? null, error: failed.error ?? null };
      } catch (err) {
        // One subscription's deliveries failing (e.g. removed between the two calls) must not blank the rest.
        row.error = message(err);
      }
      return row;
    }),
  );
  return screenSafe({ streams: byAttention(page.data as unknown as StreamRow[]), moreStreams: page.nextCursor !== null, webhooks, at: new Date().toISOString() });
}

const ATTENTION: Record<Stage, number> = { critical: 0, halted: 0, low: 1, normal: 1 };
/** Critical and halted first, otherwise the order given (most recent activity first): a stable sort. */
export const byAttention = (rows: StreamRow[]): StreamRow[] =>
  rows.map((r, i) => [r, i] as const).sort((a, b) => (ATTENTION[a[0].degradationStage] ?? 1) - (ATTENTION[b[0].degradationStage] ?? 1) || a[1] - b[1]).map(([r]) => r);

export interface Totals { asset: string; billedMicro: bigint; unsettledMicro: bigint; checkpointedMicro: bigint; finalMicro: bigint; streams: number }
/** Sums per asset (never across assets), in BigInt. */
export function totals(rows: StreamRow[]): Totals[] {
  const by = new Map<string, Totals>();
  for (const r of rows) {
    let t = by.get(r.asset);
    if (!t) by.set(r.asset, (t = { asset: r.asset, billedMicro: 0n, unsettledMicro: 0n, checkpointedMicro: 0n, finalMicro: 0n, streams: 0 }));
    t.billedMicro += BigInt(r.billedMicro);
    t.unsettledMicro += BigInt(r.unsettledMicro);
    t.checkpointedMicro += BigInt(r.checkpointedMicro ?? '0');
    t.finalMicro += BigInt(r.finalMicro);
    t.streams++;
  }
  return [...by.values()].sort((a, b) => (a.asset < b.asset ? -1 : 1));
}

/** A subscription whose latest attempts fail is failing, whatever its status says. */
export const isFailing = (w: WebhookRow) => w.status === 'active' && w.failingSince !== null;

export async function fetchDetail(client: Client, stream: string): Promise<StreamDetail> {
  const [headroom, finality] = await Promise.all([client.headroom(stream), client.finality(stream)]);
  return screenSafe({ stream, headroom, finality, at: new Date().toISOString() });
}

/** billed ÷ cap in [0, 1], computed in BigInt (three decimals) so money never passes through a float. */
export function usedFraction(billedMicro: string, capMicro: string): number {
  const billed = BigInt(billedMicro);
  const cap = BigInt(capMicro);
  if (cap <= 0n) return 0;
  const f = Number((billed * 1000n) / cap) / 1000;
  return Math.min(1, Math.max(0, f));
}

/** A text bar `width` cells wide: filled cells for the billed share of the cap. */
export function bar(billedMicro: string, capMicro: string, width = 20): { filled: string; empty: string; percent: string } {
  const f = usedFraction(billedMicro, capMicro);
  let n = Math.round(f * width);
  if (f > 0 && n === 0) n = 1; // something billed always shows
  if (f < 1 && n === width) n = width - 1; // full only at the cap
  return { filled: '█'.repeat(n), empty: '░'.repeat(width - n), percent: `${(f * 100).toFixed(1)}%` };
}

/** "HTTP 500", "HTTP 500: body…", or the transport error. */
export function describeFailure(e: LastError): string {
  const status = e.statusCode === null ? '' : `HTTP ${e.statusCode}`;
  if (e.error && status && !e.error.includes(String(e.statusCode))) return `${status}: ${e.error}`;
  return e.error ?? (status || 'failed');
}
