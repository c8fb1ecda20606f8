// `node-svc dev`: a complete local sandbox — dev issuer key, a node and its token, the local chain with the
// escrow deployed, the daemon on the sandbox rail, a webhook receiver on the reference consumer, and a simulated
// payer presenting credentials and sending vouchers for a few streams over time. A second run reuses it all.
import { createServer, type Server } from 'node:http';
import type { AddressInfo } from 'node:net';
import { join } from 'node:path';
import { writeFileSync } from 'node:fs';
import { randomBytes } from 'node:crypto';
import { formatMicro } from '../domain/amount.js';
import { NodeSvcError } from '../domain/errors.js';
import { startDaemon, type Daemon } from '../daemon.js';
import { log } from '../log.js';
import { railFromFlags, type RailFlags } from '../rails/config.js';
import type { SandboxChain } from '../rails/escrow/sandbox.js';
import { createClient, type Client } from '../sdk/client.js';
import { createConsumer } from '../sdk/consumer.js';
import { addKeys, addNode, rotateToken } from '../service/admin.js';
import { openStore as openAnyStore } from '../store/open.js';
import { nodes } from '../store/admin.js';
import { loadState, newState, publicJwk, saveState, type SandboxState } from './state.js';
import { mintCredential, mintVoucher } from './mint.js';

export interface DevOptions {
  dataDir: string;
  /** --store: the sandbox on a PostgreSQL database instead of the data dir's SQLite file. */
  store?: string;
  mode: 'escrow' | 'card';
  port: number;
  /** Seconds between simulated vouchers (per stream). */
  pace: number;
  quiet: boolean;
  out: (line: string) => void;
}

export interface Sandbox {
  url: string;
  token: string;
  dataDir: string;
  streams: string[];
  stop(): Promise<void>;
}

/** Prepare the data dir (first run) and return the state. */
async function prepare(dataDir: string, storeUrl: string | undefined): Promise<SandboxState> {
  const store = await openAnyStore({ dataDir, store: storeUrl });
  try {
    let st = loadState(dataDir);
    if (!st) {
      if ((await nodes.list(store.q)).length) throw new NodeSvcError('config', `${dataDir} holds a store that is not a sandbox`, { hint: 'pass another --data-dir for `node-svc dev` (default ./data/sandbox)' });
      st = newState();
      await addNode(store, st.node);
      const jwk = { ...publicJwk(st.issuer.privateJwk), kid: st.issuer.kid, alg: 'EdDSA', use: 'sig' };
      await addKeys(store, st.issuer.iss, { keys: [jwk] }, 'node-svc dev');
    }
    st.runs += 1;
    saveState(dataDir, st);
    return st;
  } finally {
    await store.close();
  }
}

export async function startSandbox(o: DevOptions): Promise<Sandbox> {
  const st = await prepare(o.dataDir, o.store);
  const rails = o.mode === 'card' ? await cardRail(o.dataDir) : await escrowRail(o.dataDir, st);

  let token: string;
  {
    const store = await openAnyStore({ dataDir: o.dataDir, store: o.store });
    try {
      token = (await rotateToken(store, st.node)).token; // shown each run: the previous one stops working
    } finally {
      await store.close();
    }
  }
  const rail = await railFromFlags(rails.flags, {});
  let daemon: Daemon;
  try {
    daemon = await startDaemon({ dataDir: o.dataDir, store: o.store, host: '127.0.0.1', port: o.port, rateLimit: 0, ...(rail ? { rail } : {}) });
  } catch (err) {
    await rails.stop();
    if ((err as NodeJS.ErrnoException).code === 'EADDRINUSE') throw new NodeSvcError('config', `port ${o.port} is in use`, { hint: 'stop what uses it, or pass --port <n> (0 picks a free one)' });
    throw err;
  }
  const client = createClient({ url: daemon.url, token });

  // A receiver on the reference consumer, subscribed to every event: the sandbox shows webhooks arriving.
  const receiver = await startReceiver(client, o);
  const payer = new SimulatedPayer(st, rails.payer(daemon.url), client, o, st.runs);
  await payer.start();
  return {
    url: daemon.url,
    token,
    dataDir: o.dataDir,
    streams: payer.streams,
    async stop() {
      // One Ctrl-C stops within seconds: the payer's step in flight (a channel being opened on chain) gets 2 s, then
      // is abandoned (its later calls fail quietly); the receiver drops keep-alive sockets instead of waiting them out.
      await Promise.race([payer.stop(), new Promise((r) => setTimeout(r, 2000).unref())]);
      await new Promise<void>((r) => {
        receiver.server.close(() => r());
        receiver.server.closeAllConnections?.();
      });
      await client.deleteWebhook(receiver.subscription).catch(() => undefined);
      await daemon.stop();
      await rails.stop();
    },
  };
}

/** What the simulated payer needs from a rail: open a paid stream, sign a voucher. */
interface PayerRail {
  open(id: string, cap: bigint, unit: bigint, budget: string): Promise<{ credential: string; voucher(amount: bigint, units: bigint): Promise<unknown> }>;
  /** Called on every payer step (card: the processor makes captured funds available). */
  tick?(): Promise<void>;
}

interface RailSandbox {
  flags: RailFlags;
  payer(daemonUrl: string): PayerRail;
  stop(): Promise<void>;
}

/** Escrow: the local chain (persisted in <data-dir>/chain), the escrow contract, the payee wallet. */
async function escrowRail(dataDir: string, st: SandboxState): Promise<RailSandbox> {
  const { startSandboxChain } = await import('../rails/escrow/sandbox.js').catch(() => {
    throw new NodeSvcError('config', 'the sandbox chain (ganache) is not available in this installation', { hint: 'run `npm ci` in the node-svc checkout, or use the npm package rather than the single binary for `dev`' });
  });
  const chain: SandboxChain = await startSandboxChain({ dbPath: join(dataDir, 'chain'), blockTime: 1, ...(st.chain ? { reuse: st.chain } : {}) });
  st.chain = { escrow: chain.escrow, token: chain.token };
  saveState(dataDir, st);
  const walletFile = join(dataDir, 'wallet.key');
  writeFileSync(walletFile, chain.operator.key, { mode: 0o600 });
  return {
    flags: { mode: 'escrow', rail: 'sandbox', rpcUrl: chain.rpcUrl, chainId: String(chain.chainId), contract: chain.escrow, assetToken: chain.token, walletKeyFile: walletFile, confirmations: '2', rebroadcastAfter: '10s', settleStuckAfter: '30s', settleThreshold: '500000', settleInterval: '15s', settlePoll: '250ms' },
    payer: () => ({
      async open(id, cap, unit, budget) {
        const channel = await chain.openChannel({ id, payee: chain.operator.address, deposit: cap });
        const terms = { chainId: chain.chainId, escrow: chain.escrow, channel };
        const credential = mintCredential(st, { stream: id, budget, capMicro: cap, unitPriceMicro: unit, ttlSeconds: 24 * 3600, escrow: { payerAddress: chain.payer.address, chainId: chain.chainId, contract: chain.escrow, channel } });
        return { credential, voucher: async (amount, units) => ({ stream: id, amount: amount.toString(), units: units.toString(), signature: await chain.signVoucher(terms, amount) }) };
      },
    }),
    stop: async () => { await chain.stop(); },
  };
}

/** Card: a local processor (in memory: a new one each run) with the node's connected account and test keys. */
async function cardRail(dataDir: string): Promise<RailSandbox> {
  const { startLocalProcessor } = await import('../rails/card/processor.js');
  const p = await startLocalProcessor();
  const account = p.createAccount('acct_sandboxnode').id;
  const keyFile = join(dataDir, 'card.key');
  const secretFile = join(dataDir, 'card-webhook.secret');
  const secret = `whsec_${randomBytes(24).toString('base64')}`;
  writeFileSync(keyFile, p.testKey, { mode: 0o600 });
  writeFileSync(secretFile, secret, { mode: 0o600 });
  return {
    flags: { mode: 'card', rail: 'sandbox', cardApi: p.url, cardAccount: account, cardKeyFile: keyFile, cardWebhookSecretFile: secretFile, settleThreshold: '500000', settleInterval: '15s', settlePoll: '250ms' },
    payer: (daemonUrl) => ({
      async open(id, cap, unit, budget) {
        const pi = p.createPaymentIntent({ amount: Number(cap / 10_000n), currency: 'usd', destination: account }) as { id: string };
        const credential = mintCredential(stFor(dataDir), { stream: id, budget, capMicro: cap, unitPriceMicro: unit, ttlSeconds: 24 * 3600, mode: 'card', asset: 'USD', extra: { paymentIntent: pi.id } });
        return { credential, voucher: async (amount, units) => mintVoucher(stFor(dataDir), id, amount, units) };
      },
      async tick() {
        // The processor makes captured funds available, and says so with a signed webhook.
        for (const bt of p.balanceTransactions()) {
          if (bt.status !== 'pending') continue;
          const done = p.makeAvailable(String(bt.id));
          await p.sendWebhook(`${daemonUrl}/processor/webhook`, secret, p.event('balance.available', done)).catch(() => undefined);
        }
      },
    }),
    stop: () => p.close(),
  };
}

const stFor = (dataDir: string) => loadState(dataDir)!;

async function startReceiver(client: Client, o: DevOptions): Promise<{ server: Server; subscription: string }> {
  for (const s of (await client.listWebhooks()).data) if (s.description === 'node-svc dev receiver') await client.deleteWebhook(s.id);
  let consumer: ReturnType<typeof createConsumer> | undefined;
  const server = createServer((req, res) => {
    const chunks: Buffer[] = [];
    req.on('data', (c: Buffer) => chunks.push(c));
    req.on('end', () => {
      if (!consumer) return void res.writeHead(503).end();
      consumer.handle(Buffer.concat(chunks), req.headers).then((r) => {
        if (r.status === 'applied' && r.event && !o.quiet) o.out(describeEvent(r.event.type, r.event.data));
        res.writeHead(r.status === 'rejected' ? 401 : 204).end();
      }, () => res.writeHead(500).end());
    });
  });
  await new Promise<void>((r) => server.listen(0, '127.0.0.1', () => r()));
  const port = (server.address() as AddressInfo).port;
  const sub = await client.createWebhook({ url: `http://127.0.0.1:${port}/`, description: 'node-svc dev receiver' });
  consumer = createConsumer({ secret: sub.secret as string });
  return { server, subscription: sub.id as string };
}

function describeEvent(type: string, d: Record<string, unknown>): string {
  const money = typeof d.amountMicro === 'string' ? ` ${formatMicro(d.amountMicro, String(d.asset ?? ''))}` : '';
  const what = d.stream ?? d.budget ?? d.subscription ?? '';
  return `webhook  ${type.padEnd(24)} ${String(what)}${money}${type === 'settlement.final' ? '  <- final: money' : ''}`;
}

/** A payer with a few streams: opens a channel each, presents its credential, then sends growing vouchers. */
class SimulatedPayer {
  readonly streams: string[] = [];
  #timer: NodeJS.Timeout | undefined;
  #state = new Map<string, { cap: bigint; unit: bigint; billed: bigint; units: bigint; voucher(amount: bigint, units: bigint): Promise<unknown> }>();
  #next = 0;
  #stopped = false;
  #step: Promise<void> = Promise.resolve();

  constructor(private st: SandboxState, private rail: PayerRail, private client: Client, private o: DevOptions, private run: number) {}

  async start(): Promise<void> {
    for (const [cap, unit] of [[5_000_000n, 250n], [2_000_000n, 100n], [1_000_000n, 500n]] as const) await this.#open(cap, unit);
    const tick = () => {
      if (this.#stopped) return;
      this.#step = this.#advance().catch((err) => {
        if (!this.#stopped) log.warn('simulated payer step failed', { error: ((err as Error).message ?? '').split('\n')[0] });
      }).finally(() => {
        if (!this.#stopped) this.#timer = setTimeout(tick, this.o.pace * 1000);
      });
    };
    this.#timer = setTimeout(tick, this.o.pace * 1000);
  }

  /** Stop sending; resolves when the voucher in flight (if any) is done. */
  stop(): Promise<void> {
    this.#stopped = true;
    if (this.#timer) clearTimeout(this.#timer);
    return this.#step;
  }

  async #open(cap: bigint, unit: bigint): Promise<void> {
    const id = `run${this.run}-stream-${++this.#next}`;
    const { credential, voucher } = await this.rail.open(id, cap, unit, `run${this.run}-budget`);
    await this.client.verifyAllowance(credential);
    this.#state.set(id, { cap, unit, billed: 0n, units: 0n, voucher });
    this.streams.push(id);
    if (!this.o.quiet) this.o.out(`payer    opened ${id}: cap ${formatMicro(cap, this.o.mode === 'card' ? 'USD' : 'USDC')}`);
  }

  async #advance(): Promise<void> {
    await this.rail.tick?.();
    for (const [id, s] of this.#state) {
      if (s.billed >= s.cap) continue;
      const work = BigInt(200 + Math.floor(Math.random() * 1800)); // network units done since the last voucher
      const units = s.units + work;
      const amount = units * s.unit > s.cap ? s.cap : units * s.unit;
      await this.client.submitVoucher(id, await s.voucher(amount, units));
      s.billed = amount;
      s.units = units;
      if (amount >= s.cap) {
        if (!this.o.quiet) this.o.out(`payer    ${id} reached its cap`);
        this.#state.delete(id);
        await this.#open(s.cap, s.unit); // keep three streams moving
      }
    }
  }
}
