// Composition root: open store → migrate → keyring → API (+ delivery worker and rails as they land).
import { serve, type ServerType } from '@hono/node-server';
import type { AddressInfo } from 'node:net';
import { createServer, type ServerOptions } from 'node:http';
import type { RequestListener } from './api/fast.js';
import { configError } from './domain/errors.js';
import { createApp } from './api/app.js';
import { log } from './log.js';
import { DEFAULT_SERVICE_CONFIG, NO_RAIL, type Deps, type ServiceConfig } from './service/deps.js';
import { Keyring } from './service/keyring.js';
import { openStore } from './store/open.js';
import type { Store } from './store/sql.js';
import { lockDataDir } from './store/lock.js';
import { parseDuration } from './domain/duration.js';
import { refreshUrlKeys } from './service/admin.js';
import type { KeyRefreshState } from './service/health.js';
import { DeliveryWorker } from './delivery/worker.js';
import { targetPolicy, type TargetPolicy } from './delivery/target.js';
import { VERSION } from './version.js';
import type { RailSetup } from './rails/config.js';
import { Settler } from './rails/settler.js';
import { ensureReceiptKey } from './service/receipts.js';
import { Pruner } from './ops/retention.js';
import { startTracing, stopTracing } from './ops/tracing.js';
import { boundHeapGrowth, growYoungGeneration, semiSpaceMb } from './ops/heap.js';
import { AlertWatch, type AlertOptions } from './ops/alert-watch.js';

export interface DaemonOptions {
  dataDir: string;
  /** A PostgreSQL URL shared with other daemons; undefined: SQLite in the data dir (one daemon per data dir). */
  store?: string;
  /** PostgreSQL store: write transactions at once (--store-pool; default 10). */
  storePool?: number;
  /** PostgreSQL store: milliseconds a statement may go without an answer (--store-timeout; default 10 s). */
  storeTimeoutMs?: number;
  host: string;
  port: number;
  rateLimit: number;
  /** How long an idle keep-alive connection stays open (--keep-alive-timeout; default KEEP_ALIVE_TIMEOUT_MS). */
  keepAliveTimeoutMs?: number;
  service?: Partial<ServiceConfig>;
  retrySchedule?: number[];
  deliveryTimeoutMs?: number;
  /** Deliveries in flight at most (default 256; benches bound it to measure a fixed load per daemon). */
  deliveryConcurrency?: number;
  webhookPolicy?: TargetPolicy;
  /** A settlement rail (escrow or card) and its policy; without one, finality stays `none`. */
  rail?: RailSetup;
  settleTickMs?: number;
  /** Operational alerts: thresholds (--alert-failing-after, --alert-wallet-min). */
  alerts?: AlertOptions;
}

export interface Daemon {
  url: string;
  deps: Deps;
  worker: DeliveryWorker;
  settler: Settler | undefined;
  pruner: Pruner;
  stop(): Promise<void>;
}

/**
 * An idle keep-alive connection's lifetime on the daemon's side. Node's default (5 s) is shorter than the idle timeout of
 * most clients that reuse connections (node's http.Agent keeps a free socket until the server closes it unless told
 * otherwise; nginx upstream keepalive 60 s; load balancers 60 s): the server then closes a connection at the moment the
 * client sends its next request on it, and that request fails with ECONNRESET (bench/headroom lost 11 of 10,000 so).
 * 65 s is longer than those, so the client is the side that closes; the response's `Keep-Alive: timeout=65` tells
 * clients that read it (node, undici) to let go first.
 */
export const KEEP_ALIVE_TIMEOUT_MS = 65_000;

/** Keys trusted from a URL are fetched again every NODE_SVC_KEYS_REFRESH (default 10m) and cached in the store. */
function startKeyRefresh(store: Store, state: KeyRefreshState): NodeJS.Timeout {
  const every = parseDuration(process.env.NODE_SVC_KEYS_REFRESH ?? '10m') ?? 600_000;
  let running = false;
  const timer = setInterval(() => {
    if (running) return;
    running = true;
    refreshUrlKeys(store)
      .then((report) => {
        state.at = Date.now();
        state.results = report.map((r) => ({ issuer: r.issuer, source: r.source, ...(r.error ? { error: r.error } : {}) }));
        for (const r of report) {
          if (r.error) log.warn('issuer keys not refreshed; the stored keys stay trusted', { issuer: r.issuer, source: r.source, error: r.error });
          else if (r.added.length || r.removed.length) log.info('issuer keys refreshed', { issuer: r.issuer, added: r.added, removed: r.removed });
        }
      })
      // The store could not be read (a PostgreSQL restart, a network cut): nothing was fetched or changed; the next
      // tick tries again. Unhandled, this rejection ended the process (Node's default), once per outage that a tick
      // fell into (test/e2e/multi-daemon.test.ts, the restart test, refreshes every second).
      .catch((err: unknown) => log.warn('issuer keys not refreshed: the store cannot be read; the stored keys stay trusted', { error: (err as Error)?.message ?? String(err) }))
      .finally(() => { running = false; });
  }, Math.max(1000, every));
  timer.unref();
  return timer;
}

export async function startDaemon(o: DaemonOptions): Promise<Daemon> {
  boundHeapGrowth();
  let youngMb: number;
  try {
    youngMb = semiSpaceMb();
  } catch (err) {
    throw configError((err as Error).message, 'unset it for the default (4 MB)');
  }
  // Before anything that makes spans; refuses the start on a bad OTEL_* variable. Loads nothing when tracing is off.
  await startTracing();
  // readsPerConnection 1: reads that overlap go out on connections of their own (a CLI command's share one).
  const store = await openStore({ dataDir: o.dataDir, store: o.store, readsPerConnection: 1, ...(o.storePool ? { poolSize: o.storePool } : {}), ...(o.storeTimeoutMs ? { answerTimeoutMs: o.storeTimeoutMs } : {}) });
  // SQLite: one daemon per data dir. PostgreSQL: any number of daemons share the database (leases, not a lock file).
  let unlock: () => void = () => undefined;
  try {
    if (store.dialect === 'sqlite') unlock = lockDataDir(o.dataDir);
  } catch (err) {
    await store.close();
    throw err;
  }
  // The receipt key exists before anything can become final (made once, shared by every daemon on the store).
  try {
    await ensureReceiptKey(store);
  } catch (err) {
    await store.close();
    unlock();
    throw err;
  }
  const config = { ...DEFAULT_SERVICE_CONFIG, ...(o.rail ? { settlementStuckMs: o.rail.policy.stuckAfterMs } : {}), ...o.service };
  const webhookPolicy = o.webhookPolicy ?? targetPolicy();
  const worker = new DeliveryWorker({
    store,
    policy: webhookPolicy,
    userAgent: `node-svc/${VERSION}`,
    ...(o.retrySchedule ? { retrySchedule: o.retrySchedule } : {}),
    ...(o.deliveryTimeoutMs ? { timeoutMs: o.deliveryTimeoutMs } : {}),
    ...(o.deliveryConcurrency ? { concurrency: o.deliveryConcurrency } : {}),
    ...(o.alerts?.failingAfter ? { alertFailingAfter: o.alerts.failingAfter } : {}),
  });
  const settler = o.rail ? new Settler(store, o.rail.rail, o.rail.policy, o.settleTickMs) : undefined;
  const keyRefresh: KeyRefreshState = { at: null, results: [] };
  // Loaded only with an escrow rail that serves x402: it pulls in viem and the token's artifacts (bench/memory: a
  // daemon without a rail started 15 MB heavier with it imported at the top).
  const X402Facilitator = o.rail?.x402 ? (await import('./service/x402.js')).X402Facilitator : undefined;
  const x402 = o.rail?.x402 && X402Facilitator ? new X402Facilitator(store, o.rail.x402.exact, o.rail.x402.sender, { tickMs: o.settleTickMs ?? o.rail.policy.pollMs, stuckAfterMs: o.rail.policy.stuckAfterMs, ...(o.rail.x402.settleWaitMs !== undefined ? { settleWaitMs: o.rail.x402.settleWaitMs } : {}) }) : undefined;
  const deps: Deps = {
    ...(x402 ? { x402 } : {}),
    store,
    health: { keyRefresh, ...(o.rail ? { rail: o.rail.rail } : {}) },
    // 2,000 verified credentials (LRU-ish): the repeated verify of active streams stays a cache hit, and 10k
    // streams do not keep 10k parsed credentials in the daemon's memory (bench/memory).
    keyring: new Keyring(store, { clockTolerance: config.clockTolerance, cacheSize: 2_000 }),
    config,
    now: Date.now,
    webhookPolicy,
    wakeDelivery: () => worker.wake(),
    funding: settler ? { check: (s) => settler.fund(s), unavailable: () => settler.fundingUnavailable() } : NO_RAIL,
  };
  const pruner = new Pruner({ store, retentionMs: config.retentionMs });
  const railRoutes = o.rail?.rail.routes?.bind(o.rail.rail);
  const app = createApp(deps, { rateLimit: o.rateLimit, ...(railRoutes ? { extraRoutes: (a) => railRoutes(a as never) } : {}) });
  let server: ServerType;
  try {
    server = await new Promise((resolve, reject) => {
      const s = serve({
        fetch: app.fetch, hostname: o.host, port: o.port,
        createServer: ((options: ServerOptions, hono: RequestListener) => {
          const server = createServer(options, app.listener(hono));
          server.keepAliveTimeout = o.keepAliveTimeoutMs || KEEP_ALIVE_TIMEOUT_MS; // 0 is not node's "never" here
          return server;
        }) as never,
      }, () => resolve(s));
      s.once('error', reject);
    });
  } catch (err) {
    // Expected at a start (port taken, address not ours): say which, and leave no lock file behind.
    await Promise.all([o.rail?.rail.close()]).catch(() => undefined);
    await store.close();
    unlock();
    await stopTracing();
    const code = (err as NodeJS.ErrnoException).code;
    const why = code === 'EADDRINUSE' ? 'is already in use' : code === 'EADDRNOTAVAIL' ? 'is not an address of this machine' : code === 'EACCES' ? 'needs privileges (ports below 1024)' : `cannot be listened on (${code ?? (err as Error).message})`;
    throw configError(`${o.host}:${o.port} ${why}`, code === 'EADDRINUSE' ? 'stop what listens there, or pick another --port' : 'check --host and --port');
  }
  const addr = server.address() as AddressInfo;
  const host = addr.family === 'IPv6' ? `[${addr.address}]` : addr.address;
  const url = `http://${host}:${addr.port}`;
  await worker.start();
  settler?.start();
  x402?.start();
  pruner.start();
  const alertWatch = new AlertWatch({ store, worker, ...(o.rail ? { rail: o.rail.rail } : {}), config, options: o.alerts ?? {} });
  alertWatch.start();
  const keysTimer = startKeyRefresh(store, keyRefresh);
  growYoungGeneration(youngMb); // from now on, not while the modules loaded (ops/heap.ts)
  log.info('daemon started', { url, dataDir: o.dataDir, store: store.description, ...(o.rail ? { mode: o.rail.rail.mode, rail: o.rail.rail.env } : {}) });
  let stopping: Promise<void> | undefined;
  return {
    url,
    deps,
    worker,
    settler,
    pruner,
    stop() {
      // Stop accepting, let in-flight requests finish, then close the store.
      stopping ??= new Promise<void>((resolve) => {
        server.close(() => {
          clearInterval(keysTimer);
          alertWatch.stop();
          // Settled, not all: one part that fails to stop must not keep the store open or the process from ending.
          void Promise.allSettled([worker.stop(), settler?.stop(), x402?.stop(), pruner.stop(), o.rail?.rail.close()]).then(async (parts) => {
            try {
              for (const p of parts) if (p.status === 'rejected') log.warn('a part of the daemon did not stop cleanly', { error: (p.reason as Error)?.message ?? String(p.reason) });
              await store.close().catch(() => undefined);
              unlock();
              await stopTracing().catch(() => undefined); // the last spans exported
              log.info('daemon stopped');
            } finally {
              resolve();
            }
          });
        });
        // Connections of requests still in flight close as soon as their answer is sent, not after the keep-alive
        // timeout (65 s: a drain would wait that long for a client that holds its connection).
        (server as unknown as { keepAliveTimeout: number }).keepAliveTimeout = 1;
        (server as unknown as { closeIdleConnections?: () => void }).closeIdleConnections?.();
      });
      return stopping;
    },
  };
}
