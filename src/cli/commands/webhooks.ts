import { parseDuration } from '../../domain/duration.js';
import { usageError } from '../../domain/errors.js';
import { table, type CommandResult, type GlobalOptions } from '../output.js';
import { progressBar } from '../progress.js';
import { ApiError } from '../../sdk/client.js';
import { clientFor } from './remote.js';

type Json = Record<string, any>;

export async function add(g: GlobalOptions, url: string, o: { events?: string; schemaVersion?: string; description?: string }): Promise<CommandResult> {
  const body: Json = { url };
  if (o.events) body.events = o.events.split(',').map((s) => s.trim()).filter(Boolean);
  if (o.schemaVersion) body.schemaVersion = o.schemaVersion;
  if (o.description) body.description = o.description;
  const s = await clientFor(g).createWebhook(body as never);
  return {
    data: s,
    human: `subscribed ${s.id} -> ${s.url} (${s.events.join(', ')}; schema ${s.schemaVersion})\n\nsigning secret (shown only now):\n${s.secret}\n\nVerify each delivery: x-service-signature = "sha256=" + hex HMAC-SHA256(secret, raw body).`,
  };
}

export async function list(g: GlobalOptions): Promise<CommandResult> {
  const r = await clientFor(g).listWebhooks();
  return {
    data: r,
    rows: r.data,
    human: r.data.length
      ? table(['ID', 'STATUS', 'SCHEMA', 'EVENTS', 'URL', 'LAST SUCCESS'], r.data.map((s) => [s.id, s.status + (s.disabledReason ? ` (${s.disabledReason})` : ''), s.schemaVersion, s.events.join(','), s.url, s.lastSuccessAt ?? '-']))
      : 'no webhook subscriptions: node-svc webhooks add <url>',
  };
}

export async function rm(g: GlobalOptions, id: string): Promise<CommandResult> {
  await clientFor(g).deleteWebhook(id);
  return { data: { id, deleted: true }, human: `revoked ${id}; its pending deliveries are cancelled` };
}

export async function deliveries(g: GlobalOptions, id: string, o: { limit?: string; cursor?: string }): Promise<CommandResult> {
  const r = await clientFor(g).listDeliveries(id, { ...(o.limit ? { limit: Number(o.limit) } : {}), ...(o.cursor ? { cursor: o.cursor } : {}) });
  const h = r.health;
  const head = `${id}: ${h.delivered} delivered, ${h.pending} pending, ${h.retrying} retrying, ${h.dead} dead`;
  const rows = (r.data as Json[]).map((a) => [a.attemptedAt, a.eventId, String(a.attempt), a.statusCode === null ? '-' : String(a.statusCode), `${a.durationMs}ms`, a.outcome, a.error ?? '', a.nextAttemptAt ?? '']);
  return { data: r, rows: r.data as Json[], human: rows.length ? `${head}\n${table(['TIME', 'EVENT', 'TRY', 'STATUS', 'TOOK', 'OUTCOME', 'ERROR', 'NEXT'], rows)}` : `${head}\nno attempts yet` };
}

export async function rotate(g: GlobalOptions, id: string, o: { overlap?: string }): Promise<CommandResult> {
  let overlap: number | undefined;
  if (o.overlap !== undefined) {
    const ms = parseDuration(o.overlap);
    if (ms === undefined) throw usageError(`--overlap "${o.overlap}" is not a duration`, 'use e.g. 0, 10m, 24h');
    overlap = Math.floor(ms / 1000);
  }
  const s = await clientFor(g).rotateWebhookSecret(id, overlap);
  return {
    data: s,
    human: `new signing secret for ${id} (shown only now):\n${s.secret}\n${s.previousSecretExpiresAt ? `\nThe previous secret also signs deliveries (x-service-signature-previous, second webhook-signature) until ${s.previousSecretExpiresAt}.` : ''}`,
  };
}

export async function replay(g: GlobalOptions, eventId: string | undefined, o: { subscription?: string; since?: string; type?: string }): Promise<CommandResult> {
  if (o.since !== undefined) {
    if (eventId) throw usageError('give an event id or --since, not both');
    return replaySince(g, o.since, o);
  }
  if (!eventId) throw usageError('which event?', 'pass an event id (evt_…), or --since <time> to replay everything since then');
  const r = await clientFor(g).redeliverEvent(eventId, o.subscription);
  return { data: r, human: r.queued.length ? `queued ${r.event} again for ${r.queued.map((q) => q.subscription).join(', ')}` : `no active subscription takes ${r.event}` };
}

/** Redeliver one event; while the node's redeliveries are at their limit (429 limit_exceeded), wait as told (bounded). */
async function redeliverPaced(client: ReturnType<typeof clientFor>, id: string, subscription: string | undefined) {
  const giveUpAt = Date.now() + 10 * 60_000;
  for (;;) {
    try {
      return await client.redeliverEvent(id, subscription);
    } catch (err) {
      const p = err instanceof ApiError ? (err.problem as { code?: string; limit?: string; retryAfterSeconds?: number }) : undefined;
      if (p?.code !== 'limit_exceeded' || p.limit !== 'redeliveries' || Date.now() > giveUpAt) throw err;
      await new Promise((r) => setTimeout(r, Math.min(60, Math.max(1, p.retryAfterSeconds ?? 10)) * 1000));
    }
  }
}

/** `replay --since <time|duration>`: every event of the node since then, again, with a progress bar. */
async function replaySince(g: GlobalOptions, since: string, o: { subscription?: string; type?: string }): Promise<CommandResult> {
  const ago = parseDuration(since);
  const from = ago !== undefined && !/^\d+$/.test(since) ? Date.now() - ago : Date.parse(since);
  if (Number.isNaN(from)) throw usageError(`--since "${since}" is not a time`, 'use an RFC 3339 time (2026-11-21T10:00:00Z) or a duration back from now (30m, 2h, 1d)');
  const client = clientFor(g);
  const ids: string[] = [];
  let cursor: string | undefined;
  let pruned: string | null = null;
  // The daemon starts at the first event since then (an index seek): nothing before it is read.
  for (let page = 0; page < 100_000; page++) {
    const r = await client.listEvents({ ...(cursor ? { cursor } : { since: new Date(from).toISOString() }), limit: 500, ...(o.type ? { type: o.type } : {}) });
    if (!cursor && r.sincePruned) pruned = r.retentionHorizon;
    for (const e of r.data) if (Date.parse(e.occurredAt) >= from) ids.push(e.id);
    cursor = r.nextCursor ?? undefined;
    if (!r.hasMore || !cursor) break;
  }
  if (pruned) process.stderr.write(`warning: --since is before the retention horizon (${pruned}): events older than that may have been pruned and cannot be replayed\n`);
  const bar = progressBar('replay');
  let queued = 0;
  for (const [i, id] of ids.entries()) {
    queued += (await redeliverPaced(client, id, o.subscription)).queued.length;
    bar.update(i + 1, ids.length);
  }
  bar.end();
  return { data: { since: new Date(from).toISOString(), events: ids.length, deliveriesQueued: queued, prunedBefore: pruned }, human: `replayed ${ids.length} event(s) since ${new Date(from).toISOString()}: ${queued} deliveries queued` };
}
