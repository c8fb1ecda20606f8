// /openapi.json: a valid OpenAPI 3.1 document at version 1.2.0 (1.0.0 plus the changes of CHANGELOG) covering every seed path and event kind, generated
// from the route declarations, equal to the committed src/api/openapi.json, and served as such by the daemon.
import { execFileSync } from 'node:child_process';
import { readFileSync } from 'node:fs';
import { join } from 'node:path';
import { Validator } from '@seriousme/openapi-schema-validator';
import { afterAll, beforeAll, describe, expect, it, vi } from 'vitest';
import { generatedContract } from '../../src/api/write-openapi.js';
import { REPO_ROOT, tempDataDir, type TempDataDir } from '../helpers/cli.js';
import { http, startDaemon, type RunningDaemon } from '../helpers/daemon.js';

vi.setConfig({ testTimeout: 60_000, hookTimeout: 60_000 });

const EVENT_KINDS = [
  'settlement.checkpointed', 'settlement.final', 'capture.created', 'refund.final', 'stream.revoked', 'stream.exhausted',
  'budget.released', 'budget.halted', 'subscription.period_opened', 'subscription.renewal_declined', 'subscription.closed',
];

// Seed §4: every bearer-authenticated operation (the contract document itself is checked by being served).
const SEED_OPERATIONS: [string, string][] = [
  ['post', '/v1/allowances/verify'],
  ['get', '/v1/streams/{id}/verify'],
  ['get', '/v1/streams/{id}/headroom'],
  ['get', '/v1/streams/{id}/finality'],
  ['post', '/v1/webhooks'],
  ['get', '/v1/webhooks'],
  ['delete', '/v1/webhooks/{id}'],
];

const COMMITTED_PATH = 'src/api/openapi.json';

/** The committed contract: HEAD's version when git can tell, else the file in the tree. */
function committed(): { text: string; from: string } {
  try {
    const text = execFileSync('git', ['show', `HEAD:${COMMITTED_PATH}`], { cwd: REPO_ROOT, encoding: 'utf8', stdio: ['ignore', 'pipe', 'ignore'] });
    return { text, from: `git HEAD:${COMMITTED_PATH}` };
  } catch {
    return { text: readFileSync(join(REPO_ROOT, COMMITTED_PATH), 'utf8'), from: COMMITTED_PATH };
  }
}

type Doc = Record<string, any>;
let text: string;
let doc: Doc;
beforeAll(() => {
  text = generatedContract();
  doc = JSON.parse(text);
});

describe('the generated contract document', () => {
  it('(a) validates as OpenAPI', async () => {
    const r = await new Validator().validate(doc);
    expect(r.errors ?? null, JSON.stringify(r.errors, null, 2)).toBeNull();
    expect(r.valid).toBe(true);
  });

  it('(a) the validator is not a rubber stamp: a broken document fails', async () => {
    const broken = structuredClone(doc);
    delete broken.info;
    expect((await new Validator().validate(broken)).valid).toBe(false);
  });

  it('(b) openapi 3.1.0, info.version 1.4.0 (changes of issues #11, #12, #13, #17, #24), the 400/422 rule in its description', () => {
    expect(doc.openapi).toBe('3.1.0');
    expect(doc.info).toMatchObject({ version: '1.4.0', title: expect.any(String) });
    expect(doc.info.description).toMatch(/\*\*400\*\* `invalid_request` means the request does not match this document/);
    expect(doc.info.description).toMatch(/matches this document and is refused by a rule it names is \*\*422\*\*/);
  });

  it('(b) has the bearer security scheme, required by every /v1 operation', () => {
    expect(doc.components?.securitySchemes?.bearer).toMatchObject({ type: 'http', scheme: 'bearer' });
    for (const [path, item] of Object.entries<Doc>(doc.paths)) {
      if (!path.startsWith('/v1/')) continue;
      for (const [method, op] of Object.entries<Doc>(item)) {
        if (!['get', 'post', 'put', 'patch', 'delete'].includes(method)) continue;
        expect(op.security, `${method} ${path}`).toEqual([{ bearer: [] }]);
        expect(op.responses?.['401'], `${method} ${path} documents 401`).toBeDefined();
      }
    }
  });

  it.each(SEED_OPERATIONS)('(b) seed operation %s %s is present', (method, path) => {
    expect(doc.paths?.[path]?.[method], `${method.toUpperCase()} ${path}`).toBeDefined();
  });

  it('(b) the stream reads document 404 (unknown or another node\'s), never 403', () => {
    for (const view of ['verify', 'headroom', 'finality']) {
      const responses = doc.paths[`/v1/streams/{id}/${view}`].get.responses;
      expect(responses['404'], view).toBeDefined();
      expect(responses['403'], view).toBeUndefined();
    }
    expect(doc.paths['/v1/webhooks/{id}'].delete.responses['404']).toBeDefined();
  });

  it('(b) every one of the 11 event kinds is under top-level webhooks', () => {
    expect(Object.keys(doc.webhooks ?? {}).sort()).toEqual([...EVENT_KINDS].sort());
    for (const kind of EVENT_KINDS) {
      const op = doc.webhooks[kind].post;
      expect(op, kind).toBeDefined();
      expect(op.requestBody?.content?.['application/json']?.schema, kind).toBeDefined();
    }
  });

  it('(c) equals the committed src/api/openapi.json (regenerate with `npm run build` and commit it)', () => {
    const c = committed();
    // Compare documents first for a readable diff, then bytes (the file is written exactly as generated).
    expect(doc, `the generated contract differs from ${c.from}`).toEqual(JSON.parse(c.text));
    expect(text).toBe(c.text);
  });
});

describe('(d) the live daemon', () => {
  let t: TempDataDir;
  let daemon: RunningDaemon;
  beforeAll(async () => {
    t = await tempDataDir('node-svc-contract-');
    daemon = await startDaemon(t.dataDir);
  });
  afterAll(async () => {
    await daemon?.stop('SIGKILL');
    await t?.cleanup();
  });

  it('serves the same document at /openapi.json, without a token, as application/json', async () => {
    const r = await http(daemon.url, '/openapi.json');
    expect(r.status).toBe(200);
    expect(r.headers.get('content-type')).toMatch(/^application\/json/);
    expect(r.body).toEqual(doc);
  });
});
