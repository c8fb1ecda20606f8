// The data dir's file system fills up under the real daemon (SQLite store): writes are refused with a 503 that names
// the full disk (never a 500 internal error), /healthz says the store is down and why, reads go on, and once space
// is freed the next write commits with nothing else to do. The data dir is on a tmpfs of a few MB that this test
// mounts and fills itself. Needs root (mount): CI runs as root; elsewhere the file is skipped, saying why.
// SQLite only: on PostgreSQL the disk is the server's (its own errors; test/e2e/multi-daemon for its outages).
import { execFileSync } from 'node:child_process';
import { mkdirSync, mkdtempSync, rmSync, statfsSync, unlinkSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it, vi } from 'vitest';
import { clientOf, http, setupNodes, startDaemon, type RunningDaemon } from '../helpers/daemon.js';
import { issuerKeyPair, mintCredential, payerKeyPair, signVoucher } from '../helpers/issuer.js';
import { testServerUrl } from '../helpers/postgres.js';

vi.setConfig({ testTimeout: 60_000, hookTimeout: 60_000 });

const why = process.getuid?.() !== 0 ? 'not root (mounting a tmpfs needs it)' : testServerUrl() ? 'the store is PostgreSQL in this pass (SQLite only)' : undefined;
const SKIP = why !== undefined && !(process.env.CI && !testServerUrl());
if (SKIP) console.warn(`[disk-full] SKIPPED: ${why}`);

describe.skipIf(SKIP)('the data dir\'s disk fills up', () => {
  let root: string;
  let small: string;
  let mounted = false;
  let daemon: RunningDaemon;
  let token: string;

  beforeAll(async () => {
    if (why) throw new Error(`cannot run: ${why}`);
    root = mkdtempSync(join(tmpdir(), 'node-svc-disk-full-'));
    small = join(root, 'small');
    mkdirSync(small);
    execFileSync('mount', ['-t', 'tmpfs', '-o', 'size=6m,mode=0700', 'tmpfs', small]);
    mounted = true;
    const dataDir = join(small, 'data');
    const issuer = await issuerKeyPair();
    ({ tokenA: token } = await setupNodes(dataDir, issuer));
    daemon = await startDaemon(dataDir);
    // A stream billed before the disk fills: its reads must go on.
    const A = clientOf(daemon.url, token);
    const payer = await payerKeyPair();
    expect((await A.post('/v1/allowances/verify', { credential: mintCredential({ key: issuer, payer, claims: { stream: 'df-1' } }) })).status).toBe(200);
    expect((await A.post('/v1/streams/df-1/vouchers', { voucher: signVoucher(payer, { stream: 'df-1', amount: '500', units: '5' }) })).status).toBe(200);
  });
  afterAll(async () => {
    await daemon?.stop('SIGKILL');
    if (mounted) execFileSync('umount', ['-l', small]);
    if (root) rmSync(root, { recursive: true, force: true });
  });

  it('writes answer 503 unavailable naming the full disk, /healthz is down saying so, reads go on; freed, the next write commits', async () => {
    const A = clientOf(daemon.url, token);
    const free = () => { const s = statfsSync(small); return s.bavail * s.bsize; };
    const filler = join(small, 'filler');
    writeFileSync(filler, Buffer.alloc(Math.max(0, free() - 32 * 1024)));
    // Subscriptions with long URLs (each made, then deleted: a node may hold 20) until the disk refuses one.
    const statuses: Record<string, number> = {};
    let refused: { status: number; body: any; retryAfter: string | null } | undefined;
    for (let i = 0; i < 300 && !refused; i++) {
      const r = await A.post('/v1/webhooks', { url: `http://127.0.0.1:9/hook/${i}?${'x'.repeat(1800)}` });
      statuses[r.status] = (statuses[r.status] ?? 0) + 1;
      if (r.status === 201) await http(daemon.url, `/v1/webhooks/${r.body.id}`, { token, method: 'DELETE' });
      else refused = { status: r.status, body: r.body, retryAfter: r.headers.get('retry-after') };
    }
    expect(refused, `no write was refused (${JSON.stringify(statuses)}, ${free()} bytes free)`).toBeDefined();
    expect(refused!.status, JSON.stringify(refused!.body)).toBe(503);
    expect(refused!.body).toMatchObject({ code: 'unavailable', status: 503 });
    expect(refused!.body.detail).toMatch(/^the store \(SQLite at .*node-svc\.db\) cannot do this: its disk is full \(SQLITE_FULL\)$/);
    expect(refused!.retryAfter).toBe('5');
    // Another write meets the same, never a 500.
    const again = await A.post('/v1/streams/df-1/vouchers', { voucher: 'x.y.z' });
    expect(again.status).not.toBe(500);

    const h = await http(daemon.url, '/healthz');
    expect(h.body.status, h.text).toBe('down');
    const store = (h.body.checks as Array<{ name: string; status: string; reason: string | null }>).find((c) => c.name === 'store')!;
    expect(store.status).toBe('down');
    expect(store.reason).toMatch(/^writes fail since \d{4}-\d\d-\d\dT[\d:.]+Z: the store \(SQLite at .*\) cannot do this: its disk is full \(SQLITE_FULL\)$/);
    // Reads go on.
    const f = await A.get('/v1/streams/df-1/finality');
    expect(f.status, f.text).toBe(200);
    expect(f.body.billedTruth.amountMicro).toBe('500');

    unlinkSync(filler);
    const after = await A.post('/v1/webhooks', { url: 'http://127.0.0.1:9/after' });
    expect(after.status, after.text).toBe(201);
    const healthy = await http(daemon.url, '/healthz');
    expect((healthy.body.checks as Array<{ name: string; status: string }>).find((c) => c.name === 'store')!.status).toBe('ok');
    expect(daemon.stderr).not.toContain('unhandled error');
    expect(daemon.stderr).not.toContain('internal');
  });
});
