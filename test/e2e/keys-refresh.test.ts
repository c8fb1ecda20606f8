// The daemon refreshes issuer keys trusted from a URL (DESIGN §3): a rotation at the issuer reaches
// verification without an operator step, and a failing or bad JWKS keeps the stored keys trusted.
import { writeFileSync } from 'node:fs';
import { createServer, type Server } from 'node:http';
import type { AddressInfo } from 'node:net';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { cliFor, json, tempDataDir, type TempDataDir } from '../helpers/cli.js';
import { http, setupNodes, startDaemon, type NodeSetup, type RunningDaemon } from '../helpers/daemon.js';
import { ISSUER, keyPair, mintCredential, publicJwks, type KeyPair } from '../helpers/issuer.js';
import { testServerUrl } from '../helpers/postgres.js';
import { waitFor } from '../helpers/wait.js';

describe('issuer keys trusted from a URL are refreshed by the daemon', () => {
  let tmp: TempDataDir;
  let server: Server;
  let served: { status: number; body: string };
  let url: string;
  let daemon: RunningDaemon;
  let token: string;
  let oldKey: KeyPair;
  let newKey: KeyPair;

  const verify = (credential: string) => http(daemon.url, '/v1/allowances/verify', { method: 'POST', token, body: { credential } });
  const keysList = async () => json<{ data: Array<{ kid: string }> }>((await cliFor(tmp.dataDir)('keys', 'list', '--json')).stdout).data.map((k) => k.kid).sort();

  beforeAll(async () => {
    tmp = await tempDataDir();
    oldKey = await keyPair('EdDSA', 'old-key');
    newKey = await keyPair('EdDSA', 'new-key');
    served = { status: 200, body: JSON.stringify(publicJwks(oldKey)) };
    server = createServer((_req, res) => res.writeHead(served.status, { 'content-type': 'application/json' }).end(served.body));
    await new Promise<void>((r) => server.listen(0, '127.0.0.1', () => r()));
    url = `http://127.0.0.1:${(server.address() as AddressInfo).port}/jwks.json`;
    const cli = cliFor(tmp.dataDir);
    expect((await cli('nodes', 'add', 'node-a')).code).toBe(0);
    token = json<{ token: string }>((await cli('tokens', 'issue', 'node-a')).stdout).token;
    expect((await cli('keys', 'add', '--issuer', 'https://issuer.test', url)).code).toBe(0);
    daemon = await startDaemon(tmp.dataDir, { env: { NODE_SVC_KEYS_REFRESH: '1s' } });
  }, 60_000);

  afterAll(async () => {
    await daemon?.stop();
    await new Promise<void>((r) => server.close(() => r()));
    await tmp.cleanup();
  });

  it('keeps the stored keys when the URL fails or serves a bad JWKS', async () => {
    expect((await verify(mintCredential({ key: oldKey, claims: { stream: 's-old' } }))).status).toBe(200);
    served = { status: 500, body: 'down' };
    await new Promise((r) => setTimeout(r, 2500)); // at least two refreshes
    expect(await keysList()).toEqual(['old-key']);
    served = { status: 200, body: JSON.stringify({ keys: [{ ...oldKey.publicJwk, d: 'private-part' }] }) };
    await new Promise((r) => setTimeout(r, 2500));
    expect(await keysList()).toEqual(['old-key']);
    expect((await verify(mintCredential({ key: oldKey, claims: { stream: 's-old-2' } }))).status).toBe(200);
    expect(daemon.stderr).toMatch(/issuer keys not refreshed/);
    expect(daemon.stderr).not.toContain('private-part');
  }, 30_000);

  it('picks up a rotation: the new key verifies, the key gone from the JWKS no longer does', async () => {
    served = { status: 200, body: JSON.stringify(publicJwks(newKey)) };
    await waitFor(async () => (await keysList()).join() === 'new-key', 'rotation stored', 10_000, 200);
    const fresh = await waitFor(async () => {
      const r = await verify(mintCredential({ key: newKey, claims: { stream: 's-new' } }));
      return r.status === 200 && r;
    }, 'new key verifies', 10_000, 200);
    expect(fresh.body).toMatchObject({ valid: true, stream: 's-new' });
    const old = await verify(mintCredential({ key: oldKey, claims: { stream: 's-old-3' } }));
    expect(old.status).toBe(422);
    expect(old.body).toMatchObject({ valid: false, refusal: 'unknown_key' });
  }, 30_000);
});

// The daemon does not read the key counter on every verify (SQLite: only after its own key change or another
// process's commit, seen through PRAGMA data_version): a key removed or added by the CLI must still count at once.
describe('issuer keys changed by the CLI while the daemon runs (another process)', () => {
  let tmp: TempDataDir;
  let daemon: RunningDaemon;
  let setup: NodeSetup;
  let a: KeyPair;
  let b: KeyPair;
  let n = 0;
  const verify = (key: KeyPair) => http(daemon.url, '/v1/allowances/verify', { method: 'POST', token: setup.tokenA, body: { credential: mintCredential({ key, claims: { stream: `s-cli-${++n}` } }) } });

  beforeAll(async () => {
    tmp = await tempDataDir();
    a = await keyPair('EdDSA', 'cli-a');
    b = await keyPair('EdDSA', 'cli-b');
    setup = await setupNodes(tmp.dataDir, a);
    daemon = await startDaemon(tmp.dataDir);
  }, 60_000);

  afterAll(async () => {
    await daemon?.stop();
    await tmp.cleanup();
  });

  it('answers requests that arrive together right after start with the stored keys (none sees an empty key set)', async () => {
    const all = await Promise.all(Array.from({ length: 16 }, () => verify(a)));
    expect(all.map((r) => r.status)).toEqual(all.map(() => 200));
  });

  it('refuses a key removed by `keys rm` on the next request, and trusts one added by `keys add` on the next request', async () => {
    expect((await verify(a)).status).toBe(200);
    const cli = cliFor(tmp.dataDir);
    // SQLite: the next request. PostgreSQL: once the change's notification has reached the daemon (README).
    const next = async (key: KeyPair, valid: boolean) =>
      testServerUrl() ? waitFor(async () => { const r = await verify(key); return r.body.valid === valid && r; }, `${key.kid} valid=${valid}`, 2_000, 20) : verify(key);
    expect((await cli('keys', 'rm', 'cli-a')).code).toBe(0);
    const refused = await next(a, false);
    expect(refused.status).toBe(422);
    expect(refused.body).toMatchObject({ valid: false, refusal: 'unknown_key' });
    expect((await verify(b)).body).toMatchObject({ valid: false, refusal: 'unknown_key' });
    const file = join(tmp.dataDir, '..', 'jwks-b.json');
    writeFileSync(file, JSON.stringify(publicJwks(b)));
    expect((await cli('keys', 'add', '--issuer', ISSUER, file)).code).toBe(0);
    expect((await next(b, true)).body).toMatchObject({ valid: true });
    expect((await verify(a)).body).toMatchObject({ valid: false, refusal: 'unknown_key' });
  }, 30_000);
});
