// verify's fast path reads its arguments without node's parseArgs (src/cli/verify-args.ts): whatever it takes, it must
// take as parseArgs did (the reader it replaced); whatever else, it leaves to commander.
import { parseArgs } from 'node:util';
import { describe, expect, it } from 'vitest';
import { verifyArgs } from '../../src/cli/verify-args.js';

const OPTIONS = { node: { type: 'string' }, remote: { type: 'boolean' }, json: { type: 'boolean' }, 'data-dir': { type: 'string' }, url: { type: 'string' }, token: { type: 'string' } } as const;
const byParseArgs = (args: string[]) => {
  try {
    const p = parseArgs({ args, allowPositionals: true, options: OPTIONS });
    return p.positionals.length === 1 ? { jws: p.positionals[0], values: { ...p.values } } : undefined;
  } catch {
    return undefined;
  }
};

describe('verifyArgs', () => {
  it('reads the forms scripts use, as parseArgs does', () => {
    const taken = [
      ['eyJ.a.b'], ['-'], ['eyJ.a.b', '--node', 'node-a'], ['--node', 'node-a', 'eyJ.a.b'], ['--node=node-a', 'eyJ.a.b', '--json'],
      ['eyJ.a.b', '--data-dir', '/tmp/d', '--node', 'n'], ['--remote', '--url', 'http://127.0.0.1:8787', '--token', 'nsk_x', 'eyJ.a.b'],
      ['eyJ.a.b', '--node='], ['--data-dir=/a=b', 'eyJ.a.b'], ['verify', '--node', 'verify'],
    ];
    for (const args of taken) {
      const mine = verifyArgs(args);
      expect(mine, args.join(' ')).toBeDefined();
      expect(mine, args.join(' ')).toEqual(byParseArgs(args));
    }
  });

  it('leaves everything else to commander: short options, --, unknown or repeated options, a value like an option, a switch with a value, no credential or two', () => {
    const left = [
      [], ['-h'], ['eyJ.a.b', '-n', 'x'], ['--', 'eyJ.a.b'], ['eyJ.a.b', '--format', 'json'], ['eyJ.a.b', '--node', 'a', '--node', 'b'],
      ['eyJ.a.b', '--node', '--json'], ['eyJ.a.b', '--node'], ['eyJ.a.b', '--remote=yes'], ['--json=1', 'eyJ.a.b'], ['a', 'b'], ['--json'],
      ['eyJ.a.b', '--constructor', 'x'], ['eyJ.a.b', '--toString'], ['-eyJ.a.b'],
    ];
    for (const args of left) expect(verifyArgs(args), args.join(' ')).toBeUndefined();
  });
});
