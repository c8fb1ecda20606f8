// Composition root: open store → migrate → keyring → API (+ delivery worker and rails as they land).
import { serve, type ServerType } from '@hono/node-server';
import type { AddressInfo } from 'node:net';
import { createApp } from './api/app.js';
import { log } from './log.js';
import { DEFAULT_SERVICE_CONFIG, type Deps, type ServiceConfig } from './service/deps.js';
import { Keyring } from './service/keyring.js';
import { openStore } from './store/db.js';
import { DeliveryWorker } from './delivery/worker.js';
import { targetPolicy, type TargetPolicy } from './delivery/target.js';
import { VERSION } from './version.js';

export interface DaemonOptions {
  dataDir: string;
  host: string;
  port: number;
  rateLimit: number;
  service?: Partial<ServiceConfig>;
  retrySchedule?: number[];
  deliveryTimeoutMs?: number;
  webhookPolicy?: TargetPolicy;
}

export interface Daemon {
  url: string;
  deps: Deps;
  worker: DeliveryWorker;
  stop(): Promise<void>;
}

export async function startDaemon(o: DaemonOptions): Promise<Daemon> {
  const store = openStore(o.dataDir);
  const config = { ...DEFAULT_SERVICE_CONFIG, ...o.service };
  const webhookPolicy = o.webhookPolicy ?? targetPolicy();
  const worker = new DeliveryWorker({
    store,
    policy: webhookPolicy,
    userAgent: `node-svc/${VERSION}`,
    ...(o.retrySchedule ? { retrySchedule: o.retrySchedule } : {}),
    ...(o.deliveryTimeoutMs ? { timeoutMs: o.deliveryTimeoutMs } : {}),
  });
  const deps: Deps = {
    store,
    keyring: new Keyring(store, { clockTolerance: config.clockTolerance }),
    config,
    now: Date.now,
    webhookPolicy,
    wakeDelivery: () => worker.wake(),
  };
  const app = createApp(deps, { rateLimit: o.rateLimit });
  const server: ServerType = await new Promise((resolve, reject) => {
    const s = serve({ fetch: app.fetch, hostname: o.host, port: o.port }, () => resolve(s));
    s.once('error', reject);
  });
  const addr = server.address() as AddressInfo;
  const host = addr.family === 'IPv6' ? `[${addr.address}]` : addr.address;
  const url = `http://${host}:${addr.port}`;
  worker.start();
  log.info('daemon started', { url, dataDir: o.dataDir });
  let stopping: Promise<void> | undefined;
  return {
    url,
    deps,
    worker,
    stop() {
      // Stop accepting, let in-flight requests finish, then close the store.
      stopping ??= new Promise<void>((resolve) => {
        server.close(() => {
          worker.stop().finally(() => {
            store.close();
            log.info('daemon stopped');
            resolve();
          });
        });
        (server as unknown as { closeIdleConnections?: () => void }).closeIdleConnections?.();
      });
      return stopping;
    },
  };
}
