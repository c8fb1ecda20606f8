// Hostile text helpers (issue #12): control characters escaped for people, URL secrets redacted everywhere.
import { describe, expect, it } from 'vitest';
import { escapeControl, escapeControlKeepLines, hasControl, redactUrl, redactUrls } from '../../src/domain/text.js';

describe('control characters', () => {
  it('finds C0, DEL and C1 controls, nothing else', () => {
    for (const c of ['\u0000', '\u0007', '\t', '\n', '\r', '\u001b', '\u007f', '\u0085', '\u009b']) expect(hasControl(`a${c}b`), JSON.stringify(c)).toBe(true);
    for (const s of ['plain', 'ünïcödé', '日本', '€ and ✓', '']) expect(hasControl(s)).toBe(false);
  });

  it('shows every control as a visible escape', () => {
    expect(escapeControl('\u001b]0;PWNED\u0007\u001b[2J\r\nX')).toBe('\\x1b]0;PWNED\\x07\\x1b[2J\\r\\nX');
    expect(escapeControl('\u009b31m')).toBe('\\x9b31m');
    expect(escapeControlKeepLines('a\nb\u001b[2J\rc')).toBe('a\nb\\x1b[2J\\rc');
  });
});

describe('URL redaction', () => {
  const cases: Array<[string, string]> = [
    ['https://issuer.example/jwks?access_token=S', 'https://issuer.example/jwks?***'],
    ['https://user:pass@rpc.example:8545/v3/KEY?x=1#frag', 'https://***@rpc.example:8545/v3/KEY?***#***'],
    ['http://127.0.0.1:9/hooks', 'http://127.0.0.1:9/hooks'],
    ['http://[::1]:8080/a?b', 'http://[::1]:8080/a?***'],
    ['postgres://app:pw@db/svc', 'postgres://***@db/svc'],
    ['not a url', 'not a url'],
  ];
  for (const [raw, shown] of cases) it(`${raw} → ${shown}`, () => expect(redactUrl(raw)).toBe(shown));

  it('redacts every URL inside a text, leaving the rest', () => {
    const t = 'HTTP request failed.\nURL: https://rpc.example/v3?apikey=S\nand http://u:p@x.test/ too';
    const r = redactUrls(t);
    expect(r).not.toMatch(/apikey=S|u:p@/);
    expect(r).toBe('HTTP request failed.\nURL: https://rpc.example/v3?***\nand http://***@x.test/ too');
  });
});

describe('log lines on a terminal', () => {
  it('show control characters escaped, in the message and in every field', async () => {
    const { prettyLine } = await import('../../src/log.js');
    const line = JSON.stringify({ time: '2026-11-23T10:00:00.000Z', level: 'warn', msg: 'delivery failed \u001b[2J', error: 'ECONNRESET \u001b]0;PWNED\u0007', n: 3 });
    const out = prettyLine(line);
    expect(out).toBe('10:00:00.000 warn  delivery failed \\x1b[2J  error=ECONNRESET \\x1b]0;PWNED\\x07 n=3\n');
    expect(prettyLine('not json \u001b[5m\n')).toBe('not json \\x1b[5m\n');
  });
});
