// Where deliveries may go: link-local and metadata never; loopback and private by default; --webhook-deny / --webhook-allow narrow it.
import type { LookupAddress } from 'node:dns';
import { describe, expect, it } from 'vitest';
import { parseCidrs, targetPolicy } from '../../src/delivery/target.js';

const cidrs = (s: string) => {
  const r = parseCidrs(s);
  if (typeof r === 'string') throw new Error(r);
  return r;
};
const ok = (p: ReturnType<typeof targetPolicy>, a: string) => p.allowed(a).ok;

describe('targetPolicy: always refused', () => {
  const p = targetPolicy();
  const never = [
    '169.254.169.254', // cloud metadata (IPv4 link-local)
    '169.254.0.1',
    'fe80::1', // IPv6 link-local
    'FE80::abcd',
    'fd00:ec2::254', // AWS metadata over IPv6
    '::ffff:169.254.169.254', // IPv4-mapped, dotted
    '::ffff:a9fe:a9fe', // IPv4-mapped, as the WHATWG URL parser writes it
    '100.100.100.200', // Alibaba metadata
    '0.0.0.0',
    '::',
    '224.0.0.1',
    'ff02::1',
    '255.255.255.255',
  ];
  for (const a of never)
    it(`refuses ${a}`, () => {
      const r = p.allowed(a);
      expect(r.ok).toBe(false);
      if (!r.ok) expect(r.reason).toContain(a);
    });

  it('refuses them even when --webhook-allow lists them', () => {
    const q = targetPolicy({ allow: cidrs('169.254.0.0/16,fe80::/10,0.0.0.0/0') });
    expect(ok(q, '169.254.169.254')).toBe(false);
    expect(ok(q, 'fe80::1')).toBe(false);
    expect(ok(q, '::ffff:169.254.169.254')).toBe(false);
  });
});

describe('targetPolicy: allowed by default', () => {
  const p = targetPolicy();
  for (const a of ['127.0.0.1', '::1', '10.1.2.3', '192.168.1.10', '172.16.0.5', 'fd12:3456::1', '::ffff:127.0.0.1', '203.0.113.7', '2001:db8::1'])
    it(`allows ${a}`, () => expect(p.allowed(a)).toEqual({ ok: true }));
});

describe('targetPolicy: --webhook-deny', () => {
  const p = targetPolicy({ deny: cidrs('10.0.0.0/8, 127.0.0.1/32, fd00::/8') });

  it('refuses addresses inside the denied networks, naming the flag', () => {
    const r = p.allowed('10.1.2.3');
    expect(r.ok).toBe(false);
    if (!r.ok) expect(r.reason).toMatch(/--webhook-deny/);
    expect(ok(p, '127.0.0.1')).toBe(false);
    expect(ok(p, 'fd12::1')).toBe(false);
  });

  it('applies to IPv4-mapped IPv6 forms of denied IPv4 addresses too', () => {
    expect(ok(p, '::ffff:10.1.2.3')).toBe(false);
    expect(ok(p, '::ffff:a01:203')).toBe(false);
  });

  it('still allows the rest', () => {
    expect(ok(p, '127.0.0.2')).toBe(true);
    expect(ok(p, '::1')).toBe(true);
    expect(ok(p, '192.168.0.1')).toBe(true);
  });
});

describe('targetPolicy: --webhook-allow', () => {
  const p = targetPolicy({ allow: cidrs('10.0.0.0/8,::1') });

  it('allows only the listed networks', () => {
    expect(ok(p, '10.1.2.3')).toBe(true);
    expect(ok(p, '::1')).toBe(true);
    const r = p.allowed('127.0.0.1');
    expect(r.ok).toBe(false);
    if (!r.ok) expect(r.reason).toMatch(/--webhook-allow/);
    expect(ok(p, '192.168.1.1')).toBe(false);
    expect(ok(p, '::2')).toBe(false);
  });

  it('matches an IPv4-mapped form of an allowed IPv4 address', () => {
    expect(ok(p, '::ffff:10.9.9.9')).toBe(true);
  });

  it('deny wins over allow', () => {
    const q = targetPolicy({ allow: cidrs('10.0.0.0/8'), deny: cidrs('10.6.0.0/16') });
    expect(ok(q, '10.5.0.1')).toBe(true);
    expect(ok(q, '10.6.0.1')).toBe(false);
  });

  it('an empty allow list means no restriction', () => {
    expect(ok(targetPolicy({ allow: [] }), '192.168.1.1')).toBe(true);
  });
});

describe('targetPolicy: lookup (connect-time check, no DNS rebinding)', () => {
  const resolve = (p: ReturnType<typeof targetPolicy>, host: string, options: object) =>
    new Promise<{ err: NodeJS.ErrnoException | null; address: string | LookupAddress[]; family?: number }>((res) =>
      (p.lookup as unknown as (h: string, o: object, cb: (e: NodeJS.ErrnoException | null, a: string | LookupAddress[], f?: number) => void) => void)(
        host, options, (err, address, family) => res({ err, address, ...(family !== undefined ? { family } : {}) })),
    );

  it('resolves localhost to an allowed loopback address', async () => {
    const r = await resolve(targetPolicy(), 'localhost', {});
    expect(r.err).toBeNull();
    expect(['127.0.0.1', '::1']).toContain(r.address);
  });

  it('answers all allowed addresses when asked for all', async () => {
    const r = await resolve(targetPolicy(), 'localhost', { all: true });
    expect(r.err).toBeNull();
    expect(Array.isArray(r.address)).toBe(true);
    for (const a of r.address as LookupAddress[]) expect(['127.0.0.1', '::1']).toContain(a.address);
  });

  it('fails with ENOTALLOWED when every address of the name is refused', async () => {
    const r = await resolve(targetPolicy({ deny: cidrs('127.0.0.0/8,::1') }), 'localhost', {});
    expect(r.err?.code).toBe('ENOTALLOWED');
  });
});

describe('parseCidrs', () => {
  it('reads addresses and CIDRs of both families; a bare address is a host route', () => {
    expect(parseCidrs('10.0.0.0/8, 192.168.1.1 ,fd00::/8,::1')).toEqual([
      ['10.0.0.0', 8, 'ipv4'],
      ['192.168.1.1', 32, 'ipv4'],
      ['fd00::', 8, 'ipv6'],
      ['::1', 128, 'ipv6'],
    ]);
    expect(parseCidrs('')).toEqual([]);
    expect(parseCidrs('0.0.0.0/0')).toEqual([['0.0.0.0', 0, 'ipv4']]);
  });

  it('answers an error naming the bad entry', () => {
    expect(parseCidrs('10.0.0.0/8,example.com')).toBe('"example.com" is not an IP address or CIDR');
    expect(parseCidrs('10.0.0/8')).toMatch(/"10\.0\.0\/8" is not an IP address/);
    expect(parseCidrs('10.0.0.0/33')).toBe('"10.0.0.0/33" has a bad prefix length');
    expect(parseCidrs('::/129')).toBe('"::/129" has a bad prefix length');
    expect(parseCidrs('10.0.0.0/-1')).toMatch(/bad prefix length/);
    expect(parseCidrs('10.0.0.0/8.5')).toMatch(/bad prefix length/);
  });

  it('refuses an empty or malformed prefix instead of reading it as /0 (which would mean every address)', () => {
    expect(typeof parseCidrs('10.0.0.0/')).toBe('string');
    expect(typeof parseCidrs('10.0.0.0/ 8')).toBe('string');
    expect(typeof parseCidrs('10.0.0.0/0x8')).toBe('string');
    expect(typeof parseCidrs('10.0.0.0/8/16')).toBe('string');
  });
});

// Issue #12: every IPv6 form that embeds an IPv4 address is judged by that IPv4 address.
const EMBEDDING_FORMS: Array<[string, string]> = [
  ['169.254.169.254', 'IPv4 dotted'],
  ['::ffff:169.254.169.254', 'IPv4-mapped, dotted'],
  ['::ffff:a9fe:a9fe', 'IPv4-mapped, hex'],
  ['0:0:0:0:0:ffff:a9fe:a9fe', 'IPv4-mapped, uncompressed'],
  ['::ffff:0:a9fe:a9fe', 'IPv4-translated (RFC 2765)'],
  ['::a9fe:a9fe', 'IPv4-compatible, hex'],
  ['::169.254.169.254', 'IPv4-compatible, dotted'],
  ['64:ff9b::a9fe:a9fe', 'NAT64 well-known prefix, hex'],
  ['64:ff9b::169.254.169.254', 'NAT64 well-known prefix, dotted'],
  ['0064:ff9b:0000:0000:0000:0000:a9fe:a9fe', 'NAT64 well-known prefix, uncompressed'],
  ['64:ff9b:1::a9fe:a9fe', 'NAT64 local-use /96'],
  ['64:ff9b:1:a9fe:00a9:fe00::', 'NAT64 local-use /48 (u octet skipped)'],
  ['64:ff9b:1:a9:00fe:a9fe::', 'NAT64 local-use /56'],
  ['64:ff9b:1:0:00a9:fea9:fe00:0', 'NAT64 local-use /64'],
  ['2002:a9fe:a9fe::1', '6to4'],
  ['2002:a9fe:a9fe:1234:5678::9', '6to4 with subnet and host bits'],
  ['2001:0:4136:e378:8000:63bf:5601:5601', 'Teredo (client 169.254.169.254 = ~5601:5601)'],
];

describe('SSRF table: metadata address through every notation (subscription check)', () => {
  const p = targetPolicy();
  for (const [a, what] of EMBEDDING_FORMS)
    it(`refuses ${a} (${what})`, () => {
      const r = p.allowed(a);
      expect(r.ok).toBe(false);
      if (!r.ok) expect(r.reason).toMatch(/link-local, metadata/);
    });

  it('refuses the other always-denied IPv4 ranges through NAT64, 6to4 and Teredo too', () => {
    for (const a of ['64:ff9b::6464:64c8' /* 100.100.100.200 */, '2002:0:1::' /* 0.0.0.1 */, '2002:e000:1::' /* 224.0.0.1 */, '64:ff9b::ffff:ffff'])
      expect(ok(p, a), a).toBe(false);
  });

  it('applies --webhook-deny to the embedded IPv4 address', () => {
    const q = targetPolicy({ deny: cidrs('10.0.0.0/8') });
    for (const a of ['64:ff9b::a01:203', '2002:a01:203::1', '::a01:203', '2001:0:4136:e378:8000:63bf:f5fe:fdfc' /* 10.1.2.3 */, '64:ff9b:1::a01:203'])
      expect(ok(q, a), a).toBe(false);
    expect(ok(q, '64:ff9b::c000:201'), '192.0.2.1 via NAT64').toBe(true);
  });

  it('--webhook-allow lets an embedding form through only when its IPv4 address is allowed', () => {
    const q = targetPolicy({ allow: cidrs('10.0.0.0/8') });
    expect(ok(q, '64:ff9b::a01:203')).toBe(true);
    expect(ok(q, '64:ff9b::c000:201')).toBe(false);
  });

  it('still allows ordinary IPv6 addresses and the embedded forms of allowed IPv4 addresses', () => {
    for (const a of ['2001:db8::1', '2606:4700::1111', '64:ff9b::c000:201', '2002:c000:201::1', '::1', '::ffff:127.0.0.1'])
      expect(p.allowed(a), a).toEqual({ ok: true });
  });
});

describe('SSRF table: at connection time, a resolver answering a forbidden address', () => {
  const lookupVia = (answer: string[]) =>
    targetPolicy({
      resolve: (_h, _o, cb) => cb(null, answer.map((address) => ({ address, family: address.includes(':') ? 6 : 4 }))),
    });
  const resolve = (p: ReturnType<typeof targetPolicy>, host: string) =>
    new Promise<{ err: NodeJS.ErrnoException | null; address: unknown }>((res) =>
      (p.lookup as unknown as (h: string, o: object, cb: (e: NodeJS.ErrnoException | null, a: unknown) => void) => void)(host, {}, (err, address) => res({ err, address })),
    );

  for (const [a, what] of EMBEDDING_FORMS)
    it(`refuses a name resolving to ${a} (${what})`, async () => {
      const r = await resolve(lookupVia([a]), 'rebind.example');
      expect(r.err?.code).toBe('ENOTALLOWED');
      expect(r.err?.message).toMatch(/link-local, metadata/);
    });

  it('skips forbidden addresses and connects to an allowed one of the same name', async () => {
    const r = await resolve(lookupVia(['64:ff9b::a9fe:a9fe', '127.0.0.1']), 'mixed.example');
    expect(r.err).toBeNull();
    expect(r.address).toBe('127.0.0.1');
  });

  it('a real request through an agent with this lookup never connects', async () => {
    const { request, Agent } = await import('node:http');
    const agent = new Agent({ lookup: lookupVia(['64:ff9b::a9fe:a9fe']).lookup });
    const err = await new Promise<NodeJS.ErrnoException>((res) => {
      const req = request('http://metadata.example/latest', { agent }, () => res(new Error('connected') as NodeJS.ErrnoException));
      req.once('error', res);
      req.end();
    });
    agent.destroy();
    expect(err.code).toBe('ENOTALLOWED');
  });
});

describe('lookups of one name share the one in flight', () => {
  type Cb = (err: NodeJS.ErrnoException | null, addresses: { address: string; family: number }[]) => void;
  const lookupOf = (p: ReturnType<typeof targetPolicy>) => (host: string, o: object = {}) =>
    new Promise<{ err: NodeJS.ErrnoException | null; address: unknown }>((res) =>
      (p.lookup as unknown as (h: string, o: object, cb: (e: NodeJS.ErrnoException | null, a: unknown) => void) => void)(host, o, (err, address) => res({ err, address })),
    );

  it('connections that need a name while its lookup is on its way wait for that one; another name, other options or a later need ask again', async () => {
    const asked: Array<{ host: string; options: object; answer: Cb }> = [];
    const p = targetPolicy({ resolve: (host, options, answer) => void asked.push({ host, options, answer }) });
    const lookup = lookupOf(p);
    const same = [lookup('hook.example'), lookup('hook.example'), lookup('hook.example', { all: true })];
    const other = lookup('other.example');
    const v6 = lookup('hook.example', { family: 6 });
    expect(asked.map((a) => a.host)).toEqual(['hook.example', 'other.example', 'hook.example']);
    expect(asked[2]!.options).toMatchObject({ family: 6, all: true });
    asked[0]!.answer(null, [{ address: '169.254.169.254', family: 4 }, { address: '127.0.0.1', family: 4 }]);
    const got = await Promise.all(same);
    // Each judged by the policy as before: the metadata address skipped; `all` gets the list of allowed ones.
    expect(got.map((g) => g.address)).toEqual(['127.0.0.1', '127.0.0.1', [{ address: '127.0.0.1', family: 4 }]]);
    asked[1]!.answer(Object.assign(new Error('getaddrinfo ENOTFOUND other.example'), { code: 'ENOTFOUND' }), []);
    expect((await other).err?.code).toBe('ENOTFOUND');
    asked[2]!.answer(null, [{ address: '::1', family: 6 }]);
    expect((await v6).address).toBe('::1');
    // Answered: nothing is kept; the next connection asks again.
    void lookup('hook.example');
    expect(asked).toHaveLength(4);
  });
});
