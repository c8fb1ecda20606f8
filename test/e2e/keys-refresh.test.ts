// The daemon refreshes issuer keys trusted from a URL (DESIGN §3): a rotation at the issuer reaches
// verification without an operator step, and a failing or bad JWKS keeps the stored keys trusted.
import { createServer, type Server } from 'node:http';
import type { AddressInfo } from 'node:net';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { cliFor, json, tempDataDir, type TempDataDir } from '../helpers/cli.js';
import { http, startDaemon, type RunningDaemon } from '../helpers/daemon.js';
import { keyPair, mintCredential, publicJwks, type KeyPair } from '../helpers/issuer.js';
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
