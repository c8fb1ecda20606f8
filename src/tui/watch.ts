// `node-svc watch`: a live ink view of the caller's streams and webhook delivery health. Imported lazily by the
// watch command only, so no other command loads ink or react. Plain .ts with createElement (no JSX setting needed).
import React, { useCallback, useEffect, useRef, useState } from 'react';
import { Box, render, Text, useApp, useInput, useStdout } from 'ink';
import { formatMicro } from '../domain/amount.js';
import type { Client } from '../sdk/client.js';
import { bar, describeFailure, fetchDetail, fetchSnapshot, screenSafe, STREAM_PAGE, type Snapshot, type Stage, type StreamDetail, type StreamRow, type WebhookRow } from './snapshot.js';

const h = React.createElement;
type Json = Record<string, any>;

export const STAGE_COLOR: Record<Stage, string> = { normal: 'green', low: 'yellow', critical: 'red', halted: 'gray' };
/** The headroom bar: narrower on terminals under 120 columns so the money columns still fit. */
export const barWidthFor = (columns: number) => (columns >= 120 ? 16 : 10);
const ID_WIDTH = 28;

const clock = (d: Date) => d.toTimeString().slice(0, 8);
const clip = (s: string, n: number) => (s.length > n ? `${s.slice(0, n - 1)}…` : s);
const money = (m: string | null | undefined) => (m === null || m === undefined ? '-' : formatMicro(m));
const seconds = (ms: number) => `${ms / 1000}s`;

// ---------- pure views (exported so they can be rendered with renderToString) ----------

interface Columns {
  id: number;
  stage: number;
  remaining: number;
  finality: number;
  final: number;
  unsettled: number;
}

function columnsFor(rows: StreamRow[]): Columns {
  const w = (head: string, cells: string[]) => Math.max(head.length, ...cells.map((c) => c.length));
  return {
    id: Math.min(ID_WIDTH, w('STREAM', rows.map((r) => r.stream))),
    stage: w('STAGE', rows.map((r) => r.degradationStage)),
    remaining: w('REMAINING', rows.map((r) => `${money(r.remainingCapMicro)} ${r.asset}`)),
    finality: w('FINALITY', rows.map((r) => r.finality)),
    final: w('FINAL', rows.map((r) => money(r.finalMicro))),
    unsettled: w('UNSETTLED', rows.map((r) => money(r.unsettledMicro))),
  };
}

function StreamLine({ row, c, selected, barWidth }: { row: StreamRow; c: Columns; selected: boolean; barWidth: number }): React.ReactElement {
  const color = STAGE_COLOR[row.degradationStage] ?? 'white';
  const b = bar(row.billedMicro, row.capMicro, barWidth);
  return h(
    Text,
    { wrap: 'truncate-end' },
    h(Text, { color: 'cyan', bold: true }, selected ? '› ' : '  '),
    h(Text, { bold: selected }, clip(row.stream, c.id).padEnd(c.id)),
    '  ',
    h(Text, { color }, row.degradationStage.padEnd(c.stage)),
    '  ',
    h(Text, { color }, b.filled),
    h(Text, { color: 'gray' }, b.empty),
    ` ${b.percent.padStart(6)}`,
    '  ',
    `${money(row.remainingCapMicro)} ${row.asset}`.padEnd(c.remaining),
    '  ',
    h(Text, { color: row.finality === 'final' ? 'green' : row.finality === 'checkpointed' ? 'yellow' : undefined }, row.finality.padEnd(c.finality)),
    '  ',
    money(row.finalMicro).padEnd(c.final),
    '  ',
    money(row.unsettledMicro).padEnd(c.unsettled),
  );
}

export function StreamTable({ streams, selected, maxRows, more, barWidth = 16 }: { streams: StreamRow[]; selected: number; maxRows: number; more?: boolean; barWidth?: number }): React.ReactElement {
  if (!streams.length) return h(Text, { dimColor: true }, 'no streams yet: they appear when a credential aimed at this node is verified by the daemon');
  const c = columnsFor(streams);
  const rows = Math.max(1, maxRows);
  // Keep the selection in view: a window of `rows` streams around it.
  const start = Math.min(Math.max(0, selected - Math.floor(rows / 2)), Math.max(0, streams.length - rows));
  const shown = streams.slice(start, start + rows);
  const head = `  ${'STREAM'.padEnd(c.id)}  ${'STAGE'.padEnd(c.stage)}  ${'BILLED/CAP'.padEnd(barWidth + 7)}  ${'REMAINING'.padEnd(c.remaining)}  ${'FINALITY'.padEnd(c.finality)}  ${'FINAL'.padEnd(c.final)}  UNSETTLED`;
  const above = start;
  const below = streams.length - start - shown.length;
  return h(
    Box,
    { flexDirection: 'column' },
    h(Text, { bold: true, wrap: 'truncate-end' }, head),
    above > 0 ? h(Text, { dimColor: true }, `  … ${above} above`) : null,
    ...shown.map((row, i) => h(StreamLine, { key: row.stream, row, c, selected: start + i === selected, barWidth })),
    below > 0 ? h(Text, { dimColor: true }, `  … ${below} below`) : null,
    more ? h(Text, { dimColor: true }, `  (the first ${STREAM_PAGE} streams; \`node-svc streams list --all\` lists every one)`) : null,
  );
}

function WebhookLine({ w }: { w: WebhookRow }): React.ReactElement {
  const hl = w.health;
  const status = w.status === 'active' ? h(Text, { color: 'green' }, 'active') : h(Text, { color: 'red' }, `${w.status}${w.disabledReason ? ` (${w.disabledReason})` : ''}`);
  return h(
    Box,
    { flexDirection: 'column' },
    h(Text, { wrap: 'truncate-end' }, h(Text, { bold: true }, w.id), '  ', status, '  ', h(Text, { dimColor: true }, w.url)),
    hl
      ? h(
          Text,
          { wrap: 'truncate-end' },
          '    pending ', h(Text, { bold: true }, String(hl.pending)),
          '  retrying ', h(Text, { color: hl.retrying ? 'yellow' : undefined, bold: true }, String(hl.retrying)),
          '  dead ', h(Text, { color: hl.dead ? 'red' : undefined, bold: true }, String(hl.dead)),
          '  delivered ', h(Text, { bold: true }, String(hl.delivered)),
          w.lastError
            ? h(Text, null, '  last error: ', h(Text, { color: 'red' }, describeFailure(w.lastError)), h(Text, { dimColor: true }, ` at ${w.lastError.at}`))
            : h(Text, { dimColor: true }, '  no failures'),
        )
      : h(Text, { color: 'red', wrap: 'truncate-end' }, `    deliveries unavailable: ${w.error ?? 'unknown error'}`),
  );
}

export function WebhookPanel({ webhooks }: { webhooks: WebhookRow[] }): React.ReactElement {
  return h(
    Box,
    { flexDirection: 'column', marginTop: 1 },
    h(Text, { bold: true }, 'WEBHOOKS'),
    webhooks.length
      ? webhooks.map((w) => h(WebhookLine, { key: w.id, w }))
      : h(Text, { dimColor: true }, 'no webhook subscriptions: node-svc webhooks add <url>'),
  );
}

/** One line for the webhook panel when the terminal is too short for it and the detail. */
export function WebhookSummary({ webhooks }: { webhooks: WebhookRow[] }): React.ReactElement {
  const sum = (k: 'pending' | 'retrying' | 'dead') => webhooks.reduce((n, w) => n + (w.health?.[k] ?? 0), 0);
  const retrying = sum('retrying');
  const dead = sum('dead');
  return h(
    Box,
    { marginTop: 1 },
    h(
      Text,
      { wrap: 'truncate-end' },
      h(Text, { bold: true }, 'WEBHOOKS'),
      `  ${webhooks.length} subscription${webhooks.length === 1 ? '' : 's'}: pending ${sum('pending')}  retrying `,
      h(Text, { color: retrying ? 'yellow' : undefined }, String(retrying)),
      '  dead ',
      h(Text, { color: dead ? 'red' : undefined }, String(dead)),
      h(Text, { dimColor: true }, '  (close the detail for the panel)'),
    ),
  );
}

const field = (label: string, value: React.ReactNode) => h(Text, { wrap: 'truncate-end' }, h(Text, { dimColor: true }, label.padEnd(14)), value);

/** Lines the detail panel takes (margin, border, title, seven rows): the layout budget counts on it. */
export const DETAIL_LINES = 11;

export function DetailPanel({ row, detail, error }: { row: StreamRow | undefined; detail: StreamDetail | null; error: string | null }): React.ReactElement {
  const box = (...children: React.ReactNode[]) =>
    h(Box, { flexDirection: 'column', marginTop: 1, borderStyle: 'round', borderColor: 'cyan', paddingX: 1 }, ...children);
  if (!row) return box(h(Text, { dimColor: true }, 'no stream selected'));
  if (!detail || detail.stream !== row.stream) return box(h(Text, { bold: true }, row.stream), h(Text, { color: error ? 'red' : undefined, dimColor: !error }, error ?? 'loading…'));
  const hr: Json = detail.headroom;
  const f: Json = detail.finality;
  const a = hr.asset as string;
  const m = (v: string | null | undefined) => (v === null || v === undefined ? '-' : formatMicro(v, a));
  const stage = hr.degradationStage as Stage;
  const fr: Json = f.frontier ?? {};
  const bt: Json = f.billedTruth ?? {};
  // Two columns, headroom | finality, so the detail fits a 24-row terminal beside the table.
  return box(
    h(Text, { wrap: 'truncate-end' }, h(Text, { bold: true }, hr.stream), '  ', h(Text, { color: STAGE_COLOR[stage] }, stage), `  (${hr.status})  budget ${row.budget}  payer ${row.payer}  ${row.mode}  expires ${row.expiresAt}`),
    h(
      Box,
      { flexDirection: 'row' },
      h(
        Box,
        { flexDirection: 'column', width: '50%', paddingRight: 1 },
        h(Text, { bold: true }, 'headroom'),
        field('cap', m(hr.capMicro)),
        field('billed', m(hr.billedMicro)),
        field('remaining', m(hr.remainingCapMicro)),
        field('units left', `${hr.remainingUnits} at ${m(hr.unitPriceMicro)}`),
        field('rate', `${m(hr.rate?.observedMicroPerSecond)}/s${hr.rate?.limitMicroPerSecond ? ` of ${m(hr.rate.limitMicroPerSecond)}/s` : ' (no limit)'}`),
        error ? h(Text, { color: 'red', wrap: 'truncate-end' }, `refresh failed: ${error}`) : field('as of', String(hr.asOf ?? detail.at)),
      ),
      h(
        Box,
        { flexDirection: 'column', flexGrow: 1, width: '50%' },
        h(Text, { wrap: 'truncate-end' }, h(Text, { bold: true }, 'finality'), '      ', h(Text, { color: f.finality === 'final' ? 'green' : 'yellow' }, f.finality === 'final' ? 'final' : `${f.finality} (not a credit signal)`)),
        field('final', m(f.finalMicro)),
        field('checkpointed', m(f.checkpointedMicro)),
        field('frontier', `${m(fr.amountMicro)} ${fr.finality ?? '-'}${fr.finalAt ? ` at ${fr.finalAt}` : fr.checkpointedAt ? ` at ${fr.checkpointedAt}` : ''}`),
        field('reference', String(fr.reference ?? '-')),
        field('billed truth', `${m(bt.amountMicro)} · ${bt.units ?? '0'} units${bt.signedAt ? ` · signed ${bt.signedAt}` : ''}`),
        field('unsettled', m(f.unsettledMicro)),
      ),
    ),
  );
}

export interface ViewProps {
  url: string;
  intervalMs: number;
  snapshot: Snapshot | null;
  /** The last refresh failed with this (the previous snapshot, if any, stays on screen). */
  error: string | null;
  lastRefresh: Date | null;
  selected: number;
  detailOpen: boolean;
  detail: StreamDetail | null;
  detailError: string | null;
  /** Terminal size, to fit the stream table and the bar. */
  rows: number;
  columns: number;
}

export function WatchView(p: ViewProps): React.ReactElement {
  const streams = p.snapshot?.streams ?? [];
  // Fit the terminal: header, table head and footer; the detail; the webhook panel (one summary line when the detail
  // needs its room); then as many stream rows as are left (at least 3), with two lines for "… N above/below".
  const fixed = 6 + (p.error ? 1 : 0);
  const detailLines = p.detailOpen ? DETAIL_LINES : 0;
  const hooks = p.snapshot?.webhooks ?? [];
  const hooksLines = 2 + Math.max(1, hooks.length * 2);
  const collapseHooks = p.detailOpen && p.rows < fixed + detailLines + hooksLines + 3 + 2;
  const maxRows = Math.max(3, p.rows - fixed - detailLines - (collapseHooks ? 2 : hooksLines) - 2);
  return h(
    Box,
    { flexDirection: 'column' },
    h(Text, { wrap: 'truncate-end' }, h(Text, { bold: true, color: 'cyan' }, 'node-svc watch'), h(Text, { dimColor: true }, `  ${screenSafe(p.url)}  ${streams.length} stream${streams.length === 1 ? '' : 's'}`)),
    p.error ? h(Text, { color: 'red', wrap: 'truncate-end' }, `✗ ${p.error} — retrying every ${seconds(p.intervalMs)}`) : null,
    p.snapshot
      ? h(
          Box,
          { flexDirection: 'column', marginTop: 1 },
          h(StreamTable, { streams, selected: p.selected, maxRows, more: p.snapshot.moreStreams, barWidth: barWidthFor(p.columns) }),
          p.detailOpen ? h(DetailPanel, { row: streams[p.selected], detail: p.detail, error: p.detailError }) : null,
          collapseHooks ? h(WebhookSummary, { webhooks: hooks }) : h(WebhookPanel, { webhooks: hooks }),
        )
      : h(Box, { marginTop: 1 }, h(Text, { dimColor: true }, p.error ? 'no data yet' : 'loading…')),
    h(
      Box,
      { marginTop: 1 },
      h(
        Text,
        { dimColor: true, wrap: 'truncate-end' },
        `↑/↓ select  enter ${p.detailOpen ? 'close details' : 'details'}  q quit    `,
        p.lastRefresh ? `refreshed ${clock(p.lastRefresh)}` : 'not refreshed yet',
        ` · every ${seconds(p.intervalMs)}`,
      ),
    ),
  );
}

// ---------- the live app ----------

export interface WatchProps {
  client: Client;
  url: string;
  intervalMs: number;
}

const messageOf = (err: unknown) => screenSafe(err instanceof Error ? err.message : String(err));

export function WatchApp({ client, url, intervalMs }: WatchProps): React.ReactElement {
  const { exit } = useApp();
  const { stdout } = useStdout();
  const [snapshot, setSnapshot] = useState<Snapshot | null>(null);
  const [error, setError] = useState<string | null>(null);
  const [lastRefresh, setLastRefresh] = useState<Date | null>(null);
  const [selectedId, setSelectedId] = useState<string | null>(null);
  const [detailOpen, setDetailOpen] = useState(false);
  const [detail, setDetail] = useState<StreamDetail | null>(null);
  const [detailError, setDetailError] = useState<string | null>(null);

  // The refresh loop reads the current selection through refs, and `kick` refreshes at once (enter, moves).
  const want = useRef<{ open: boolean; id: string | null }>({ open: false, id: null });
  const kickRef = useRef<() => void>(() => {});

  useEffect(() => {
    let stopped = false;
    let running = false;
    let again = false;
    let timer: NodeJS.Timeout | undefined;
    const tick = async () => {
      if (running) { again = true; return; }
      running = true;
      clearTimeout(timer);
      try {
        try {
          const s = await fetchSnapshot(client);
          if (stopped) return;
          setSnapshot(s);
          setError(null);
          setLastRefresh(new Date());
          // Default to the first stream; keep the selection if it still exists.
          const ids = s.streams.map((r) => r.stream);
          const id = want.current.id !== null && ids.includes(want.current.id) ? want.current.id : (ids[0] ?? null);
          want.current.id = id;
          setSelectedId(id);
        } catch (err) {
          if (!stopped) setError(messageOf(err));
        }
        const { open, id } = want.current;
        if (open && id !== null && !stopped) {
          try {
            const d = await fetchDetail(client, id);
            if (!stopped) { setDetail(d); setDetailError(null); }
          } catch (err) {
            if (!stopped) setDetailError(messageOf(err));
          }
        }
      } finally {
        running = false;
        if (!stopped) {
          if (again) { again = false; void tick(); }
          else timer = setTimeout(() => void tick(), intervalMs);
        }
      }
    };
    kickRef.current = () => void tick();
    void tick();
    return () => { stopped = true; clearTimeout(timer); };
  }, [client, intervalMs]);

  const streams = snapshot?.streams ?? [];
  const selected = Math.max(0, streams.findIndex((s) => s.stream === selectedId));

  // Keys read the latest rows through a ref: a key can arrive after a refresh was drawn but before React re-subscribes
  // the input handler (passive effects run later), and a stale handler would move within an older list.
  const latest = useRef({ streams, selected });
  latest.current = { streams, selected };

  const move = useCallback((by: number) => {
    const { streams: rows, selected: at } = latest.current;
    const row = rows[Math.min(Math.max(0, at + by), rows.length - 1)];
    if (!row) return;
    want.current.id = row.stream;
    latest.current = { streams: rows, selected: rows.indexOf(row) };
    setSelectedId(row.stream);
    if (want.current.open) kickRef.current();
  }, []);

  useInput((input, key) => {
    if (input === 'q') return exit();
    if (key.upArrow || input === 'k') return move(-1);
    if (key.downArrow || input === 'j') return move(1);
    if (key.pageUp) return move(-10);
    if (key.pageDown) return move(10);
    if (key.return || (key.escape && want.current.open)) {
      const open = key.escape ? false : !want.current.open;
      want.current.open = open;
      setDetailOpen(open);
      if (open) kickRef.current();
    }
  });

  return h(WatchView, { url, intervalMs, snapshot, error, lastRefresh, selected, detailOpen, detail, detailError, rows: stdout.rows || 24, columns: stdout.columns || 80 });
}

export interface RunWatchOptions extends WatchProps {
  /** For tests: a fake terminal. */
  stdout?: NodeJS.WriteStream;
  stdin?: NodeJS.ReadStream;
  /** Write every frame in full (what tests read). */
  debug?: boolean;
}

/** Render the live view; resolves when the user quits (q or ctrl-c). */
export async function runWatch(o: RunWatchOptions): Promise<void> {
  const app = render(h(WatchApp, { client: o.client, url: o.url, intervalMs: o.intervalMs }), {
    ...(o.stdout ? { stdout: o.stdout } : {}),
    ...(o.stdin ? { stdin: o.stdin } : {}),
    ...(o.debug ? { debug: true, patchConsole: false } : {}),
    exitOnCtrlC: true,
  });
  await app.waitUntilExit();
}
