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

describe('redactUrls and redactUrl: the scan reads URLs as these regular expressions do', () => {
  // The expressions redactUrls and redactUrl were written with (until the scan replaced them, bench/cli-start):
  // the oracle for any text.
  const URL_IN_TEXT = /\b[a-z][a-z0-9+.-]{1,15}:\/\/[^\s"'<>`]+/gi;
  const oracleUrl = (raw: string): string => {
    const m = /^([a-z][a-z0-9+.-]*:\/\/)([^/?#]*)([^?#]*)(\?[^#]*)?(#.*)?$/is.exec(raw);
    if (!m) return raw;
    const [, scheme, authority = '', path = '', query, fragment] = m;
    const at = authority.lastIndexOf('@');
    return `${scheme}${at >= 0 ? `***@${authority.slice(at + 1)}` : authority}${path}${query ? '?***' : ''}${fragment ? '#***' : ''}`;
  };
  const oracleUrls = (text: string): string => (text.includes('://') ? text.replace(URL_IN_TEXT, (m) => oracleUrl(m)) : text);
  // Pieces that make schemes, boundaries, userinfo, queries and the characters that end a URL (every \s among them).
  const PIECES = ['://', '://', 'https', 'http://', 'http://', 's3+x://', 'u:p@', '?', 'a', 'Z', 'x9', '0', '_', '+', '.', '-', ':', '/', '//', '?', '#', '@', 'u:p@', '%2F',
    ' ', '\t', '\n', '\r', '\v', '\f', '\u00a0', '\u1680', '\u2000', '\u200a', '\u2028', '\u2029', '\u202f', '\u205f', '\u3000', '\ufeff', '\u180e',
    '"', "'", '<', '>', '`', 'é', 'ſ', '\u212a', 'abcdefghijklmnop', 'q=S', '&'];

  it('gives what the expressions give, for 30,000 random texts', () => {
    let seed = 7; // mulberry32: the same texts every run
    const rand = (n: number) => {
      seed = (seed + 0x6d2b79f5) | 0;
      let x = Math.imul(seed ^ (seed >>> 15), seed | 1);
      x ^= x + Math.imul(x ^ (x >>> 7), x | 61);
      return ((x ^ (x >>> 14)) >>> 0) % n;
    };
    let urls = 0;
    let redacted = 0;
    for (let i = 0; i < 30_000; i++) {
      let t = '';
      for (let k = rand(24); k >= 0; k--) t += PIECES[rand(PIECES.length)];
      const want = oracleUrls(t);
      if (t.match(URL_IN_TEXT)) urls++;
      if (want !== t) redacted++;
      expect(redactUrls(t), JSON.stringify(t)).toBe(want);
      expect(redactUrl(t), JSON.stringify(t)).toBe(oracleUrl(t));
    }
    // The texts did hold URLs, and secrets in them to redact.
    expect(urls).toBeGreaterThan(6000);
    expect(redacted).toBeGreaterThan(1500);
  });

  it('reads a long hostile text once, not once per `://` (a text of 250,000 "0://" took minutes before the scan was ordered so)', () => {
    // Each `://` here has no scheme before it: the scan must not read the rest of the text for each of them.
    expect(redactUrls('0://'.repeat(250_000))).toBe('0://'.repeat(250_000));
    expect(redactUrls(`${'0://'.repeat(250_000)} http://u:p@h`)).toBe(`${'0://'.repeat(250_000)} http://***@h`);
    expect(redactUrls('_http://x'.repeat(100_000))).toBe(oracleUrls('_http://x'.repeat(100_000)));
  });

  it('gives what the expressions give at the edges of a scheme (its length, its first letter, its boundary)', () => {
    const texts = ['ab://k@x', 'a://k@x', `${'a'.repeat(16)}://k@x`, `${'a'.repeat(17)}://k@x`, `x.${'a'.repeat(15)}://k@x`, `x.${'a'.repeat(16)}://k@x`,
      '_http://k@x', '9http://k@x', '.http://k@x', '-http://k@x', 'é http://k@x', 'éhttp://k@x', 'http://', 'http:// k@x', 'http://"k@x',
      'http://a http://b@c', 'http://a/http://u@b', 'x://y://z@w', 'HTTP://U:P@HOST/P?Q#F', 'see <https://u:p@h/p?q=1#f>.', "'s3+x.y-z://k@b?x'",
      'a.b.c://u@h', 'http://h\u2029?q', 'http://h\u180e?q', 'http://h\ufeff?q', 'http://h\u00a0?q'];
    for (const t of texts) {
      expect(redactUrls(t), t).toBe(oracleUrls(t));
      expect(redactUrls(t).includes('k@') || redactUrls(t).includes('?q'), t).toBe(oracleUrls(t).includes('k@') || oracleUrls(t).includes('?q'));
    }
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
