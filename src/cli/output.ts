import { NodeSvcError } from '../domain/errors.js';

/** What every command function returns: data for JSON, a rendering for people, and an exit code. */
export interface CommandResult<T = unknown> {
  data: T;
  human: string;
  exitCode?: number;
}

export interface GlobalOptions {
  dataDir?: string;
  url?: string;
  token?: string;
  json?: boolean;
}

/** JSON when stdout is not a TTY or with --json; tables and sentences on a TTY. */
export const jsonMode = (opts: GlobalOptions): boolean => !!opts.json || !process.stdout.isTTY;

export function render(result: CommandResult, json: boolean): string {
  return json ? `${JSON.stringify(result.data, null, process.stdout.isTTY ? 2 : 0)}\n` : result.human.endsWith('\n') ? result.human : `${result.human}\n`;
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
