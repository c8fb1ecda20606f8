// Stands in for `node:module` in our own modules inside the binary (build.ts redirects their imports of it here).
// Their `createRequire(import.meta.url)` then gets a require that finds better-sqlite3 in the bundle, and says
// plainly when a development-only package (ganache, solc) is not in the binary. Only createRequire is provided:
// importing anything else of node:module from our code fails the build, loudly.
import { createRequire as nodeCreateRequire } from 'node:module';
import { NodeSvcError } from '../domain/errors.js';
import { SQLITE_ADDON_ID } from './manifest.js';
import { bundledDatabase, sqliteAddonPath } from './sqlite.js';

export function createRequire(from: string | URL): NodeJS.Require {
  // node's own require made on first use: the store's (better-sqlite3 and its addon) never needs it, and making it is
  // ~0.4 ms of a verify start (bench/cli-start).
  let made: NodeJS.Require | undefined;
  const real = () => (made ??= nodeCreateRequire(from));
  const require = ((id: string): unknown => {
    if (id === 'better-sqlite3') return bundledDatabase();
    try {
      return real()(id);
    } catch (err) {
      throw notInBinary(id, err);
    }
  }) as NodeJS.Require;
  const resolve = ((id: string, options?: { paths?: string[] }) =>
    id === SQLITE_ADDON_ID ? sqliteAddonPath() : real().resolve(id, options)) as NodeJS.RequireResolve;
  resolve.paths = (request: string) => real().resolve.paths(request);
  return Object.defineProperties(Object.assign(require, { resolve }), {
    cache: { get: () => real().cache, enumerable: true },
    main: { get: () => real().main, enumerable: true },
    extensions: { get: () => real().extensions, enumerable: true },
  });
}

function notInBinary(id: string, err: unknown): unknown {
  const e = err as { code?: unknown; message?: unknown };
  // Only the package asked for: a dependency missing inside an installed package keeps node's own error.
  if (e?.code !== 'MODULE_NOT_FOUND' || typeof e.message !== 'string' || !e.message.startsWith(`Cannot find module '${id}'`)) return err;
  return new NodeSvcError('config', `the node-svc single binary does not include the "${id}" package`, {
    hint: `"${id}" is only used by development commands (such as \`node-svc dev\`): run those from the npm package (npm install node-svc), or install ${id} in a node_modules directory next to the binary`,
  });
}
