// A fault nothing in the daemon caught still ends it (exit code 1, as Node's default), but its last log line names it
// (src/cli/stop.ts, logFatalFaults). The fault is planted by a module preloaded into the real daemon's process
// (NODE_OPTIONS=--import): no input of the API can cause one, which is the point of the line.
import { writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { afterEach, describe, expect, it } from 'vitest';
import { tempDataDir, type TempDataDir } from '../helpers/cli.js';
import { startDaemon } from '../helpers/daemon.js';

describe('a fault nothing caught', () => {
  let dir: TempDataDir | undefined;
  afterEach(async () => { await dir?.cleanup(); });

  for (const [origin, plant] of [
    ['unhandled rejection', "Promise.reject(new Error('planted at https://user:pw@rpc.example/key?token=abc'))"],
    ['uncaught exception', "throw new TypeError('planted at https://user:pw@rpc.example/key?token=abc')"],
  ] as const)
    it(`${origin}: the daemon logs "daemon crashed" with it (URLs redacted), then exits 1`, async () => {
      dir = await tempDataDir('node-svc-crash-');
      const pre = join(dir.root, 'plant.mjs');
      // Planted when the test says so (SIGUSR2), once the daemon is up and serving.
      writeFileSync(pre, `process.on('SIGUSR2', () => { ${plant}; });\n`);
      const d = await startDaemon(dir.dataDir, { env: { NODE_OPTIONS: `--import=${pre}` } });
      const code = await d.stop('SIGUSR2');
      expect(code).toBe(1);
      const lines = d.stderr.trim().split('\n');
      const last = JSON.parse(lines[lines.length - 1]!) as Record<string, string>;
      expect(last).toMatchObject({ level: 'error', msg: 'daemon crashed', origin, error: origin === 'uncaught exception' ? 'TypeError' : 'Error' });
      expect(last.message).toMatch(/^planted at https:\/\//);
      expect(last.stack).toContain('plant.mjs');
      expect(lines.some((l) => l.includes('daemon started'))).toBe(true);
      expect(d.stderr).not.toMatch(/pw@|token=abc/);
    });
});
