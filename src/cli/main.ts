// The one place that exits (changesets/wrangler habit): commands throw typed errors, this maps them to exit codes.
import { EXIT, NodeSvcError } from '../domain/errors.js';
import { buildProgram } from './program.js';
import { render, renderError, type CommandResult } from './output.js';

process.umask(0o077); // data dir 0700, database and its WAL files 0600

const argv = process.argv.slice(2);
const jsonFlag = argv.includes('--json') || !process.stdout.isTTY;

async function main(): Promise<number> {
  let result: CommandResult | undefined;
  const program = buildProgram((r) => { result = r; });
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
  if (result.data !== undefined) process.stdout.write(render(result, jsonFlag));
  return result.exitCode ?? EXIT.ok;
}

main().then(
  (code) => { process.exitCode = code; },
  (err: unknown) => {
    if (err instanceof NodeSvcError) {
      process.stderr.write(renderError(err, jsonFlag));
      process.exitCode = err.exitCode;
    } else {
      // Not ours: say so without a stack trace (which could carry a secret-bearing argument).
      const e = new NodeSvcError('internal', `unexpected error: ${err instanceof Error ? err.message : String(err)}`);
      process.stderr.write(renderError(e, jsonFlag));
      process.exitCode = EXIT.other;
    }
  },
);
