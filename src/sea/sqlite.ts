// better-sqlite3 inside the binary: its JS is bundled, its addon is the embedded one, dlopen()ed from the cache dir,
// so nothing searches node_modules (there is none next to a copied binary) or calls `bindings`.
import Database from 'better-sqlite3';
import { NodeSvcError } from '../domain/errors.js';
import { extract, isSea, manifest } from './assets.js';

// On globalThis: the TUI bundle carries its own copy of this module and must not dlopen a second time.
const ADDON = Symbol.for('node-svc.sea.sqlite-addon');

/** NODE_SVC_SQLITE_ADDON when set (same meaning as outside the binary), else the embedded addon, extracted. */
export function sqliteAddonPath(): string {
  const override = process.env.NODE_SVC_SQLITE_ADDON;
  if (override) return override;
  if (!isSea()) throw new NodeSvcError('store', 'this bundle only finds its SQLite addon when run as the node-svc binary', { hint: 'set NODE_SVC_SQLITE_ADDON to a better_sqlite3.node' });
  return extract(manifest().sqlite, 'better_sqlite3.node');
}

export function sqliteAddon(): object {
  const g = globalThis as { [ADDON]?: object };
  if (g[ADDON]) return g[ADDON];
  const path = sqliteAddonPath();
  const mod = { exports: {} };
  try {
    process.dlopen(mod, path);
  } catch (err) {
    throw new NodeSvcError('store', `cannot load the SQLite addon ${path}: ${(err as Error).message}`);
  }
  return (g[ADDON] = mod.exports);
}

type DatabaseConstructor = typeof Database;
let database: DatabaseConstructor | undefined;

// Whatever nativeBinding the caller passed (a path that the bundle's require could not load, or none at all,
// which would mean `bindings`), the loaded addon object is what better-sqlite3 gets.
const withAddon = ([filename, options, ...rest]: unknown[]) => [filename, { ...(options as object | undefined), nativeBinding: sqliteAddon() }, ...rest];

/** better-sqlite3's Database, with `new Database(...)` and `Database(...)` both given the embedded addon. */
export function bundledDatabase(): DatabaseConstructor {
  return (database ??= new Proxy(Database, {
    construct: (target, args: unknown[], newTarget: Function) => Reflect.construct(target as Function, withAddon(args), newTarget) as object,
    apply: (target, _this, args: unknown[]) => Reflect.construct(target as Function, withAddon(args)) as object,
  }));
}
