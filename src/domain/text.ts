// Hostile text: control characters (terminal escape injection) and secret-bearing URLs (query strings, userinfo).

/** C0, DEL and C1 controls: ESC, BEL, CR, … can retitle or clear a terminal, forge log lines or hide text. */
export const CONTROL_RE = /[\u0000-\u001f\u007f-\u009f]/;
const CONTROL_G = /[\u0000-\u001f\u007f-\u009f]/g;
const CONTROL_BUT_NL_G = /[\u0000-\u0009\u000b-\u001f\u007f-\u009f]/g;
/** The same rule as an OpenAPI/JSON Schema pattern (ECMA-262), so the document says what the validator does. */
export const NO_CONTROL_PATTERN = '^[^\\u0000-\\u001f\\u007f-\\u009f]*$';

export const hasControl = (s: string): boolean => CONTROL_RE.test(s);

/**
 * Characters as JSON Schema's maxLength counts them (code points, as zod 4 does too), not UTF-16 units: a string the
 * OpenAPI document allows must never be refused as too long. Cheap when `.length` already answers.
 */
export const lengthOver = (s: string, max: number): boolean => s.length > max && [...s].length > max;

const visible = (c: string) => {
  const n = c.charCodeAt(0);
  return n === 10 ? '\\n' : n === 13 ? '\\r' : n === 9 ? '\\t' : `\\x${n.toString(16).padStart(2, '0')}`;
};

/** For one value in human output (a table cell, a log field): every control character shown as an escape. */
export const escapeControl = (s: string): string => s.replace(CONTROL_G, visible);

/** For a whole human text we built ourselves: line breaks stay, every other control character is shown escaped. */
export const escapeControlKeepLines = (s: string): string => s.replace(CONTROL_BUT_NL_G, visible);

/**
 * A URL as it may be shown: userinfo and query string replaced by *** (they carry tokens: `user:pass@`,
 * `?access_token=`), the rest as written (not re-serialised, so what is shown is what is stored).
 */
export function redactUrl(raw: string): string {
  const m = /^[a-z][a-z0-9+.-]*:\/\//i.exec(raw);
  return m ? m[0] + redactAfterScheme(raw.slice(m[0].length)) : raw;
}

/** What follows `scheme://`, redacted: userinfo (up to the last @ of the authority), the query and the fragment. */
function redactAfterScheme(rest: string): string {
  let a = 0; // the authority: up to the first / ? #
  while (a < rest.length && rest[a] !== '/' && rest[a] !== '?' && rest[a] !== '#') a++;
  let p = a; // the path: up to the first ? #
  while (p < rest.length && rest[p] !== '?' && rest[p] !== '#') p++;
  const authority = rest.slice(0, a);
  const at = authority.lastIndexOf('@');
  const query = rest[p] === '?';
  const fragment = query ? rest.indexOf('#', p) >= 0 : p < rest.length;
  return `${at >= 0 ? `***@${authority.slice(at + 1)}` : authority}${rest.slice(a, p)}${query ? '?***' : ''}${fragment ? '#***' : ''}`;
}

// Character classes of a URL inside a text, as the regular expression /\b[a-z][a-z0-9+.-]{1,15}:\/\/[^\s"'<>`]+/gi
// reads it (test/domain/text.test.ts holds that expression and compares): a scheme of 2 to 16 characters starting with
// a letter at a word boundary, `://`, then everything up to a space, a quote, < > or a backtick.
const isLetter = (c: number) => (c >= 65 && c <= 90) || (c >= 97 && c <= 122);
const isDigit = (c: number) => c >= 48 && c <= 57;
const inScheme = (c: number) => isLetter(c) || isDigit(c) || c === 43 || c === 45 || c === 46; // + - .
const isWord = (c: number) => isLetter(c) || isDigit(c) || c === 95; // _
/** `\s` of a regular expression: white space and line terminators. */
const isSpace = (c: number) => c === 32 || (c >= 9 && c <= 13) || c === 0xa0 || c === 0x1680 || (c >= 0x2000 && c <= 0x200a)
  || c === 0x2028 || c === 0x2029 || c === 0x202f || c === 0x205f || c === 0x3000 || c === 0xfeff;
const endsUrl = (c: number) => isSpace(c) || c === 34 || c === 39 || c === 60 || c === 62 || c === 96; // " ' < > `

/**
 * Every URL inside a free text (an error message from a library, a log field) redacted as redactUrl does. A scan
 * from each `://` rather than a regular expression: compiling one was 0.3 ms of every verify start (bench/cli-start,
 * the issuer's URL in its answer), and this runs on every string of the CLI's JSON output.
 */
export function redactUrls(text: string): string {
  let c = text.indexOf('://');
  if (c < 0) return text;
  let out = '';
  let copied = 0; // text[0, copied) is in `out`
  let from = 0; // a URL starts here or after (the end of the one before)
  while (c >= 0) {
    // The first start of a scheme that ends at c: a letter at a word boundary, at most 16 characters before c,
    // at least 2, every character from it to c one of a scheme's.
    let r = c;
    while (r > from && r > c - 16 && inScheme(text.charCodeAt(r - 1))) r--;
    let s = -1;
    for (let k = r; k <= c - 2; k++) {
      if (isLetter(text.charCodeAt(k)) && (k === 0 || !isWord(text.charCodeAt(k - 1)))) { s = k; break; }
    }
    // The rest of the URL is read only after a scheme is found, and what is read is then taken: each character of
    // the text is looked at a bounded number of times, whatever it holds ("0://0://…" included).
    let e = c + 3;
    if (s >= 0) while (e < text.length && !endsUrl(text.charCodeAt(e))) e++;
    if (e === c + 3) { c = text.indexOf('://', c + 1); continue; }
    out += text.slice(copied, s) + text.slice(s, c + 3) + redactAfterScheme(text.slice(c + 3, e));
    copied = from = e;
    c = text.indexOf('://', e);
  }
  return copied === 0 ? text : out + text.slice(copied);
}
