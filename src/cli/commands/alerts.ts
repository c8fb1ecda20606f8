// `node-svc alerts`: the operator's alert endpoints, managed against the store (--data-dir / --store), like nodes
// and tokens: never through a node's bearer token.
import { addAlertEndpoint, awaitAlertDeliveries, listAlertEndpoints, removeAlertEndpoint, testAlertEndpoints } from '../../service/alerts.js';
import { parseDuration } from '../../domain/duration.js';
import { EXIT } from '../../domain/errors.js';
import { parseCidrs, targetPolicy } from '../../delivery/target.js';
import { usageError } from '../../domain/errors.js';
import { table, type CommandResult, type GlobalOptions } from '../output.js';
import { withStore } from './context.js';

/** The daemon's --webhook-allow / --webhook-deny as the environment gives them: refuse at once what it would never deliver to. */
function policy() {
  const cidrs = (name: string) => {
    const v = process.env[name];
    if (!v) return [];
    const r = parseCidrs(v);
    if (typeof r === 'string') throw usageError(`${name}: ${r}`);
    return r;
  };
  return targetPolicy({ allow: cidrs('NODE_SVC_WEBHOOK_ALLOW'), deny: cidrs('NODE_SVC_WEBHOOK_DENY') });
}

export const add = (g: GlobalOptions, url: string, o: { events?: string; description?: string }): Promise<CommandResult> =>
  withStore(g, async (s) => {
    const events = o.events === undefined ? undefined : o.events.split(',').map((k) => k.trim()).filter(Boolean);
    const e = await addAlertEndpoint(s, { url, ...(events ? { events } : {}), ...(o.description ? { description: o.description } : {}) }, { policy: policy() });
    return {
      data: e,
      human: `${table(['ID', 'URL', 'EVENTS', 'SECRET'], [[e.id, e.url, e.events.join(','), e.secret]])}\n\nThe signing secret is shown only now. Each delivery carries x-service-signature and the Standard Webhooks headers, as node webhooks do.\nnext: node-svc alerts test ${e.id}`,
    };
  });

export const list = (g: GlobalOptions): Promise<CommandResult> =>
  withStore(g, async (s) => {
    const r = await listAlertEndpoints(s);
    const endpoints = r.data.length
      ? table(['ID', 'STATUS', 'EVENTS', 'URL', 'LAST SUCCESS', 'FAILING SINCE'], r.data.map((e) => [e.id, e.status + (e.disabledReason ? ` (${e.disabledReason})` : ''), e.events.join(','), e.url, e.lastSuccessAt ?? '-', e.failingSince ?? '-']))
      : 'no alert endpoints: node-svc alerts add <url>';
    const open = r.open.length ? `\n\nopen conditions:\n${table(['KIND', 'SUBJECT', 'NODE', 'SINCE'], r.open.map((o) => [o.kind, o.subject, o.node ?? '-', o.since]))}` : '';
    return { data: r, rows: r.data, human: endpoints + open };
  });

export const rm = (g: GlobalOptions, id: string): Promise<CommandResult> =>
  withStore(g, async (s) => ({ data: await removeAlertEndpoint(s, id), human: `removed alert endpoint ${id}` }));

export const test = (g: GlobalOptions, id: string | undefined, o: { wait?: string } = {}): Promise<CommandResult> => {
  const waitMs = o.wait === undefined ? undefined : parseDuration(o.wait);
  if (o.wait !== undefined && (waitMs === undefined || waitMs > 600_000)) throw usageError(`--wait "${o.wait}" is not a duration up to 10m`, 'e.g. 10s, 1m');
  return withStore(g, async (s) => {
    const r = await testAlertEndpoints(s, id);
    if (waitMs === undefined)
      return { data: r, human: `queued test event ${r.event} to ${r.endpoints.join(', ')}; the daemon delivers it (--wait 10s waits for the answers; node-svc alerts list shows the last success)` };
    // The daemon delivers; this reads where each delivery stands until all are answered or the wait is over.
    const results = await awaitAlertDeliveries(s, r.event, waitMs);
    const ok = results.length > 0 && results.every((x) => x.outcome === 'delivered');
    return {
      data: { ...r, delivered: ok, results },
      human: `test event ${r.event}\n${table(['ENDPOINT', 'OUTCOME', 'STATUS', 'ERROR'], results.map((x) => [x.endpoint, x.outcome, x.lastStatus === null ? '-' : String(x.lastStatus), x.lastError ?? '-']))}${ok ? '' : '\nnot every endpoint acknowledged it (is the daemon running? node-svc status)'}`,
      exitCode: ok ? EXIT.ok : EXIT.negative,
    };
  });
};
