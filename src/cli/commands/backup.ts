import { chmodSync, existsSync, mkdirSync, renameSync, rmSync } from 'node:fs';
import { join, resolve } from 'node:path';
import { NodeSvcError, usageError } from '../../domain/errors.js';
import { copyDatabase, DB_FILE, openSqliteStore, resolveDataDir, validateBackup } from '../../store/db.js';
import { isPostgresUrl, resolveStoreUrl } from '../../store/open.js';
import { lockDataDir } from '../../store/lock.js';
import { progressBar } from '../progress.js';
import type { CommandResult, GlobalOptions } from '../output.js';

/** A PostgreSQL store is backed up and restored by PostgreSQL's own tools, with the server's roles and PITR. */
function refusePostgres(g: GlobalOptions, what: 'backup' | 'restore'): void {
  const url = resolveStoreUrl(g.store);
  if (!url || !isPostgresUrl(url)) return;
  throw usageError(`node-svc ${what} copies the SQLite database of a data dir; this store is PostgreSQL`,
    what === 'backup'
      ? 'use pg_dump: pg_dump --format=custom --file=node-svc.dump "$DATABASE_URL" (consistent while daemons run), or the server\'s base backups and WAL archiving for point-in-time recovery'
      : 'use pg_restore into an empty database with every daemon stopped: pg_restore --dbname="$DATABASE_URL" --no-owner node-svc.dump');
}

/** SQLite online backup: consistent while the daemon keeps writing; a progress bar on a TTY. */
export async function backup(g: GlobalOptions, file: string, o: { force?: boolean }): Promise<CommandResult> {
  refusePostgres(g, 'backup');
  const target = resolve(file);
  if (existsSync(target) && !o.force) throw usageError(`${target} already exists`, 'pick a new file, or pass --force to overwrite it');
  const store = openSqliteStore(resolveDataDir(g.dataDir), { readonly: true });
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
      human: `backed up ${store.path} to ${target} (${r.totalPages} pages, ${Date.now() - started} ms)\nrestore: node-svc restore ${target} (with the daemon stopped)`,
    };
  } finally {
    await store.close();
  }
}

/**
 * Put a backup in place of the store. Refused while a daemon runs on the data dir (its lock is held meanwhile, so
 * none starts). The backup is checked first; the current database and its WAL files are moved aside, not deleted.
 */
export async function restore(g: GlobalOptions, file: string): Promise<CommandResult> {
  refusePostgres(g, 'restore');
  const source = resolve(file);
  if (!existsSync(source)) throw usageError(`${source} does not exist`, 'give a file written by node-svc backup');
  const dataDir = resolveDataDir(g.dataDir);
  const info = validateBackup(source); // before anything in the data dir is touched
  mkdirSync(dataDir, { recursive: true, mode: 0o700 });
  const unlock = lockDataDir(dataDir, 'stop the daemon (SIGTERM), then restore');
  try {
    const db = join(dataDir, DB_FILE);
    const incoming = `${db}.restoring`;
    rmSync(incoming, { force: true });
    // A copy through SQLite (not a file copy): the backup may itself be in WAL mode with a -wal beside it.
    await copyDatabase(source, incoming);
    chmodSync(incoming, 0o600);
    let keptAs: string | null = null;
    const present = ['', '-wal', '-shm'].filter((suffix) => existsSync(db + suffix));
    if (present.length) {
      keptAs = `${db}.before-restore-${new Date().toISOString().replace(/[:.]/g, '-')}`;
      // The WAL belongs to its database: the files move together, so the old store stays whole and no old WAL is
      // ever replayed into the restored one (even a stray -wal without its database).
      for (const suffix of present) renameSync(db + suffix, keptAs + suffix);
    }
    renameSync(incoming, db);
    await openSqliteStore(dataDir).close(); // migrates a backup made by an older node-svc; proves it opens
    return {
      data: { restored: source, dataDir, schema: info.schema, previous: keptAs },
      human: `restored ${source} into ${db} (schema ${info.schema})${keptAs ? `\nthe previous store is kept as ${keptAs}` : ''}\nstart the daemon again: node-svc daemon`,
    };
  } catch (err) {
    if (err instanceof NodeSvcError) throw err;
    throw new NodeSvcError('store', `restore failed: ${(err as Error).message}`);
  } finally {
    unlock();
  }
}
