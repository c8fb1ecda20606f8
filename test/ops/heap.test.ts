// The daemon's young generation (src/ops/heap.ts): kept at its first size while modules load, then let grow under
// load up to NODE_SVC_SEMI_SPACE_MB per semi-space and no further. Run in child processes: V8's flags are per process.
import { execFile } from 'node:child_process';
import { join } from 'node:path';
import { pathToFileURL } from 'node:url';
import { describe, expect, it } from 'vitest';
import { REPO_ROOT, runCli, tempDataDir } from '../helpers/cli.js';

const HEAP = pathToFileURL(join(REPO_ROOT, 'dist', 'ops', 'heap.js')).href;
// Allocates in turns of the event loop (as requests do), most of it short-lived and some kept, and reports the young
// generation's semi-space (its usable capacity, in whole MB) at the start, its largest and at the end.
const SCRIPT = `
import v8 from 'node:v8';
import { boundHeapGrowth, growYoungGeneration, semiSpaceMb } from '${HEAP}';
boundHeapGrowth();
const young = () => { const s = v8.getHeapSpaceStatistics().find((s) => s.space_name === 'new_space'); return Math.round((s.space_used_size + s.space_available_size) / 1048576); };
const first = young();
if (process.env.GROW === '1') growYoungGeneration(semiSpaceMb());
let max = first, keep = [], i = 0;
const turn = () => {
  for (let k = 0; k < 3000; k++) keep.push({ k, s: 'x' + k });
  if (keep.length > 150000) keep = keep.slice(-50000);
  max = Math.max(max, young());
  if (++i < 300) setImmediate(turn); else console.log(JSON.stringify({ first, max, last: young() }));
};
turn();
`;

function run(env: Record<string, string>): Promise<{ first: number; max: number; last: number }> {
  const clean = Object.fromEntries(Object.entries(process.env).filter(([k]) => !k.startsWith('NODE_SVC_')));
  return new Promise((resolve, reject) => {
    execFile(process.execPath, ['--input-type=module', '-e', SCRIPT], { env: { ...clean, ...env }, timeout: 30_000 }, (err, stdout, stderr) => {
      if (err) return reject(new Error(`${err.message}\n${stderr}`));
      resolve(JSON.parse(stdout));
    });
  });
}

describe('the young generation under load', () => {
  it('grows to 4 MB by default and stops there', async () => {
    const r = await run({ GROW: '1' });
    expect(r.first).toBe(1);
    expect(r.max).toBe(4);
  });

  it('NODE_SVC_SEMI_SPACE_MB sets the size it stops at; 1, and the growth factor set at the process start alone, keep V8\'s first 1 MB', async () => {
    // boundHeapGrowth alone (the daemon while its modules load): never grown.
    expect((await run({})).max).toBe(1);
    expect((await run({ GROW: '1', NODE_SVC_SEMI_SPACE_MB: '1' })).max).toBe(1);
    expect((await run({ GROW: '1', NODE_SVC_SEMI_SPACE_MB: '2' })).max).toBe(2);
    expect((await run({ GROW: '1', NODE_SVC_SEMI_SPACE_MB: '8' })).max).toBe(8);
  });

  it('NODE_SVC_SEMI_SPACE_GROWTH_FACTOR overrides it: V8 grows past 4 MB', async () => {
    expect((await run({ GROW: '1', NODE_SVC_SEMI_SPACE_GROWTH_FACTOR: '2' })).max).toBeGreaterThan(4);
  });

  it('a daemon refuses to start on a NODE_SVC_SEMI_SPACE_MB it cannot use, and names it', async () => {
    const d = await tempDataDir();
    try {
      for (const bad of ['abc', '0', '17', '2.5']) {
        const r = await runCli(['--data-dir', d.dataDir, 'daemon', '--port', '0', '--host', '127.0.0.1'], { env: { NODE_SVC_SEMI_SPACE_MB: bad } });
        expect(r.code).not.toBe(0);
        expect(JSON.parse(r.stderr).error).toEqual({ code: 'config', message: `NODE_SVC_SEMI_SPACE_MB must be a whole number of MB from 1 to 16 (got "${bad}")`, hint: 'unset it for the default (4 MB)' });
      }
    } finally {
      await d.cleanup();
    }
  });
});
