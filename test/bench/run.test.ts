// bench/run.mjs: finds every bench script (not itself, not lib/), runs each, and summarises their result lines.
import { execFile } from 'node:child_process';
import { mkdirSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { REPO_ROOT, tempDataDir, type TempDataDir } from '../helpers/cli.js';

let t: TempDataDir;
const line = (bench: string, results: unknown[]) => `console.log('some figures'); console.log(${JSON.stringify(JSON.stringify({ bench, results }))});`;

beforeAll(async () => {
  t = await tempDataDir('node-svc-bench-run-');
  mkdirSync(join(t.root, 'lib'));
  writeFileSync(join(t.root, 'alpha.mjs'), line('alpha', [{ name: 'rate ratio', figure: 0.7, unit: 'ratio', target: '>= 0.4', pass: true }]));
  writeFileSync(join(t.root, 'beta.mjs'), `${line('beta', [{ name: 'p99', figure: 12, unit: 'ms', target: '< 10', pass: false }])} process.exitCode = 1;`);
  writeFileSync(join(t.root, 'gamma.mjs'), "console.log('figures for the record only');");
  writeFileSync(join(t.root, 'lib', 'helper.mjs'), "throw new Error('a helper is not a bench');");
  writeFileSync(join(t.root, 'run.mjs'), "throw new Error('the runner does not run itself');");
});
afterAll(async () => { await t?.cleanup(); });

// No waiting for a quiet machine between the fake scripts (the suite keeps the machine busy): `sync` only.
const run = (args: string[] = []) =>
  new Promise<{ code: number; stdout: string }>((resolve) => {
    execFile(process.execPath, [join(REPO_ROOT, 'bench', 'run.mjs'), ...args], { env: { ...process.env, BENCH_DIR: t.root, BENCH_SETTLE_MAX_S: '0' }, timeout: 30_000 }, (err, stdout) =>
      resolve({ code: err ? Number((err as { code?: number }).code ?? 1) : 0, stdout }));
  });

describe('bench/run.mjs', () => {
  it('runs every script, prints one summary with targets, figures, PASS/MISS and run times, and exits 1 on a miss', async () => {
    const r = await run();
    expect(r.code).toBe(1);
    const summary = r.stdout.slice(r.stdout.indexOf('=== summary'));
    expect(summary).toMatch(/=== summary \(3 scripts, \d+ s\) ===/);
    expect(summary).toMatch(/^alpha\s+rate ratio\s+>= 0\.4\s+0\.7 ratio\s+PASS\s+\d+\.\d s$/m);
    expect(summary).toMatch(/^beta\s+p99\s+< 10\s+12 ms\s+MISS\s+\d+\.\d s$/m);
    expect(summary).toMatch(/^gamma\s+\(no result line: figures printed above\)\s+-\s+-\s+ok\s+\d+\.\d s$/m);
    expect(summary).toMatch(/1 missed or failed/);
    expect(r.stdout).not.toMatch(/helper is not a bench|does not run itself/);
  });

  it('runs only the named scripts; all met → exit 0; an unknown name is exit 2', async () => {
    const ok = await run(['alpha', 'gamma']);
    expect(ok.code).toBe(0);
    expect(ok.stdout).toMatch(/all targets met/);
    expect(ok.stdout).not.toMatch(/^beta/m);
    expect((await run(['nope'])).code).toBe(2);
  });
});
