import { existsSync } from 'node:fs';
import { resolve } from 'node:path';
import { usageError } from '../../domain/errors.js';
import { openStore, resolveDataDir } from '../../store/db.js';
import { progressBar } from '../progress.js';
import type { CommandResult, GlobalOptions } from '../output.js';

/** SQLite online backup: consistent while the daemon keeps writing; a progress bar on a TTY. */
export async function backup(g: GlobalOptions, file: string, o: { force?: boolean }): Promise<CommandResult> {
  const target = resolve(file);
  if (existsSync(target) && !o.force) throw usageError(`${target} already exists`, 'pick a new file, or pass --force to overwrite it');
  const store = openStore(resolveDataDir(g.dataDir), { readonly: true });
  const bar = progressBar('backup');
  const started = Date.now();
  try {
    const r = await store.db.backup(target, {
      progress({ totalPages, remainingPages }) {
        bar.update(totalPages - remainingPages, totalPages);
        return 256; // pages per step: small steps keep the daemon's writers moving
      },
    });
    bar.end();
    return {
      data: { file: target, pages: r.totalPages, ms: Date.now() - started },
      human: `backed up ${store.path} to ${target} (${r.totalPages} pages, ${Date.now() - started} ms)\nrestore: stop the daemon, copy it over ${store.path}`,
    };
  } finally {
    store.close();
  }
}
