// The reference consumer (seed §6, DESIGN §9): signature first, then the envelope, then event-id dedupe and a
// join-semilattice merge. Property: every event delivered twice and shuffled gives the state of one ordered
// delivery, and that state is what an independent model of the rules says.
import { mkdtemp, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import fc from 'fast-check';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { serviceSignature } from '../../src/delivery/sign.js';
import { EVENT_KINDS, HALT_REASONS, type EventKind } from '../../src/domain/events.js';
import { createConsumer, memoryStore, sqliteStore, type Consumer, type ConsumerState, type ConsumerStore } from '../../src/sdk/consumer.js';

const SECRET = 'whsec_dGVzdC1zZWNyZXQtZm9yLXRoZS1jb25zdW1lci10ZXN0cw==';
const INT64_MAX = 9223372036854775807n;
const TWO_53 = 2n ** 53n;

interface Ev {
  id: string;
  type: string;
  schemaVersion: string;
  occurredAt: string;
  externalRef: string;
  data: Record<string, unknown>;
}
interface Delivery {
  body: string;
  headers: Record<string, string>;
}

const bodyOf = (e: Ev) => JSON.stringify({ id: e.id, type: e.type, schemaVersion: e.schemaVersion, occurredAt: e.occurredAt, externalRef: e.externalRef, data: e.data });
const deliver = (e: Ev, secret = SECRET): Delivery => {
  const body = bodyOf(e);
  return { body, headers: { 'x-service-event-id': e.id, 'x-service-signature': serviceSignature(secret, body), 'content-type': 'application/json' } };
};

// ---- arbitraries ----

const amount = fc
  .oneof(
    fc.bigInt({ min: 0n, max: 1_000n }),
    fc.bigInt({ min: TWO_53 - 3n, max: TWO_53 + 3n }), // where a float would round
    fc.bigInt({ min: TWO_53, max: INT64_MAX }),
    fc.bigInt({ min: 0n, max: INT64_MAX }),
  )
  .map(String);
const streamId = fc.constantFrom('s-1', 's-2', 's-3');
const budgetId = fc.constantFrom('b-1', 'b-2');
const subId = fc.constantFrom('sub-1', 'sub-2');
const periodNo = fc.integer({ min: 0, max: 3 });
const time = fc.date({ min: new Date('2020-01-01T00:00:00Z'), max: new Date('2040-01-01T00:00:00Z'), noInvalidDate: true }).map((d) => d.toISOString());
const v10or11 = fc.constantFrom('1.0.0', '1.1.0');

type Draft = Pick<Ev, 'type' | 'schemaVersion' | 'data'>;
const money = (type: EventKind) => fc.record({ type: fc.constant(type), schemaVersion: v10or11, data: fc.record({ stream: streamId, amountMicro: amount, asset: fc.constant('USDC') }) });
const DRAFTS: Record<EventKind, fc.Arbitrary<Draft>> = {
  'settlement.checkpointed': money('settlement.checkpointed'),
  'settlement.final': money('settlement.final'),
  'capture.created': money('capture.created'),
  'refund.final': money('refund.final'),
  'stream.revoked': fc.record({ type: fc.constant('stream.revoked'), schemaVersion: v10or11, data: fc.record({ stream: streamId, reason: fc.string({ maxLength: 8 }) }, { requiredKeys: ['stream'] }) }),
  'stream.exhausted': fc.record({ type: fc.constant('stream.exhausted'), schemaVersion: v10or11, data: fc.record({ stream: streamId }) }),
  'budget.halted': fc.record({ type: fc.constant('budget.halted'), schemaVersion: v10or11, data: fc.record({ budget: budgetId, reason: fc.constantFrom(...HALT_REASONS) }) }),
  'budget.released': fc.record({ type: fc.constant('budget.released'), schemaVersion: v10or11, data: fc.record({ budget: budgetId, amountMicro: amount, asset: fc.constant('USDC') }, { requiredKeys: ['budget'] }) }),
  // 1.0.0 never carries the subscription kinds (they were introduced in 1.1.0).
  'subscription.period_opened': fc.record({ type: fc.constant('subscription.period_opened'), schemaVersion: fc.constant('1.1.0'), data: fc.record({ subscription: subId, period: periodNo, periodStart: time, periodEnd: time }, { requiredKeys: ['subscription', 'period'] }) }),
  'subscription.renewal_declined': fc.record({ type: fc.constant('subscription.renewal_declined'), schemaVersion: fc.constant('1.1.0'), data: fc.record({ subscription: subId, period: periodNo }) }),
  'subscription.closed': fc.record({ type: fc.constant('subscription.closed'), schemaVersion: fc.constant('1.1.0'), data: fc.record({ subscription: subId, period: periodNo }) }),
};
const draft = fc.oneof(...Object.values(DRAFTS));
const events = (maxLength: number, minLength = 0) =>
  fc.array(draft, { minLength, maxLength }).map((ds) =>
    ds.map((d, i): Ev => ({ id: `evt_${String(i).padStart(4, '0')}`, occurredAt: new Date(1_700_000_000_000 + i * 1000).toISOString(), externalRef: `ref-${i}`, ...d })),
  );
/** The events, each delivered twice, in a random order. */
const twiceShuffled = (maxLength: number) =>
  events(maxLength).chain((evs) => {
    const idx = [...evs.keys(), ...evs.keys()];
    return fc.tuple(fc.constant(evs), fc.shuffledSubarray(idx, { minLength: idx.length, maxLength: idx.length }));
  });

// ---- an independent model of the rules ----

function model(evs: Ev[]): ConsumerState {
  const s: ConsumerState = { streams: {}, budgets: {}, subscriptions: {} };
  const big = (a: string, b: string) => (BigInt(b) > BigInt(a) ? b : a);
  for (const e of evs) {
    const d = e.data as Record<string, any>;
    if (d.stream !== undefined) {
      const x = (s.streams[d.stream] ??= { checkpointedMicro: '0', finalMicro: '0', creditedMicro: '0', capturedMicro: '0', refundedMicro: '0', revoked: false, exhausted: false });
      if (e.type === 'settlement.checkpointed') x.checkpointedMicro = big(x.checkpointedMicro, d.amountMicro);
      if (e.type === 'settlement.final') x.finalMicro = x.creditedMicro = big(x.finalMicro, d.amountMicro);
      if (e.type === 'capture.created') x.capturedMicro = big(x.capturedMicro, d.amountMicro);
      if (e.type === 'refund.final') x.refundedMicro = big(x.refundedMicro, d.amountMicro);
      if (e.type === 'stream.revoked') x.revoked = true;
      if (e.type === 'stream.exhausted') x.exhausted = true;
    }
    if (d.budget !== undefined) {
      const b = (s.budgets[d.budget] ??= { status: 'active', reasons: [], releasedMicro: null });
      if (e.type === 'budget.halted') {
        if (b.status === 'active') b.status = 'halted';
        b.reasons = [...new Set([...b.reasons, d.reason as string])].sort();
      } else {
        b.status = 'released';
        if (d.amountMicro !== undefined) b.releasedMicro = b.releasedMicro === null ? d.amountMicro : big(b.releasedMicro, d.amountMicro);
      }
    }
    if (d.subscription !== undefined) {
      const sub = (s.subscriptions[d.subscription] ??= { periods: {}, closed: false });
      if (e.type === 'subscription.closed') sub.closed = true;
      else {
        const p = (sub.periods[String(d.period)] ??= { opened: false, renewalDeclined: false, periodStart: null, periodEnd: null });
        if (e.type === 'subscription.renewal_declined') p.renewalDeclined = true;
        else {
          p.opened = true;
          if (d.periodStart !== undefined && (p.periodStart === null || d.periodStart < p.periodStart)) p.periodStart = d.periodStart;
          if (d.periodEnd !== undefined && (p.periodEnd === null || d.periodEnd > p.periodEnd)) p.periodEnd = d.periodEnd;
        }
      }
    }
  }
  return s;
}

// ---- helpers ----

let dir: string;
beforeAll(async () => {
  dir = await mkdtemp(join(tmpdir(), 'node-svc-consumer-'));
});
afterAll(async () => {
  await rm(dir, { recursive: true, force: true });
});
let files = 0;
const dbFile = () => join(dir, `state-${++files}.db`);

async function feed(c: Consumer, ds: Delivery[]) {
  const out: string[] = [];
  for (const d of ds) out.push((await c.handle(d.body, d.headers)).status);
  return out;
}

async function checkProperty(store: () => Promise<ConsumerStore> | ConsumerStore, runs: number, maxLength: number) {
  await fc.assert(
    fc.asyncProperty(twiceShuffled(maxLength), async ([evs, order]) => {
      const once = createConsumer({ secret: SECRET, store: await store() });
      const messy = createConsumer({ secret: SECRET, store: await store() });
      try {
        const first = await feed(once, evs.map((e) => deliver(e)));
        expect(first.every((s) => s === 'applied')).toBe(true);
        const statuses = await feed(messy, order.map((i) => deliver(evs[i]!)));
        // The first sight of each event id is applied, the second is a duplicate.
        const seen = new Set<number>();
        statuses.forEach((s, k) => {
          const i = order[k]!;
          expect(s).toBe(seen.has(i) ? 'duplicate' : 'applied');
          seen.add(i);
        });
        const a = await once.state();
        const b = await messy.state();
        expect(b).toEqual(a);
        expect(JSON.stringify(canonical(b))).toBe(JSON.stringify(canonical(a)));
        expect(a).toEqual(model(evs));
      } finally {
        once.close();
        messy.close();
      }
    }),
    { numRuns: runs },
  );
}

/** Keys sorted at every level, so a deep comparison is also a byte comparison. */
const canonical = (v: unknown): unknown =>
  Array.isArray(v) ? v.map(canonical) : v && typeof v === 'object' ? Object.fromEntries(Object.entries(v).sort(([a], [b]) => (a < b ? -1 : 1)).map(([k, x]) => [k, canonical(x)])) : v;

const ev = (id: string, type: string, data: Record<string, unknown>, schemaVersion = '1.1.0'): Ev => ({ id, type, schemaVersion, occurredAt: '2026-01-01T00:00:00.000Z', externalRef: `ref-${id}`, data });
const settle = (id: string, type: 'settlement.checkpointed' | 'settlement.final', amountMicro: string, stream = 's-1') => ev(id, type, { stream, amountMicro, asset: 'USDC' });

// ---- tests ----

describe('consumer property: duplicates and order do not matter (DESIGN §9)', () => {
  it('memoryStore: every event twice, shuffled = one in-order delivery = the model', async () => {
    await checkProperty(() => memoryStore(), 300, 40);
  });

  it('sqliteStore (temp files): the same', async () => {
    await checkProperty(() => sqliteStore(dbFile()), 25, 25);
  }, 120_000);

  it('the generator covers every event kind and both schema versions', () => {
    const kinds = new Set<string>();
    const pairs = new Set<string>();
    fc.sample(events(40), 200).flat().forEach((e) => {
      kinds.add(e.type);
      pairs.add(`${e.schemaVersion} ${e.type}`);
    });
    expect([...kinds].sort()).toEqual(Object.keys(EVENT_KINDS).sort());
    expect(pairs.has('1.0.0 settlement.final')).toBe(true);
    expect(pairs.has('1.1.0 settlement.final')).toBe(true);
    expect([...pairs].filter((p) => p.startsWith('1.0.0 subscription.'))).toEqual([]);
  });
});

describe('consumer rules', () => {
  it('credit only on settlement.final: checkpointed alone leaves creditedMicro "0"', async () => {
    const c = createConsumer({ secret: SECRET });
    await feed(c, [deliver(settle('e1', 'settlement.checkpointed', '700'))]);
    expect((await c.state()).streams['s-1']).toMatchObject({ checkpointedMicro: '700', finalMicro: '0', creditedMicro: '0' });
    await feed(c, [deliver(settle('e2', 'settlement.final', '650'))]);
    expect((await c.state()).streams['s-1']).toMatchObject({ checkpointedMicro: '700', finalMicro: '650', creditedMicro: '650' });
  });

  it('late lower cumulative amounts are ignored, above 2^53 too (compared as integers, not floats)', async () => {
    const c = createConsumer({ secret: SECRET });
    const hi = (TWO_53 + 1n).toString(); // 9007199254740993: a float would read it as ...992
    const lo = TWO_53.toString();
    await feed(c, [deliver(settle('e1', 'settlement.final', hi)), deliver(settle('e2', 'settlement.final', lo)), deliver(settle('e3', 'settlement.final', '99'))]);
    expect((await c.state()).streams['s-1']).toMatchObject({ finalMicro: hi, creditedMicro: hi });
    await feed(c, [deliver(settle('e4', 'settlement.final', INT64_MAX.toString()))]);
    expect((await c.state()).streams['s-1']!.creditedMicro).toBe('9223372036854775807');
    // "10" vs "9": a string comparison would get this wrong.
    const d = createConsumer({ secret: SECRET });
    await feed(d, [deliver(settle('x1', 'settlement.checkpointed', '10')), deliver(settle('x2', 'settlement.checkpointed', '9'))]);
    expect((await d.state()).streams['s-1']!.checkpointedMicro).toBe('10');
  });

  it('budget status by precedence active < halted < released; halt reasons are a set', async () => {
    const c = createConsumer({ secret: SECRET });
    await feed(c, [
      deliver(ev('h1', 'budget.halted', { budget: 'b-1', reason: 'sla' })),
      deliver(ev('r1', 'budget.released', { budget: 'b-1', amountMicro: '5' })),
      deliver(ev('h2', 'budget.halted', { budget: 'b-1', reason: 'anomaly' })),
      deliver(ev('h3', 'budget.halted', { budget: 'b-1', reason: 'sla' })),
    ]);
    expect((await c.state()).budgets['b-1']).toEqual({ status: 'released', reasons: ['anomaly', 'sla'], releasedMicro: '5' });
  });

  it('duplicates answer "duplicate" and change nothing', async () => {
    const c = createConsumer({ secret: SECRET });
    const d = deliver(settle('e1', 'settlement.final', '5'));
    expect(await c.handle(d.body, d.headers)).toMatchObject({ status: 'applied', event: { id: 'e1', type: 'settlement.final', schemaVersion: '1.1.0' } });
    const before = await c.state();
    expect(await c.handle(d.body, d.headers)).toMatchObject({ status: 'duplicate' });
    // The same id with other (correctly signed) content is still a duplicate: dedupe is on the event id.
    const other = deliver(settle('e1', 'settlement.final', '500'));
    expect((await c.handle(other.body, other.headers)).status).toBe('duplicate');
    expect(await c.state()).toEqual(before);
  });
});

describe('consumer refusals change nothing', () => {
  let c: Consumer;
  let before: ConsumerState;
  beforeAll(async () => {
    c = createConsumer({ secret: SECRET });
    await feed(c, [deliver(settle('base-1', 'settlement.final', '100')), deliver(ev('base-2', 'budget.halted', { budget: 'b-1', reason: 'cap' }))]);
    before = await c.state();
    expect(before.streams['s-1']!.creditedMicro).toBe('100');
  });

  const genuine = () => deliver(settle('evt-x', 'settlement.final', '1000'));
  const sigOf = (d: Delivery) => d.headers['x-service-signature']!;
  const cases: Array<[string, () => Delivery]> = [
    ['a tampered body (amount changed after signing)', () => { const d = genuine(); return { ...d, body: d.body.replace('"1000"', '"9000"') }; }],
    ['a body with a byte appended', () => { const d = genuine(); return { ...d, body: `${d.body} ` }; }],
    ['the wrong secret', () => deliver(settle('evt-x', 'settlement.final', '1000'), 'whsec_other')],
    ['an uppercase hex signature', () => { const d = genuine(); return { ...d, headers: { ...d.headers, 'x-service-signature': `sha256=${sigOf(d).slice(7).toUpperCase()}` } }; }],
    ['a truncated signature', () => { const d = genuine(); return { ...d, headers: { ...d.headers, 'x-service-signature': sigOf(d).slice(0, -2) } }; }],
    ['the signature without its prefix', () => { const d = genuine(); return { ...d, headers: { ...d.headers, 'x-service-signature': sigOf(d).slice(7) } }; }],
    ['no signature header', () => { const d = genuine(); const { 'x-service-signature': _s, ...rest } = d.headers; return { ...d, headers: rest }; }],
    ['an empty signature header', () => { const d = genuine(); return { ...d, headers: { ...d.headers, 'x-service-signature': '' } }; }],
  ];
  for (const [name, make] of cases) {
    it(`${name} → rejected bad_signature, state untouched`, async () => {
      const d = make();
      const r = await c.handle(d.body, d.headers);
      expect(r).toMatchObject({ status: 'rejected', reason: 'bad_signature' });
      expect(r.event).toBeUndefined();
      expect(await c.state()).toEqual(before);
    });
  }

  const signedBad: Array<[string, () => string]> = [
    ['an unknown type', () => bodyOf(ev('bad-1', 'settlement.pending', { stream: 's-1', amountMicro: '1', asset: 'USDC' }))],
    ['schemaVersion 2.0.0', () => bodyOf(ev('bad-2', 'settlement.final', { stream: 's-1', amountMicro: '1000', asset: 'USDC' }, '2.0.0'))],
    ['a 1.1.0 kind marked 1.0.0', () => bodyOf(ev('bad-3', 'subscription.period_opened', { subscription: 'sub-1', period: 1 }, '1.0.0'))],
    ['amountMicro as a number', () => bodyOf(ev('bad-4', 'settlement.final', { stream: 's-1', amountMicro: 1000, asset: 'USDC' }))],
    ['amountMicro negative', () => bodyOf(ev('bad-5', 'settlement.final', { stream: 's-1', amountMicro: '-1', asset: 'USDC' }))],
    ['amountMicro above int64', () => bodyOf(ev('bad-6', 'settlement.final', { stream: 's-1', amountMicro: (INT64_MAX + 1n).toString(), asset: 'USDC' }))],
    ['a halt reason outside the nine codes', () => bodyOf(ev('bad-7', 'budget.halted', { budget: 'b-1', reason: 'because' }))],
    ['no id', () => JSON.stringify({ type: 'stream.revoked', schemaVersion: '1.1.0', occurredAt: 'x', externalRef: 'y', data: { stream: 's-1' } })],
    ['not JSON', () => '{"id":'],
    ['a JSON array', () => '[]'],
  ];
  for (const [name, make] of signedBad) {
    it(`${name} (correctly signed) → rejected bad_envelope, state untouched`, async () => {
      const body = make();
      const r = await c.handle(body, { 'x-service-signature': serviceSignature(SECRET, body) });
      expect(r).toMatchObject({ status: 'rejected', reason: 'bad_envelope', detail: expect.any(String) });
      expect(await c.state()).toEqual(before);
    });
  }

  it('an x-service-event-id differing from the body id is rejected', async () => {
    const d = genuine();
    const r = await c.handle(d.body, { ...d.headers, 'x-service-event-id': 'evt-other' });
    expect(r).toMatchObject({ status: 'rejected', reason: 'event_id_mismatch' });
    expect(await c.state()).toEqual(before);
  });

  it('after all those refusals the genuine event is still new: nothing marked its id as seen', async () => {
    const d = genuine();
    expect((await c.handle(d.body, d.headers)).status).toBe('applied');
    expect((await c.state()).streams['s-1']!.creditedMicro).toBe('1000');
    for (const id of ['bad-1', 'bad-2', 'bad-4']) {
      const ok = deliver(ev(id, 'stream.exhausted', { stream: 's-9' }));
      expect((await c.handle(ok.body, ok.headers)).status).toBe('applied');
    }
  });
});

describe('consumer inputs', () => {
  it('takes the body as string, Buffer or Uint8Array and headers as Headers or any-case records', async () => {
    const c = createConsumer({ secret: SECRET });
    const a = deliver(settle('b1', 'settlement.final', '1'));
    const b = deliver(settle('b2', 'settlement.final', '2'));
    const d3 = deliver(settle('b3', 'settlement.final', '3'));
    expect((await c.handle(Buffer.from(a.body), new Headers(a.headers))).status).toBe('applied');
    expect((await c.handle(new Uint8Array(Buffer.from(b.body)), { 'X-Service-Signature': b.headers['x-service-signature']! })).status).toBe('applied');
    expect((await c.handle(d3.body, { 'x-service-signature': [d3.headers['x-service-signature']!] })).status).toBe('applied');
    expect((await c.state()).streams['s-1']!.creditedMicro).toBe('3');
  });

  it('during a rotation: either secret, in x-service-signature or x-service-signature-previous', async () => {
    const c = createConsumer({ secret: ['whsec_new', 'whsec_old'] });
    const e1 = settle('r1', 'settlement.final', '1');
    const body = bodyOf(e1);
    expect((await c.handle(body, { 'x-service-signature': serviceSignature('whsec_old', body) })).status).toBe('applied');
    const body2 = bodyOf(settle('r2', 'settlement.final', '2'));
    expect((await c.handle(body2, { 'x-service-signature': 'sha256=00', 'x-service-signature-previous': serviceSignature('whsec_new', body2) })).status).toBe('applied');
    const body3 = bodyOf(settle('r3', 'settlement.final', '3'));
    expect((await c.handle(body3, { 'x-service-signature': serviceSignature('whsec_gone', body3) })).reason).toBe('bad_signature');
  });

  it('needs a secret', () => {
    expect(() => createConsumer({ secret: '' })).toThrow(TypeError);
    expect(() => createConsumer({ secret: [] })).toThrow(TypeError);
  });
});

describe('sqliteStore persistence', () => {
  it('the state and the seen ids survive a close and re-open', async () => {
    const file = dbFile();
    const evs = fc.sample(events(30, 20), { numRuns: 1, seed: 42 })[0]!;
    expect(evs.length).toBeGreaterThan(0);
    const first = createConsumer({ secret: SECRET, store: await sqliteStore(file) });
    const half = Math.ceil(evs.length / 2);
    await feed(first, evs.slice(0, half).map((e) => deliver(e)));
    const mid = await first.state();
    first.close();

    const again = createConsumer({ secret: SECRET, store: await sqliteStore(file) });
    expect(await again.state()).toEqual(mid);
    // Everything already applied is a duplicate after the re-open; the rest applies.
    const statuses = await feed(again, evs.map((e) => deliver(e)));
    expect(statuses).toEqual(evs.map((_, i) => (i < half ? 'duplicate' : 'applied')));
    const end = await again.state();
    again.close();
    expect(end).toEqual(model(evs));

    const third = createConsumer({ secret: SECRET, store: await sqliteStore(file) });
    expect(await third.state()).toEqual(end);
    third.close();
  });

  it('memoryStore and sqliteStore agree on the same deliveries', async () => {
    const evs = fc.sample(events(40, 30), { numRuns: 1, seed: 7 })[0]!;
    expect(evs.length).toBeGreaterThanOrEqual(30);
    const m = createConsumer({ secret: SECRET });
    const s = createConsumer({ secret: SECRET, store: await sqliteStore(dbFile()) });
    const ds = [...evs, ...evs.slice().reverse()].map((e) => deliver(e));
    expect(await feed(s, ds)).toEqual(await feed(m, ds));
    expect(await s.state()).toEqual(await m.state());
    s.close();
  });
});
