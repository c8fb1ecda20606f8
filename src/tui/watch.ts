// `node-svc watch`: a live ink view of the caller's streams and webhook delivery health. Imported lazily by the
// watch command only, so no other command loads ink or react. Plain .ts with createElement (no JSX setting needed).
import React, { useCallback, useEffect, useRef, useState } from 'react';
import { Box, render, Text, useApp, useInput, useStdout } from 'ink';
import { formatMicro } from '../domain/amount.js';
import type { Client } from '../sdk/client.js';
import { bar, describeFailure, fetchDetail, fetchSnapshot, isFailing, screenSafe, STREAM_PAGE, totals, type Snapshot, type Stage, type StreamDetail, type StreamRow, type WebhookRow } from './snapshot.js';

const h = React.createElement;
type Json = Record<string, any>;

export const STAGE_COLOR: Record<Stage, string> = { normal: 'green', low: 'yellow', critical: 'red', halted: 'gray' };
/** The headroom bar: narrower on terminals under 120 columns so the money columns still fit. */
export const barWidthFor = (columns: number) => (columns >= 120 ? 16 : 10);
/** Stream ids are clipped to this many cells: more on a wide terminal, so long ids stay whole. */
export const idWidthFor = (columns: number) => (columns >= 160 ? 56 : columns >= 120 ? 40 : 28);

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

function columnsFor(rows: StreamRow[], idWidth: number): Columns {
  const w = (head: string, cells: string[]) => Math.max(head.length, ...cells.map((c) => c.length));
  return {
    id: Math.min(idWidth, w('STREAM', rows.map((r) => r.stream))),
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

/** One line per asset: what the streams shown add up to (billed, unsettled, checkpointed, final). */
export function TotalsLine({ streams }: { streams: StreamRow[] }): React.ReactElement | null {
  const t = totals(streams);
  if (!t.length) return null;
  return h(
    Text,
    { wrap: 'truncate-end' },
    h(Text, { bold: true }, '  TOTAL  '),
    t.map((x) => `${x.asset}: billed ${formatMicro(x.billedMicro)}  unsettled ${formatMicro(x.unsettledMicro)}  checkpointed ${formatMicro(x.checkpointedMicro)}  final ${formatMicro(x.finalMicro)}`).join('   '),
  );
}

export function StreamTable({ streams, selected, maxRows, more, barWidth = 16, idWidth = 28, empty }: { streams: StreamRow[]; selected: number; maxRows: number; more?: boolean; barWidth?: number; idWidth?: number; empty?: string }): React.ReactElement {
  if (!streams.length) return h(Text, { dimColor: true }, empty ?? 'no streams yet: they appear when a credential aimed at this node is verified by the daemon');
  const c = columnsFor(streams, idWidth);
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
    h(TotalsLine, { streams }),
    more ? h(Text, { dimColor: true }, `  (the ${STREAM_PAGE} most recently active; \`node-svc streams list --all\` lists every one)`) : null,
  );
}

function WebhookLine({ w, selected }: { w: WebhookRow; selected?: boolean }): React.ReactElement {
  const hl = w.health;
  const status = isFailing(w)
    ? h(Text, { color: 'yellow' }, `failing since ${w.failingSince}`)
    : w.status === 'active' ? h(Text, { color: 'green' }, 'active') : h(Text, { color: 'red' }, `${w.status}${w.disabledReason ? ` (${w.disabledReason})` : ''}`);
  return h(
    Box,
    { flexDirection: 'column' },
    h(Text, { wrap: 'truncate-end' }, selected ? h(Text, { color: 'cyan', bold: true }, '› ') : '', h(Text, { bold: true }, w.id), '  ', status, '  ', h(Text, { dimColor: true }, w.url)),
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

export function WebhookPanel({ webhooks, selectedId }: { webhooks: WebhookRow[]; selectedId?: string | null }): React.ReactElement {
  return h(
    Box,
    { flexDirection: 'column', marginTop: 1 },
    h(Text, { bold: true }, 'WEBHOOKS', selectedId !== undefined ? h(Text, { dimColor: true, bold: false }, '  (↑/↓ select, enter deliveries, tab back to streams)') : ''),
    webhooks.length
      ? webhooks.map((w) => h(WebhookLine, { key: w.id, w, selected: w.id === selectedId }))
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

/** A subscription's recent deliveries (its latest attempts): what failed, how, and when it is tried again. */
export interface HookDetail { id: string; health: Json; attempts: Json[] }
export const HOOK_ATTEMPTS = 8;

export function HookDetailPanel({ id, detail, error }: { id: string; detail: HookDetail | null; error: string | null }): React.ReactElement {
  const box = (...children: React.ReactNode[]) =>
    h(Box, { flexDirection: 'column', marginTop: 1, borderStyle: 'round', borderColor: 'cyan', paddingX: 1 }, ...children);
  if (!detail || detail.id !== id) return box(h(Text, { bold: true }, id), h(Text, { color: error ? 'red' : undefined, dimColor: !error }, error ?? 'loading…'));
  const hl = detail.health;
  return box(
    h(Text, { wrap: 'truncate-end' }, h(Text, { bold: true }, id), `  ${hl.delivered} delivered, ${hl.pending} pending, ${hl.retrying} retrying, ${hl.dead} dead`),
    detail.attempts.length
      ? h(Text, { bold: true, wrap: 'truncate-end' }, `${'TIME'.padEnd(24)}  ${'EVENT'.padEnd(30)}  TRY  STATUS  OUTCOME  NEXT / ERROR`)
      : h(Text, { dimColor: true }, 'no attempts yet'),
    ...detail.attempts.map((a) =>
      h(
        Text,
        { key: String(a.id ?? `${a.eventId}-${a.attempt}`), wrap: 'truncate-end' },
        `${String(a.attemptedAt).padEnd(24)}  ${String(a.eventId).padEnd(30)}  ${String(a.attempt).padStart(3)}  ${(a.statusCode === null ? '-' : String(a.statusCode)).padEnd(6)}  `,
        h(Text, { color: a.outcome === 'delivered' ? 'green' : 'red' }, String(a.outcome).padEnd(7)),
        a.outcome === 'delivered' ? '' : `  ${a.nextAttemptAt ? `next ${a.nextAttemptAt}` : 'no retry left'}${a.error ? `  ${a.error}` : ''}`,
      ),
    ),
    error ? h(Text, { color: 'red', wrap: 'truncate-end' }, `refresh failed: ${error}`) : null,
  );
}

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
  /** `/`: only streams whose id contains this; `filtering` while it is being typed. */
  filter?: string;
  filtering?: boolean;
  /** `c`: closed streams shown too (hidden by default). */
  showClosed?: boolean;
  /** `?`: the keys. */
  help?: boolean;
  /** tab: the webhook panel has the keys; this subscription is selected, and its deliveries shown when open. */
  hookFocus?: boolean;
  hookId?: string | null;
  hookOpen?: boolean;
  hookDetail?: HookDetail | null;
  hookError?: string | null;
}

export const KEYS: Array<[string, string]> = [
  ['↑/↓ j/k', 'select'], ['PgUp/PgDn', 'ten at a time'], ['Home/End', 'first / last'], ['enter', 'details of the stream'],
  ['/', 'filter by stream id (enter keeps it, esc clears it)'], ['c', 'show or hide closed streams (hidden at start)'], ['tab', 'select subscriptions: enter shows a subscription\'s recent deliveries'], ['?', 'this help'], ['q', 'quit'],
];

export function HelpPanel(): React.ReactElement {
  return h(
    Box,
    { flexDirection: 'column', marginTop: 1, borderStyle: 'round', paddingX: 1 },
    h(Text, { bold: true }, 'keys'),
    ...KEYS.map(([k, what]) => h(Text, { key: k, wrap: 'truncate-end' }, h(Text, { bold: true }, k.padEnd(12)), what)),
    h(Text, { dimColor: true, wrap: 'truncate-end' }, 'order: critical and halted first, then most recent activity'),
  );
}

export function WatchView(p: ViewProps): React.ReactElement {
  const all = p.snapshot?.streams ?? [];
  const streams = p.filter ? all.filter((r) => r.stream.includes(p.filter!)) : all;
  // Fit the terminal: header, table head and footer; the detail; the webhook panel (one summary line when the detail
  // needs its room); then as many stream rows as are left (at least 3), with two lines for "… N above/below".
  // (+1 for the totals line, +1 for the filter line, + the help box when open)
  const fixed = 7 + (p.error ? 1 : 0) + (p.filter || p.filtering ? 1 : 0) + (p.help ? KEYS.length + 4 : 0);
  const detailLines = (p.detailOpen ? DETAIL_LINES : 0) + (p.hookOpen ? HOOK_ATTEMPTS + 5 : 0);
  const hooks = p.snapshot?.webhooks ?? [];
  const hooksLines = 2 + Math.max(1, hooks.length * 2);
  const collapseHooks = p.detailOpen && p.rows < fixed + detailLines + hooksLines + 3 + 2;
  const maxRows = Math.max(3, p.rows - fixed - detailLines - (collapseHooks ? 2 : hooksLines) - 2);
  return h(
    Box,
    { flexDirection: 'column' },
    h(Text, { wrap: 'truncate-end' }, h(Text, { bold: true, color: 'cyan' }, 'node-svc watch'), h(Text, { dimColor: true }, `  ${screenSafe(p.url)}  ${streams.length}${streams.length !== all.length ? ` of ${all.length}` : ''} ${p.showClosed ? '' : 'open '}stream${(streams.length !== all.length ? all.length : streams.length) === 1 ? '' : 's'}${p.showClosed ? ' (closed shown)' : ''}`)),
    p.error ? h(Text, { color: 'red', wrap: 'truncate-end' }, `✗ ${p.error} — retrying every ${seconds(p.intervalMs)}`) : null,
    p.filter || p.filtering ? h(Text, { wrap: 'truncate-end' }, h(Text, { color: 'cyan' }, '/'), p.filter ?? '', p.filtering ? h(Text, { dimColor: true }, '▏ enter keeps, esc clears') : '') : null,
    p.help ? h(HelpPanel) : null,
    p.snapshot
      ? h(
          Box,
          { flexDirection: 'column', marginTop: 1 },
          h(StreamTable, { streams, selected: p.selected, maxRows, more: p.snapshot.moreStreams, barWidth: barWidthFor(p.columns), idWidth: idWidthFor(p.columns), ...(p.filter && all.length ? { empty: `no stream id contains "${p.filter}"` } : !p.showClosed ? { empty: 'no open streams (c shows closed ones)' } : {}) }),
          p.detailOpen ? h(DetailPanel, { row: streams[p.selected], detail: p.detail, error: p.detailError }) : null,
          collapseHooks && !p.hookFocus ? h(WebhookSummary, { webhooks: hooks }) : h(WebhookPanel, { webhooks: hooks, ...(p.hookFocus ? { selectedId: p.hookId ?? null } : {}) }),
          p.hookOpen && p.hookId ? h(HookDetailPanel, { id: p.hookId, detail: p.hookDetail ?? null, error: p.hookError ?? null }) : null,
        )
      : h(Box, { marginTop: 1 }, h(Text, { dimColor: true }, p.error ? 'no data yet' : 'loading…')),
    h(
      Box,
      { marginTop: 1 },
      h(
        Text,
        { dimColor: true, wrap: 'truncate-end' },
        // fits 80 columns up to "q quit"; the refresh time may be cut
        `↑/↓ select  enter ${p.detailOpen || p.hookOpen ? 'close' : 'details'}  tab ${p.hookFocus ? 'streams' : 'hooks'}  / filter  c closed  ? keys  q quit   `,
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
  const [filter, setFilter] = useState('');
  const [filtering, setFiltering] = useState(false);
  const [showClosed, setShowClosed] = useState(false);
  const [help, setHelp] = useState(false);
  const [hookFocus, setHookFocus] = useState(false);
  const [hookId, setHookId] = useState<string | null>(null);
  const [hookOpen, setHookOpen] = useState(false);
  const [hookDetail, setHookDetail] = useState<HookDetail | null>(null);
  const [hookError, setHookError] = useState<string | null>(null);
  const hook = useRef<{ focus: boolean; id: string | null; open: boolean }>({ focus: false, id: null, open: false });

  // The refresh loop reads the current selection through refs, and `kick` refreshes at once (enter, moves).
  // Keys read and write these refs, not state: several keys can arrive before React draws (typed fast, pasted).
  const want = useRef<{ open: boolean; id: string | null; closed: boolean; filter: string; filtering: boolean }>({ open: false, id: null, closed: false, filter: '', filtering: false });
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
          const s = await fetchSnapshot(client, { closed: want.current.closed });
          if (stopped) return;
          setSnapshot(s);
          setError(null);
          setLastRefresh(new Date());
          // Default to the first stream; keep the selection if it still exists.
          const f = want.current.filter;
          const ids = s.streams.map((r) => r.stream).filter((id) => !f || id.includes(f));
          const id = want.current.id !== null && ids.includes(want.current.id) ? want.current.id : (ids[0] ?? null);
          want.current.id = id;
          setSelectedId(id);
        } catch (err) {
          if (!stopped) setError(messageOf(err));
        }
        const hk = hook.current;
        if (hk.open && hk.id !== null && !stopped) {
          try {
            const d = await client.listDeliveries(hk.id, { limit: HOOK_ATTEMPTS });
            if (!stopped) { setHookDetail({ id: hk.id, health: d.health, attempts: d.data as Json[] }); setHookError(null); }
          } catch (err) {
            if (!stopped) setHookError(messageOf(err));
          }
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

  const streams = (snapshot?.streams ?? []).filter((r) => !filter || r.stream.includes(filter));
  const selected = Math.max(0, streams.findIndex((s) => s.stream === selectedId));

  // Keys read the latest rows through a ref: a key can arrive after a refresh was drawn but before React re-subscribes
  // the input handler (passive effects run later), and a stale handler would move within an older list.
  const latest = useRef({ streams, selected });
  latest.current = { streams, selected };
  const latestHooks = useRef<WebhookRow[]>([]);
  latestHooks.current = snapshot?.webhooks ?? [];
  const latestAll = useRef<StreamRow[]>([]);
  latestAll.current = snapshot?.streams ?? [];

  const move = useCallback((by: number) => {
    const { streams: rows, selected: at } = latest.current;
    const to = by === -Infinity ? 0 : by === Infinity ? rows.length - 1 : at + by;
    const row = rows[Math.min(Math.max(0, to), rows.length - 1)];
    if (!row) return;
    want.current.id = row.stream;
    latest.current = { streams: rows, selected: rows.indexOf(row) };
    setSelectedId(row.stream);
    if (want.current.open) kickRef.current();
  }, []);

  const applyFilter = (f: string) => {
    want.current.filter = f;
    setFilter(f);
    const first = latestAll.current.find((r) => !f || r.stream.includes(f));
    if (first && !(want.current.id && want.current.id.includes(f))) { want.current.id = first.stream; setSelectedId(first.stream); }
  };

  useInput((input, key) => {
    const typing = (on: boolean) => { want.current.filtering = on; setFiltering(on); };
    if (want.current.filtering) {
      // Typing a filter: every printable key is part of it.
      if (key.escape) { typing(false); return applyFilter(''); }
      if (key.return) return typing(false);
      if (key.backspace || key.delete) return applyFilter(want.current.filter.slice(0, -1));
      if (input && !key.ctrl && !key.meta && !key.upArrow && !key.downArrow) return applyFilter(want.current.filter + input);
      return;
    }
    if (input === 'q') return exit();
    if (input === '?') return setHelp((x) => !x);
    if (input === '/') return typing(true);
    if (input === 'c') {
      want.current.closed = !want.current.closed;
      setShowClosed(want.current.closed);
      return kickRef.current();
    }
    if (key.tab) {
      hook.current.focus = !hook.current.focus;
      setHookFocus(hook.current.focus);
      const hooks = latestHooks.current;
      if (hook.current.focus && !hooks.some((w) => w.id === hook.current.id)) { hook.current.id = hooks[0]?.id ?? null; setHookId(hook.current.id); }
      if (!hook.current.focus) { hook.current.open = false; setHookOpen(false); }
      return;
    }
    if (hook.current.focus) {
      const hooks = latestHooks.current;
      const at = Math.max(0, hooks.findIndex((w) => w.id === hook.current.id));
      const pick = (i: number) => { const w = hooks[Math.min(Math.max(0, i), hooks.length - 1)]; if (w) { hook.current.id = w.id; setHookId(w.id); if (hook.current.open) kickRef.current(); } };
      if (key.upArrow || input === 'k') return pick(at - 1);
      if (key.downArrow || input === 'j') return pick(at + 1);
      if (key.return || (key.escape && hook.current.open)) {
        hook.current.open = key.escape ? false : !hook.current.open;
        setHookOpen(hook.current.open);
        if (hook.current.open) kickRef.current();
        return;
      }
    }
    if (key.home) return move(-Infinity);
    if (key.end) return move(Infinity);
    if (key.escape && !want.current.open && (want.current.filter || help)) { setHelp(false); return applyFilter(''); }
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

  return h(WatchView, { url, intervalMs, snapshot, error, lastRefresh, selected, detailOpen, detail, detailError, rows: stdout.rows || 24, columns: stdout.columns || 80, filter, filtering, showClosed, help, hookFocus, hookId, hookOpen, hookDetail, hookError });
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
  // The alternate screen (like less, top): the last frame does not stay in the scrollback when the view ends.
  const out = o.stdout ?? process.stdout;
  const alt = !o.debug && !!out.isTTY;
  const leave = () => { if (alt) out.write('\x1b[?1049l'); };
  if (alt) {
    out.write('\x1b[?1049h\x1b[H');
    process.once('exit', leave); // also when ctrl-c ends the process
  }
  try {
    await renderApp(o);
  } finally {
    leave();
    process.removeListener('exit', leave);
  }
}

async function renderApp(o: RunWatchOptions): Promise<void> {
  const app = render(h(WatchApp, { client: o.client, url: o.url, intervalMs: o.intervalMs }), {
    ...(o.stdout ? { stdout: o.stdout } : {}),
    ...(o.stdin ? { stdin: o.stdin } : {}),
    ...(o.debug ? { debug: true } : {}),
    ...(o.debug || o.stdout ? { patchConsole: false } : {}), // a fake terminal (tests): leave the real console alone
    exitOnCtrlC: true,
  });
  await app.waitUntilExit();
}
