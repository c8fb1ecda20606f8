// The TUI inside the binary: ink's dependencies use top-level await, which a CJS bundle cannot hold, so build.ts
// bundles it as an ESM asset and turns `import('…/tui/x.js')` into importTui('x.js'): extract it, then import it.
import { existsSync, renameSync, writeFileSync } from 'node:fs';
import { createRequire } from 'node:module';
import { join } from 'node:path';
import { pathToFileURL } from 'node:url';
import { NodeSvcError } from '../domain/errors.js';
import { cacheDir, extract, manifest } from './assets.js';

// import() from a file that a real require loaded works whatever the SEA main script supports (code cache included).
const IMPORTER = "'use strict';\nmodule.exports = (url) => import(url);\n";
const IMPORTER_FILE = 'import-1.cjs'; // bump the number when IMPORTER changes

function importer(): (url: string) => Promise<unknown> {
  const path = join(cacheDir(), IMPORTER_FILE);
  if (!existsSync(path)) {
    const tmp = `${path}.${process.pid}.tmp`;
    writeFileSync(tmp, IMPORTER, { mode: 0o600 });
    renameSync(tmp, path);
  }
  return createRequire(path)(path) as (url: string) => Promise<unknown>;
}

/** The TUI module `entry` (its path under dist/tui, e.g. `watch.js`), as `import()` would have returned it. */
export async function importTui(entry: string): Promise<unknown> {
  const file = manifest().tui[entry];
  if (!file) throw new NodeSvcError('internal', `the TUI module ${entry} is not in this binary`);
  const path = extract(file, entry.replace(/[\\/]/g, '_').replace(/\.js$/, '.mjs'));
  return importer()(pathToFileURL(path).href);
}
