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

export function targetPolicy(opts: { allow?: Array<[string, number, 'ipv4' | 'ipv6']>; deny?: Array<[string, number, 'ipv4' | 'ipv6']> } = {}): TargetPolicy {
  const always = new BlockList();
  for (const [a, n, f] of ALWAYS_DENIED) always.addSubnet(a, n, f);
  const deny = new BlockList();
  for (const [a, n, f] of opts.deny ?? []) deny.addSubnet(a, n, f);
  const allow = opts.allow?.length ? new BlockList() : undefined;
  for (const [a, n, f] of opts.allow ?? []) allow!.addSubnet(a, n, f);

  function allowed(address: string): { ok: true } | { ok: false; reason: string } {
    let a = address;
    const mapped = /^::ffff:(\d+\.\d+\.\d+\.\d+)$/i.exec(a);
    if (mapped) a = mapped[1]!;
    const fam = isIP(a) === 6 ? 'ipv6' : 'ipv4';
    if (always.check(a, fam)) return { ok: false, reason: `address ${address} is link-local, metadata or otherwise never a webhook target` };
    if (deny.check(a, fam)) return { ok: false, reason: `address ${address} is in --webhook-deny` };
    if (allow && !allow.check(a, fam)) return { ok: false, reason: `address ${address} is not in --webhook-allow` };
    return { ok: true };
  }

  const lookup = ((hostname: string, options: object, cb: (err: NodeJS.ErrnoException | null, address: string | { address: string; family: number }[], family?: number) => void) => {
    dnsLookup(hostname, { ...options, all: true }, (err, addresses) => {
      if (err) return cb(err, '', 0);
      const list = addresses as { address: string; family: number }[];
      const ok = list.filter((x) => allowed(x.address).ok);
      if (!ok.length) {
        const e = new Error(list.length ? allowed(list[0]!.address as string).ok ? 'no address' : (allowed(list[0]!.address) as { reason: string }).reason : `no address for ${hostname}`) as NodeJS.ErrnoException;
        e.code = 'ENOTALLOWED';
        return cb(e, '', 0);
      }
      if ((options as { all?: boolean }).all) return cb(null, ok);
      cb(null, ok[0]!.address, ok[0]!.family);
    });
  }) as unknown as LookupFunction;

  return { allowed, lookup };
}
