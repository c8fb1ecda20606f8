// `verify`'s arguments as scripts pass them, read without a parser module (cli/main.ts's fast path, bench/cli-start:
// node's parseArgs cost ~0.6 ms of a verify start, most of it loading and compiling itself). It takes a subset of what
// parseArgs would take, with the same meaning; anything else is left to commander, the CLI's one real parser.

/** verify's options that take a value. */
const VALUED = new Set(['node', 'data-dir', 'url', 'token']);
/** verify's switches. */
const SWITCHES = new Set(['remote', 'json']);

export interface VerifyArgs {
  /** The credential, or `-` for stdin. */
  jws: string;
  values: { node?: string; 'data-dir'?: string; url?: string; token?: string; remote?: true; json?: true };
}

/**
 * `args` (the command line without the word `verify`): one positional and verify's own long options, each at most
 * once, as `--name value`, `--name=value` or `--switch`. Undefined for anything else: a short option, `--`, an
 * unknown or repeated option, a value that starts with `-`, a switch given a value, no positional or two.
 */
export function verifyArgs(args: readonly string[]): VerifyArgs | undefined {
  const values: Record<string, string | true> = {};
  let jws: string | undefined;
  for (let k = 0; k < args.length; k++) {
    const a = args[k]!;
    if (a.startsWith('--') && a.length > 2) {
      const eq = a.indexOf('=');
      const name = eq < 0 ? a.slice(2) : a.slice(2, eq);
      if (Object.hasOwn(values, name)) return undefined;
      if (SWITCHES.has(name) && eq < 0) values[name] = true;
      else if (VALUED.has(name)) {
        const v = eq < 0 ? args[++k] : a.slice(eq + 1);
        if (v === undefined || (eq < 0 && v.startsWith('-'))) return undefined;
        values[name] = v;
      } else return undefined;
    } else if (a.startsWith('-') && a !== '-') return undefined;
    else if (jws !== undefined) return undefined;
    else jws = a;
  }
  return jws === undefined ? undefined : { jws, values: values as VerifyArgs['values'] };
}
