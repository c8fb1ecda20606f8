// `npm run build` (after tsc): writes the commit the tree is at into dist/version.js, before anything bundles it, so
// node_svc_build_info{commit} names the build (the CLI bundle and the single binary are made from dist). A tree
// without git (a tarball) keeps "unknown".
import { execFileSync } from 'node:child_process';
import { readFileSync, writeFileSync } from 'node:fs';
import { fileURLToPath } from 'node:url';

const FILE = fileURLToPath(new URL('../version.js', import.meta.url)); // dist/build/commit.js → dist/version.js
const ASSIGNMENT = /export const COMMIT = '[^']*';/;

function headCommit(): string {
  try {
    const out = execFileSync('git', ['rev-parse', '--short=12', 'HEAD'], { cwd: fileURLToPath(new URL('../..', import.meta.url)), encoding: 'utf8', stdio: ['ignore', 'pipe', 'ignore'] }).trim();
    return /^[0-9a-f]{12}$/.test(out) ? out : 'unknown';
  } catch {
    return 'unknown';
  }
}

const source = readFileSync(FILE, 'utf8');
if (!ASSIGNMENT.test(source)) throw new Error(`${FILE}: no COMMIT assignment to stamp (src/version.ts changed?)`);
writeFileSync(FILE, source.replace(ASSIGNMENT, `export const COMMIT = '${headCommit()}';`));
