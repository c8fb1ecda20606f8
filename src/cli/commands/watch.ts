// `node-svc watch`: the live ink view on a terminal; one plain snapshot when piped or with --json.
// ink is imported here and only here, and only when the live view actually runs.
import { formatMicro } from '../../domain/amount.js';
import { usageError } from '../../domain/errors.js';
import { createClient } from '../../sdk/client.js';
import { bar, describeFailure, fetchSnapshot, isFailing, totals, type Snapshot } from '../../tui/snapshot.js';
import { jsonMode, table, type CommandResult, type GlobalOptions } from '../output.js';
import { clientFor, daemonUrl } from './remote.js';

export interface WatchOptions {
  /** Seconds between refreshes (decimal allowed; default 1). */
  interval?: string;
}

const MIN_INTERVAL_MS = 100;

export function parseInterval(v: string | undefined): number {
  if (v === undefined) return 1000;
  const s = Number(v);
  if (!/^\d+(\.\d+)?$/.test(v.trim()) || !Number.isFinite(s) || s * 1000 < MIN_INTERVAL_MS) {
    throw usageError(`--interval "${v}" is not a number of seconds ≥ ${MIN_INTERVAL_MS / 1000}`, 'e.g. --interval 1 or --interval 0.5');
  }
  return Math.round(s * 1000);
}

export async function watch(g: GlobalOptions, o: WatchOptions = {}): Promise<CommandResult> {
  const intervalMs = parseInterval(o.interval);
  clientFor(g); // the same usage errors as every client command (no token, a malformed --url)
  const url = daemonUrl(g);
  // A refresh should not hang for the client's default 15 s when the daemon stalls: it shows as an error and retries.
  const client = createClient({ url, token: g.token!, timeout: Math.max(3000, intervalMs * 3) });

  // The live view needs a terminal on both ends: ink reads keys from stdin in raw mode.
  if (!jsonMode(g) && process.stdin.isTTY) {
    // NO_COLOR (no-color.org): chalk does not read it itself; it reads FORCE_COLOR when ink is first imported, just below.
    if (process.env.NO_COLOR) process.env.FORCE_COLOR = '0';
    // ink draws only the last frame, at exit, when it thinks it runs in CI (CI set): this is a terminal, so draw live.
    for (const k of ['CI', 'CONTINUOUS_INTEGRATION']) if (k in process.env) process.env[k] = '0';
    const { runWatch } = await import('../../tui/watch.js');
    await runWatch({ client, url, intervalMs });
    return { data: undefined, human: '' };
  }
  const snap = await fetchSnapshot(client, { closed: true }); // a script gets every stream, open and closed
  const sums = totals(snap.streams).map((t) => ({ ...t, billedMicro: String(t.billedMicro), unsettledMicro: String(t.unsettledMicro), checkpointedMicro: String(t.checkpointedMicro), finalMicro: String(t.finalMicro) }));
  return { data: { streams: snap.streams, totals: sums, webhooks: snap.webhooks, asOf: snap.at }, human: plain(snap) };
}

/** The snapshot as plain tables (a terminal whose stdin is not one, e.g. `… | node-svc watch`). */
function plain(s: Snapshot): string {
  const streams = s.streams.length
    ? table(
        ['STREAM', 'STAGE', 'USED', 'REMAINING', 'FINALITY', 'FINAL', 'UNSETTLED'],
        s.streams.map((r) => [r.stream, r.degradationStage, bar(r.billedMicro, r.capMicro).percent, formatMicro(r.remainingCapMicro, r.asset), r.finality, formatMicro(r.finalMicro, r.asset), formatMicro(r.unsettledMicro, r.asset)]),
      )
    : 'no streams yet';
  const hooks = s.webhooks.length
    ? table(
        ['WEBHOOK', 'STATUS', 'PENDING', 'RETRYING', 'DEAD', 'DELIVERED', 'LAST ERROR'],
        s.webhooks.map((w) => [
          w.id, isFailing(w) ? 'failing' : w.status, ...(w.health ? [w.health.pending, w.health.retrying, w.health.dead, w.health.delivered].map(String) : ['?', '?', '?', '?']),
          w.lastError ? `${describeFailure(w.lastError)} at ${w.lastError.at}` : (w.error ?? '-'),
        ]),
      )
    : 'no webhook subscriptions';
  return `${streams}\n\n${hooks}`;
}
