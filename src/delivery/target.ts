// Where deliveries may go. Link-local and cloud-metadata addresses are refused always; loopback and private
// networks are allowed by default (they are the operator's own endpoints); --webhook-deny / --webhook-allow
// narrow it. The socket connects to the address that was checked (a custom lookup), so DNS rebinding cannot
// swap it after the check.
import { lookup as dnsLookup } from 'node:dns';
import { BlockList, isIP, type LookupFunction } from 'node:net';

const ALWAYS_DENIED: Array<[string, number, 'ipv4' | 'ipv6']> = [
  ['169.254.0.0', 16, 'ipv4'], // link-local, incl. 169.254.169.254 metadata
  ['100.100.100.200', 32, 'ipv4'], // a cloud metadata service outside link-local
  ['0.0.0.0', 8, 'ipv4'],
  ['224.0.0.0', 4, 'ipv4'],
  ['255.255.255.255', 32, 'ipv4'],
  ['fe80::', 10, 'ipv6'], // link-local
  ['fd00:ec2::254', 128, 'ipv6'], // cloud metadata over IPv6
  ['ff00::', 8, 'ipv6'],
  ['::', 128, 'ipv6'],
];

export interface TargetPolicy {
  allowed(address: string): { ok: true } | { ok: false; reason: string };
  lookup: LookupFunction;
}

type Resolver = (hostname: string, options: { all: true }, cb: (err: NodeJS.ErrnoException | null, addresses: { address: string; family: number }[]) => void) => void;

/** The 16 bytes of an IPv6 address (any textual form, with or without a trailing dotted quad), or null. */
export function ipv6Bytes(text: string): Uint8Array | null {
  if (isIP(text) !== 6) return null;
  let s = text.toLowerCase();
  const quad = /(\d+)\.(\d+)\.(\d+)\.(\d+)$/.exec(s);
  if (quad) {
    const [a, b, c, d] = quad.slice(1).map(Number) as [number, number, number, number];
    s = `${s.slice(0, quad.index)}${((a << 8) | b).toString(16)}:${((c << 8) | d).toString(16)}`;
  }
  const [head, tail] = s.includes('::') ? s.split('::') as [string, string] : [s, undefined];
  const h = head ? head.split(':') : [];
  const t = tail === undefined ? [] : tail ? tail.split(':') : [];
  const groups = tail === undefined ? h : [...h, ...Array<string>(8 - h.length - t.length).fill('0'), ...t];
  if (groups.length !== 8) return null;
  const out = new Uint8Array(16);
  groups.forEach((g, i) => {
    const n = parseInt(g, 16);
    out[i * 2] = n >> 8;
    out[i * 2 + 1] = n & 0xff;
  });
  return out;
}

const v4 = (b: Uint8Array, at: number, xor = 0) => [0, 1, 2, 3].map((i) => b[at + i]! ^ xor).join('.');
const zero = (b: Uint8Array, from: number, to: number) => b.subarray(from, to).every((x) => x === 0);
const prefix = (b: Uint8Array, bytes: number[]) => bytes.every((x, i) => b[i] === x);

/**
 * The IPv4 addresses an IPv6 address carries, and whether the IPv6 form is only a notation for them (mapped,
 * compatible, translated: then the IPv6 address itself is not judged). Each of these reaches the IPv4 host, through
 * the stack, a NAT64 gateway or a 6to4/Teredo relay, so each is judged by the IPv4 address it embeds.
 */
export function embeddedIpv4(address: string): { v4: string[]; notation: boolean } | null {
  const b = ipv6Bytes(address);
  if (!b) return null;
  // ::ffff:a.b.c.d (IPv4-mapped) and ::ffff:0:a.b.c.d (IPv4-translated, RFC 2765)
  if (zero(b, 0, 10) && b[10] === 0xff && b[11] === 0xff) return { v4: [v4(b, 12)], notation: true };
  if (zero(b, 0, 8) && b[8] === 0xff && b[9] === 0xff && zero(b, 10, 12)) return { v4: [v4(b, 12)], notation: true };
  // ::a.b.c.d (IPv4-compatible, deprecated); :: and ::1 are themselves
  if (zero(b, 0, 12) && !(zero(b, 12, 15) && b[15]! <= 1)) return { v4: [v4(b, 12)], notation: true };
  // 64:ff9b::/96 (NAT64 well-known prefix, RFC 6052)
  if (prefix(b, [0, 0x64, 0xff, 0x9b]) && zero(b, 4, 12)) return { v4: [v4(b, 12)], notation: false };
  // 64:ff9b:1::/48 (NAT64 local-use, RFC 8215): the operator picks the prefix length, so every RFC 6052 position
  // the address could mean is judged (bits 64..71 are the reserved "u" octet).
  if (prefix(b, [0, 0x64, 0xff, 0x9b, 0, 1])) {
    // A position counts when the rest (u octet, suffix) is zero, as RFC 6052 requires; /96 always counts.
    const at = (idx: number[], rest: number[]) => (rest.every((i) => b[i] === 0) ? [idx.map((i) => b[i]!).join('.')] : []);
    const v4s = [
      ...at([6, 7, 9, 10], [8, 11, 12, 13, 14, 15]),
      ...at([7, 9, 10, 11], [8, 12, 13, 14, 15]),
      ...at([9, 10, 11, 12], [8, 13, 14, 15]),
      v4(b, 12),
    ];
    return { v4: [...new Set(v4s)], notation: false };
  }
  // 2002::/16 (6to4): bits 16..47
  if (prefix(b, [0x20, 0x02])) return { v4: [v4(b, 2)], notation: false };
  // 2001:0::/32 (Teredo): the client's address is the last 32 bits inverted; the server's is bits 32..63
  if (prefix(b, [0x20, 0x01, 0, 0])) return { v4: [v4(b, 12, 0xff), v4(b, 4)], notation: false };
  return null;
}

export function targetPolicy(opts: { allow?: Array<[string, number, 'ipv4' | 'ipv6']>; deny?: Array<[string, number, 'ipv4' | 'ipv6']>; resolve?: Resolver } = {}): TargetPolicy {
  const always = new BlockList();
  for (const [a, n, f] of ALWAYS_DENIED) always.addSubnet(a, n, f);
  const deny = new BlockList();
  for (const [a, n, f] of opts.deny ?? []) deny.addSubnet(a, n, f);
  const allow = opts.allow?.length ? new BlockList() : undefined;
  for (const [a, n, f] of opts.allow ?? []) allow!.addSubnet(a, n, f);
  const resolve: Resolver = opts.resolve ?? ((h, o, cb) => dnsLookup(h, o, cb as never));

  // The verdict is a function of the address alone (the lists are fixed for the policy's life): remembered, bounded.
  // Every attempt to an IP-literal URL asks (bench/delivery: the three BlockList checks were ~2 % of the daemon).
  const verdicts = new Map<string, { ok: true } | { ok: false; reason: string }>();
  function allowed(address: string): { ok: true } | { ok: false; reason: string } {
    let v = verdicts.get(address);
    if (!v) {
      if (verdicts.size >= 1024) verdicts.clear();
      verdicts.set(address, (v = judge(address)));
    }
    return v;
  }

  function judge(address: string): { ok: true } | { ok: false; reason: string } {
    const fam = isIP(address);
    if (!fam) return { ok: false, reason: `address ${address} is not an IP address` };
    const embedded = fam === 6 ? embeddedIpv4(address) : null;
    // Fail closed: every address the connection could reach is judged; any refusal refuses.
    const candidates: Array<[string, 'ipv4' | 'ipv6']> = [
      ...(embedded?.notation ? [] : [[address, fam === 6 ? 'ipv6' : 'ipv4'] as [string, 'ipv4' | 'ipv6']]),
      ...(embedded?.v4 ?? []).map((a) => [a, 'ipv4'] as [string, 'ipv4']),
    ];
    const via = (a: string) => (a === address ? '' : ` (it reaches IPv4 ${a})`);
    for (const [a, f] of candidates)
      if (always.check(a, f)) return { ok: false, reason: `address ${address}${via(a)} is link-local, metadata or otherwise never a webhook target` };
    for (const [a, f] of candidates) if (deny.check(a, f)) return { ok: false, reason: `address ${address}${via(a)} is in --webhook-deny` };
    // Allowed when the address itself is listed, or every IPv4 address it embeds is.
    if (allow && !(allow.check(address, fam === 6 ? 'ipv6' : 'ipv4') && !embedded?.notation) && !(embedded && embedded.v4.every((a) => allow.check(a, 'ipv4'))))
      return { ok: false, reason: `address ${address} is not in --webhook-allow` };
    return { ok: true };
  }

  // One lookup in flight per name (and options): the connections that need it meanwhile share its answer. A resolver
  // runs in libuv's thread pool, which gives lookups at most half of its threads (2 of 4): without this, a receiver
  // whose DNS never answers queued a lookup per new connection (each attempt, each retry), took both threads for
  // the resolver's whole timeout, again and again, and every other receiver named by a host name waited behind it
  // (test/e2e/dns-hang.test.ts: a receiver named in /etc/hosts got nothing for over a minute). Now such a name holds
  // one thread, whatever its deliveries; nothing is kept once the answer is given (keep-alive reuses the sockets).
  const inFlight = new Map<string, Array<(err: NodeJS.ErrnoException | null, addresses: { address: string; family: number }[]) => void>>();
  const shared: Resolver = (hostname, options, cb) => {
    const o = options as { family?: number | string; hints?: number };
    const key = `${o.family ?? 0}|${o.hints ?? 0}|${hostname}`;
    const waiting = inFlight.get(key);
    if (waiting) return void waiting.push(cb);
    const list = [cb];
    inFlight.set(key, list);
    try {
      resolve(hostname, options, (err, addresses) => {
        inFlight.delete(key);
        // Every waiter is answered, even if one of them throws (the first such error is thrown after).
        let thrown: { e: unknown } | undefined;
        for (const f of list) {
          try {
            f(err, addresses);
          } catch (e) {
            thrown ??= { e };
          }
        }
        if (thrown) throw thrown.e;
      });
    } catch (e) {
      inFlight.delete(key); // a resolver that refused its arguments: nobody may wait on it
      throw e;
    }
  };

  const lookup = ((hostname: string, options: object, cb: (err: NodeJS.ErrnoException | null, address: string | { address: string; family: number }[], family?: number) => void) => {
    shared(hostname, { ...options, all: true }, (err, addresses) => {
      if (err) return cb(err, '', 0);
      const list = addresses;
      const ok = list.filter((x) => allowed(x.address).ok);
      if (!ok.length) {
        const first = list[0] ? allowed(list[0].address) : undefined;
        const e = new Error(first && !first.ok ? first.reason : `no address for ${hostname}`) as NodeJS.ErrnoException;
        e.code = 'ENOTALLOWED';
        return cb(e, '', 0);
      }
      if ((options as { all?: boolean }).all) return cb(null, ok);
      cb(null, ok[0]!.address, ok[0]!.family);
    });
  }) as unknown as LookupFunction;

  return { allowed, lookup };
}
export function parseCidrs(list: string): Array<[string, number, 'ipv4' | 'ipv6']> | string {
  const out: Array<[string, number, 'ipv4' | 'ipv6']> = [];
  for (const raw of list.split(',').map((s) => s.trim()).filter(Boolean)) {
    const [addr, bits, ...rest] = raw.split('/');
    const fam = isIP(addr ?? '');
    if (!fam || rest.length) return `"${raw}" is not an IP address or CIDR`;
    const max = fam === 4 ? 32 : 128;
    // Digits only: Number('') is 0, so "10.0.0.0/" would otherwise mean /0, every address.
    const n = bits === undefined ? max : /^\d{1,3}$/.test(bits) ? Number(bits) : NaN;
    if (!Number.isInteger(n) || n < 0 || n > max) return `"${raw}" has a bad prefix length`;
    out.push([addr!, n, fam === 4 ? 'ipv4' : 'ipv6']);
  }
  return out;
}
