// The CLI's verify bundle (src/build/cli-bundle.ts, bench/cli-start), as `npm run build` leaves it in dist/cli: the
// code cache is one this node accepts, verify runs on the bundle alone (better-sqlite3's JavaScript bundled, the
// installed one only for another addon), and errors of the modules other commands load are still ours.
import { execFileSync } from 'node:child_process';
import { readFileSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { Script } from 'node:vm';
import { afterAll, beforeAll, describe, expect, it, vi } from 'vitest';
import { isNodeSvcError, NodeSvcError } from '../../src/domain/errors.js';
import { BUNDLE, BUNDLE_CACHE, wrapCjs } from '../../src/cli/start.js';
import { BIN, cliFor, json, REPO_ROOT, tempDataDir, type TempDataDir } from '../helpers/cli.js';
import { ISSUER, keyPair, mintCredential, publicJwks, writeJwks } from '../helpers/issuer.js';

vi.setConfig({ testTimeout: 60_000, hookTimeout: 60_000 });

const CLI_DIR = join(REPO_ROOT, 'dist', 'cli');
let t: TempDataDir;
let jws: string;

beforeAll(async () => {
  t = await tempDataDir();
  const cli = cliFor(t.dataDir);
  const key = await keyPair('EdDSA');
  expect((await cli('nodes', 'add', 'node-a')).code).toBe(0);
  expect((await cli('keys', 'add', '--issuer', ISSUER, await writeJwks(join(t.root, 'jwks.json'), publicJwks(key)))).code).toBe(0);
  jws = mintCredential({ key, claims: { aud: 'node-a', jti: 'cred-bundle-1' } });
});
afterAll(async () => { await t?.cleanup(); });

describe('dist/cli: the verify bundle', () => {
  it('has a code cache this node accepts (every function compiled: far more than the eager top level)', () => {
    const source = readFileSync(join(CLI_DIR, BUNDLE), 'utf8');
    const cachedData = readFileSync(join(CLI_DIR, BUNDLE_CACHE));
    expect(new Script(wrapCjs(source), { filename: BUNDLE, cachedData }).cachedDataRejected).toBe(false);
    expect(cachedData.length).toBeGreaterThan(source.length);
  });

  it('verify requires nothing but the loader and the SQLite addon (the rest is compiled from the bundle), better-sqlite3\'s JavaScript bundled; the installed package for another addon', () => {
    const args = ['verify', jws, '--node', 'node-a', '--data-dir', t.dataDir];
    const loaded = (env: Record<string, string> = {}) => {
      const hook = join(t.root, 'loaded.cjs');
      const out = join(t.root, 'loaded.json');
      writeFileSync(hook, `process.on('exit', () => require('fs').writeFileSync(${JSON.stringify(out)}, JSON.stringify(Object.keys(require.cache))));\n`);
      const base = Object.fromEntries(Object.entries(process.env).filter(([k]) => !k.startsWith('NODE_SVC_')));
      const stdout = execFileSync(process.execPath, ['-r', hook, BIN, ...args], { env: { ...base, ...env }, encoding: 'utf8' });
      expect(json(stdout)).toMatchObject({ valid: true, credentialId: 'cred-bundle-1' });
      return (JSON.parse(readFileSync(out, 'utf8')) as string[]).filter((f) => !f.endsWith('loaded.cjs')).map((f) => f.slice(REPO_ROOT.length + 1));
    };
    // (the native addon is loaded through require either way)
    expect(loaded()).toEqual(['bin/node-svc', 'dist/cli/node-svc.cjs', 'node_modules/better-sqlite3/build/Release/better_sqlite3.node']);
    const addon = join(REPO_ROOT, 'node_modules', 'better-sqlite3', 'build', 'Release', 'better_sqlite3.node');
    expect(loaded({ NODE_SVC_SQLITE_ADDON: addon })).toContain('node_modules/better-sqlite3/lib/database.js');
  });
});

describe('NodeSvcError across module copies', () => {
  it('isNodeSvcError knows an error of another copy of errors.js, which instanceof does not', async () => {
    const other = (await import(join(REPO_ROOT, 'dist', 'domain', 'errors.js'))) as typeof import('../../src/domain/errors.js');
    const foreign = new other.NodeSvcError('not_found', 'x not found', { exitCode: 3 });
    expect(foreign instanceof NodeSvcError).toBe(false);
    expect(isNodeSvcError(foreign)).toBe(true);
    expect(isNodeSvcError(new NodeSvcError('usage', 'bad'))).toBe(true);
    for (const x of [new Error('plain'), { code: 'usage', message: 'look-alike' }, null, undefined, 'NodeSvcError']) expect(isNodeSvcError(x)).toBe(false);
  });
});
