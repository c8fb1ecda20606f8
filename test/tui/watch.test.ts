// `node-svc watch` against the real daemon: the ink view rendered into a fake terminal (a Writable with columns, rows
// and isTTY, and a raw-mode stdin we type into), and the piped snapshot through the real CLI.
import { execFileSync, spawn } from 'node:child_process';
import { once } from 'node:events';
import { createServer, type AddressInfo, type Server, type Socket, connect } from 'node:net';
import { Readable, Writable } from 'node:stream';
import { stripVTControlCharacters } from 'node:util';
import { afterAll, beforeAll, describe, expect, it, vi } from 'vitest';
import { createClient } from '../../src/sdk/client.js';
import { BIN, json, runCli, tempDataDir, type TempDataDir } from '../helpers/cli.js';
import { clientOf, setupNodes, startDaemon, type RunningDaemon } from '../helpers/daemon.js';
import { issuerKeyPair, mintCredential, payerKeyPair, signVoucher, type KeyPair } from '../helpers/issuer.js';
import { ack, always, startReceiver, type Receiver } from '../helpers/receiver.js';

vi.setConfig({ testTimeout: 60_000, hookTimeout: 60_000 });

// Colours are part of what is tested; chalk reads this when ink is first imported (below, dynamically).
process.env.FORCE_COLOR = '1';
// As the watch command does on a terminal: ink would draw only the last frame when CI is set (.ci/run sets it).
for (const k of ['CI', 'CONTINUOUS_INTEGRATION']) if (k in process.env) process.env[k] = '0';
const tui = await import('../../src/tui/watch.js');
const { render: inkRender } = await import('ink');
const React = (await import('react')).default;

const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));
const tag = Math.random().toString(36).slice(2, 7);
const ID = { normal: `tui-normal-${tag}`, low: `tui-low-${tag}`, critical: `tui-critical-${tag}`, halted: `tui-halted-${tag}` };
const SGR = { normal: '\x1b[32m', low: '\x1b[33m', critical: '\x1b[31m', halted: '\x1b[90m' }; // green, yellow, red, gray

/** A terminal ink can render into: every frame written in full (debug mode), keys typed into a raw-mode stdin. */
class FakeTerminal {
  frames: string[] = [];
  readonly stdout: Writable & { columns: number; rows: number; isTTY: boolean };
  readonly stdin: Readable & { isTTY: boolean; setRawMode: (on: boolean) => void; ref: () => void; unref: () => void };
  #keys: string[] = [];

  constructor(columns = 200, rows = 60) {
    const self = this;
    this.stdout = Object.assign(
      new Writable({
        write(chunk, _enc, cb) {
          self.frames.push(String(chunk));
          cb();
        },
      }),
      { columns, rows, isTTY: true },
    );
    const keys = this.#keys;
    const stdin = new Readable({ read() {} });
    // ink drains stdin with read() on 'readable'; hand it one typed key per read.
    stdin.read = () => keys.shift() ?? null;
    this.stdin = Object.assign(stdin, { isTTY: true, setRawMode: () => {}, ref: () => {}, unref: () => {} });
  }

  /** The newest frame with styles (ANSI) kept. */
  get raw(): string {
    return this.frames[this.frames.length - 1] ?? '';
  }

  /** The newest frame as plain text. */
  get text(): string {
    return stripVTControlCharacters(this.raw);
  }

  press(key: string): void {
    this.#keys.push(key);
    this.stdin.emit('readable');
  }

  async waitFor(pred: (text: string) => boolean, what: string, timeoutMs = 15_000): Promise<string> {
    const end = Date.now() + timeoutMs;
    while (!pred(this.text)) {
      if (Date.now() > end) throw new Error(`terminal: ${what} not shown within ${timeoutMs} ms; last frame:\n${this.text}`);
      await sleep(25);
    }
    return this.text;
  }
}

const KEY = { up: '\x1b[A', down: '\x1b[B', enter: '\r' };
const lineOf = (text: string, needle: string) => text.split('\n').find((l) => l.includes(needle)) ?? '';

let t: TempDataDir;
let daemon: RunningDaemon;
let token: string;
let issuer: KeyPair;
let payer: KeyPair;
let failing: Receiver;
let healthy: Receiver;
let failingId: string;
let healthyId: string;

beforeAll(async () => {
  [issuer, payer] = await Promise.all([issuerKeyPair(), payerKeyPair()]);
  t = await tempDataDir('node-svc-tui-');
  ({ tokenA: token } = await setupNodes(t.dataDir, issuer));
  // One retry, far away: a failed delivery stays "retrying" for the whole test.
  daemon = await startDaemon(t.dataDir, { env: { NODE_SVC_RETRY_SCHEDULE: '600', NODE_SVC_DELIVERY_TIMEOUT: '2' } });
  const A = clientOf(daemon.url, token);

  [failing, healthy] = await Promise.all([startReceiver(always(500)), startReceiver(ack())]);
  const sub = async (url: string) => {
    const r = await A.post('/v1/webhooks', { url, events: ['stream.exhausted'] });
    expect(r.status, r.text).toBe(201);
    return r.body.id as string;
  };
  failingId = await sub(`${failing.url}/hook`);
  healthyId = await sub(`${healthy.url}/hook`);

  // Four streams in four stages (DESIGN §5): 10 %, 85 %, 96 % and 100 % of a 1,000,000 cap billed.
  const billed: Record<keyof typeof ID, number> = { normal: 100_000, low: 850_000, critical: 960_000, halted: 1_000_000 };
  for (const [stage, stream] of Object.entries(ID) as [keyof typeof ID, string][]) {
    const credential = mintCredential({ key: issuer, payer, claims: { stream, budget: `tui-budget-${tag}`, cap: '1000000', rate: undefined } });
    const v = await A.post('/v1/allowances/verify', { credential });
    expect(v.status, v.text).toBe(200);
    const r = await A.post(`/v1/streams/${stream}/vouchers`, { voucher: signVoucher(payer, { stream, amount: String(billed[stage]), units: '40' }) });
    expect(r.body.accepted, r.text).toBe(true);
    const h = await A.get(`/v1/streams/${stream}/headroom`);
    expect(h.body.degradationStage).toBe(stage);
  }

  // The exhausted stream's event: one subscription acknowledges it, the other answers 500 and waits for its retry.
  for (let i = 0; ; i++) {
    const [f, ok] = await Promise.all([A.get(`/v1/webhooks/${failingId}/deliveries`), A.get(`/v1/webhooks/${healthyId}/deliveries`)]);
    if (f.body.health.retrying === 1 && ok.body.health.delivered === 1) break;
    if (i > 150) throw new Error(`deliveries not settled: ${f.text} ${ok.text}`);
    await sleep(100);
  }
});

afterAll(async () => {
  await daemon?.stop('SIGKILL');
  await Promise.all([failing?.close(), healthy?.close()]);
  await t?.cleanup();
});

describe('watch TUI (ink, fake terminal, real daemon)', () => {
  it('shows every stream with its stage and coloured headroom bar, webhook health and last error; keys select, open details, quit', async () => {
    const term = new FakeTerminal();
    const done = tui.runWatch({
      client: createClient({ url: daemon.url, token }), url: daemon.url, intervalMs: 200,
      stdout: term.stdout as unknown as NodeJS.WriteStream, stdin: term.stdin as unknown as NodeJS.ReadStream, debug: true,
    });

    // Closed streams (the exhausted one) are hidden at start; `c` shows them.
    const open = await term.waitFor((s) => [ID.normal, ID.low, ID.critical].every((id) => s.includes(id)) && s.includes(failingId), 'the open streams');
    expect(open).not.toContain(ID.halted);
    expect(open).toMatch(/c closed/);
    expect(open).toMatch(/3 open streams/);
    term.press('c');
    const text = await term.waitFor((s) => Object.values(ID).every((id) => s.includes(id)) && s.includes(failingId) && s.includes(healthyId), 'all streams and subscriptions');
    for (const [stage, id] of Object.entries(ID) as [keyof typeof ID, string][]) {
      expect(lineOf(text, id), id).toContain(` ${stage} `);
      // the stage word and the bar's filled cells carry the stage's colour
      const raw = lineOf(term.raw, id);
      expect(raw, `${stage} colour`).toContain(`${SGR[stage]}${stage}`);
      expect(raw, `${stage} bar`).toMatch(new RegExp(`${SGR[stage].replace('[', '\\[')}█+`));
    }
    // remaining, finality, final, unsettled of the low stream (money via formatMicro, never a float)
    expect(lineOf(text, ID.low)).toMatch(/85\.0%\s+0\.150000 USDC\s+none\s+0\.000000\s+0\.850000/);
    expect(lineOf(text, ID.halted)).toMatch(/100\.0%\s+0\.000000 USDC/);

    // webhook panel: the failing subscription is retrying with its last error, the healthy one delivered
    const lines = text.split('\n');
    const at = (id: string) => lines[lines.findIndex((l) => l.includes(id)) + 1] ?? '';
    expect(at(failingId)).toMatch(/pending 0\s+retrying 1\s+dead 0\s+delivered 0\s+last error: receiver answered HTTP 500/);
    expect(at(healthyId)).toMatch(/pending 0\s+retrying 0\s+dead 0\s+delivered 1\s+no failures/);
    expect(text).toMatch(/refreshed \d\d:\d\d:\d\d · every 0\.2s/);
    expect(text).toContain('q quit');

    // selection starts on the first row; down moves it; enter opens the detail of the selected stream
    const selectedId = (s: string) => Object.values(ID).find((id) => lineOf(s, id).trimStart().startsWith('›'));
    const first = selectedId(text);
    expect(first).toBeDefined();
    term.press(KEY.down);
    const second = selectedId(await term.waitFor((s) => selectedId(s) !== first, 'selection moved'));
    expect(second).toBeDefined();
    term.press(KEY.enter);
    const detail = await term.waitFor((s) => s.includes('billed truth') && s.includes('frontier'), 'detail view');
    const billedOf: Record<string, string> = { [ID.normal]: '0.100000', [ID.low]: '0.850000', [ID.critical]: '0.960000', [ID.halted]: '1.000000' };
    expect(detail).toContain(`${second}  ${Object.entries(ID).find(([, id]) => id === second)![0]}  (`); // the title names the selected stream
    expect(detail).toMatch(new RegExp(`billed truth\\s+${billedOf[second!]!.replace('.', '\\.')} USDC · 40 units · signed \\d{4}-`));
    expect(detail).toMatch(/frontier\s+0\.000000 USDC none/);
    expect(detail).toMatch(/reference\s+-/);
    expect(detail).toMatch(/finality\s+none \(not a credit signal\)/);
    expect(detail).toMatch(/cap\s+1\.000000 USDC/);
    // the detail follows the selection
    term.press(KEY.up);
    await term.waitFor((s) => selectedId(s) === first && new RegExp(`billed truth\\s+${billedOf[first!]!.replace('.', '\\.')} USDC`).test(s), 'detail of the first stream');
    term.press(KEY.enter);
    await term.waitFor((s) => !s.includes('billed truth'), 'detail closed');

    term.press('q');
    await done; // resolves: the app unmounted and its refresh timer is gone
  });

  it('shows an unreachable daemon as an error without crashing, and recovers on a later tick', async () => {
    // A port with nothing on it yet; later a TCP proxy to the daemon appears there.
    const probe = createServer();
    probe.listen(0, '127.0.0.1');
    await once(probe, 'listening');
    const port = (probe.address() as AddressInfo).port;
    await new Promise((r) => probe.close(r));
    const url = `http://127.0.0.1:${port}`;

    const term = new FakeTerminal();
    const done = tui.runWatch({
      client: createClient({ url, token }), url, intervalMs: 150,
      stdout: term.stdout as unknown as NodeJS.WriteStream, stdin: term.stdin as unknown as NodeJS.ReadStream, debug: true,
    });
    const down = await term.waitFor((s) => s.includes('cannot reach the daemon'), 'the error');
    expect(down).toMatch(/✗ cannot reach the daemon at http:\/\/127\.0\.0\.1:\d+ \(connection refused: nothing is listening there\) — retrying every 0\.15s/);
    expect(down).toContain('no data yet');
    await sleep(400); // a few failing ticks later it is still running
    expect(term.text).toContain('cannot reach the daemon');

    const target = new URL(daemon.url);
    const sockets = new Set<Socket>();
    const proxy: Server = createServer((c) => {
      const up = connect(Number(target.port), target.hostname);
      for (const s of [c, up]) { sockets.add(s); s.on('error', () => {}); }
      c.pipe(up).pipe(c);
    });
    proxy.listen(port, '127.0.0.1');
    await once(proxy, 'listening');
    try {
      const up = await term.waitFor((s) => s.includes(ID.critical) && !s.includes('cannot reach'), 'recovery');
      expect(lineOf(up, ID.critical)).toContain('critical');
      term.press('q');
      await done;
    } finally {
      for (const s of sockets) s.destroy();
      await new Promise((r) => proxy.close(r));
    }
  });
});

describe('watch TUI: attention order, filter, totals, keys, alternate screen', () => {
  const start = (term: FakeTerminal, debug = true) =>
    tui.runWatch({
      client: createClient({ url: daemon.url, token }), url: daemon.url, intervalMs: 200,
      stdout: term.stdout as unknown as NodeJS.WriteStream, stdin: term.stdin as unknown as NodeJS.ReadStream, debug,
    });
  const order = (s: string) => s.split('\n').map((l) => Object.values(ID).find((id) => l.includes(id))).filter(Boolean);

  it('critical and halted first, then most recent activity; totals per asset; a failing subscription is not green', async () => {
    const term = new FakeTerminal();
    const done = start(term);
    term.press('c');
    const text = await term.waitFor((s) => Object.values(ID).every((id) => s.includes(id)) && s.includes('TOTAL'), 'all streams');
    const o = order(text);
    // critical and halted (attention) above low and normal; within each group newest activity first (low was billed after normal)
    expect(o.slice(0, 2).sort()).toEqual([ID.critical, ID.halted].sort());
    expect(o.slice(2)).toEqual([ID.low, ID.normal]);
    // 0.1 + 0.85 + 0.96 + 1.0 billed; nothing settled yet
    expect(lineOf(text, 'TOTAL')).toMatch(/USDC: billed 2\.910000\s+unsettled 2\.910000\s+checkpointed 0\.000000\s+final 0\.000000/);
    expect(lineOf(text, failingId)).toMatch(/failing since \d{4}-/);
    expect(lineOf(text, healthyId)).toMatch(/active/);
    term.press('q');
    await done;
  });

  it('/ filters by id (esc clears), ? shows the keys, End/Home jump', async () => {
    const term = new FakeTerminal();
    const done = start(term);
    await term.waitFor((s) => s.includes(ID.critical), 'streams');
    term.press('/');
    for (const ch of ID.low) term.press(ch);
    const filtered = await term.waitFor((s) => !s.includes(ID.normal) && s.includes(ID.low), 'filtered');
    expect(filtered).not.toContain(ID.critical);
    expect(filtered).toMatch(/1 of 3 open streams/);
    term.press(KEY.enter);
    term.press('\x1b');
    await term.waitFor((s) => s.includes(ID.normal) && s.includes(ID.critical), 'filter cleared');
    term.press('?');
    const help = await term.waitFor((s) => s.includes('filter by stream id'), 'help');
    expect(help).toMatch(/Home\/End\s+first \/ last/);
    term.press('?');
    await term.waitFor((s) => !s.includes('filter by stream id'), 'help closed');
    const selected = (s: string) => Object.values(ID).find((id) => lineOf(s, id).trimStart().startsWith('›'));
    term.press('\x1b[F'); // End
    await term.waitFor((s) => selected(s) === ID.normal, 'last row selected');
    term.press('\x1b[H'); // Home
    await term.waitFor((s) => selected(s) === ID.critical, 'first row selected');
    term.press('q');
    await done;
  });

  it('tab drills into a subscription: its recent deliveries, failures and next attempt', async () => {
    const term = new FakeTerminal();
    const done = start(term);
    await term.waitFor((s) => s.includes(failingId) && s.includes(healthyId), 'subscriptions');
    term.press('\t');
    const focused = await term.waitFor((s) => lineOf(s, failingId).trimStart().startsWith('›'), 'first subscription selected');
    expect(focused).toMatch(/tab back to streams/);
    term.press(KEY.enter);
    const panel = await term.waitFor((s) => /TRY\s+STATUS\s+OUTCOME/.test(s), 'deliveries of the failing subscription');
    const attempt = panel.split('\n').find((l) => /\bfailed\b/.test(l) && l.includes('evt_')) ?? '';
    expect(attempt).toMatch(/\s+1\s+500\s+failed\s+next \d{4}-.*receiver answered HTTP 500/);
    expect(panel).toMatch(new RegExp(`${failingId}\\s+0 delivered, 0 pending, 1 retrying, 0 dead`));
    term.press(KEY.down);
    await term.waitFor((s) => new RegExp(`${healthyId}\\s+1 delivered`).test(s), 'the healthy one');
    expect(term.text).toMatch(/\s+1\s+204\s+delivered/);
    term.press('\t');
    await term.waitFor((s) => !/TRY\s+STATUS\s+OUTCOME/.test(s), 'back to streams, panel closed');
    term.press('q');
    await done;
  });

  it('uses extra width for long stream ids, and clips them on a narrow terminal', () => {
    expect(tui.idWidthFor(80)).toBe(28);
    expect(tui.idWidthFor(200)).toBeGreaterThan(tui.idWidthFor(80));
    const long = 'a-stream-id-that-is-longer-than-forty-characters-x';
    const row = { stream: long, budget: 'b', payer: 'p', mode: 'escrow', asset: 'USDC', status: 'open', degradationStage: 'normal' as const, capMicro: '10', billedMicro: '1', remainingCapMicro: '9', finality: 'none' as const, finalMicro: '0', unsettledMicro: '1', expiresAt: '' };
    const wide = new FakeTerminal(200, 30);
    const narrow = new FakeTerminal(80, 30);
    for (const [term, cols] of [[wide, 200], [narrow, 80]] as const) {
      const app = inkRender(React.createElement(tui.StreamTable, { streams: [row], selected: 0, maxRows: 5, barWidth: tui.barWidthFor(cols), idWidth: tui.idWidthFor(cols) }), { stdout: term.stdout as never, debug: true, patchConsole: false });
      app.unmount();
    }
    const all = (t: FakeTerminal) => stripVTControlCharacters(t.frames.join(''));
    expect(all(wide)).toContain(long);
    expect(all(narrow)).not.toContain(long);
    expect(all(narrow)).toContain(`${long.slice(0, 27)}…`);
  });

  it('keeps the header and the keys line on an 80x24 terminal', async () => {
    const term = new FakeTerminal(80, 24);
    const done = start(term);
    const text = await term.waitFor((s) => s.includes(ID.critical) && s.includes('q quit'), 'frame');
    const lines = text.replace(/\n+$/, '').split('\n');
    expect(lines[0]).toMatch(/^node-svc watch/);
    expect(lines.length).toBeLessThanOrEqual(24);
    term.press('q');
    await done;
  });

  it('uses the alternate screen on a terminal, and leaves it on quit', async () => {
    const term = new FakeTerminal();
    const done = start(term, false);
    // Without debug, ink writes diffs: look through everything written so far.
    for (let i = 0; !term.frames.join('').includes(ID.critical); i++) {
      if (i > 300) throw new Error('no frame with the streams');
      await sleep(50);
    }
    term.press('q');
    await done;
    const all = term.frames.join('');
    expect(all.startsWith('\x1b[?1049h')).toBe(true);
    expect(all.lastIndexOf('\x1b[?1049l')).toBeGreaterThan(all.lastIndexOf(ID.critical));
  });
});

const hasScript = (() => {
  try {
    execFileSync('script', ['--version'], { stdio: 'ignore' });
    return true;
  } catch {
    return false;
  }
})();

describe('watch in a real pseudo-terminal (util-linux script)', () => {
  // `script` gives the real CLI a terminal on stdin and stdout; q typed after the first frames ends it.
  const inPty = (env: string) =>
    new Promise<string>((resolve, reject) => {
      // script's terminal starts at 0x0 columns and rows: give it a real size first.
      const cmd = `stty cols 160 rows 50; ${env} "${process.execPath}" "${BIN}" watch --url ${daemon.url} --token ${token}`;
      const child = spawn('script', ['-qfc', cmd, '/dev/null'], { stdio: ['pipe', 'pipe', 'inherit'] });
      let out = '';
      child.stdout.setEncoding('utf8').on('data', (d: string) => { out += d; });
      const timer = setTimeout(() => { child.kill('SIGKILL'); reject(new Error(`watch did not quit: ${out.slice(-500)}`)); }, 30_000);
      const poll = setInterval(() => { if (out.includes(ID.critical)) { clearInterval(poll); child.stdin.write('q'); } }, 100);
      child.once('exit', () => { clearTimeout(timer); clearInterval(poll); resolve(out); });
    });

  it.runIf(hasScript)('honours NO_COLOR (no colour codes at all) and uses the alternate screen either way', async () => {
    const plain = await inPty('NO_COLOR=1');
    expect(plain).toContain(ID.critical);
    expect(plain.match(/\x1b\[[0-9;]*m/g) ?? []).toHaveLength(0);
    const coloured = await inPty('');
    expect((coloured.match(/\x1b\[[0-9;]*m/g) ?? []).length).toBeGreaterThan(10);
    for (const out of [plain, coloured]) {
      expect(out).toContain('\x1b[?1049h');
      expect(out.lastIndexOf('\x1b[?1049l')).toBeGreaterThan(out.lastIndexOf(ID.critical));
    }
  });
});

describe('watch snapshot (real CLI, piped)', () => {
  it('prints one JSON snapshot of streams and webhooks and exits 0', async () => {
    const r = await runCli(['watch', '--url', daemon.url, '--token', token]);
    expect(r.code, r.stderr).toBe(0);
    const out = json<{ streams: Record<string, any>[]; webhooks: Record<string, any>[] }>(r.stdout);
    const byId = new Map(out.streams.map((s) => [s.stream, s]));
    for (const [stage, id] of Object.entries(ID)) expect(byId.get(id), id).toMatchObject({ degradationStage: stage, capMicro: '1000000' });
    expect(byId.get(ID.low)).toMatchObject({ billedMicro: '850000', remainingCapMicro: '150000', finality: 'none', finalMicro: '0', unsettledMicro: '850000' });
    const hooks = new Map(out.webhooks.map((w) => [w.id, w]));
    expect(hooks.get(failingId)).toMatchObject({
      status: 'active', health: { pending: 0, retrying: 1, dead: 0, delivered: 0 },
      lastError: { statusCode: 500, error: 'receiver answered HTTP 500', eventId: expect.stringMatching(/^evt_/) },
    });
    expect(hooks.get(healthyId)).toMatchObject({ health: { retrying: 0, dead: 0, delivered: 1 }, lastError: null });
  });

  it('--json on the CLI gives the same snapshot shape; a bad --interval is a usage error (exit 2)', async () => {
    const r = await runCli(['watch', '--json', '--interval', '0.5', '--url', daemon.url, '--token', token]);
    expect(r.code, r.stderr).toBe(0);
    expect(Object.keys(json(r.stdout))).toEqual(expect.arrayContaining(['streams', 'webhooks']));
    const bad = await runCli(['watch', '--interval', 'soon', '--url', daemon.url, '--token', token]);
    expect(bad.code).toBe(2);
    expect(json(bad.stderr)).toMatchObject({ error: { code: 'usage' } });
  });
});
