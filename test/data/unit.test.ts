// data/node-svc.service: the hardening the README promises, and systemd's own exposure score where systemd-analyze exists.
import { execFileSync } from 'node:child_process';
import { readFileSync } from 'node:fs';
import { join } from 'node:path';
import { describe, expect, it } from 'vitest';
import { REPO_ROOT } from '../helpers/cli.js';

const path = join(REPO_ROOT, 'data', 'node-svc.service');
const unit = readFileSync(path, 'utf8');
const values = (key: string) => unit.split('\n').filter((l) => l.startsWith(`${key}=`)).map((l) => l.slice(key.length + 1));

const analyze = (() => {
  try {
    execFileSync('systemd-analyze', ['--version'], { stdio: 'ignore' });
    return true;
  } catch {
    return false;
  }
})();

describe('data/node-svc.service', () => {
  it('runs as a dynamic user with the data dir as the only writable path and no privileges', () => {
    expect(values('DynamicUser')).toEqual(['yes']);
    expect(values('StateDirectory')).toEqual(['node-svc']);
    expect(values('ProtectSystem')).toEqual(['strict']);
    expect(values('ReadWritePaths')).toEqual(['/var/lib/node-svc']);
    expect(values('NoNewPrivileges')).toEqual(['yes']);
    expect(values('CapabilityBoundingSet')).toEqual(['']);
    expect(values('SystemCallFilter')).toContain('@system-service');
    expect(values('PrivateTmp')).toEqual(['yes']);
    expect(values('RestrictAddressFamilies')[0]!.split(' ').sort()).toEqual(['AF_INET', 'AF_INET6', 'AF_UNIX']);
    expect(values('ExecStart')[0]).toMatch(/ daemon --data-dir \/var\/lib\/node-svc$/);
  });

  it.runIf(analyze)('systemd-analyze security rates its exposure below 3.0', () => {
    const out = execFileSync('systemd-analyze', ['security', '--offline=true', path], { encoding: 'utf8' });
    const m = /Overall exposure level for node-svc\.service: (\d+\.\d+)/.exec(out);
    expect(m, out.slice(-500)).not.toBeNull();
    expect(Number(m![1])).toBeLessThan(3.0);
  });
});
