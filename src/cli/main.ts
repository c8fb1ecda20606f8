// The one place that exits (changesets/wrangler habit): commands throw typed errors, this maps them to exit codes.
import { writeSync } from 'node:fs';
import { EXIT, isNodeSvcError, NodeSvcError } from '../domain/errors.js';
import { FORMATS, isTerminal, outputFormat, render, renderError, type CommandResult, type Format } from './output.js';
import { verifyArgs } from './verify-args.js';

process.umask(0o077); // data dir 0700, database and its WAL files 0600

/**
 * process.stdout and process.stderr, created on first use (a pipe's stream costs a verify start a few ms: bench/cli-start),
 * with a reader that went away (`node-svc streams list --all | head -1`) ending the run quietly with 0.
 */
let guarded = false;
function stdio(): NodeJS.Process {
  if (!guarded) {
    guarded = true;
    for (const s of [process.stdout, process.stderr])
      s.on('error', (err: NodeJS.ErrnoException) => {
        if (err.code === 'EPIPE') process.exit(0);
        throw err;
      });
  }
  return process;
}

/**
 * All of `text` to fd 1 without creating process.stdout; EPIPE as above; a full non-blocking pipe gets the stream.
 * True when every byte was written here (nothing left in a stream's buffer).
 */
function writeOut(text: string): boolean {
  const buf = Buffer.from(text);
  for (let off = 0; off < buf.length;) {
    try {
      off += writeSync(1, buf, off);
    } catch (err) {
      const code = (err as NodeJS.ErrnoException).code;
      if (code === 'EPIPE') process.exit(0);
      if (code !== 'EAGAIN') throw err;
      stdio().stdout.write(buf.subarray(off));
      return false;
    }
  }
  return true;
}

const argv = process.argv.slice(2);
const explicitJson = argv.includes('--json');
const formatArg = ((): string | undefined => {
  const i = argv.findIndex((a) => a === '--format' || a.startsWith('--format='));
  if (i < 0) return undefined;
  return argv[i]!.includes('=') ? argv[i]!.slice('--format='.length) : argv[i + 1];
})();
const format = FORMATS.includes(formatArg as Format) ? (formatArg as Format) : undefined;
const jsonFlag = format ? format !== 'table' : explicitJson || !isTerminal(1);
const text = (r: CommandResult) => render(r, outputFormat(r, { format, json: jsonFlag, explicitJson }));

/**
 * `verify` is what scripts call on every credential: its arguments read by verifyArgs, so that commander (and
 * everything else) stays unloaded (bench/cli-start). Anything unusual falls through to commander.
 */
async function fastVerify(): Promise<CommandResult | undefined> {
  const i = argv.indexOf('verify');
  if (i < 0 || argv.includes('--help') || argv.includes('-h')) return undefined;
  const parsed = verifyArgs(argv.filter((_, k) => k !== i));
  if (!parsed) return undefined;
  const v = parsed.values;
  const { verify } = await import('./commands/verify.js');
  return verify(
    {
      dataDir: v['data-dir'], url: v.url ?? process.env.NODE_SVC_URL ?? 'http://127.0.0.1:8787', token: v.token ?? process.env.NODE_SVC_TOKEN, json: v.json,
      urlFrom: v.url !== undefined ? 'cli' : process.env.NODE_SVC_URL !== undefined ? 'env' : 'default',
    },
    parsed.jws,
    { node: v.node, remote: v.remote },
  );
}

async function main(): Promise<number> {
  if (argv[0] === 'verify' || (argv.includes('verify') && argv[0]?.startsWith('--'))) {
    const fast = await fastVerify();
    if (fast) {
      const code = fast.exitCode ?? EXIT.ok;
      // The answer is on fd 1 and the store closed: the run ends here, without node tearing its environment down
      // first (freeing the heap, cleanup hooks: about 2.5 ms of a verify start, bench/cli-start). When part of the
      // answer waits in a stream's buffer (a full pipe), the run ends as any other, once it is written.
      if (writeOut(text(fast))) process.exit(code);
      return code;
    }
  }
  stdio();
  let result: CommandResult | undefined;
  const { buildProgram } = await import('./program.js');
  const program = buildProgram((r) => { result = r; }, jsonFlag);
  try {
    await program.parseAsync(process.argv);
  } catch (err) {
    const e = err as { code?: string; exitCode?: number };
    if (typeof e.code === 'string' && e.code.startsWith('commander.')) {
      // commander already printed its message (help, version, usage error)
      return e.code === 'commander.helpDisplayed' || e.code === 'commander.version' || e.code === 'commander.help' ? EXIT.ok : EXIT.usage;
    }
    throw err;
  }
  if (!result) return EXIT.ok;
  if (result.data !== undefined) process.stdout.write(text(result));
  return result.exitCode ?? EXIT.ok;
}

main().then(
  (code) => { process.exitCode = code; },
  (err: unknown) => {
    // isNodeSvcError, not instanceof: other commands run on modules that carry their own copy of the class.
    if (isNodeSvcError(err)) {
      stdio().stderr.write(renderError(err, jsonFlag));
      process.exitCode = err.exitCode;
    } else {
      // Not ours: say so without a stack trace (which could carry a secret-bearing argument).
      const e = new NodeSvcError('internal', `unexpected error: ${err instanceof Error ? err.message : String(err)}`);
      stdio().stderr.write(renderError(e, jsonFlag));
      process.exitCode = EXIT.other;
    }
  },
);
