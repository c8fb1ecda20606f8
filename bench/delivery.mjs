// bench/delivery: webhook delivery throughput and latency of the real delivery worker against a loopback receiver
// (issue #22, DESIGN §15: sustained deliveries/s >= 0.5 x the raw keep-alive POST rate to the same receiver, every
// attempt durably recorded; p95 event->delivery < 10 ms at 1,000 events/s over 10 subscriptions; §13: daemon RSS <= 120 MB).
//
// Three processes on this machine: the receiver (bench/lib/delivery-receiver.mjs, node:http, answers 204), the daemon
// (bench/lib/delivery-daemon.mjs: startDaemon from dist/daemon.js, events recorded in that process through
// recordEvent inside write transactions, as the service layer does) and this one, which drives both over IPC, sends
// the raw baseline and watches the store through its own read-only connection. The data dir is prepared with the
// CLI (nodes add, tokens issue); the subscription is made with POST /v1/webhooks.
//
// Rounds alternate baseline and subject: raw keep-alive POSTs for BENCH_RAW_S seconds (undici Agent, 128 in flight,
// an envelope-sized body), then BENCH_N events in transactions of BENCH_BATCH, timed from the first record until
// the store shows none pending (all delivered, attempts committed). Medians over BENCH_ROUNDS, ratio per round.
// Then BENCH_RATE events/s for BENCH_PACED_S seconds over BENCH_SUBS subscriptions, read as the issue states it:
// the events are spread over the subscriptions (BENCH_SUBS more nodes, one subscription each, events in turn:
// 1,000 events/s are 1,000 deliveries/s, 100 per subscription), not each event fanned out to all of them (that would
// be 10,000 deliveries/s; the burst above measures fan-out). One event per transaction, open loop (each transaction
// begins at its time, overlapping ones commit together, as concurrent requests' do; the rate produced is checked): latency = receiver's receive time
// minus the time just before the event's transaction (clocks of the two processes compared over IPC). BENCH_PACED_RUNS
// (3) such runs; the run whose p95 is their median gives the latency figures and the rate produced.
// Daemon RSS: sampled from /proc every 50 ms and VmHWM. Knobs: BENCH_SUBS, BENCH_CPU_PROF=<dir> (daemon .cpuprofile),
// BENCH_DAEMON_EXEC_ARGV (flags for the daemon's node), BENCH_DIST=<dir> (a candidate build's dist/), BENCH_TRACE=1.
// The machine must be otherwise idle: the latency tail follows fsync and CPU contention directly.
import { execFileSync, fork } from 'node:child_process';
import { mkdtempSync, readFileSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { Agent, request } from 'undici';
import { envelopeBody } from '../dist/domain/events.js';
import { newId } from '../dist/domain/ids.js';
import { openSqliteStore as openStore } from '../dist/store/db.js';
import { report, result } from './lib/report.mjs';

// 20,000 deliveries per round whatever the number of subscriptions.
const N = Number(process.env.BENCH_N ?? Math.ceil(20_000 / Number(process.env.BENCH_SUBS ?? 10)));
const BATCH = Number(process.env.BENCH_BATCH ?? 100);
const ROUNDS = Number(process.env.BENCH_ROUNDS ?? 3);
const RAW_S = Number(process.env.BENCH_RAW_S ?? 3);
const RAW_CONCURRENCY = Number(process.env.BENCH_RAW_CONCURRENCY ?? 128); // the worker's default global concurrency
const RATE = Number(process.env.BENCH_RATE ?? 1000);
const PACED_S = Number(process.env.BENCH_PACED_S ?? 10);
const PACED_RUNS = Number(process.env.BENCH_PACED_RUNS ?? 3);
const SUBS = Number(process.env.BENCH_SUBS ?? 10);
const CPU_PROF = process.env.BENCH_CPU_PROF; // a directory: the daemon process writes a .cpuprofile there
const DAEMON_ARGV = (process.env.BENCH_DAEMON_EXEC_ARGV ?? '').split(' ').filter(Boolean); // e.g. V8 flags for the daemon
const NODE = 'bench-node';
const LIB = (f) => fileURLToPath(new URL(`./lib/${f}`, import.meta.url));
const BIN = fileURLToPath(new URL('../bin/node-svc', import.meta.url));

const now = () => performance.timeOrigin + performance.now();
const sleep = (ms) => new Promise((r) => setTimeout(r, ms));
const median = (xs) => [...xs].sort((a, b) => a - b)[Math.floor(xs.length / 2)];
const pct = (sorted, p) => sorted[Math.min(sorted.length - 1, Math.ceil((p / 100) * sorted.length) - 1)];
const fmt = (n) => Math.round(n).toLocaleString('en-US');

const env = Object.fromEntries(Object.entries(process.env).filter(([k]) => !k.startsWith('NODE_SVC_')));
const children = [];
const root = mkdtempSync(join(tmpdir(), 'node-svc-bench-delivery-'));
const dataDir = join(root, 'data');
let store;

/** A forked helper with request/response over IPC. */
async function spawnChild(file, args, extra = {}) {
  const child = fork(file, args, { env: { ...env, NODE_SVC_LOG_LEVEL: 'warn' }, stdio: ['ignore', 'inherit', 'inherit', 'ipc'], ...extra });
  children.push(child);
  let seq = 0;
  const waiting = new Map();
  let exited = false;
  const ready = new Promise((resolve, reject) => {
    child.once('exit', (code, sig) => {
      exited = true;
      const err = new Error(`${file} exited (${code ?? sig})`);
      reject(err);
      for (const w of waiting.values()) w.reject(err);
      waiting.clear();
    });
    child.on('message', (m) => {
      if (m.ready) return resolve(m);
      const w = waiting.get(m.re);
      if (!w) return;
      waiting.delete(m.re);
      if (m.error) w.reject(new Error(m.error));
      else w.resolve(m);
    });
  });
  const info = await Promise.race([ready, sleep(20_000).then(() => { throw new Error(`${file} did not start in 20 s`); })]);
  const call = (cmd, args = {}, timeoutMs = 120_000) => {
    if (exited) return Promise.reject(new Error(`${file} is not running`));
    const re = ++seq;
    return new Promise((resolve, reject) => {
      const t = setTimeout(() => { waiting.delete(re); reject(new Error(`${file}: ${cmd} took over ${timeoutMs} ms`)); }, timeoutMs);
      waiting.set(re, { resolve: (v) => { clearTimeout(t); resolve(v); }, reject: (e) => { clearTimeout(t); reject(e); } });
      child.send({ cmd, re, ...args });
    });
  };
  const waitExit = (ms) => (exited ? Promise.resolve(true) : Promise.race([new Promise((r) => child.once('exit', () => r(true))), sleep(ms).then(() => false)]));
  return { child, info, call, waitExit, get exited() { return exited; } };
}

/** Offset of a child's clock from ours (ms), from the IPC ping with the smallest round trip. */
async function clockOffset(c) {
  let best = { rtt: Infinity, off: 0 };
  for (let i = 0; i < 15; i++) {
    const a = now();
    const { t } = await c.call('clock');
    const b = now();
    if (b - a < best.rtt) best = { rtt: b - a, off: t - (a + b) / 2 };
  }
  return best;
}

/** Peak and current RSS of a process, MB, from /proc (VmHWM is the high-water mark over its life). */
function rssOf(pid) {
  const s = readFileSync(`/proc/${pid}/status`, 'utf8');
  const kb = (k) => Number(new RegExp(`^${k}:\\s+(\\d+) kB`, 'm').exec(s)?.[1] ?? NaN);
  return { peak: kb('VmHWM') / 1024, now: kb('VmRSS') / 1024 };
}

async function cleanup() {
  for (const c of children.splice(0)) {
    if (c.exitCode !== null || c.signalCode !== null) continue;
    c.kill('SIGTERM');
    const gone = await Promise.race([new Promise((r) => c.once('exit', () => r(true))), sleep(5000).then(() => false)]);
    if (!gone) c.kill('SIGKILL');
  }
  try { store?.close(); } catch { /* already closed */ }
  rmSync(root, { recursive: true, force: true });
}
for (const sig of ['SIGINT', 'SIGTERM']) process.once(sig, () => { cleanup().finally(() => process.exit(130)); });

try {
  await main();
} catch (err) {
  console.error(`bench/delivery failed: ${err?.stack ?? err}`);
  process.exitCode = 1;
} finally {
  await cleanup();
}

async function main() {
  // ---- the store, with the CLI ----
  const cli = (...args) => execFileSync(process.execPath, [BIN, ...args, '--data-dir', dataDir, '--json'], { env, encoding: 'utf8' });
  cli('nodes', 'add', NODE);
  const { token } = JSON.parse(cli('tokens', 'issue', NODE));

  // ---- receiver and daemon, each its own process ----
  const receiver = await spawnChild(LIB('delivery-receiver.mjs'), []);
  const hookUrl = `http://127.0.0.1:${receiver.info.port}/hook`;
  const daemon = await spawnChild(LIB('delivery-daemon.mjs'), [dataDir], { execArgv: [...DAEMON_ARGV, ...(CPU_PROF ? ['--cpu-prof', '--cpu-prof-dir', CPU_PROF] : [])] });
  const daemonPid = daemon.child.pid;
  let peakRss = 0;
  const trace = process.env.BENCH_TRACE ? (label) => { const x = rssOf(daemonPid); console.error(`  [trace] ${label}: daemon rss ${x.now.toFixed(1)} MB, high-water ${x.peak.toFixed(1)} MB`); } : () => {};
  trace('started');
  const rssTimer = setInterval(() => { try { peakRss = Math.max(peakRss, rssOf(daemonPid).now); } catch { /* exited */ } }, 50);
  rssTimer.unref();

  for (let i = 0; i < SUBS; i++) {
    const res = await request(`${daemon.info.url}/v1/webhooks`, {
      method: 'POST',
      headers: { authorization: `Bearer ${token}`, 'content-type': 'application/json' },
      body: JSON.stringify({ url: `${hookUrl}/${i + 1}`, events: ['budget.halted'], description: `bench ${i + 1}` }),
    });
    const text = await res.body.text();
    if (res.statusCode !== 201) throw new Error(`POST /v1/webhooks answered ${res.statusCode}: ${text}`);
  }

  // The paced phase's nodes: one subscription each, on paths of their own.
  const pacedNodes = [];
  for (let i = 0; i < SUBS; i++) {
    const node = `${NODE}-p${i + 1}`;
    cli('nodes', 'add', node);
    const t = JSON.parse(cli('tokens', 'issue', node)).token;
    const res = await request(`${daemon.info.url}/v1/webhooks`, {
      method: 'POST',
      headers: { authorization: `Bearer ${t}`, 'content-type': 'application/json' },
      body: JSON.stringify({ url: `${hookUrl}/p${i + 1}`, events: ['budget.halted'], description: `bench paced ${i + 1}` }),
    });
    const text = await res.body.text();
    if (res.statusCode !== 201) throw new Error(`POST /v1/webhooks answered ${res.statusCode}: ${text}`);
    pacedNodes.push(node);
  }

  // Our own read-only connection: what it sees is committed.
  store = openStore(dataDir, { readonly: true });
  const pendingQ = store.db.prepare("SELECT COUNT(*) FROM deliveries WHERE status = 'pending'").pluck();
  const deliveredQ = store.db.prepare("SELECT COUNT(*) FROM deliveries WHERE status = 'delivered'").pluck();
  const otherQ = store.db.prepare("SELECT status, COUNT(*) AS n FROM deliveries WHERE status NOT IN ('pending', 'delivered') GROUP BY status");
  const attemptsQ = store.db.prepare("SELECT COUNT(*) FROM delivery_attempts WHERE outcome = 'delivered'").pluck();

  let recorded = 0; // events recorded so far
  let expected = 0; // the deliveries they make (a burst's event fans out to SUBS; a paced one goes to one)
  /** Wait until the receiver has `unique` deliveries (since its last reset), then until the store shows none pending. Bounded. */
  async function drained(unique, limitMs = 120_000) {
    const until = now() + limitMs;
    let atReceiver = NaN;
    while (now() < until) {
      const c = await receiver.call('count');
      if (c.unique >= unique) { atReceiver = now(); break; }
      await sleep(5);
    }
    if (Number.isNaN(atReceiver)) throw new Error(`receiver did not get all ${unique} deliveries within ${limitMs} ms`);
    while (now() < until) {
      if (pendingQ.get() === 0) return { atReceiver, atStore: now() };
      await sleep(2);
    }
    throw new Error(`deliveries still pending after ${limitMs} ms`);
  }

  // ---- raw baseline: keep-alive POSTs of an envelope-sized body, 128 in flight, from this process ----
  const sampleBody = envelopeBody({ id: newId('evt'), type: 'budget.halted', occurredAt: new Date().toISOString(), externalRef: 'budget:b12345', data: { budget: 'b12345', reason: 'anomaly' } }, '1.1.0');
  const rawAgent = new Agent({ connections: RAW_CONCURRENCY, keepAliveTimeout: 30_000 });
  let rawSeq = 0;
  async function raw(seconds) {
    await receiver.call('reset');
    const end = performance.now() + seconds * 1000;
    let done = 0;
    const t0 = performance.now();
    const lane = async () => {
      while (performance.now() < end) {
        const res = await request(hookUrl, {
          method: 'POST',
          headers: { 'content-type': 'application/json', 'x-service-event-id': `raw-${++rawSeq}` },
          body: sampleBody,
          dispatcher: rawAgent,
        });
        await res.body.dump();
        if (res.statusCode !== 204) throw new Error(`receiver answered ${res.statusCode}`);
        done++;
      }
    };
    await Promise.all(Array.from({ length: RAW_CONCURRENCY }, lane));
    const rate = done / ((performance.now() - t0) / 1000);
    await receiver.call('reset');
    return rate;
  }

  async function sustained(n) {
    await receiver.call('reset');
    const r = await daemon.call('burst', { node: NODE, n, batch: BATCH });
    recorded += n;
    expected += n * SUBS;
    const d = await drained(n * SUBS);
    return { rate: (n * SUBS) / ((d.atStore - r.t0) / 1000), recordRate: n / ((r.t1 - r.t0) / 1000), receiverRate: (n * SUBS) / ((d.atReceiver - r.t0) / 1000) };
  }

  // ---- warm-up (JIT, connections, page cache), then alternating rounds ----
  await raw(1);
  await sustained(Math.min(N, 2000));
  trace('warm-up done');
  const r = { raw: [], sus: [], rec: [], recv: [], ratio: [] };
  for (let k = 0; k < ROUNDS; k++) {
    const a = await raw(RAW_S);
    const s = await sustained(N);
    trace(`round ${k + 1} done`);
    r.raw.push(a); r.sus.push(s.rate); r.rec.push(s.recordRate); r.recv.push(s.receiverRate); r.ratio.push(s.rate / a);
  }
  await rawAgent.close();

  // ---- latency at a steady rate, one event per transaction; PACED_RUNS runs, the median run's figures ----
  // A p95 over 10 s is moved by one half-second stall anywhere in the machine (a run of 2026-11-27: p95 314 ms, max
  // 501 ms, half the events late from the daemon's own producer; 2.4-4.6 ms in the runs before and after): the run
  // whose p95 is the median of three carries the figures, and every run's p95 is printed.
  const paced = [];
  let pacedDuplicates = 0;
  let pacedUnsigned = 0;
  for (let k = 0; k < PACED_RUNS; k++) {
    await receiver.call('reset');
    const offD = await clockOffset(daemon);
    const offR = await clockOffset(receiver);
    const p = await daemon.call('paced', { nodes: pacedNodes, rate: RATE, seconds: PACED_S }, (PACED_S + 60) * 1000);
    trace(`paced run ${k + 1} done`);
    recorded += p.records.length;
    expected += p.records.length;
    await drained(p.records.length, 60_000);
    const { times } = await receiver.call('times', { ids: p.records.map(([id]) => id) });
    const c = await receiver.call('count');
    pacedDuplicates += c.duplicates;
    pacedUnsigned += c.unsigned;
    const lat = p.records.map(([, t], i) => (times[i] - offR.off) - (t - offD.off)).sort((a, b) => a - b);
    paced.push({ lat, p95: pct(lat, 95), n: p.records.length, late: p.late, achieved: p.records.length / ((p.t1 - p.t0) / 1000), offD, offR });
  }
  const run = [...paced].sort((a, b) => a.p95 - b.p95)[Math.floor(paced.length / 2)];
  const { lat, achieved, offD, offR } = run;

  // ---- durability and totals ----
  const stats = await daemon.call('stats');
  const rss = rssOf(daemonPid);
  peakRss = Math.max(peakRss, rss.now);
  const delivered = deliveredQ.get();
  const others = otherQ.all();
  const deliveredAttempts = attemptsQ.get();

  console.log(`bench/delivery  loopback receiver, ${SUBS} subscription(s), events recorded in the daemon process via recordEvent (medians of ${ROUNDS} rounds)`);
  console.log(`  raw keep-alive POST (undici, ${RAW_CONCURRENCY} in flight, ${Buffer.byteLength(sampleBody)} B body)  ${fmt(median(r.raw))}/s`);
  console.log(`  worker, ${fmt(N)} events in transactions of ${BATCH}, until none pending  ${fmt(median(r.sus))} deliveries/s   ratio ${median(r.ratio).toFixed(2)}  (target >= 0.5)`);
  console.log(`    recording alone ${fmt(median(r.rec))} events/s; receiver had all at ${fmt(median(r.recv))}/s; per round ${r.sus.map(fmt).join(', ')} vs raw ${r.raw.map(fmt).join(', ')}`);
  console.log(`  latency event->delivery at ${RATE} events/s spread over ${SUBS} subscriptions of ${SUBS} nodes for ${PACED_S} s, median of ${PACED_RUNS} runs by p95 (${fmt(run.n)} events, achieved ${achieved.toFixed(0)}/s, ${run.late} late)  p50 ${lat.length ? pct(lat, 50).toFixed(2) : '-'} ms  p95 ${pct(lat, 95).toFixed(2)} ms  p99 ${pct(lat, 99).toFixed(2)} ms  max ${lat[lat.length - 1].toFixed(2)} ms  (target p95 < 10 ms; Convoy publishes ~124 ms)`);
  console.log(`    p95 per run: ${paced.map((x) => `${x.p95.toFixed(2)} ms (${x.late} late)`).join(', ')}`);
  console.log(`    clock offsets vs bench: daemon ${offD.off.toFixed(3)} ms (rtt ${offD.rtt.toFixed(3)}), receiver ${offR.off.toFixed(3)} ms (rtt ${offR.rtt.toFixed(3)}); corrected`);
  console.log(`  daemon peak RSS ${peakRss.toFixed(1)} MB sampled, ${rss.peak.toFixed(1)} MB VmHWM  (target <= 120 MB)`);
  const ok = delivered === expected && others.length === 0;
  console.log(`  deliveries delivered ${fmt(delivered)} = expected ${fmt(expected)} (events ${fmt(recorded)}): ${ok ? 'yes' : `NO (expected ${fmt(expected)}; other: ${JSON.stringify(others)})`}; delivered attempts ${fmt(deliveredAttempts)}; receiver duplicates ${pacedDuplicates}, unsigned ${pacedUnsigned} (paced runs); worker stats ${JSON.stringify(stats.stats)}`);
  const mb = (x) => (x / 1048576).toFixed(1);
  console.log(`    daemon memory high-water (MB): rss ${mb(stats.mem.rss)}, V8 heap total ${mb(stats.mem.heapTotal)} / used ${mb(stats.mem.heapUsed)}, external ${mb(stats.mem.external)}, array buffers ${mb(stats.mem.arrayBuffers)}`);
  report('delivery', [
    result('worker deliveries / raw keep-alive POSTs', median(r.ratio), 'ratio', ['>=', 0.5]),
    result(`event->delivery p95 at ${RATE}/s`, pct(lat, 95), 'ms', ['<', 10]),
    // The latency holds at the rate asked only if that rate was produced: a producer that fell behind measured less.
    result(`events recorded / ${RATE} asked per second`, achieved / RATE, 'ratio', ['>=', 0.95]),
    result('daemon peak RSS', Math.max(peakRss, rss.peak), 'MB', ['<=', 120]),
    result('every event delivered to every subscription (1 = yes)', ok ? 1 : 0, 'bool', ['>=', 1]),
  ]);
  clearInterval(rssTimer);

  await daemon.call('stop', {}, 30_000);
  await daemon.waitExit(10_000);
  await receiver.call('stop', {}, 5_000).catch(() => undefined);
}
