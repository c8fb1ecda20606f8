// `node-svc alerts`: the operator's alert endpoints, managed against the store (--data-dir / --store), like nodes
// and tokens: never through a node's bearer token.
import { addAlertEndpoint, listAlertEndpoints, removeAlertEndpoint, testAlertEndpoints } from '../../service/alerts.js';
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

export const test = (g: GlobalOptions, id: string | undefined): Promise<CommandResult> =>
  withStore(g, async (s) => {
    const r = await testAlertEndpoints(s, id);
    return { data: r, human: `queued test event ${r.event} to ${r.endpoints.join(', ')}; the daemon delivers it (node-svc alerts list shows the last success)` };
  });
