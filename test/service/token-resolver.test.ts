// The daemon remembers token → node answers; any commit from another connection (the admin CLI) drops them.
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterEach, describe, expect, it } from 'vitest';
import { addNode, issueToken, revokeTokens, rotateToken, tokenResolver } from '../../src/service/admin.js';
import { openSqliteStore as openStore, type SqliteStore as Store } from '../../src/store/db.js';
import { sleep } from '../helpers/wait.js';

describe('tokenResolver', () => {
  const dirs: string[] = [];
  const stores: Store[] = [];
  const open = (dir: string) => {
    const s = openStore(dir);
    stores.push(s);
    return s;
  };
  afterEach(() => {
    for (const s of stores.splice(0)) void s.close();
    for (const d of dirs.splice(0)) rmSync(d, { recursive: true, force: true });
  });
  const fresh = async () => {
    const dir = mkdtempSync(join(tmpdir(), 'node-svc-tokens-'));
    dirs.push(dir);
    const daemon = open(dir); // the daemon's connection
    const admin = open(dir); // the CLI's connection
    await addNode(admin, 'node-a');
    return { daemon, admin };
  };

  it('answers from memory, and a revoke committed by another connection is refused from the next millisecond on', async () => {
    const { daemon, admin } = await fresh();
    const { token } = await issueToken(admin, 'node-a');
    const resolve = tokenResolver(daemon);
    expect(await resolve(token)).toBe('node-a');
    expect(await resolve(token)).toBe('node-a');
    await revokeTokens(admin, 'node-a');
    await sleep(2); // data_version is asked at most once a millisecond
    expect(await resolve(token)).toBeUndefined();
    expect(await resolve('nsv_unknown')).toBeUndefined();
  });

  it('a rotated token works during its grace only, even when remembered', async () => {
    const { daemon, admin } = await fresh();
    const { token: old } = await issueToken(admin, 'node-a');
    const t0 = Date.now();
    const { token: next } = await rotateToken(admin, 'node-a', 60_000, t0);
    const resolve = tokenResolver(daemon);
    expect(await resolve(old, t0 + 1_000)).toBe('node-a');
    expect(await resolve(old, t0 + 59_000)).toBe('node-a'); // remembered
    expect(await resolve(old, t0 + 61_000)).toBeUndefined(); // grace over, no commit in between
    expect(await resolve(next, t0 + 61_000)).toBe('node-a');
  });

  it('remembers nothing while the store cannot be sure its invalidations arrive (PostgreSQL: a silent LISTEN connection)', async () => {
    const { daemon, admin } = await fresh();
    const { token } = await issueToken(admin, 'node-a');
    // The daemon's store says whether it hears every invalidation (PgStore.invalidationsCurrent); SQLite has no such
    // method, so the real store is given one here. The token is then revoked by a statement on the daemon's own
    // connection: no invalidation and no data_version move, as when a NOTIFY is lost on the way.
    let current = true;
    (daemon as Store & { invalidationsCurrent?: () => boolean }).invalidationsCurrent = () => current;
    const resolve = tokenResolver(daemon);
    const revokeQuietly = (status: string) => daemon.db.prepare('UPDATE tokens SET status = ?').run(status);
    expect(await resolve(token)).toBe('node-a');
    revokeQuietly('revoked');
    expect(await resolve(token)).toBe('node-a'); // remembered: nothing said it changed
    current = false;
    expect(await resolve(token)).toBeUndefined(); // not sure: read again
    revokeQuietly('active');
    expect(await resolve(token)).toBe('node-a');
    revokeQuietly('revoked');
    expect(await resolve(token)).toBeUndefined(); // not remembered while unsure either
    current = true;
    expect(await resolve(token)).toBeUndefined();
  });
});
