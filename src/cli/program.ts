// commander only parses; each command module is imported when it runs, so `verify` never loads Hono or ink.
import { Command, Option } from 'commander';
import type { CommandResult, GlobalOptions } from './output.js';

type Sink = (r: CommandResult) => void;

export { VERSION } from '../version.js';
import { VERSION } from '../version.js';

export function buildProgram(sink: Sink, json = false): Command {
  const program = new Command('node-svc')
    .description('Allowance verification, stream finality and signed webhooks for serviceNodes')
    .version(VERSION, '-V, --version')
    .addOption(new Option('--data-dir <dir>', 'data directory (beats env NODE_SVC_DATA_DIR; default ./data)'))
    .addOption(new Option('--store <url>', 'postgres://… database shared by several daemons (beats env NODE_SVC_STORE and config `store`; default: SQLite in the data dir)'))
    .addOption(new Option('--url <url>', 'daemon URL for client commands').env('NODE_SVC_URL').default('http://127.0.0.1:8787'))
    .addOption(new Option('--token <token>', 'bearer token for client commands').env('NODE_SVC_TOKEN'))
    .option('--json', 'print JSON (the default when stdout is not a terminal)')
    .addOption(new Option('--format <format>', 'output: table, json, or jsonl (list commands: one item per line)').choices(['table', 'json', 'jsonl']))
    .exitOverride()
    // Usage errors in JSON mode are JSON too, like every other error (scripts parse stderr).
    .configureOutput({
      outputError: (str, write) => {
        // A value that begins with '-' (a receipt key id is a base64url thumbprint: 1 in 64 does) reads as an option.
        const dash = /unknown option '(-[^-'][^']*)'/.exec(str);
        if (dash) str = `${str.trimEnd()}\n(if '${dash[1]}' is a value, not an option, put -- before it: e.g. node-svc receipts retire -- ${dash[1]})\n`;
        write(json ? `${JSON.stringify({ error: { code: 'usage', message: str.replace(/^error: /, '').trim() } })}\n` : str);
      },
    })
    .showHelpAfterError(json ? false : '(run with --help for usage)')
    .enablePositionalOptions(false);

  const globals = (cmd: Command): GlobalOptions => ({ ...cmd.optsWithGlobals(), urlFrom: cmd.getOptionValueSourceWithGlobals('url') }) as GlobalOptions;
  const run = <A extends unknown[]>(fn: (g: GlobalOptions, ...args: A) => Promise<CommandResult>) =>
    async (...args: unknown[]) => {
      const cmd = args[args.length - 1] as Command;
      sink(await fn(globals(cmd), ...(args.slice(0, -1) as A)));
    };

  const nodes = program.command('nodes').description('serviceNodes this operator runs');
  nodes.command('add <id>').description('register a node').action(run(async (g, id: string) => (await import('./commands/nodes.js')).add(g, id)));
  nodes.command('list').description('list nodes').action(run(async (g) => (await import('./commands/nodes.js')).list(g)));
  nodes.command('rm <id>').description('remove a node and its tokens').action(run(async (g, id: string) => (await import('./commands/nodes.js')).rm(g, id)));

  const tokens = program.command('tokens').description('bearer tokens (one active per node)');
  tokens.command('issue <node>').description('issue the node\'s token (shown once)').action(run(async (g, node: string) => (await import('./commands/tokens.js')).issue(g, node)));
  tokens.command('rotate <node>').description('replace the node\'s token (shown once)')
    .option('--grace <duration>', 'keep the old token working this long (e.g. 10m, 24h)', '0')
    .action(run(async (g, node: string, o: { grace: string }) => (await import('./commands/tokens.js')).rotate(g, node, o.grace)));
  tokens.command('revoke <node>').description('revoke every token of the node').action(run(async (g, node: string) => (await import('./commands/tokens.js')).revoke(g, node)));

  const keys = program.command('keys').description('trusted issuer keys (JWKS)');
  keys.command('add <source>').description('trust the keys of a JWKS file or URL for an issuer')
    .requiredOption('--issuer <iss>', 'the issuer (iss) these keys sign for')
    .action(run(async (g, source: string, o: { issuer: string }) => (await import('./commands/keys.js')).add(g, o.issuer, source)));
  keys.command('list').description('list trusted keys').action(run(async (g) => (await import('./commands/keys.js')).list(g)));
  keys.command('rm <kid>').description('stop trusting a key').action(run(async (g, kid: string) => (await import('./commands/keys.js')).rm(g, kid)));

  program.command('verify <jws>').description('verify an allowance credential offline ("-" reads stdin)')
    .option('--node <id>', 'the node it must be aimed at (env NODE_SVC_NODE; default: the only node)')
    .option('--remote', 'ask the daemon at --url instead of verifying offline')
    .action(run(async (g, jws: string, o: { node?: string; remote?: boolean }) => (await import('./commands/verify.js')).verify(g, jws, o)));

  const receipts = program.command('receipts').description('signed settlement receipts: the daemon receipt keys (from the store) and the offline check');
  const R = () => import('./commands/receipts.js');
  receipts.command('jwks').description('print the receipt JWKS to publish for receipt checkers (public keys only; makes the first key if none exists)')
    .action(run(async (g) => (await R()).jwks(g)));
  receipts.command('keys').description('list the receipt keys: active, rotated (still published), retired').action(run(async (g) => (await R()).keys(g)));
  receipts.command('rotate').description('a new active receipt key; the previous one stays in the JWKS').action(run(async (g) => (await R()).rotate(g)));
  receipts.command('retire <kid>').description('leave a rotated receipt key out of the JWKS (its receipts stop verifying); a kid that begins with "-": receipts retire -- <kid>').action(run(async (g, kid: string) => (await R()).retire(g, kid)));
  receipts.command('verify <jws>').description('check a receipt: signature against the receipt JWKS, claims, and with --rpc the transaction on chain ("-" reads stdin; exit 1 when refused)')
    .option('--jwks <file-or-url>', "the daemon's receipt JWKS (default: the keys in the store of --data-dir / --store)")
    .option('--node <id>', 'the node the receipt must name')
    .option('--rpc <url>', 'escrow receipts: re-read the transaction on this chain RPC')
    .action(run(async (g, jws: string, o: { jwks?: string; rpc?: string; node?: string }) => (await R()).verify(g, jws, o)));

  const streams = program.command('streams').description('streams of the node behind --token (asks the daemon at --url)');
  const S = () => import('./commands/streams.js');
  streams.command('list').description("the node's streams").option('--cursor <c>', 'continue from a cursor').option('--limit <n>', 'page size (1-500)').option('--all', 'follow every page')
    .addOption(new Option('--status <which>', 'open, closed or all streams (default all)').choices(['open', 'closed', 'all']))
    .addOption(new Option('--sort <order>', 'id (default) or activity (most recent first)').choices(['id', 'activity']))
    .action(run(async (g, o: { cursor?: string; limit?: string; all?: boolean; status?: 'open' | 'closed' | 'all'; sort?: 'id' | 'activity' }) => (await S()).list(g, o)));
  streams.command('verify <id>').description('open and payable? (exit 1 when not)').action(run(async (g, id: string) => (await S()).verify(g, id)));
  streams.command('headroom <id>').description('remaining cap, units, rate, degradation stage').action(run(async (g, id: string) => (await S()).headroom(g, id)));
  streams.command('finality <id>').description('settled-frontier finality and billed truth').action(run(async (g, id: string) => (await S()).finality(g, id)));
  streams.command('receipt <id>').description("the signed receipt of the stream's highest final settlement (the bare JWS when piped; --json for the object)")
    .action(run(async (g, id: string) => (await S()).receipt(g, id)));

  const webhooks = program.command('webhooks').description('webhook subscriptions of the node behind --token (asks the daemon at --url)');
  const W = () => import('./commands/webhooks.js');
  webhooks.command('add <url>').description('subscribe an endpoint (prints its signing secret once)')
    .option('--events <kinds>', 'comma-separated event kinds (default: all)').option('--schema-version <v>', '1.1.0 (default) or 1.0.0').option('--description <text>')
    .action(run(async (g, url: string, o: { events?: string; schemaVersion?: string; description?: string }) => (await W()).add(g, url, o)));
  webhooks.command('list').description('list subscriptions').action(run(async (g) => (await W()).list(g)));
  webhooks.command('rm <id>').description('revoke a subscription').action(run(async (g, id: string) => (await W()).rm(g, id)));
  webhooks.command('deliveries <id>').description('delivery attempts and health of a subscription').option('--limit <n>').option('--cursor <c>')
    .action(run(async (g, id: string, o: { limit?: string; cursor?: string }) => (await W()).deliveries(g, id, o)));
  webhooks.command('rotate <id>').description('new signing secret; the old one keeps signing during the overlap').option('--overlap <duration>', 'how long the old secret also signs (default 24h)')
    .action(run(async (g, id: string, o: { overlap?: string }) => (await W()).rotate(g, id, o)));
  webhooks.command('replay [event]').description('deliver an event again (same event id), or every event --since a time')
    .option('--subscription <id>', 'only to this subscription').option('--since <time>', 'RFC 3339 time or a duration back from now (2h)').option('--type <kind>', 'with --since: only this event kind')
    .action(run(async (g, ev: string | undefined, o: { subscription?: string; since?: string; type?: string }) => (await W()).replay(g, ev, o)));

  const alerts = program.command('alerts').description("the operator's alert endpoints: operational events (endpoint.failing, settlement.stuck, wallet.low, …) pushed through the outbox; managed against the store (--data-dir / --store), never with a node token");
  const A = () => import('./commands/alerts.js');
  alerts.command('add <url>').description('add an alert endpoint (prints its signing secret once)')
    .option('--events <kinds>', 'comma-separated kinds (default: all): endpoint.failing, endpoint.recovered, endpoint.disabled, delivery.exhausted, settlement.stuck, settlement.failed, settlement.recovered, authorization.expiring, wallet.low, headroom.low, store.unavailable, store.recovered').option('--description <text>')
    .action(run(async (g, url: string, o: { events?: string; description?: string }) => (await A()).add(g, url, o)));
  alerts.command('list').description('alert endpoints, their health, and the conditions raised and not recovered yet').action(run(async (g) => (await A()).list(g)));
  alerts.command('rm <id>').description('remove an alert endpoint (its pending deliveries are cancelled)').action(run(async (g, id: string) => (await A()).rm(g, id)));
  alerts.command('test [id]').description('queue an alert.test event to one alert endpoint, or to every active one (the daemon delivers it)')
    .option('--wait <duration>', 'wait this long (at most 10m) for each endpoint to answer; exit 1 unless every one acknowledged it')
    .action(run(async (g, id: string | undefined, o: { wait?: string }) => (await A()).test(g, id, o)));

  program.command('consume').description('a ready webhook receiver on the reference consumer (verifies, applies, prints)')
    .option('--port <port>', 'port to listen on', '8788').option('--host <host>', 'address', '127.0.0.1')
    .option('--secret <whsec>', 'the subscription secret (comma-separated during a rotation; env NODE_SVC_WEBHOOK_SECRET)')
    .option('--state <file>', 'keep the state in this SQLite file (default: in memory)')
    .action(run(async (g, o: { port: string; host: string; secret?: string; state?: string }) => (await import('./commands/consume.js')).consume(g, o)));

  const D = () => import('./commands/dev.js');
  const devCmd = program.command('dev').description('a complete local sandbox: chain, escrow rail, daemon, webhook receiver, simulated payer (what `npm start` runs)')
    .option('--port <port>', 'daemon port (0 picks a free one)', '8787').option('--pace <seconds>', 'seconds between simulated vouchers', '2').option('--quiet', 'do not print payer and webhook lines')
    .option('--mode <mode>', 'escrow (local chain) or card (local card processor)', 'escrow')
    .action(run(async (g, o: { port: string; pace: string; quiet?: boolean; mode: string }) => (await D()).dev(g, o)));
  devCmd.command('jwks').description("print the sandbox issuer's public keys (a JWKS to trust with keys add --issuer https://issuer.sandbox.node-svc.invalid)")
    .action(run(async (g) => (await D()).jwks(g)));
  devCmd.command('credential').description('mint a credential as the sandbox issuer (prints the bare JWS; --json for the object)')
    .requiredOption('--stream <id>').option('--node <id>', 'the node it is aimed at (aud; default dev-node)').option('--cap <micro>', 'cap in micro units', '5000000').option('--unit-price <micro>', 'micro units per network unit', '100')
    .option('--rate <micro>', 'rate limit, micro units per second').option('--ttl <duration>', 'lifetime', '1h').option('--budget <id>')
    .action(run(async (g, o: { stream: string; node?: string; cap: string; unitPrice: string; rate?: string; ttl: string; budget?: string }) => (await D()).credential(g, o)));
  devCmd.command('voucher').description('sign a voucher as the sandbox payer (prints the bare JWS, or --send it to the daemon)')
    .requiredOption('--stream <id>').requiredOption('--amount <micro>', 'cumulative micro units').option('--units <n>', 'cumulative network units', '0').option('--send', 'POST it to the daemon at --url with --token')
    .option('--credential <jws>', "with --send: the stream's credential, so a stream the daemon has not seen is registered first (\"-\" reads stdin)")
    .action(run(async (g, o: { stream: string; amount: string; units: string; send?: boolean; credential?: string }) => (await D()).voucher(g, o)));
  devCmd.command('control <kind>').description('as the sandbox issuer: revoke (--stream), halt (--budget --reason), release (--budget) — sent to the daemon')
    .option('--stream <id>').option('--budget <id>').option('--reason <r>').option('--amount <micro>').option('--print', 'print the signed message instead of sending it')
    .option('--node <id>', 'the node it is aimed at (aud; default dev-node)')
    .action(run(async (g, kind: string, o: { stream?: string; budget?: string; reason?: string; amount?: string; print?: boolean; node?: string }) => (await D()).control(g, kind, o)));

  program.command('daemon').description('serve the /v1 API (and deliver webhooks) until SIGTERM')
    .addOption(new Option('--host <host>', 'address to listen on').env('NODE_SVC_HOST').default('127.0.0.1'))
    .addOption(new Option('--port <port>', 'port (0 picks a free one)').env('NODE_SVC_PORT').default('8787'))
    .addOption(new Option('--rate-limit <n>', 'requests/s per token, burst 2x (default 1000; 0: off)').env('NODE_SVC_RATE_LIMIT'))
    .addOption(new Option('--retry-schedule <seconds>', 'webhook retry intervals, comma-separated (default 5,300,1800,7200,18000,36000,50400,72000,86400; ±20% jitter)').env('NODE_SVC_RETRY_SCHEDULE'))
    .addOption(new Option('--delivery-timeout <seconds>', 'webhook attempt timeout (default 15)').env('NODE_SVC_DELIVERY_TIMEOUT'))
    .addOption(new Option('--retention <duration>', 'prune delivered webhook deliveries, their attempts and events older than this (default 30d; 0 keeps all; never billed truth or settlements)').env('NODE_SVC_RETENTION'))
    .addOption(new Option('--webhook-allow <cidrs>', 'only deliver to these networks (comma-separated CIDRs)').env('NODE_SVC_WEBHOOK_ALLOW'))
    .addOption(new Option('--webhook-deny <cidrs>', 'never deliver to these networks (link-local and metadata are always refused)').env('NODE_SVC_WEBHOOK_DENY'))
    .addOption(new Option('--max-subscriptions <n>', 'webhook subscriptions per node at most (default 20; beyond: 429 limit_exceeded)').env('NODE_SVC_MAX_SUBSCRIPTIONS'))
    .addOption(new Option('--store-pool <n>', 'PostgreSQL store: write transactions at once, 1 to 100 (default 10); writes beyond wait and commit together. A database sharing this machine\'s cores: fewer (2) cost less CPU per write; one across a network: more overlap its round trips').env('NODE_SVC_STORE_POOL'))
    .addOption(new Option('--store-timeout <seconds>', 'PostgreSQL store: seconds a statement may take, 1 to 3600 (default 10; the sessions\' statement_timeout): then it is canceled and the request answers 503 unavailable; an answer still missing 1 s later closes its connection (a database cut off by the network without a reset would otherwise hold requests for TCP\'s own timers, a quarter of an hour or more)').env('NODE_SVC_STORE_TIMEOUT'))
    .addOption(new Option('--max-redeliveries <n>', 'redeliveries pending per node at most (default 1000; beyond: 429 limit_exceeded)').env('NODE_SVC_MAX_REDELIVERIES'))
    .addOption(new Option('--keep-alive-timeout <seconds>', 'how long an idle keep-alive connection stays open, 1 to 3600 (default 65: longer than the idle timeout of clients and proxies that reuse connections, so the daemon is never the side that closes one as a request is sent on it)').env('NODE_SVC_KEEP_ALIVE_TIMEOUT'))
    .addOption(new Option('--mode <mode>', 'settle on a rail: escrow or card (default: no settlement)').env('NODE_SVC_MODE'))
    .addOption(new Option('--rail <env>', 'sandbox (local dev chain / test keys) or production').env('NODE_SVC_RAIL'))
    .addOption(new Option('--rpc-url <url>', 'escrow: the chain RPC').env('NODE_SVC_RPC_URL'))
    .addOption(new Option('--chain-id <n>', 'escrow: the chain id the RPC must serve').env('NODE_SVC_CHAIN_ID'))
    .addOption(new Option('--contract <address>', 'escrow: the escrow contract').env('NODE_SVC_CONTRACT'))
    .addOption(new Option('--asset-token <address>', 'escrow: the ERC-20 (6 decimals) the operator accepts; required. A channel in any other token is not payable').env('NODE_SVC_ASSET_TOKEN'))
    .addOption(new Option('--rebroadcast-after <duration>', 'escrow: send a settle (or x402 transfer) transaction again when it is not mined this long after it was last sent; from the second time replace it with higher fees (default 30s)').env('NODE_SVC_REBROADCAST_AFTER'))
    .addOption(new Option('--x402-settle-wait <duration>', 'escrow: how long POST /v1/x402/settle waits for its transaction to be mined before it answers settlement_pending (default 10s; 0 answers at once)').env('NODE_SVC_X402_SETTLE_WAIT'))
    .addOption(new Option('--wallet-key-file <file>', 'escrow: file holding the payee wallet private key (hex)').env('NODE_SVC_WALLET_KEY_FILE'))
    .addOption(new Option('--confirmations <n>', 'escrow: blocks deep for final (default 2 in sandbox; 0 uses the finalized block)').env('NODE_SVC_CONFIRMATIONS'))
    .addOption(new Option('--settle-threshold <micro>', 'settle when this much is unsettled (default 1000000)').env('NODE_SVC_SETTLE_THRESHOLD'))
    .addOption(new Option('--settle-interval <duration>', 'settle when the oldest unsettled voucher is this old (default 60s)').env('NODE_SVC_SETTLE_INTERVAL'))
    .addOption(new Option('--settle-poll <duration>', 'how often the settler (and x402\'s tracker) checks the rail when nothing woke it: sent transactions, confirmations, captures, funding (default 1s; 100ms to 60s)').env('NODE_SVC_SETTLE_POLL'))
    .addOption(new Option('--settle-stuck-after <duration>', 'a settlement (or x402 transfer) sent but not mined (captured) this long is stuck: warning log, metric, /healthz degraded (default 60s)').env('NODE_SVC_SETTLE_STUCK_AFTER'))
    .addOption(new Option('--alert-failing-after <n>', 'raise endpoint.failing after this many consecutive failed attempts to one subscription (default 3)').env('NODE_SVC_ALERT_FAILING_AFTER'))
    .addOption(new Option('--alert-wallet-min <wei>', 'escrow: raise wallet.low when the wallet holds less gas than this (wei; default 10000000000000000, 0.01 ETH)').env('NODE_SVC_ALERT_WALLET_MIN'))
    .addOption(new Option('--card-key-file <file>', 'card: processor secret key file (sk_test_/rk_test_ in sandbox, sk_live_/rk_live_ in production; or env NODE_SVC_CARD_KEY)').env('NODE_SVC_CARD_KEY_FILE'))
    .addOption(new Option('--card-account <acct>', "card: the node's connected account id (acct_…)").env('NODE_SVC_CARD_ACCOUNT'))
    .addOption(new Option('--card-webhook-secret-file <file>', "card: the processor webhook endpoint's signing secret (whsec_…)").env('NODE_SVC_CARD_WEBHOOK_SECRET_FILE'))
    .addOption(new Option('--card-api <url>', 'card, sandbox only: the processor API base URL (a local processor for tests and `dev`)').env('NODE_SVC_CARD_API'))
    .addHelpText('after', '\nTraces: OpenTelemetry over OTLP/HTTP when OTEL_EXPORTER_OTLP_ENDPOINT (or OTEL_EXPORTER_OTLP_TRACES_ENDPOINT) is set;\n'
      + 'OTEL_SERVICE_NAME, OTEL_TRACES_SAMPLER(_ARG), OTEL_EXPORTER_OTLP_PROTOCOL and the other standard variables apply;\n'
      + 'off (nothing loaded) without them or with OTEL_SDK_DISABLED=true. README: "Alerts and traces".')
    .action(async (o: import('./commands/daemon.js').DaemonFlags, cmd: Command) => {
      // Where each value came from, so <data-dir>/config.json fills only what env and flags left at default.
      const sources = Object.fromEntries(cmd.options.map((opt) => [opt.attributeName(), cmd.getOptionValueSource(opt.attributeName())]));
      sink(await (await import('./commands/daemon.js')).daemon(globals(cmd), o, sources));
    });

  program.command('watch').description("live view of the node's streams and webhook delivery health: attention first, / filter, c closed, tab subscriptions, ? keys (one JSON snapshot when piped or with --json)")
    .option('--interval <seconds>', 'seconds between refreshes', '1')
    .action(run(async (g, o: { interval: string }) => (await import('./commands/watch.js')).watch(g, o)));

  for (const name of ['status', 'doctor'])
    program.command(name).description(name === 'status' ? "the daemon's health at a glance: reachable, version, node, keys, rail, outbox, settlements, subscriptions (exit 0 healthy, 1 degraded, 4 unreachable)" : 'same as status')
      .action(run(async (g) => (await import('./commands/status.js')).status(g)));

  program.command('restore <backup>').description('replace the store with a backup made by `backup` (the daemon must be stopped; the current store is kept beside it)')
    .action(run(async (g, file: string) => (await import('./commands/backup.js')).restore(g, file)));

  program.command('backup <file>').description('online backup of the store (consistent while the daemon runs)').option('--force', 'overwrite the file')
    .action(run(async (g, file: string, o: { force?: boolean }) => (await import('./commands/backup.js')).backup(g, file, o)));

  program.command('version').description('print the version').action(run(async () => ({ data: { version: VERSION }, human: VERSION })));
  return program;
}
