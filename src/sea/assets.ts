// The binary's embedded files, extracted on first use to a per-user cache dir so that dlopen() and import() can load them.
import { lstatSync, mkdirSync, renameSync, statSync, writeFileSync } from 'node:fs';
import { homedir, tmpdir } from 'node:os';
import { isAbsolute, join } from 'node:path';
import { randomBytes } from 'node:crypto';
import * as sea from 'node:sea';
import { NodeSvcError } from '../domain/errors.js';
import { MANIFEST_ASSET, type EmbeddedFile, type SeaManifest } from './manifest.js';

export const isSea = (): boolean => sea.isSea();

let manifestCache: SeaManifest | undefined;
export function manifest(): SeaManifest {
  return (manifestCache ??= JSON.parse(Buffer.from(sea.getRawAsset(MANIFEST_ASSET) as ArrayBuffer).toString('utf8')) as SeaManifest);
}

let dirCache: string | undefined;
/**
 * `$XDG_CACHE_HOME/node-svc` (default ~/.cache/node-svc), else `<tmpdir>/node-svc-<uid>`: created 0700 and used
 * only when it is a real directory of ours that nobody else can write (we dlopen what is in it).
 */
export function cacheDir(): string {
  if (dirCache) return dirCache;
  const xdg = process.env.XDG_CACHE_HOME;
  const uid = process.getuid?.();
  const candidates = [
    join(xdg && isAbsolute(xdg) ? xdg : join(homedir(), '.cache'), 'node-svc'),
    join(tmpdir(), `node-svc-${uid ?? 'user'}`),
  ];
  const problems: string[] = [];
  for (const dir of candidates) {
    try {
      // There already (every start but the first): one lstat, no mkdir.
      const st = lstatSync(dir, { throwIfNoEntry: false }) ?? (mkdirSync(dir, { recursive: true, mode: 0o700 }), lstatSync(dir));
      if (!st.isDirectory()) throw new Error('not a directory');
      if (uid !== undefined && st.uid !== uid) throw new Error('owned by another user');
      if (st.mode & 0o022) throw new Error('writable by group or others');
      return (dirCache = dir);
    } catch (err) {
      problems.push(`${dir}: ${(err as Error).message}`);
    }
  }
  throw new NodeSvcError('config', `no usable cache directory for the binary's embedded files (${problems.join('; ')})`, {
    hint: 'set XDG_CACHE_HOME to a directory of yours',
  });
}

/**
 * The path of an embedded file in the cache dir, written there first when missing or of the wrong size.
 * Content-addressed names mean two versions of the binary never overwrite each other's files, and the
 * write-then-rename means a concurrent start never sees half a file.
 */
export function extract(file: EmbeddedFile, name: string): string {
  const target = join(cacheDir(), `${file.sha256.slice(0, 16)}-${name}`);
  try {
    if (statSync(target).size === file.size) return target;
  } catch {
    // not there yet
  }
  const tmp = `${target}.${process.pid}.${randomBytes(4).toString('hex')}.tmp`;
  writeFileSync(tmp, new Uint8Array(sea.getAsset(file.asset)), { mode: 0o600, flag: 'wx' });
  renameSync(tmp, target);
  return target;
}
