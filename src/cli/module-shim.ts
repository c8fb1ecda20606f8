// Stands in for `node:module` in store/db.ts inside the CLI bundle (src/build/cli-bundle.ts redirects that one import
// here; src/sea/module-shim.ts is the binary's counterpart). Its createRequire answers `require('better-sqlite3')` with
// the copy of better-sqlite3's JavaScript bundled beside this module: that saves resolving, reading and compiling the
// package's 13 files on every verify start (about a tenth of `node -e 0`, bench/cli-start). Only when the installed
// better-sqlite3, whose native addon is loaded either way, is the very version bundled; otherwise, or with
// NODE_SVC_SQLITE_ADDON naming some other addon, the installed package as before.
import Bundled from 'better-sqlite3';
import { readFileSync } from 'node:fs';
import { createRequire as nodeCreateRequire } from 'node:module';
import { dirname, join } from 'node:path';

/** The version of the better-sqlite3 bundled, set by the bundler (esbuild `define`). */
declare const NODE_SVC_BUNDLED_SQLITE: string;

const ADDON_ID = 'better-sqlite3/build/Release/better_sqlite3.node';

export function createRequire(from: string | URL): NodeJS.Require {
  const real = nodeCreateRequire(from);
  let addon: string | undefined;
  const resolve = ((id: string, options?: { paths?: string[] }) =>
    id === ADDON_ID && !options ? (addon ??= real.resolve(id)) : real.resolve(id, options)) as NodeJS.RequireResolve;
  resolve.paths = real.resolve.paths;
  /** The installed better-sqlite3 is the bundled version: its package.json, three levels above its addon. */
  const sameVersion = (): boolean => {
    if (process.env.NODE_SVC_SQLITE_ADDON) return false;
    try {
      const pkg = JSON.parse(readFileSync(join(dirname(resolve(ADDON_ID)), '..', '..', 'package.json'), 'utf8')) as { name?: unknown; version?: unknown };
      return pkg.name === 'better-sqlite3' && pkg.version === NODE_SVC_BUNDLED_SQLITE;
    } catch {
      return false;
    }
  };
  const require = ((id: string): unknown => (id === 'better-sqlite3' && sameVersion() ? Bundled : real(id))) as NodeJS.Require;
  return Object.assign(require, { resolve, cache: real.cache, main: real.main, extensions: real.extensions });
}
