// Issue #13, "scripts can trust the CLI", through the real bin/node-svc: one precedence (flag > env > config >
// default), a closed pipe exits 0, a malformed --url is a usage error naming it, expected conditions are named
// (port in use, data dir, log level, config.json), --format, the bare JWS of dev credential, and restore.
import { inspectStore, pgUrlOf } from '../helpers/inspect.js';
import { testServerUrl } from '../helpers/postgres.js';
import { execFile, spawn } from 'node:child_process';
import { createHmac } from 'node:crypto';
import { existsSync, mkdirSync, readFileSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import Database from 'better-sqlite3';
import { afterAll, beforeAll, describe, expect, it, vi } from 'vitest';
import { BIN, cliFor, json, REPO_ROOT, runCli, tempDataDir, type TempDataDir } from '../helpers/cli.js';
import { startDaemon } from '../helpers/daemon.js';

vi.setConfig({ testTimeout: 60_000, hookTimeout: 60_000 });

let t: TempDataDir;
let cli: ReturnType<typeof cliFor>;

beforeAll(async () => {
  t = await tempDataDir();
  cli = cliFor(t.dataDir);
  expect((await cli('nodes', 'add', 'node-a')).code).toBe(0);
});
afterAll(async () => { await t?.cleanup(); });

describe('precedence: flag > environment > default', () => {
  it('--data-dir beats NODE_SVC_DATA_DIR (a revoke or backup hits the store named on the command line)', async () => {
    const other = join(t.root, 'other');
    expect((await runCli(['nodes', 'add', 'node-other', '--data-dir', other])).code).toBe(0);
    const r = await runCli(['nodes', 'list', '--data-dir', t.dataDir], { env: { NODE_SVC_DATA_DIR: other } });
    expect(json(r.stdout).data.map((n: { id: string }) => n.id)).toEqual(['node-a']);
    const env = await runCli(['nodes', 'list'], { env: { NODE_SVC_DATA_DIR: other } });
    expect(json(env.stdout).data.map((n: { id: string }) => n.id)).toEqual(['node-other']);
  });

  it('--url beats NODE_SVC_URL; a malformed one is exit 2 naming where it came from', async () => {
    const flag = await runCli(['streams', 'list', '--url', '127.0.0.1:8787', '--token', 'nsv_x'], { env: { NODE_SVC_URL: 'http://127.0.0.1:1' } });
    expect(flag.code).toBe(2);
    expect(json(flag.stderr).error).toMatchObject({ code: 'usage', message: expect.stringMatching(/^--url "127\.0\.0\.1:8787" is not an http\(s\) URL/), hint: 'add the scheme: http://127.0.0.1:8787' });
    const env = await runCli(['streams', 'list', '--token', 'nsv_x'], { env: { NODE_SVC_URL: 'http://127.0.0.1:8787/v1' } });
    expect(env.code).toBe(2);
    expect(json(env.stderr).error.message).toMatch(/^NODE_SVC_URL "http:\/\/127\.0\.0\.1:8787\/v1" must be the daemon's base URL/);
    const verify = await runCli(['verify', 'a.b.c', '--remote', '--url', 'http://127.0.0.1:8787/v1/allowances', '--token', 'nsv_x']);
    expect(verify.code).toBe(2);
  });
});

describe('output', () => {
  it('a closed pipe (… | head -1) exits 0 without a stack trace', async () => {
    // Enough output to outlast the pipe: 20,000 nodes written straight into the store.
    const big = join(t.root, 'big');
    expect((await runCli(['nodes', 'add', 'n-0', '--data-dir', big])).code).toBe(0);
    const store = pgUrlOf(big);
    if (store) {
      inspectStore(big).prepare("INSERT INTO nodes(id, created_at) SELECT 'n-' || g, ? FROM generate_series(1, 19999) g").run(Date.now());
    } else {
      const db = new Database(join(big, 'node-svc.db'));
      const ins = db.prepare('INSERT INTO nodes(id, created_at) VALUES (?, ?)');
      db.transaction(() => { for (let i = 1; i < 20_000; i++) ins.run(`n-${i}`, Date.now()); })();
      db.close();
    }
    const out = await new Promise<{ code: number; stderr: string; stdout: string }>((resolve, reject) => {
      execFile('bash', ['-c', `"${process.execPath}" "${BIN}" nodes list --format jsonl --data-dir "${big}" | head -1; echo "exit=\${PIPESTATUS[0]}" >&2`],
        { cwd: REPO_ROOT, timeout: 30_000, env: { ...process.env, ...(store ? { NODE_SVC_STORE: store } : {}) } }, (err, stdout, stderr) => (err ? reject(err) : resolve({ code: 0, stdout, stderr })));
    });
    expect(out.stdout).toMatch(/^\{"id":"n-0"/);
    expect(out.stderr).toMatch(/exit=0\s*$/);
    expect(out.stderr).not.toMatch(/EPIPE|Error|at /);
  });

  it('--format table|json|jsonl on list commands, whatever stdout is', async () => {
    const table = await cli('nodes', 'list', '--format', 'table');
    expect(table.stdout).toMatch(/^NODE\s+TOKEN\s+CREATED\nnode-a /);
    const lines = (await cli('nodes', 'list', '--format', 'jsonl')).stdout.trim().split('\n');
    expect(lines.map((l) => JSON.parse(l).id)).toEqual(['node-a']);
    expect(json((await cli('nodes', 'list', '--format', 'json')).stdout).data[0].id).toBe('node-a');
    const bad = await cli('nodes', 'list', '--format', 'yaml');
    expect(bad.code).toBe(2);
  });
});

describe('expected conditions are named, never an internal error', () => {
  it('port in use: exit 4 naming host:port, and no daemon.pid left behind', async () => {
    const first = await startDaemon(t.dataDir);
    try {
      const port = new URL(first.url).port;
      const second = join(t.root, 'second');
      const r = await runCli(['daemon', '--port', port, '--data-dir', second, '--json']);
      expect(r.code).toBe(4);
      expect(json(r.stderr).error).toMatchObject({ code: 'config', message: `127.0.0.1:${port} is already in use` });
      expect(existsSync(join(second, 'daemon.pid'))).toBe(false);
    } finally {
      await first.stop();
    }
  });

  it('a data dir that cannot be used', async () => {
    const file = join(t.root, 'a-file');
    writeFileSync(file, 'x');
    const r = await runCli(['nodes', 'add', 'x', '--data-dir', join(file, 'data')]);
    expect(r.code).toBe(4);
    expect(json(r.stderr).error).toMatchObject({ code: 'store', message: expect.stringMatching(/^cannot use the data dir .*: a file is in the way/) });
  });

  it('an unknown log level names NODE_SVC_LOG_LEVEL', async () => {
    const r = await runCli(['daemon', '--port', '0', '--data-dir', t.dataDir], { env: { NODE_SVC_LOG_LEVEL: 'verbose' } });
    expect(r.code).toBe(4);
    expect(json(r.stderr).error).toMatchObject({ code: 'config', message: 'NODE_SVC_LOG_LEVEL must be one of debug, info, warn, error, got "verbose"' });
  });

  it('bad config.json values are listed together, naming config.json and each key', async () => {
    const d = join(t.root, 'cfg');
    mkdirSync(d, { recursive: true });
    writeFileSync(join(d, 'config.json'), JSON.stringify({ retrySchedule: 'soon', webhookDeny: '10.0.0.0/99', settleInterval: 'later', settlePoll: '10ms', port: 8787 }));
    const r = await runCli(['daemon', '--data-dir', d]);
    expect(r.code).toBe(4);
    const msg = json(r.stderr).error.message as string;
    expect(msg).toMatch(/config\.json has 4 problem\(s\)/);
    expect(msg).toMatch(/"settlePoll": must be a duration from 100ms to 60s/);
    expect(msg).toMatch(/"retrySchedule": must be a list of whole seconds/);
    expect(msg).toMatch(/"webhookDeny": /);
    expect(msg).toMatch(/"settleInterval": must be a duration/);
    expect(msg).not.toMatch(/--retry-schedule/);
  });
});

describe('onboarding from the README', () => {
  it('dev jwks → keys add → dev credential --node (bare JWS when piped) → verify - ; --json gives the object', async () => {
    const sandbox = join(t.root, 'sandbox');
    const jwks = await runCli(['dev', 'jwks', '--data-dir', sandbox]);
    expect(jwks.code, jwks.stderr).toBe(0);
    const doc = json(jwks.stdout);
    expect(doc.keys[0]).toMatchObject({ kty: 'OKP', crv: 'Ed25519', kid: 'dev-issuer-1', alg: 'EdDSA' });
    expect(doc.keys[0].d).toBeUndefined(); // public half only
    writeFileSync(join(t.root, 'dev-jwks.json'), jwks.stdout);
    const add = await cli('keys', 'add', '--issuer', 'https://issuer.sandbox.node-svc.invalid', join(t.root, 'dev-jwks.json'));
    expect(add.code, add.stderr).toBe(0);

    const minted = await runCli(['dev', 'credential', '--stream', 's1', '--node', 'node-a', '--data-dir', sandbox]);
    expect(minted.code, minted.stderr).toBe(0);
    expect(minted.stdout).toMatch(/^[\w-]+\.[\w-]+\.[\w-]+\n$/);
    const v = await cli.with(['verify', '-'], { input: minted.stdout });
    expect(v.code, v.stdout).toBe(0);
    expect(json(v.stdout)).toMatchObject({ valid: true, node: 'node-a', stream: 's1' });
    const obj = await runCli(['dev', 'credential', '--stream', 's1', '--data-dir', sandbox, '--json']);
    expect(json(obj.stdout).credential).toMatch(/^[\w-]+\.[\w-]+\.[\w-]+$/);
    const voucher = await runCli(['dev', 'voucher', '--stream', 's1', '--amount', '10', '--data-dir', sandbox]);
    expect(voucher.stdout).toMatch(/^[\w-]+\.[\w-]+\.[\w-]+\n$/);
  });

  it('dev voucher --send --credential registers an unknown stream, then bills it (human money as asset amounts)', async () => {
    const sandbox = join(t.root, 'sandbox');
    const token = json((await cli('tokens', 'issue', 'node-a')).stdout).token as string;
    const d = await startDaemon(t.dataDir);
    try {
      const jws = (await runCli(['dev', 'credential', '--stream', 'hand-1', '--node', 'node-a', '--data-dir', sandbox])).stdout.trim();
      const without = await runCli(['dev', 'voucher', '--stream', 'hand-1', '--amount', '250000', '--send', '--url', d.url, '--token', token, '--data-dir', sandbox]);
      expect(without.code).toBe(3); // unknown stream: the credential is needed first
      const sent = await runCli(['dev', 'voucher', '--stream', 'hand-1', '--amount', '250000', '--units', '2500', '--send', '--credential', jws, '--url', d.url, '--token', token, '--data-dir', sandbox, '--format', 'table']);
      expect(sent.code, sent.stderr).toBe(0);
      expect(sent.stdout).toBe('voucher for hand-1: accepted, billed 0.250000 USDC\n');
    } finally {
      await d.stop();
    }
  });
});

describe('consume, for people', () => {
  it('--format table prints each event on one line, money as an asset amount', async () => {
    const secret = 'whsec_dGVzdC1zZWNyZXQtZm9yLWNvbnN1bWUtZm9ybWF0';
    const child = spawn(process.execPath, [BIN, 'consume', '--port', '0', '--secret', secret, '--format', 'table'], { cwd: REPO_ROOT, stdio: ['ignore', 'pipe', 'pipe'] });
    try {
      let out = '';
      let err = '';
      child.stdout!.setEncoding('utf8').on('data', (s: string) => { out += s; });
      const url = await new Promise<string>((resolve, reject) => {
        const timer = setTimeout(() => reject(new Error(`consume did not start: ${err}`)), 20_000);
        child.stderr!.setEncoding('utf8').on('data', (s: string) => {
          err += s;
          const m = /consuming on (http:\/\/\S+)/.exec(err);
          if (m) { clearTimeout(timer); resolve(m[1]!); }
        });
      });
      const body = JSON.stringify({ id: 'evt_fmt_1', type: 'settlement.final', schemaVersion: '1.1.0', occurredAt: new Date().toISOString(), externalRef: 'stream:s-fmt', data: { stream: 's-fmt', budget: 'b-fmt', asset: 'USDC', amountMicro: '871000', reference: '0xabc' } });
      const sig = `sha256=${createHmac('sha256', secret).update(body).digest('hex')}`;
      const res = await fetch(`${url}/`, { method: 'POST', body, headers: { 'content-type': 'application/json', 'x-service-event-id': 'evt_fmt_1', 'x-service-signature': sig } });
      expect(res.status).toBe(200);
      for (let i = 0; !out.includes('evt_fmt_1') && i < 100; i++) await new Promise((r) => setTimeout(r, 50));
      expect(out).toMatch(/^\S+Z {2}applied +settlement\.final +s-fmt b-fmt {2}0\.871000 USDC {2}reference=0xabc {2}evt_fmt_1\n$/);
    } finally {
      child.kill('SIGTERM');
    }
  });
});

// SQLite's own backup file; a PostgreSQL store refuses both (test/e2e/ops.test.ts) and points at pg_dump / pg_restore.
describe.skipIf(!!testServerUrl())('restore', () => {
  it('refused while the daemon runs; then puts the backup in place and keeps the previous store beside it', async () => {
    const backup = join(t.root, 'backup.db');
    expect((await cli('backup', backup)).code).toBe(0);
    expect((await cli('nodes', 'add', 'after-backup')).code).toBe(0);
    const d = await startDaemon(t.dataDir);
    try {
      const refused = await cli('restore', backup);
      expect(refused.code).toBe(4);
      expect(json(refused.stderr).error.message).toMatch(/another node-svc daemon \(pid \d+\) is running/);
    } finally {
      await d.stop();
    }
    const r = await cli('restore', backup);
    expect(r.code, r.stderr).toBe(0);
    const out = json(r.stdout);
    expect(out.previous).toMatch(/node-svc\.db\.before-restore-/);
    expect(existsSync(out.previous)).toBe(true);
    expect(existsSync(join(t.dataDir, 'daemon.pid'))).toBe(false);
    const ids = json((await cli('nodes', 'list')).stdout).data.map((n: { id: string }) => n.id);
    expect(ids).toContain('node-a');
    expect(ids).not.toContain('after-backup');
    // The kept store still holds what the backup did not.
    const kept = new Database(out.previous, { readonly: true });
    expect(kept.prepare("SELECT id FROM nodes WHERE id = 'after-backup'").get()).toBeTruthy();
    kept.close();
  });

  it('moves the WAL files of the store it replaces with it (a crashed daemon leaves them), so none is replayed into the backup', async () => {
    const d = join(t.root, 'walcase');
    expect((await runCli(['nodes', 'add', 'w-1', '--data-dir', d])).code).toBe(0);
    const backup = join(t.root, 'wal-backup.db');
    expect((await runCli(['backup', backup, '--data-dir', d])).code).toBe(0);
    // A writer that never checkpoints: its last commit lives only in the -wal, as after a crash.
    const db = new Database(join(d, 'node-svc.db'));
    db.pragma('journal_mode = WAL');
    db.pragma('wal_autocheckpoint = 0');
    db.prepare('INSERT INTO nodes(id, created_at) VALUES (?, ?)').run('only-in-wal', Date.now());
    const copyWal = readFileSync(join(d, 'node-svc.db-wal'));
    db.close(); // closing checkpoints; put the WAL back as a crash would have left it
    writeFileSync(join(d, 'node-svc.db-wal'), copyWal);
    const r = await runCli(['restore', backup, '--data-dir', d]);
    expect(r.code, r.stderr).toBe(0);
    expect(existsSync(join(d, 'node-svc.db-wal'))).toBe(false);
    expect(existsSync(`${json(r.stdout).previous}-wal`)).toBe(true);
    const ids = json((await runCli(['nodes', 'list', '--data-dir', d])).stdout).data.map((n: { id: string }) => n.id);
    expect(ids).toEqual(['w-1']);
  });

  it('a file that is not a node-svc backup is refused before anything is touched', async () => {
    const junk = join(t.root, 'junk.db');
    writeFileSync(junk, 'not a database at all, just text');
    const r = await cli('restore', junk);
    expect(r.code).toBe(4);
    expect(json(r.stderr).error.code).toBe('store');
    expect(json((await cli('nodes', 'list')).stdout).data.map((n: { id: string }) => n.id)).toContain('node-a');
  });
});

