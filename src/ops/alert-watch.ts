// The daemon's watch for the operational alerts no write of its own causes: the store answering again after an
// outage (store.unavailable / store.recovered), the escrow wallet's gas (wallet.low). With SQLite it also notices
// writes of the CLI (`alerts add`, `alerts test`) made from another process, so their deliveries start at once.
import { DAEMON_ID } from '../rails/settler.js';
import { NodeSvcError } from '../domain/errors.js';
import { iso } from '../domain/time.js';
import { log } from '../log.js';
import type { Rail } from '../rails/rail.js';
import type { ServiceConfig } from '../service/deps.js';
import { alertStates } from '../store/alerts.js';
import type { SqliteStore } from '../store/db.js';
import { health } from '../store/health.js';
import type { Store } from '../store/sql.js';
import { subscriptionsChanged } from '../store/webhooks.js';
import { emitAlert, raiseAlert } from './alerts.js';

export interface AlertOptions {
  /** Consecutive failed attempts to one subscription before endpoint.failing (default 3). */
  failingAfter?: number;
  /** Escrow: wallet.low below this balance, wei (default 0.01 ETH). */
  walletMinWei?: bigint;
}

export const DEFAULT_WALLET_MIN_WEI = 10n ** 16n;
/** How often the store and the wallet are looked at; NODE_SVC_ALERT_WATCH_MS overrides it (tests). */
const WATCH_MS = Number(process.env.NODE_SVC_ALERT_WATCH_MS) > 0 ? Number(process.env.NODE_SVC_ALERT_WATCH_MS) : 15_000;
/** The alert_states row that remembers the last store outage reported. */
const STORE_KEY = 'store';

export class AlertWatch {
  #timers: NodeJS.Timeout[] = [];
  #running = false;
  /** Since when the store has not answered (in memory: it cannot be written to an unavailable store). */
  #outage: { since: number; error: string } | undefined;
  constructor(private readonly o: { store: Store; worker: { wake(): void }; rail?: Rail; config: ServiceConfig; options: AlertOptions; now?: () => number }) {}

  get #now() { return this.o.now ?? Date.now; }

  start(): void {
    const t = setInterval(() => void this.tick(), WATCH_MS);
    t.unref();
    this.#timers.push(t);
    if (this.o.store.dialect === 'sqlite') {
      // The CLI writes the data dir's database from its own process: the writer connection's data_version moves on
      // every commit made elsewhere. Then the delivery worker reads subscriptions again and looks for due deliveries.
      const version = (this.o.store as SqliteStore).externalVersion;
      let last = version();
      const w = setInterval(() => {
        try {
          const v = version();
          if (v !== last) { last = v; subscriptionsChanged(); this.o.worker.wake(); }
        } catch { /* closed while stopping */ }
      }, 1000);
      w.unref();
      this.#timers.push(w);
    }
  }

  stop(): void {
    for (const t of this.#timers) clearInterval(t);
    this.#timers = [];
  }

  /** One look at the store, then (when it answers) at the wallet. */
  async tick(): Promise<void> {
    if (this.#running) return;
    this.#running = true;
    try {
      if (await this.#storeAnswers()) await this.#wallet();
    } catch (err) {
      log.warn('alert watch failed; trying again', { error: (err as Error).message });
    } finally {
      this.#running = false;
    }
  }

  /**
   * store.unavailable cannot be written to a store that does not answer: the outage is remembered in memory (with a
   * log line at once) and, once the store answers again, store.unavailable (with the outage's start) and
   * store.recovered are recorded together, by one daemon of those sharing the store (alertStates.claimOutage).
   */
  async #storeAnswers(): Promise<boolean> {
    const now = this.#now();
    try {
      // Within 5 s (health.ping): a database cut off by the network answers no error for minutes.
      await health.ping(this.o.store.q);
    } catch (err) {
      // Named (the database's host and the reason, never its URL or password), as the health verdict names it.
      const error = err instanceof NodeSvcError ? err.message : (err as Error).name;
      if (!this.#outage) {
        this.#outage = { since: now, error };
        log.error('alert store.unavailable: the store does not answer; the alert is sent once it is back', { since: iso(now), error });
      }
      return false;
    }
    const o = this.#outage;
    if (!o) return true;
    await this.o.store.write(async (tx) => {
      if (!(await alertStates.claimOutage(tx, STORE_KEY, o.since, now))) {
        log.info('store back; the store outage already reported by another daemon', { since: iso(o.since) });
        return;
      }
      const data = { since: iso(o.since), error: o.error, daemon: DAEMON_ID };
      await emitAlert(tx, 'store.unavailable', 'store', data, o.since);
      await emitAlert(tx, 'store.recovered', 'store', { since: iso(o.since), recoveredAt: iso(now), downSeconds: Math.round((now - o.since) / 1000), daemon: DAEMON_ID }, now);
    });
    this.#outage = undefined;
    return true;
  }

  /** wallet.low once the escrow wallet's gas falls below the minimum; cleared (silently) once it is topped up. */
  async #wallet(): Promise<void> {
    const rail = this.o.rail;
    if (!rail?.probe || rail.mode !== 'escrow') return;
    const p = await rail.probe();
    if (!p.wallet || !p.reachable) return;
    const min = this.o.options.walletMinWei ?? DEFAULT_WALLET_MIN_WEI;
    const balance = BigInt(p.wallet.balanceWei);
    const key = `wallet:${p.wallet.address.toLowerCase()}`;
    const now = this.#now();
    if (balance < min) {
      if ((await alertStates.get(this.o.store.q, key))?.kind === 'wallet.low') return;
      await this.o.store.write((tx) => raiseAlert(tx, { key, kind: 'wallet.low', node: null, ref: `wallet:${p.wallet!.address}`, now,
        data: { address: p.wallet!.address, network: p.network, balanceWei: balance.toString(), minimumWei: min.toString() } }));
    } else if (await alertStates.get(this.o.store.q, key)) {
      await this.o.store.write((tx) => alertStates.clear(tx, key, ['wallet.low']));
      log.info('wallet topped up above the alert minimum', { address: p.wallet.address, balanceWei: balance.toString() });
    }
  }
}
