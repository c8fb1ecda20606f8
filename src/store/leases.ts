// Named leases with a fencing token: the only SQL for them. A lease is held by one daemon until it expires; the
// holder renews it, a daemon that finds it expired takes it over and bumps the fence, so anything the previous
// holder still tries to write under its (older) fence is refused. Times are the daemons' clocks (keep them in NTP:
// a lease of seconds tolerates skew well below that).
import type { Sql } from './sql.js';

export const leases = {
  /**
   * Take `name` for `holder` until `now + ttlMs` when it is free, expired or already ours (a renewal). Returns the
   * fence it is held under, or undefined when another holder's lease is still running. Call inside a write.
   */
  acquire: async (tx: Sql, name: string, holder: string, now: number, ttlMs: number): Promise<number | undefined> => {
    await tx.run(`INSERT INTO leases(name, holder, fence, expires_at) VALUES (@name, @holder, 1, @until)
      ON CONFLICT(name) DO UPDATE SET fence = CASE WHEN leases.holder = @holder THEN leases.fence ELSE leases.fence + 1 END,
        holder = @holder, expires_at = @until
      WHERE leases.holder = @holder OR leases.expires_at <= @now`, { name, holder, until: now + ttlMs, now });
    const r = await tx.get<{ holder: string; fence: number }>('SELECT holder, fence FROM leases WHERE name = ?', [name]);
    return r && r.holder === holder ? Number(r.fence) : undefined;
  },
  /** Is the lease still this holder's, under this fence, and running? (Inside the write that depends on it.) */
  // PostgreSQL: FOR SHARE keeps the row as read until the write commits, so a take-over (an UPDATE of the row) waits
  // for it: no settlement write commits under a fence that another daemon has already replaced. SQLite: one writer.
  holds: async (tx: Sql, name: string, holder: string, fence: number, now: number): Promise<boolean> =>
    !!(await tx.get(`SELECT 1 FROM leases WHERE name = ? AND holder = ? AND fence = ? AND expires_at > ?${tx.dialect === 'postgres' ? ' FOR SHARE' : ''}`,
      [name, holder, fence, now])),
  /** Give it up now (a clean stop): another daemon takes over at its next try instead of after the expiry. */
  release: (tx: Sql, name: string, holder: string) => tx.run('UPDATE leases SET expires_at = 0 WHERE name = ? AND holder = ?', [name, holder]),
};
