// The real bin/node-svc against a temp data dir: nodes, tokens, keys and offline verify (DESIGN §3, §4, §11).
import { createHash } from 'node:crypto';
import { readdir, readFile, writeFile } from 'node:fs/promises';
import { createServer, type Server } from 'node:http';
import type { AddressInfo } from 'node:net';
import { join } from 'node:path';
import { exportJWK, generateKeyPair, generateSecret } from 'jose';
import { afterAll, beforeAll, describe, expect, it, vi } from 'vitest';
import { nodeForToken } from '../../src/service/admin.js';
import { openStore } from '../../src/store/open.js';
import { PG_BIN, storeUrlFor } from '../helpers/postgres.js';
import { execFileSync } from 'node:child_process';
import { cliFor, json, runCli, tempDataDir, type CliResult, type TempDataDir } from '../helpers/cli.js';
import { ISSUER, keyPair, mintCredential, nowSeconds, publicJwks, writeJwks, type KeyPair } from '../helpers/issuer.js';

// Each case spawns real processes; leave room when the machine is busy (npm test passes 60 s too).
vi.setConfig({ testTimeout: 60_000, hookTimeout: 60_000 });

const TOKEN_RE = /^nsv_[A-Za-z0-9_-]{43}$/;

/** The JSON error a failing command writes to stderr (JSON because stdout is piped), with nothing on stdout. */
function errorOf(r: CliResult): { code: string; message: string; hint?: string } {
  expect(r.stdout).toBe('');
  return json<{ error: { code: string; message: string; hint?: string } }>(r.stderr).error;
}

/** Every byte of every file in the data dir (database, WAL, shm), to look for secrets in clear. */
/** Everything the store holds: the data dir's files, or (PostgreSQL) a pg_dump of the database with its data. */
async function dataBytes(dataDir: string): Promise<Buffer> {
  const url = await storeUrlFor(dataDir);
  // pg_dump frames its output with a random \restrict key each run: not data.
  if (url) return Buffer.from(execFileSync(join(PG_BIN, 'pg_dump'), ['--data-only', url], { maxBuffer: 64 * 1024 * 1024, encoding: 'utf8' }).replace(/^\\(un)?restrict .*$/gm, ''));
  const files = await readdir(dataDir);
  return Buffer.concat(await Promise.all(files.map((f) => readFile(join(dataDir, f)))));
}

const temps: TempDataDir[] = [];
async function freshDir(): Promise<TempDataDir> {
  const t = await tempDataDir();
  temps.push(t);
  return t;
}
afterAll(async () => {
  await Promise.all(temps.map((t) => t.cleanup()));
});

describe('nodes', () => {
  let t: TempDataDir;
  let cli: ReturnType<typeof cliFor>;
  beforeAll(async () => {
    t = await freshDir();
    cli = cliFor(t.dataDir);
  });

  it('add → 0 with the node as JSON, creating the data dir', async () => {
    const r = await cli('nodes', 'add', 'node-a');
    expect(r).toMatchObject({ code: 0, stderr: '' });
    expect(json(r.stdout)).toEqual({ id: 'node-a', createdAt: expect.stringMatching(/^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z$/) });
    expect((await cli('nodes', 'add', 'node-b.x:1_2')).code).toBe(0);
  });

  it('list → 0 with every node, sorted, and whether it has a token', async () => {
    const r = await cli('nodes', 'list');
    expect(r.code).toBe(0);
    expect(json(r.stdout)).toEqual({ data: [
      { id: 'node-a', createdAt: expect.any(String), hasToken: false },
      { id: 'node-b.x:1_2', createdAt: expect.any(String), hasToken: false },
    ] });
  });

  it('a duplicate is refused: exit 4 (conflict), JSON error on stderr, nothing added', async () => {
    const r = await cli('nodes', 'add', 'node-a');
    expect(r.code).toBe(4);
    const e = errorOf(r);
    expect(e.code).toBe('conflict');
    expect(e.message).toMatch(/already exists/);
    expect(json(( await cli('nodes', 'list')).stdout).data).toHaveLength(2);
  });

  it('bad ids are refused with exit 2 (usage)', async () => {
    for (const id of ['bad/id', 'has space', '.dot-first', '_under', 'x'.repeat(129), 'é']) {
      const r = await cli('nodes', 'add', id);
      expect(r.code, id).toBe(2);
      expect(errorOf(r)).toMatchObject({ code: 'usage', message: expect.stringMatching(/not a valid node id/), hint: expect.any(String) });
    }
    expect((await cli('nodes', 'add', 'x'.repeat(128))).code).toBe(0);
    expect((await cli('nodes', 'rm', 'x'.repeat(128))).code).toBe(0);
    expect(json((await cli('nodes', 'list')).stdout).data.map((n: { id: string }) => n.id)).toEqual(['node-a', 'node-b.x:1_2']);
  });

  it('rm → 0; rm of an unknown node → 3 (not found)', async () => {
    const r = await cli('nodes', 'rm', 'node-b.x:1_2');
    expect(r.code).toBe(0);
    expect(json(r.stdout)).toEqual({ id: 'node-b.x:1_2', removed: true });
    const again = await cli('nodes', 'rm', 'node-b.x:1_2');
    expect(again.code).toBe(3);
    expect(errorOf(again).code).toBe('not_found');
    expect(json((await cli('nodes', 'list')).stdout).data.map((n: { id: string }) => n.id)).toEqual(['node-a']);
  });

  it('usage errors from the parser exit 2: missing argument, unknown command', async () => {
    expect((await cli('nodes', 'add')).code).toBe(2);
    expect((await cli('nodes', 'frobnicate')).code).toBe(2);
    expect((await runCli(['no-such-command'])).code).toBe(2);
  });

  it('--json prints the same JSON as piped output', async () => {
    const r = await cli('nodes', 'list', '--json');
    expect(r.code).toBe(0);
    expect(json(r.stdout)).toEqual(json((await cli('nodes', 'list')).stdout));
  });

  it('NODE_SVC_DATA_DIR selects the data dir', async () => {
    const r = await runCli(['nodes', 'list'], { env: { NODE_SVC_DATA_DIR: t.dataDir } });
    expect(r.code).toBe(0);
    expect(json(r.stdout).data.map((n: { id: string }) => n.id)).toEqual(['node-a']);
  });
});

describe('tokens', () => {
  let t: TempDataDir;
  let cli: ReturnType<typeof cliFor>;
  const seen: string[] = [];
  beforeAll(async () => {
    t = await freshDir();
    cli = cliFor(t.dataDir);
    expect((await cli('nodes', 'add', 'node-a')).code).toBe(0);
    expect((await cli('nodes', 'add', 'node-b')).code).toBe(0);
  });
  const live = async (token: string, now = Date.now()) => {
    const s = await openStore({ dataDir: t.dataDir, store: await storeUrlFor(t.dataDir), readonly: true });
    try {
      return await nodeForToken(s, token, now);
    } finally {
      await s.close();
    }
  };

  it('issue → nsv_ + 43 base64url characters, shown once, and the node now has a token', async () => {
    const r = await cli('tokens', 'issue', 'node-a');
    expect(r.code).toBe(0);
    const out = json(r.stdout);
    expect(out).toEqual({ node: 'node-a', tokenId: expect.stringMatching(/^tok_[0-9A-Z]{26}$/), token: expect.stringMatching(TOKEN_RE), createdAt: expect.any(String) });
    seen.push(out.token);
    expect(await live(out.token)).toBe('node-a');
    expect(json((await cli('nodes', 'list')).stdout).data).toEqual([
      expect.objectContaining({ id: 'node-a', hasToken: true }),
      expect.objectContaining({ id: 'node-b', hasToken: false }),
    ]);
  });

  it('a second issue is refused (exit 4, conflict) and points at rotate', async () => {
    const r = await cli('tokens', 'issue', 'node-a');
    expect(r.code).toBe(4);
    expect(errorOf(r)).toMatchObject({ code: 'conflict', hint: expect.stringMatching(/tokens rotate node-a/) });
  });

  it('issue for an unknown node → 3', async () => {
    const r = await cli('tokens', 'issue', 'ghost');
    expect(r.code).toBe(3);
    expect(errorOf(r).code).toBe('not_found');
  });

  it('rotate --grace 10m: a new token; the old one keeps working until the grace ends', async () => {
    const before = Date.now();
    const r = await cli('tokens', 'rotate', 'node-a', '--grace', '10m');
    expect(r.code).toBe(0);
    const out = json(r.stdout);
    expect(out.token).toMatch(TOKEN_RE);
    expect(out.token).not.toBe(seen[0]);
    const until = Date.parse(out.previousValidUntil);
    expect(until).toBeGreaterThanOrEqual(before + 600_000);
    expect(until).toBeLessThanOrEqual(Date.now() + 600_000);
    expect(await live(out.token)).toBe('node-a');
    expect(await live(seen[0]!)).toBe('node-a');
    expect(await live(seen[0]!, until + 1)).toBeUndefined();
    seen.push(out.token);
  });

  it('rotate without --grace: the old token stops at once', async () => {
    const r = await cli('tokens', 'rotate', 'node-a');
    expect(r.code).toBe(0);
    const out = json(r.stdout);
    expect(out.token).toMatch(TOKEN_RE);
    expect(await live(out.token)).toBe('node-a');
    expect(await live(seen[1]!)).toBeUndefined();
    seen.push(out.token);
  });

  it('rotate with a bad --grace → 2, and nothing changes', async () => {
    const r = await cli('tokens', 'rotate', 'node-a', '--grace', 'soon');
    expect(r.code).toBe(2);
    expect(errorOf(r)).toMatchObject({ code: 'usage', message: expect.stringMatching(/not a duration/) });
    expect(await live(seen[2]!)).toBe('node-a');
  });

  it('revoke → every token of the node stops working; other nodes untouched', async () => {
    const b = json((await cli('tokens', 'issue', 'node-b')).stdout).token as string;
    seen.push(b);
    const r = await cli('tokens', 'revoke', 'node-a');
    expect(r.code).toBe(0);
    expect(json(r.stdout)).toEqual({ node: 'node-a', revoked: 2 }); // the active one and the one in grace
    for (const tok of seen.slice(0, 3)) expect(await live(tok)).toBeUndefined();
    expect(await live(b)).toBe('node-b');
    expect((await cli('tokens', 'revoke', 'ghost')).code).toBe(3);
    // After revoking, a fresh token can be issued.
    const again = await cli('tokens', 'issue', 'node-a');
    expect(again.code).toBe(0);
    seen.push(json(again.stdout).token);
  });

  it('no token is ever stored in clear: only its SHA-256 is in the data files', async () => {
    expect(seen).toHaveLength(5);
    const bytes = await dataBytes(t.dataDir);
    for (const tok of seen) {
      expect(bytes.includes(Buffer.from(tok)), 'token in clear').toBe(false);
      expect(bytes.includes(Buffer.from(tok.slice(4))), 'token body in clear').toBe(false);
      expect(bytes.includes(Buffer.from(tok, 'utf8').toString('base64')), 'token base64 in store').toBe(false);
      // Positive control: the hash is there, so the bytes read are the right ones.
      expect(bytes.includes(Buffer.from(createHash('sha256').update(tok).digest('hex'))), 'hash stored').toBe(true);
    }
  });

  it('removing a node removes its tokens', async () => {
    expect((await cli('nodes', 'rm', 'node-b')).code).toBe(0);
    expect(await live(seen[3]!)).toBeUndefined();
  });
});

describe('keys', () => {
  let t: TempDataDir;
  let cli: ReturnType<typeof cliFor>;
  let ed: KeyPair;
  let es: KeyPair;
  let server: Server;
  let base: string;
  let served: unknown = {};
  const keysList = async () => {
    const r = await cli('keys', 'list');
    expect(r.code).toBe(0);
    return r.stdout;
  };

  beforeAll(async () => {
    t = await freshDir();
    cli = cliFor(t.dataDir);
    ed = await keyPair('EdDSA', 'ed-1');
    es = await keyPair('ES256', 'es-1');
    server = createServer((req, res) => {
      if (req.url === '/jwks.json') {
        res.writeHead(200, { 'content-type': 'application/jwk-set+json' });
        res.end(JSON.stringify(served));
      } else {
        res.writeHead(404).end('not found');
      }
    });
    await new Promise<void>((r) => server.listen(0, '127.0.0.1', r));
    base = `http://127.0.0.1:${(server.address() as AddressInfo).port}`;
  });
  afterAll(async () => {
    await new Promise((r) => server.close(r));
  });

  it('list on an empty store → 0 with no keys', async () => {
    expect(json(await keysList())).toEqual({ data: [] });
  });

  it('add from a file: a valid JWKS (EdDSA + ES256) is trusted for the issuer', async () => {
    const file = await writeJwks(join(t.root, 'issuer.jwks.json'), publicJwks(ed, es));
    const r = await cli('keys', 'add', '--issuer', ISSUER, file);
    expect(r.code).toBe(0);
    expect(json(r.stdout)).toEqual({ issuer: ISSUER, source: file, added: ['ed-1', 'es-1'], unchanged: [] });
    expect(json(await keysList()).data).toEqual([
      { kid: 'ed-1', issuer: ISSUER, alg: 'EdDSA', source: file, addedAt: expect.any(String), fetchedAt: expect.any(String) },
      { kid: 'es-1', issuer: ISSUER, alg: 'ES256', source: file, addedAt: expect.any(String), fetchedAt: expect.any(String) },
    ]);
    // Re-adding the same keys changes nothing.
    const again = await cli('keys', 'add', '--issuer', ISSUER, file);
    expect(again.code).toBe(0);
    expect(json(again.stdout)).toMatchObject({ added: [], unchanged: ['ed-1', 'es-1'] });
  });

  it('stores only public members', async () => {
    const bytes = await dataBytes(t.dataDir);
    expect(bytes.includes(Buffer.from(String(ed.privateJwk.d)))).toBe(false);
    expect(bytes.includes(Buffer.from(String(ed.publicJwk.x)))).toBe(true);
  });

  const refusedFiles: Array<[string, () => Promise<unknown>, RegExp]> = [
    ['a private key', async () => ({ keys: [{ ...(await keyPair('EdDSA', 'priv-1')).privateJwk, use: 'sig' }] }), /private key material/],
    ['a key without kid', async () => {
      const { kid: _kid, ...noKid } = (await keyPair('EdDSA')).publicJwk;
      return { keys: [noKid] };
    }, /has no "kid"/],
    ['a symmetric oct key', async () => ({ keys: [{ ...(await exportJWK(await generateSecret('HS256', { extractable: true }))), kid: 'oct-1', alg: 'HS256' }] }), /symmetric \(oct\)/],
    ['an RS256 key', async () => {
      const rsa = await generateKeyPair('RS256', { extractable: true });
      return { keys: [{ ...(await exportJWK(rsa.publicKey)), kid: 'rsa-1', alg: 'RS256', use: 'sig' }] };
    }, /alg "RS256" is not allowed/],
    ['a good key next to a bad one (all or nothing)', async () => ({ keys: [(await keyPair('EdDSA', 'good-2')).publicJwk, { ...(await keyPair('EdDSA', 'bad-2')).publicJwk, use: 'enc' }] }), /use "enc"/],
    ['a kid that appears twice', async () => ({ keys: [(await keyPair('EdDSA', 'twice')).publicJwk, (await keyPair('EdDSA', 'twice')).publicJwk] }), /appears twice/],
    ['an empty JWKS', async () => ({ keys: [] }), /has no keys/],
    ['something that is not a JWKS', async () => ({ hello: 'world' }), /is not a JWKS/],
  ];
  for (const [label, make, message] of refusedFiles) {
    it(`add refuses ${label} with exit 2 and leaves the store unchanged`, async () => {
      const before = await keysList();
      const file = await writeJwks(join(t.root, 'refused.json'), await make());
      const r = await cli('keys', 'add', '--issuer', ISSUER, file);
      expect(r.code).toBe(2);
      expect(errorOf(r).message).toMatch(message);
      expect(await keysList()).toBe(before);
    });
  }

  it('add refuses a file that is not JSON (2) or does not exist (2)', async () => {
    const before = await keysList();
    const file = join(t.root, 'not.json');
    await writeFile(file, 'kid: nope');
    expect(errorOf(await cli('keys', 'add', '--issuer', ISSUER, file)).message).toMatch(/is not JSON/);
    const missing = await cli('keys', 'add', '--issuer', ISSUER, join(t.root, 'missing.json'));
    expect(missing.code).toBe(2);
    expect(errorOf(missing).message).toMatch(/ENOENT/);
    expect(await keysList()).toBe(before);
  });

  it('add without --issuer → 2', async () => {
    expect((await cli('keys', 'add', join(t.root, 'issuer.jwks.json'))).code).toBe(2);
  });

  it('a kid already trusted for another issuer is refused (4), store unchanged', async () => {
    const before = await keysList();
    const file = await writeJwks(join(t.root, 'other.json'), publicJwks(ed));
    const r = await cli('keys', 'add', '--issuer', 'https://other.test', file);
    expect(r.code).toBe(4);
    expect(errorOf(r)).toMatchObject({ code: 'conflict', message: expect.stringMatching(/another issuer/) });
    expect(await keysList()).toBe(before);
  });

  it('add from an http URL (local server on 127.0.0.1) records the URL as the source', async () => {
    const remote = await keyPair('EdDSA', 'url-1');
    served = publicJwks(remote);
    const url = `${base}/jwks.json`;
    const r = await cli('keys', 'add', '--issuer', 'https://issuer2.test', url);
    expect(r.code).toBe(0);
    expect(json(r.stdout)).toEqual({ issuer: 'https://issuer2.test', source: url, added: ['url-1'], unchanged: [] });
    expect(json(await keysList()).data).toContainEqual(expect.objectContaining({ kid: 'url-1', issuer: 'https://issuer2.test', alg: 'EdDSA', source: url }));
  });

  it('a URL that answers 404 → 4 (unavailable), store unchanged; a URL serving a private key → 2', async () => {
    const before = await keysList();
    const r = await cli('keys', 'add', '--issuer', 'https://issuer2.test', `${base}/missing`);
    expect(r.code).toBe(4);
    expect(errorOf(r)).toMatchObject({ code: 'unavailable', message: expect.stringMatching(/HTTP 404/) });
    served = { keys: [(await keyPair('ES256', 'url-priv')).privateJwk] };
    const p = await cli('keys', 'add', '--issuer', 'https://issuer2.test', `${base}/jwks.json`);
    expect(p.code).toBe(2);
    expect(errorOf(p).message).toMatch(/private key material/);
    expect(await keysList()).toBe(before);
  });

  it('rm → 0 and the key is gone; rm of an unknown kid → 3', async () => {
    const r = await cli('keys', 'rm', 'url-1');
    expect(r.code).toBe(0);
    expect(json(r.stdout)).toEqual({ kid: 'url-1', removed: true });
    expect(json(await keysList()).data.map((k: { kid: string }) => k.kid)).toEqual(['ed-1', 'es-1']);
    const again = await cli('keys', 'rm', 'url-1');
    expect(again.code).toBe(3);
    expect(errorOf(again).code).toBe('not_found');
  });
});

describe('verify (offline)', () => {
  let t: TempDataDir;
  let cli: ReturnType<typeof cliFor>;
  let ed: KeyPair;
  let es: KeyPair;
  let valid: string;
  const now = nowSeconds();

  beforeAll(async () => {
    t = await freshDir();
    cli = cliFor(t.dataDir);
    ed = await keyPair('EdDSA', 'ed-1');
    es = await keyPair('ES256', 'es-1');
    valid = mintCredential({ key: ed, now, claims: { jti: 'cred-1', exp: now + 3600 } });
  });

  it('with no database yet → 4 with a hint', async () => {
    const r = await cli('verify', valid, '--node', 'node-a');
    expect(r.code).toBe(4);
    expect(errorOf(r)).toMatchObject({ code: 'store', hint: expect.stringMatching(/nodes add/) });
  });

  it('with no node registered and no --node → 2', async () => {
    await cli('keys', 'list'); // creates the store
    const r = await cli('verify', valid);
    expect(r.code).toBe(2);
    expect(errorOf(r).message).toMatch(/no node registered/);
  });

  it('with no trusted keys → 4 with a hint to add some', async () => {
    expect((await cli('nodes', 'add', 'node-a')).code).toBe(0);
    const r = await cli('verify', valid);
    expect(r.code).toBe(4);
    expect(errorOf(r)).toMatchObject({ code: 'config', message: expect.stringMatching(/no trusted issuer keys/), hint: expect.stringMatching(/keys add --issuer/) });
  });

  it('a valid credential → 0 with the DESIGN §4 fields (the only node is the audience)', async () => {
    const file = await writeJwks(join(t.root, 'jwks.json'), publicJwks(ed, es));
    expect((await cli('keys', 'add', '--issuer', ISSUER, file)).code).toBe(0);
    const r = await cli('verify', valid);
    expect(r).toMatchObject({ code: 0, stderr: '' });
    expect(json(r.stdout)).toEqual({
      valid: true,
      credentialId: 'cred-1',
      issuer: ISSUER,
      payer: 'payer-1',
      node: 'node-a',
      stream: 'stream-1',
      budget: 'budget-1',
      capMicro: '5000000',
      asset: 'USDC',
      unitPriceMicro: '25',
      rateMicroPerSecond: '1000',
      mode: 'escrow',
      issuedAt: new Date(now * 1000).toISOString(),
      expiresAt: new Date((now + 3600) * 1000).toISOString(),
    });
  });

  it('an ES256 credential with --json → 0', async () => {
    const r = await cli('verify', mintCredential({ key: es }), '--json');
    expect(r.code).toBe(0);
    expect(json(r.stdout)).toMatchObject({ valid: true, node: 'node-a' });
  });

  it('refused credentials → 1 with valid:false and the refusal on stdout', async () => {
    const cases: Array<[string, string]> = [
      [mintCredential({ key: ed, claims: { iat: now - 7200, exp: now - 3600 } }), 'expired'],
      [mintCredential({ key: ed, claims: { aud: 'node-b' } }), 'wrong_audience'],
      [mintCredential({ key: ed, claims: { iss: 'https://evil.test' } }), 'untrusted_issuer'],
      [mintCredential({ key: ed, header: { kid: 'nobody' } }), 'unknown_key'],
      [mintCredential({ key: ed, claims: { cap: undefined } }), 'missing_claim'],
      [mintCredential({ key: ed, header: { alg: 'HS256' }, signWith: Buffer.from(String(ed.publicJwk.x), 'base64url') }), 'unsupported_algorithm'],
      ['not-a-jws', 'malformed'],
    ];
    for (const [jws, refusal] of cases) {
      const r = await cli('verify', jws);
      expect(r.code, refusal).toBe(1);
      expect(r.stderr).toBe('');
      expect(json(r.stdout)).toEqual({ valid: false, refusal, detail: expect.any(String) });
    }
  });

  it('verify - reads the credential from stdin (surrounding whitespace ignored)', async () => {
    const r = await cli.with(['verify', '-'], { input: `\n${valid}\n` });
    expect(r.code).toBe(0);
    expect(json(r.stdout)).toMatchObject({ valid: true, credentialId: 'cred-1' });
    const expired = await cli.with(['verify', '-'], { input: mintCredential({ key: ed, claims: { iat: now - 7200, exp: now - 3600 } }) });
    expect(expired.code).toBe(1);
    expect(json(expired.stdout)).toMatchObject({ valid: false, refusal: 'expired' });
  });

  it('verify - with empty stdin → 2', async () => {
    const r = await cli.with(['verify', '-'], { input: '' });
    expect(r.code).toBe(2);
    expect(errorOf(r).code).toBe('usage');
  });

  it('several nodes and no --node → 2, naming --node and NODE_SVC_NODE', async () => {
    expect((await cli('nodes', 'add', 'node-b')).code).toBe(0);
    const r = await cli('verify', valid);
    expect(r.code).toBe(2);
    expect(errorOf(r)).toMatchObject({ code: 'usage', hint: expect.stringMatching(/--node.*NODE_SVC_NODE/) });
  });

  it('--node picks the audience', async () => {
    const a = await cli('verify', valid, '--node', 'node-a');
    expect(a.code).toBe(0);
    const b = await cli('verify', valid, '--node', 'node-b');
    expect(b.code).toBe(1);
    expect(json(b.stdout)).toMatchObject({ valid: false, refusal: 'wrong_audience' });
    expect((await cli('verify', valid, '--node', 'bad/node')).code).toBe(2);
  });

  it('NODE_SVC_NODE picks the audience; --node wins over it', async () => {
    const a = await cli.with(['verify', valid], { env: { NODE_SVC_NODE: 'node-a' } });
    expect(a.code).toBe(0);
    const b = await cli.with(['verify', valid], { env: { NODE_SVC_NODE: 'node-b' } });
    expect(b.code).toBe(1);
    expect(json(b.stdout)).toMatchObject({ refusal: 'wrong_audience' });
    const both = await cli.with(['verify', valid, '--node', 'node-a'], { env: { NODE_SVC_NODE: 'node-b' } });
    expect(both.code).toBe(0);
  });

  it('verify is read-only: it changes nothing in the store', async () => {
    const before = await dataBytes(t.dataDir);
    expect((await cli('verify', valid, '--node', 'node-a')).code).toBe(0);
    expect((await dataBytes(t.dataDir)).equals(before)).toBe(true);
  });

  it('after keys rm, the credential is refused as unknown_key (→ 1)', async () => {
    expect((await cli('keys', 'rm', 'ed-1')).code).toBe(0);
    const r = await cli('verify', valid, '--node', 'node-a');
    expect(r.code).toBe(1);
    expect(json(r.stdout)).toMatchObject({ valid: false, refusal: 'unknown_key' });
  });
});
