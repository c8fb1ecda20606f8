// `node-svc status` (alias `doctor`): the first command an operator runs. The daemon's own verdict (/healthz, the
// same checks a probe sees) plus what only the client can tell: is the daemon reachable, whose token is this.
import { formatMicro } from '../../domain/amount.js';
import { EXIT, NodeSvcError } from '../../domain/errors.js';
import { createClient, fetchHealth } from '../../sdk/client.js';
import { table, type CommandResult, type GlobalOptions } from '../output.js';
import { daemonUrl } from './remote.js';

type Json = Record<string, any>;
type Status = 'ok' | 'degraded' | 'down';
interface Check { name: string; status: Status; reason: string | null; figures: Json }

const plural = (n: number, one: string, many = `${one}s`) => `${n} ${n === 1 ? one : many}`;

/** One line per check for people; unknown checks (added later) show their reason or figures as they are. */
function describe(c: Check): string {
  const f = c.figures ?? {};
  switch (c.name) {
    case 'daemon': return `${f.url}${f.version ? `  version ${f.version}` : ''}`;
    case 'node': return f.node ? `${f.node}${f.tokenGraceUntil ? `  (token in grace until ${f.tokenGraceUntil})` : ''}` : (f.note ?? '-');
    case 'store': return plural(f.nodes ?? 0, 'node');
    case 'keys': return `${plural(f.count ?? 0, 'key')}${f.issuers?.length ? ` from ${f.issuers.map((i: Json) => i.issuer).join(', ')}` : ''}${f.lastRefresh ? `; last refresh ${f.lastRefresh.at} ${f.lastRefresh.ok ? 'ok' : 'FAILED'}` : ''}`;
    case 'rail': {
      if (!f.mode) return f.note ?? 'none';
      const wallet = f.wallet ? `, wallet ${f.wallet.address} gas ${formatWei(f.wallet.balanceWei)}` : '';
      return `${f.mode} ${f.env}${f.network ? ` on ${f.network}` : ''}, ${f.reachable ? 'reachable' : 'NOT reachable'}${wallet}`;
    }
    case 'outbox': return `${f.pending} pending, ${f.retrying} retrying, ${f.dead} dead (${f.deadUnresolved ?? f.dead} not delivered since); oldest pending ${f.oldestPendingAgeSeconds} s`;
    case 'settlements': {
      const money = (f.byAsset ?? []).map((a: Json) => `${a.asset}: unsettled ${formatMicro(a.unsettledMicro, a.asset)}, final ${formatMicro(a.finalMicro, a.asset)}`).join('; ');
      return `${f.inFlight} in flight, ${f.checkpointed} checkpointed, ${f.failed} failed${money ? `; ${money}` : ''}`;
    }
    case 'clock': return typeof f.offsetMs === 'number' ? `${f.offsetMs === 0 ? 'same as' : `${(Math.abs(f.offsetMs) / 1000).toFixed(3)} s ${f.offsetMs > 0 ? 'ahead of' : 'behind'}`} the database server's (±${(f.uncertaintyMs / 1000).toFixed(3)} s)` : '-';
    case 'subscriptions': return `${f.active} active, ${f.failing} failing, ${f.disabled} disabled`;
    case 'alerts': return f.endpoints || f.failing || f.disabled ? `${plural(f.endpoints ?? 0, 'alert endpoint')}, ${f.failing} failing, ${f.disabled} disabled${f.deadDeliveries ? `, ${plural(f.deadDeliveries, 'dead delivery', 'dead deliveries')}` : ''}` : 'no alert endpoints (node-svc alerts add <url>)';
    default: return Object.entries(f).map(([k, v]) => `${k} ${typeof v === 'object' ? JSON.stringify(v) : String(v)}`).join(', ');
  }
}

/** Wei as ether with up to 6 decimals, in BigInt (never a float). */
function formatWei(wei: string): string {
  const n = BigInt(wei);
  const whole = n / 10n ** 18n;
  const frac = ((n % 10n ** 18n) / 10n ** 12n).toString().padStart(6, '0');
  return `${whole}.${frac} ETH`;
}

export async function status(g: GlobalOptions): Promise<CommandResult> {
  const url = daemonUrl(g);
  const client = createClient({ url, ...(g.token ? { token: g.token } : {}), timeout: 10_000 });
  let verdict: Json;
  try {
    verdict = await fetchHealth(url, 10_000);
  } catch (err) {
    const reason = err instanceof NodeSvcError ? err.message : String(err);
    const checks: Check[] = [{ name: 'daemon', status: 'down', reason, figures: { url, reachable: false } }];
    return {
      data: { status: 'unreachable', url, reasons: [`daemon: ${reason}`], checks },
      human: `node-svc status: UNREACHABLE\n${reason}\n  start it with \`node-svc daemon\`, or point --url / NODE_SVC_URL at it`,
      exitCode: EXIT.other,
    };
  }
  const checks: Check[] = [{ name: 'daemon', status: 'ok', reason: null, figures: { url, reachable: true, version: verdict.version } }];
  let node: string | null = null;
  if (!g.token) {
    checks.push({ name: 'node', status: 'ok', reason: null, figures: { node: null, note: 'no token (--token / NODE_SVC_TOKEN): node not checked' } });
  } else {
    try {
      const n = await client.node();
      node = n.node;
      checks.push({ name: 'node', status: 'ok', reason: null, figures: { node: n.node, tokenGraceUntil: n.tokenGraceUntil } });
    } catch (err) {
      const reason = err instanceof NodeSvcError && err.code === 'unauthorized' ? 'the token is refused (revoked, rotated past its grace, or from another data dir)' : err instanceof Error ? err.message : String(err);
      checks.push({ name: 'node', status: 'degraded', reason, figures: { node: null } });
    }
  }
  checks.push(...(verdict.checks as Check[]));
  const overall: Status = checks.some((c) => c.status === 'down') ? 'down' : checks.some((c) => c.status === 'degraded') ? 'degraded' : 'ok';
  const reasons = checks.filter((c) => c.status !== 'ok' && c.reason).map((c) => `${c.name}: ${c.reason}`);
  const rows = checks.map((c) => [c.name, c.status === 'ok' ? 'ok' : c.status.toUpperCase(), c.status === 'ok' ? describe(c) : `${c.reason}  (${describe(c)})`]);
  const head = `node-svc status: ${overall === 'ok' ? 'healthy' : overall.toUpperCase()}  ${url}${node ? `  node ${node}` : ''}`;
  return {
    data: { status: overall, url, version: verdict.version, node, reasons, checks, asOf: verdict.asOf },
    human: `${head}\n${table(['CHECK', 'STATUS', 'DETAIL'], rows)}`,
    // 0 healthy, 1 degraded (a negative answer), 4 when the daemon cannot be reached (above)
    exitCode: overall === 'ok' ? EXIT.ok : EXIT.negative,
  };
}
