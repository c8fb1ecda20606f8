// The daemon's health verdict: a list of named checks (ok | degraded | down, a reason, figures), shared by
// GET /healthz (probes) and `node-svc status` (operators). Add a check by appending to HEALTH_CHECKS.
import type { RailProbe } from '../rails/rail.js';
import { health } from '../store/health.js';
import { alertEndpoints } from '../store/alerts.js';
import { NodeSvcError } from '../domain/errors.js';
import { VERSION } from '../version.js';
import type { Deps, HealthSources } from './deps.js';

export type CheckStatus = 'ok' | 'degraded' | 'down';

export interface HealthCheck {
  name: string;
  status: CheckStatus;
  /** Why it is not ok (null when ok), in words an operator can act on. */
  reason: string | null;
  /** What was measured; money as decimal strings of micro units, times as RFC 3339. */
  figures: Record<string, unknown>;
}

export interface Verdict {
  status: CheckStatus;
  version: string;
  /** Checks that are not ok, as "name: reason" (the one line a probe log shows). */
  reasons: string[];
  checks: HealthCheck[];
  asOf: string;
}

export type { HealthSources, KeyRefreshState } from './deps.js';

/** A check; undefined when it does not apply to this daemon (the clock check on SQLite). */
export type CheckFn = (d: Deps, s: HealthSources) => HealthCheck | undefined | Promise<HealthCheck | undefined>;

const iso = (ms: number | null) => (ms === null ? null : new Date(ms).toISOString());
const ageSeconds = (d: Deps, ms: number | null) => (ms === null ? 0 : Math.max(0, Math.floor((d.now() - ms) / 1000)));
const check = (name: string, problems: Array<[CheckStatus, string]>, figures: Record<string, unknown>): HealthCheck => {
  const worst = problems.find(([s]) => s === 'down') ?? problems[0];
  return { name, status: worst ? worst[0] : 'ok', reason: problems.length ? problems.map(([, r]) => r).join('; ') : null, figures };
};

async function keysCheck(d: Deps, s: HealthSources): Promise<HealthCheck> {
  const rows = await health.keys(d.store.q);
  const count = rows.reduce((n, r) => n + r.keys, 0);
  const failed = (s.keyRefresh?.results ?? []).filter((r) => r.error);
  const problems: Array<[CheckStatus, string]> = [];
  if (!count) problems.push(['degraded', 'no trusted issuer keys: every credential is refused (node-svc keys add)']);
  for (const f of failed) problems.push(['degraded', `refresh of ${f.source} failed (stored keys stay trusted): ${f.error}`]);
  return check('keys', problems, {
    count,
    issuers: rows.map((r) => ({ issuer: r.issuer, keys: r.keys, fromUrl: !!r.from_url, fetchedAt: iso(r.fetched_at) })),
    lastRefresh: s.keyRefresh?.at ? { at: iso(s.keyRefresh.at), ok: !failed.length, failed: failed.length } : null,
  });
}

async function railCheck(_d: Deps, s: HealthSources): Promise<HealthCheck> {
  if (!s.rail) return check('rail', [], { mode: null, note: 'no settlement rail configured: finality stays none' });
  const rail = s.rail;
  const limit = s.probeTimeoutMs ?? 3000;
  let timer: NodeJS.Timeout | undefined;
  const probe: RailProbe | 'timeout' = rail.probe
    ? await Promise.race([rail.probe(), new Promise<'timeout'>((r) => { timer = setTimeout(() => r('timeout'), limit); })]).finally(() => clearTimeout(timer))
    : { network: 'unknown', reachable: true };
  const problems: Array<[CheckStatus, string]> = [];
  const figures: Record<string, unknown> = { mode: rail.mode, env: rail.env };
  if (probe === 'timeout') {
    problems.push(['degraded', `the ${rail.mode === 'escrow' ? 'chain RPC' : 'card processor'} did not answer within ${limit} ms: settlements wait`]);
    figures.reachable = false;
  } else {
    Object.assign(figures, { network: probe.network, reachable: probe.reachable, ...(probe.wallet ? { wallet: probe.wallet } : {}) });
    if (probe.error) problems.push(['degraded', `${probe.error}: settlements wait`]);
    if (probe.wallet && BigInt(probe.wallet.balanceWei) === 0n) problems.push(['degraded', `the wallet ${probe.wallet.address} holds no gas: settlements cannot be sent`]);
  }
  return check('rail', problems, figures);
}

async function outboxCheck(d: Deps, s: HealthSources): Promise<HealthCheck> {
  const o = await health.outbox(d.store.q);
  const limit = s.outboxAgeLimitMs ?? 15 * 60_000;
  const problems: Array<[CheckStatus, string]> = [];
  // A dead delivery stops counting once a replay of its event reached its subscription, or the subscription is deleted.
  if (o.deadUnresolved) problems.push(['degraded', `${o.deadUnresolved} dead deliveries not delivered since (node-svc webhooks replay; resolved once the replay is delivered)`]);
  if (o.oldestPendingAt !== null && d.now() - o.oldestPendingAt > limit) problems.push(['degraded', `oldest pending delivery is ${ageSeconds(d, o.oldestPendingAt)} s old`]);
  return check('outbox', problems, { pending: o.pending, retrying: o.retrying, dead: o.dead, deadUnresolved: o.deadUnresolved, oldestPendingAgeSeconds: ageSeconds(d, o.oldestPendingAt) });
}

async function settlementsCheck(d: Deps): Promise<HealthCheck> {
  const f = await health.settlements(d.store.q, d.now(), d.config.settlementStuckMs);
  const problems: Array<[CheckStatus, string]> = [];
  if (f.stuck) problems.push(['degraded', `${f.stuck} settlement(s) or x402 payment(s) sent but not mined for more than ${Math.round(d.config.settlementStuckMs / 1000)} s (oldest ${ageSeconds(d, f.oldestUnminedAt)} s): rebroadcast and replaced; see streams finality`]);
  if (f.failed) problems.push(['degraded', `${f.failed} stream(s) whose latest settlement failed (retried with backoff)`]);
  const funding = d.funding?.unavailable();
  if (funding) problems.push(['degraded', `${funding}: funded streams answer 503`]);
  return check('settlements', problems, {
    inFlight: f.inFlight, stuck: f.stuck, checkpointed: f.checkpointed, failed: f.failed, oldestOpenAgeSeconds: ageSeconds(d, f.oldestOpenAt),
    byAsset: f.byAsset.map((a) => ({ asset: a.asset, streams: a.streams, unsettledMicro: a.unsettledMicro.toString(), finalMicro: a.finalMicro.toString() })),
  });
}

async function subscriptionsCheck(d: Deps): Promise<HealthCheck> {
  const r = await health.subscriptions(d.store.q);
  const problems: Array<[CheckStatus, string]> = [];
  if (r.failing) problems.push(['degraded', `${r.failing} subscription(s) failing since ${iso(r.failing_since)}`]);
  return check('subscriptions', problems, { active: r.total, failing: r.failing, disabled: r.disabled });
}

/** Alert endpoints (the operator's own channel): one failing or disabled means alerts may not reach anyone. */
async function alertsCheck(d: Deps): Promise<HealthCheck> {
  const [r, dead] = await Promise.all([alertEndpoints.health(d.store.q), alertEndpoints.dead(d.store.q)]);
  const problems: Array<[CheckStatus, string]> = [];
  if (r.failing) problems.push(['degraded', `${r.failing} alert endpoint(s) failing since ${iso(r.failing_since)}: alerts may not reach anyone (node-svc alerts list)`]);
  if (r.disabled) problems.push(['degraded', `${r.disabled} alert endpoint(s) disabled (node-svc alerts list)`]);
  // Dead alert deliveries are counted, not a problem of their own: the endpoint that lost them was failing (above).
  return check('alerts', problems, { endpoints: r.total, failing: r.failing, disabled: r.disabled, deadDeliveries: dead });
}

/** Clocks further apart than this (beyond the read's own uncertainty) make the clock check degraded. */
export const CLOCK_SKEW_LIMIT_MS = 1000;

/**
 * PostgreSQL: this host's clock against the database server's. Daemons sharing a database keep delivery leases and
 * retry times by their own clocks: once two are a lease apart (the delivery timeout × 2 + 10 s), the one ahead reads
 * the other's leases as run out and takes over its deliveries in flight (duplicates at the receivers; the fence keeps
 * each attempt recorded once), whichever of them is off; retries go early or late by the difference. SQLite: one
 * daemon, one clock; the check does not apply.
 */
async function clockCheck(d: Deps): Promise<HealthCheck | undefined> {
  if (d.store.dialect !== 'postgres') return undefined;
  const { offsetMs, uncertaintyMs } = await health.clockOffset(d.store.q, d.now);
  const problems: Array<[CheckStatus, string]> = [];
  if (Math.abs(offsetMs) - uncertaintyMs > CLOCK_SKEW_LIMIT_MS)
    problems.push(['degraded', `this host's clock is ${(Math.abs(offsetMs) / 1000).toFixed(1)} s ${offsetMs > 0 ? 'ahead of' : 'behind'} the database server's: daemons sharing the database time delivery leases and retries by their own clocks, so once clocks are a lease apart (40 s by default) deliveries in flight are taken over and sent twice, and retries go early or late; set this host's time (NTP)`]);
  return check('clock', problems, { offsetMs, uncertaintyMs, limitMs: CLOCK_SKEW_LIMIT_MS });
}

/** In display order. Other modules append theirs (e.g. settlements stuck past a limit). */
export const HEALTH_CHECKS: CheckFn[] = [keysCheck, railCheck, outboxCheck, settlementsCheck, subscriptionsCheck, alertsCheck, clockCheck];

export async function healthVerdict(d: Deps, s: HealthSources = {}): Promise<Verdict> {
  const checks: HealthCheck[] = [];
  try {
    await health.ping(d.store.q);
    // Reads answer, but writes fail for the file or disk (SQLite): payments cannot be recorded, so down, naming it.
    // A daemon with nothing to write after that would stay down for ever: a fault counts for a minute after the last
    // write it failed (a write that commits clears it at once).
    const f = d.store.writeFault?.();
    const fault = f && d.now() - f.last < 60_000 ? f : undefined;
    checks.push(check('store', fault ? [['down', `writes fail since ${new Date(fault.since).toISOString()}: ${fault.message}`]] : [], { nodes: await health.nodes(d.store.q) }));
  } catch (err) {
    // Without the store nothing else can be read: one check, down.
    // A NodeSvcError names what failed (the database's host and the reason, never its URL or password); anything else only by its name.
    const why = err instanceof NodeSvcError ? err.message : (err as Error).name;
    checks.push(check('store', [['down', `the store does not answer (${why})`]], {}));
  }
  if (checks[0]!.status === 'ok') {
    for (const fn of HEALTH_CHECKS) {
      try {
        const c = await fn(d, s);
        if (c) checks.push(c);
      } catch (err) {
        checks.push(check(fn.name.replace(/Check$/, '') || 'check', [['degraded', `could not be computed (${(err as Error).name})`]], {}));
      }
    }
  }
  const status: CheckStatus = checks.some((c) => c.status === 'down') ? 'down' : checks.some((c) => c.status === 'degraded') ? 'degraded' : 'ok';
  return { status, version: VERSION, reasons: checks.filter((c) => c.reason && c.status !== 'ok').map((c) => `${c.name}: ${c.reason}`), checks, asOf: new Date(d.now()).toISOString() };
}
