// One daemon per data dir, and no restore under a running daemon: a pid lock file, taken over only when its process is gone.
import { readFileSync, rmSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { configError } from '../domain/errors.js';

/** One daemon per data dir: a pid lock file, taken over only when its process is gone. */
export function lockDataDir(dataDir: string, hint = 'stop it first, or use another --data-dir'): () => void {
  const path = join(dataDir, 'daemon.pid');
  for (let i = 0; i < 2; i++) {
    try {
      writeFileSync(path, String(process.pid), { flag: 'wx', mode: 0o600 });
      return () => rmSync(path, { force: true });
    } catch (err) {
      if ((err as NodeJS.ErrnoException).code !== 'EEXIST') throw err;
      const pid = Number(readFileSync(path, 'utf8').trim());
      let alive = false;
      try {
        alive = Number.isInteger(pid) && pid > 0 && pid !== process.pid && (process.kill(pid, 0), true);
      } catch {
        alive = false;
      }
      if (alive) throw configError(`another node-svc daemon (pid ${pid}) is running on ${dataDir}`, hint);
      rmSync(path, { force: true }); // stale: its process is gone
    }
  }
  throw configError(`cannot lock ${dataDir}`);
}

