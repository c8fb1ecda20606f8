// commander only parses; each command module is imported when it runs, so `verify` never loads Hono or ink.
import { Command, Option } from 'commander';
import type { CommandResult, GlobalOptions } from './output.js';

type Sink = (r: CommandResult) => void;

export const VERSION = '0.1.0';

export function buildProgram(sink: Sink): Command {
  const program = new Command('node-svc')
    .description('Allowance verification, stream finality and signed webhooks for serviceNodes')
    .version(VERSION, '-V, --version')
    .addOption(new Option('--data-dir <dir>', 'data directory (env NODE_SVC_DATA_DIR; default ./data)'))
    .addOption(new Option('--url <url>', 'daemon URL for client commands').env('NODE_SVC_URL').default('http://127.0.0.1:8787'))
    .addOption(new Option('--token <token>', 'bearer token for client commands').env('NODE_SVC_TOKEN'))
    .option('--json', 'print JSON (the default when stdout is not a terminal)')
    .exitOverride()
    .showHelpAfterError('(run with --help for usage)')
    .enablePositionalOptions(false);

  const globals = (cmd: Command): GlobalOptions => cmd.optsWithGlobals() as GlobalOptions;
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

  program.command('daemon').description('serve the /v1 API (and deliver webhooks) until SIGTERM')
    .addOption(new Option('--host <host>', 'address to listen on').env('NODE_SVC_HOST').default('127.0.0.1'))
    .addOption(new Option('--port <port>', 'port (0 picks a free one)').env('NODE_SVC_PORT').default('8787'))
    .addOption(new Option('--rate-limit <n>', 'requests/s per token, burst 2x (0: off; env NODE_SVC_RATE_LIMIT)'))
    .action(run(async (g, o: import('./commands/daemon.js').DaemonFlags) => (await import('./commands/daemon.js')).daemon(g, o)));

  program.command('version').description('print the version').action(run(async () => ({ data: { version: VERSION }, human: VERSION })));
  return program;
}
