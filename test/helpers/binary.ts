// dist/node-svc (npm run build:binary), built when missing or older than what tsc last wrote to dist/. Test files that
// need it at once (binary.test.ts, container.test.ts) build it once: the build holds a lock directory beside it.
import { execFileSync } from 'node:child_process';
import { mkdirSync, readdirSync, rmSync, statSync } from 'node:fs';
import { join } from 'node:path';
import { REPO_ROOT } from './cli.js';

export const DIST = join(REPO_ROOT, 'dist');
export const BINARY = join(DIST, 'node-svc');
const LOCK = join(DIST, '.node-svc.build-lock');
/** A lock older than a build can take was left by a killed run. */
const STALE_LOCK_MS = 240_000;

/** The newest .js under dist/ (what tsc last wrote), to rebuild a binary older than the code it bundles. */
function newestJs(dir: string): number {
  let newest = 0;
  for (const e of readdirSync(dir, { withFileTypes: true })) {
    const p = join(dir, e.name);
    if (e.isDirectory()) newest = Math.max(newest, newestJs(p));
    else if (e.name.endsWith('.js')) newest = Math.max(newest, statSync(p).mtimeMs);
  }
  return newest;
}

function fresh(): boolean {
  try {
    return statSync(BINARY).mtimeMs > newestJs(DIST);
  } catch {
    return false;
  }
}

const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));

/** Build dist/node-svc unless it is fresh (about 15 s, more on a busy machine); waits for a build in progress elsewhere. */
export async function ensureBinary(): Promise<string> {
  const end = Date.now() + STALE_LOCK_MS;
  for (;;) {
    if (fresh()) return BINARY;
    try {
      mkdirSync(LOCK);
      break;
    } catch (err) {
      if ((err as NodeJS.ErrnoException).code !== 'EEXIST') throw err;
      let age = 0;
      try {
        age = Date.now() - statSync(LOCK).mtimeMs;
      } catch {
        continue; // released meanwhile
      }
      if (age > STALE_LOCK_MS) rmSync(LOCK, { recursive: true, force: true });
      else if (Date.now() > end) throw new Error(`dist/node-svc: another build held ${LOCK} for ${Math.round(age / 1000)} s`);
      else await sleep(500);
    }
  }
  try {
    if (!fresh()) execFileSync(process.execPath, [join(DIST, 'sea', 'build.js')], { cwd: REPO_ROOT, stdio: ['ignore', 'ignore', 'pipe'], timeout: 170_000 });
  } finally {
    rmSync(LOCK, { recursive: true, force: true });
  }
  return BINARY;
}
