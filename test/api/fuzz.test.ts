// Contract fuzz (issue #12): requests generated from the OpenAPI document itself (fast-check arbitraries built from
// its schemas, seeded, bounded), sent to the real daemon. Every answer: no 5xx, a status the document declares for
// the operation, problem+json for every 4xx, and a body valid against the documented schema (ajv, JSON Schema
// 2020-12, the dialect of OpenAPI 3.1). And the rule of the document's description (issue #24): 400 exactly when the
// request does not match the document (judged here by ajv on its path, query and body), never for one that does.
import Ajv2020 from 'ajv/dist/2020.js';
import fc from 'fast-check';
import { afterAll, beforeAll, describe, expect, it, vi } from 'vitest';
import { generatedContract } from '../../src/api/write-openapi.js';
import { tempDataDir, type TempDataDir } from '../helpers/cli.js';
import { clientOf, setupNodes, startDaemon, type RunningDaemon } from '../helpers/daemon.js';
import { ISSUER, keyPair, mintCredential, nowSeconds, signCompact, type KeyPair } from '../helpers/issuer.js';

vi.setConfig({ testTimeout: 60_000, hookTimeout: 60_000 });

type Schema = Record<string, any>;
const SEED = 0x5eed12;
const RUNS = 50;

const doc = JSON.parse(generatedContract()) as Schema;
const resolve = (s: Schema): Schema => (s?.$ref ? resolve(s.$ref.split('/').slice(1).reduce((o: Schema, k: string) => o[k], doc)) : s);

/** A fast-check arbitrary for (mostly) schema-valid values, with a share of arbitrary JSON thrown in. */
function arb(raw: Schema, depth = 0): fc.Arbitrary<unknown> {
  const s = resolve(raw);
  const positive = ((): fc.Arbitrary<unknown> => {
    if (s.const !== undefined) return fc.constant(s.const);
    if (s.enum) return fc.constantFrom(...s.enum);
    if (s.anyOf || s.oneOf) return fc.oneof(...(s.anyOf ?? s.oneOf).map((x: Schema) => arb(x, depth + 1)));
    const type = Array.isArray(s.type) ? s.type.find((t: string) => t !== 'null') : s.type;
    switch (type) {
      case 'string': {
        const max = Math.min(s.maxLength ?? 300, 3000);
        const min = s.minLength ?? 0;
        if (s.pattern) return fc.stringMatching(new RegExp(s.pattern)).filter((x) => x.length >= min && x.length <= max);
        // boundaries matter: the limit itself and just past it
        return fc.oneof({ weight: 4, arbitrary: fc.string({ minLength: min, maxLength: Math.min(max, 80), unit: 'binary' }) }, fc.constantFrom('x'.repeat(Math.max(min, max)), 'x'.repeat(max + 1)));
      }
      case 'integer':
        return fc.oneof(fc.integer({ min: s.minimum ?? -1e6, max: s.maximum ?? 1e6 }), fc.constantFrom(s.minimum ?? 0, s.maximum ?? 2 ** 53));
      case 'number':
        return fc.double({ noNaN: true });
      case 'boolean':
        return fc.boolean();
      case 'array':
        return fc.array(arb(s.items ?? {}, depth + 1), { minLength: s.minItems ?? 0, maxLength: Math.min(s.maxItems ?? 5, 5) });
      case 'object': {
        const props = s.properties ?? {};
        if (depth > 4) return fc.constant({});
        return fc.record(Object.fromEntries(Object.entries(props).map(([k, v]) => [k, arb(v as Schema, depth + 1)])), { requiredKeys: s.required ?? [] });
      }
      default:
        return fc.jsonValue({ maxDepth: 2 });
    }
  })();
  return depth === 0 ? fc.oneof({ weight: 9, arbitrary: positive }, { weight: 1, arbitrary: fc.jsonValue({ maxDepth: 2 }) }) : positive;
}

/**
 * Does this request match the document? Each path and query value against its parameter schema (a query value is text:
 * integer and number schemas read it as a number, as the API does), no undeclared query parameter, and the body against
 * the request body schema (absent only when not required). What the API may answer 400 to, and nothing else.
 */
function matchesDocument(op: Schema, sent: { path: Record<string, string>; query: URLSearchParams; body: unknown | null }): boolean {
  const params: Schema[] = op.parameters ?? [];
  for (const p of params.filter((x) => x.in === 'path')) if (!validatorFor(`param ${JSON.stringify(p.schema)}`, p.schema)(sent.path[p.name])) return false;
  const declared = new Map(params.filter((x) => x.in === 'query').map((x) => [x.name as string, x.schema as Schema]));
  for (const [k, v] of sent.query) {
    const schema = declared.get(k);
    if (!schema) return false;
    const type = resolve(schema).type;
    const value = (type === 'integer' || type === 'number') && /^-?[0-9]+(\.[0-9]+)?(e[+-]?[0-9]+)?$/i.test(v) ? Number(v) : v;
    if (!validatorFor(`param ${JSON.stringify(schema)}`, schema)(value)) return false;
  }
  const body = op.requestBody?.content?.['application/json']?.schema;
  if (!body) return true;
  if (sent.body === null) return !op.requestBody.required;
  return validatorFor(`body ${JSON.stringify(body)}`, body)(sent.body) as boolean;
}

interface Op { method: string; path: string; op: Schema }
const operations: Op[] = Object.entries(doc.paths as Record<string, Schema>).flatMap(([path, item]) =>
  Object.entries(item).filter(([m]) => ['get', 'post', 'delete', 'put', 'patch'].includes(m)).map(([method, op]) => ({ method, path, op: op as Schema })),
);

const ajv = new Ajv2020({ strict: false, validateFormats: false, allErrors: true });
const validators = new Map<string, ReturnType<typeof ajv.compile>>();
function validatorFor(key: string, schema: Schema) {
  let v = validators.get(key);
  if (!v) validators.set(key, (v = ajv.compile({ ...schema, components: doc.components })));
  return v;
}

describe('contract fuzz: requests generated from /openapi.json', () => {
  let tmp: TempDataDir;
  let daemon: RunningDaemon;
  let token: string;
  let issuer: KeyPair;
  const seen = { requests: 0, statuses: new Map<string, number>() };
  const known: string[] = ['fuzz-stream']; // ids that exist: the stream, then the event and subscription made below

  beforeAll(async () => {
    tmp = await tempDataDir();
    issuer = await keyPair();
    token = (await setupNodes(tmp.dataDir, issuer)).tokenA;
    daemon = await startDaemon(tmp.dataDir);
    // Some real state, so that reads of existing ids are exercised too.
    const c = clientOf(daemon.url, token);
    await c.post('/v1/allowances/verify', { credential: mintCredential({ key: issuer, claims: { stream: 'fuzz-stream' } }) });
    const ev = await c.post('/v1/control', {
      message: signCompact({ alg: issuer.alg, typ: 'control+jwt', kid: issuer.kid }, { iss: ISSUER, aud: 'node-a', jti: 'fuzz-1', iat: nowSeconds(), kind: 'budget.halted', budget: 'b', reason: 'sla' }, issuer.privateKey),
    });
    const sub = await c.post('/v1/webhooks', { url: 'http://127.0.0.1:9/fuzz' });
    known.push(ev.body.eventId, sub.body.id);
  });
  afterAll(async () => {
    await daemon?.stop();
    await tmp?.cleanup();
    // what the run covered, for whoever reads the test log
    console.log(`contract fuzz: ${seen.requests} requests; statuses ${JSON.stringify(Object.fromEntries(seen.statuses))}`);
  });

  for (const { method, path, op } of operations) {
    it(`${method.toUpperCase()} ${path}`, async () => {
      const params: Schema[] = op.parameters ?? [];
      const pathParams = params.filter((p) => p.in === 'path');
      const queryParams = params.filter((p) => p.in === 'query');
      const bodySchema = op.requestBody?.content?.['application/json']?.schema;
      const request = fc.record({
        path: fc.tuple(...pathParams.map((p) => fc.oneof(arb(p.schema, 1).map(String), fc.constantFrom(...known)))),
        query: fc.record(Object.fromEntries(queryParams.map((p) => [p.name, arb(p.schema, 1)])), { requiredKeys: [] }),
        unknownQuery: fc.oneof({ weight: 7, arbitrary: fc.constant(null) }, { weight: 1, arbitrary: fc.constantFrom('foo', 'limit2', 'x-y') }),
        body: bodySchema ? fc.option(arb(bodySchema), { freq: 10 }) : fc.constant(null),
      });
      await fc.assert(
        fc.asyncProperty(request, async (r) => {
          let url = path;
          const sentPath: Record<string, string> = {};
          pathParams.forEach((p, i) => {
            sentPath[p.name] = r.path[i] || 'x';
            url = url.replace(`{${p.name}}`, encodeURIComponent(sentPath[p.name]!));
          });
          const qs = new URLSearchParams();
          for (const [k, v] of Object.entries(r.query)) if (v !== undefined) qs.append(k, String(v));
          if (r.unknownQuery) qs.append(r.unknownQuery, '1');
          const q = qs.toString();
          const headers: Record<string, string> = { authorization: `Bearer ${token}` };
          if (r.body !== null && bodySchema) headers['content-type'] = 'application/json';
          const res = await fetch(`${daemon.url}${url}${q ? `?${q}` : ''}`, { method: method.toUpperCase(), headers, ...(r.body !== null && bodySchema ? { body: JSON.stringify(r.body) } : {}) });
          const text = await res.text();
          seen.requests++;
          seen.statuses.set(String(res.status), (seen.statuses.get(String(res.status)) ?? 0) + 1);
          const where = `${method.toUpperCase()} ${url}${q ? `?${q}` : ''} body=${JSON.stringify(r.body)?.slice(0, 300)} → ${res.status} ${text.slice(0, 300)}`;
          expect(res.status, where).toBeLessThan(500);
          // 400 means "does not match the document", and only that: a matching request refused by a rule the document
          // names is 422 with a named code (DESIGN §15). 413 is the body limit, which the document states in words.
          const matches = matchesDocument(op, { path: sentPath, query: qs, body: r.body !== null && bodySchema ? r.body : null });
          if (matches) expect(res.status, `a request that matches the document got 400: ${where}`).not.toBe(400);
          else expect([400, 413], `a request that does not match the document was not refused as such: ${where}`).toContain(res.status);
          if (res.status === 422) expect(JSON.parse(text).refusal, where).toEqual(expect.any(String));
          // Unknown query parameters are refused like unknown body fields, naming them (checked before the body and the id).
          if (r.unknownQuery) expect([res.status, text.includes(r.unknownQuery)], where).toEqual([400, true]);
          const declared = op.responses?.[String(res.status)];
          expect(declared, `status not declared: ${where}`).toBeDefined();
          const type = (res.headers.get('content-type') ?? '').split(';')[0]!;
          if (res.status >= 400) expect(type, where).toBe('application/problem+json');
          if (!declared.content) {
            expect(text, where).toBe('');
            return;
          }
          const content = declared.content[type];
          expect(content, `content type ${type} not declared: ${where}`).toBeDefined();
          const validate = validatorFor(`${method} ${path} ${res.status} ${type}`, content.schema);
          expect(validate(JSON.parse(text)), `${where}\n${JSON.stringify(validate.errors)}`).toBe(true);
        }),
        { seed: SEED, numRuns: RUNS, endOnFailure: true },
      );
    });
  }
});
