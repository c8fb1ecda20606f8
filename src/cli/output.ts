import { NodeSvcError } from '../domain/errors.js';

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
  url?: string;
  token?: string;
  json?: boolean;
  /** Where --url came from (commander's source: cli, env, default), to name it in a usage error. */
  urlFrom?: string;
  format?: Format;
}

/** JSON when stdout is not a TTY or with --json; tables and sentences on a TTY. */
export const jsonMode = (opts: GlobalOptions): boolean => !!opts.json || !process.stdout.isTTY;

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

export function render(result: CommandResult, json: boolean | Format): string {
  const f: Format = json === true ? 'json' : json === false ? 'table' : json;
  if (f === 'jsonl') return (result.rows ?? [result.data]).map((r) => `${JSON.stringify(r)}\n`).join('');
  return f === 'json' ? `${JSON.stringify(result.data, null, process.stdout.isTTY ? 2 : 0)}\n` : result.human.endsWith('\n') ? result.human : `${result.human}\n`;
}

export function renderError(err: NodeSvcError, json: boolean): string {
  if (json) return `${JSON.stringify({ error: { code: err.code, message: err.message, ...(err.hint ? { hint: err.hint } : {}), ...err.extra } })}\n`;
  return `node-svc: ${err.message}\n${err.hint ? `  ${err.hint}\n` : ''}`;
}

/** A plain text table: header row, then rows, columns padded to the widest cell. */
export function table(head: string[], rows: string[][]): string {
  if (!rows.length) return '';
  const widths = head.map((h, i) => Math.max(h.length, ...rows.map((r) => (r[i] ?? '').length)));
  const line = (cells: string[]) => cells.map((c, i) => (i === cells.length - 1 ? c : c.padEnd(widths[i]!))).join('  ').trimEnd();
  return [line(head), ...rows.map(line)].join('\n');
}
