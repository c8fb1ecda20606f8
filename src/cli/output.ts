import { fstatSync } from 'node:fs';
import { NodeSvcError } from '../domain/errors.js';
import { escapeControl, escapeControlKeepLines, redactUrls } from '../domain/text.js';

/** What every command function returns: data for JSON, a rendering for people, and an exit code. */
export interface CommandResult<T = unknown> {
  data: T;
  human: string;
  exitCode?: number;
  /** The items of a list command: `--format jsonl` prints one per line. */
  rows?: unknown[];
  /** Print `human` also when piped (a bare JWS for `JWS=$(…)`); only --json / --format json gives `data`. */
  plainWhenPiped?: boolean;
}

export type Format = 'table' | 'json' | 'jsonl';
export const FORMATS: Format[] = ['table', 'json', 'jsonl'];

export interface GlobalOptions {
  dataDir?: string;
  /** --store: a PostgreSQL URL (a secret: never printed). */
  store?: string;
  url?: string;
  token?: string;
  json?: boolean;
  /** Where --url came from (commander's source: cli, env, default), to name it in a usage error. */
  urlFrom?: string;
  format?: Format;
}

/** JSON when stdout is not a TTY or with --json; tables and sentences on a TTY. */
/**
 * Is `fd` a terminal? Asked without process.stdout.isTTY or node:tty, which load node:net and the stream modules (a few
 * ms of every verify start, bench/cli-start): only a character device can be a terminal, so fstat answers most cases.
 */
export function isTerminal(fd: number): boolean {
  return (terminal[fd] ??= ask(fd));
}
/** Asked once per fd and run (the output's format and its indentation both ask about fd 1). */
const terminal: Record<number, boolean> = {};
function ask(fd: number): boolean {
  try {
    if (!fstatSync(fd).isCharacterDevice()) return false;
  } catch {
    return false; // closed
  }
  return process.getBuiltinModule('node:tty').isatty(fd);
}

export const jsonMode = (opts: GlobalOptions): boolean => !!opts.json || !isTerminal(1);

/**
 * How a result is printed: `--format` wins, then --json, then JSON when stdout is not a terminal
 * (except results meant to be captured bare, like a JWS); a table or sentence on a terminal.
 */
export function outputFormat(result: CommandResult, o: { format?: Format | undefined; json: boolean; explicitJson: boolean }): Format {
  if (o.format) return o.format;
  if (o.explicitJson) return 'json';
  if (result.plainWhenPiped) return 'table';
  return o.json ? 'json' : 'table';
}

// URLs lose their query and userinfo in every CLI output, JSON too: stdout ends up in CI logs and tickets.
const redacting = (_k: string, v: unknown) => (typeof v === 'string' ? redactUrls(v) : v);

export function render(result: CommandResult, json: boolean | Format): string {
  const f: Format = json === true ? 'json' : json === false ? 'table' : json;
  if (f === 'jsonl') return (result.rows ?? [result.data]).map((r) => `${JSON.stringify(r, redacting)}\n`).join('');
  if (f === 'json') return `${JSON.stringify(result.data, redacting, isTerminal(1) ? 2 : 0)}\n`;
  // Whatever is in the store reaches a terminal only escaped, and URLs without their query or userinfo.
  const human = humanSafe(result.human);
  return human.endsWith('\n') ? human : `${human}\n`;
}

export function renderError(err: NodeSvcError, json: boolean): string {
  const message = redactUrls(err.message);
  if (json) return `${JSON.stringify({ error: { code: err.code, message, ...(err.hint ? { hint: err.hint } : {}), ...err.extra } })}\n`;
  return humanSafe(`node-svc: ${message}\n${err.hint ? `  ${err.hint}\n` : ''}`);
}

/** Human text: URLs redacted (query, userinfo), control characters other than line breaks shown as escapes. */
export const humanSafe = (s: string): string => escapeControlKeepLines(redactUrls(s));

/** A plain text table: header row, then rows, columns padded to the widest cell. */
export function table(head: string[], rows: string[][]): string {
  if (!rows.length) return '';
  rows = rows.map((r) => r.map((c) => escapeControl(c ?? ''))); // a stored "\r\n" must not start a fake row
  const widths = head.map((h, i) => Math.max(h.length, ...rows.map((r) => (r[i] ?? '').length)));
  const line = (cells: string[]) => cells.map((c, i) => (i === cells.length - 1 ? c : c.padEnd(widths[i]!))).join('  ').trimEnd();
  return [line(head), ...rows.map(line)].join('\n');
}
