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
  const m = /^([a-z][a-z0-9+.-]*:\/\/)([^/?#]*)([^?#]*)(\?[^#]*)?(#.*)?$/is.exec(raw);
  if (!m) return raw;
  const [, scheme, authority = '', path = '', query, fragment] = m;
  const at = authority.lastIndexOf('@');
  return `${scheme}${at >= 0 ? `***@${authority.slice(at + 1)}` : authority}${path}${query ? '?***' : ''}${fragment ? '#***' : ''}`;
}

const URL_IN_TEXT = /\b[a-z][a-z0-9+.-]{1,15}:\/\/[^\s"'<>`]+/gi;

/** Every URL inside a free text (an error message from a library, a log field) redacted as redactUrl does. */
export const redactUrls = (text: string): string => (text.includes('://') ? text.replace(URL_IN_TEXT, (m) => redactUrl(m)) : text);
