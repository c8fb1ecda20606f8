// bench/tracing: GET /v1/streams/{id}/headroom with OpenTelemetry traces on at 100 % sampling
// (OTEL_TRACES_SAMPLER=always_on, OTLP/HTTP protobuf, the default) vs off (no OTEL_* variable: nothing loaded), copies
// of one data dir and the same daemon flags, autocannon in this process. The collector is a trivial local HTTP server here that
// drains each export and answers 200. A fresh daemon per side and round; prints medians and the median per-round ratios.
// Two rates per side: requests/s (wall clock) and requests per CPU-second of the daemon process (utime + stime from
// /proc: its capacity on one core, exporting included). On this shared 2-core machine the wall rate swings with the
// neighbours' load (rounds of one run measured 0.61 to 0.95); the CPU-normalized rate does not, so it carries the
// target. For the record, the same with 10 % of traces sampled (parentbased_traceidratio 0.1): what an operator who
// cannot afford every trace would run. Target (issue #23): on at 100 % >= 0.85 x off.
// A round runs the three daemons side by side and measures them in turns of one second (BENCH_SLICE_S), the order
// rotating, SECONDS each in all: when each side ran 4 s on its own, one side of a round could fall on a busy
// neighbour (rounds of one run measured 0.59 to 0.96 on the same code). What turns do not remove is each daemon
// process's own bias: two daemons with tracing off, measured in turns, differ by up to 10 % per CPU-second (measured
// 0.98 and 1.105, also with each pinned to a core). Hence fresh daemons each round and the median of five rounds.
// Env: BENCH_ROUNDS (5), BENCH_SECONDS (4), BENCH_SLICE_S (1), BENCH_CONNECTIONS (50).
import { cpSync } from 'node:fs';
import { createServer } from 'node:http';
import { join } from 'node:path';
import { setTimeout as sleep } from 'node:timers/promises';
import { report, result } from './lib/report.mjs';
import { cpuSeconds, fmt, median, prepare } from './lib/setup.mjs';

const ROUNDS = Number(process.env.BENCH_ROUNDS ?? 5);
const SECONDS = Number(process.env.BENCH_SECONDS ?? 4);
const SLICE_S = Number(process.env.BENCH_SLICE_S ?? 1);
const CONNECTIONS = Number(process.env.BENCH_CONNECTIONS ?? 50);
const TARGET = 0.85;

// Tracing is this bench's choice: the caller's own OTEL_* variables would turn it on in the "off" daemon too.
for (const k of Object.keys(process.env)) if (k.startsWith('OTEL_')) delete process.env[k];
const { default: autocannon } = await import('autocannon');
let spans = 0; // export requests received (each a batch of up to 4096 spans, the daemon's default)
let bytes = 0;
const exportsOf = { on: 0, sampled: 0 }; // by the side's path prefix (its daemon's endpoint)
let strayExports = 0; // under no side's prefix: nothing should send them
const collector = createServer((req, res) => {
  req.on('data', (c) => { bytes += c.length; });
  req.on('end', () => {
    spans++;
    const side = req.url.split('/')[1];
    if (side in exportsOf) exportsOf[side]++;
    else strayExports++;
    res.writeHead(200, { 'content-type': 'application/x-protobuf' }).end();
  });
});
await new Promise((r) => collector.listen(0, '127.0.0.1', r));
const ON = {
  OTEL_EXPORTER_OTLP_ENDPOINT: `http://127.0.0.1:${collector.address().port}/on`,
  OTEL_TRACES_SAMPLER: 'always_on',
  OTEL_SERVICE_NAME: 'node-svc-bench',
};
const SAMPLED = { ...ON, OTEL_EXPORTER_OTLP_ENDPOINT: `http://127.0.0.1:${collector.address().port}/sampled`, OTEL_TRACES_SAMPLER: 'parentbased_traceidratio', OTEL_TRACES_SAMPLER_ARG: '0.1' };
const SIDES = { off: {}, on: ON, sampled: SAMPLED };

const p = prepare('tracing');
try {
  // The stream, registered and billed once through a daemon of its own.
  const setup = await p.daemon();
  const post = async (path, body) => {
    const r = await fetch(`${setup.url}${path}`, { method: 'POST', headers: { ...p.auth, 'content-type': 'application/json' }, body: JSON.stringify(body) });
    if (r.status !== 200) throw new Error(`POST ${path} → ${r.status} ${await r.text()}`);
    return r.json();
  };
  await post('/v1/allowances/verify', { credential: p.credential('traced') });
  await post('/v1/streams/traced/vouchers', { voucher: p.voucher('traced', 5000) });
  await p.stop(setup.child);
  // One data dir per side (a data dir takes one daemon): copies of the stopped one.
  const dirs = { off: p.dataDir };
  for (const name of ['on', 'sampled']) cpSync(p.dataDir, (dirs[name] = join(p.root, `data-${name}`)), { recursive: true });

  /**
   * One side's daemon (tracing off, on, or sampled), started and warmed; `slice()` loads it for SLICE_S seconds. Its
   * CPU is read from after the warm-up (`begin()`) to after the last turn (`end()`): the work it does outside its own
   * turns (a batch exported on the exporter's timer, garbage collection) counts too; an idle daemon adds next to nothing.
   */
  const side = async (name) => {
    const on = name !== 'off';
    const before = exportsOf[name];
    const d = await p.daemon([], SIDES[name], dirs[name]);
    const target = { url: `${d.url}/v1/streams/traced/headroom`, headers: p.auth, connections: CONNECTIONS, pipelining: 1 };
    await autocannon({ ...target, duration: 2 }); // JIT, statements, the exporter's first batches
    const sum = { requests: 0, cpu: 0, seconds: 0, p99: [] };
    let cpu0 = 0;
    return {
      sum,
      begin() { cpu0 = cpuSeconds(d.child.pid); },
      end() { sum.cpu = cpuSeconds(d.child.pid) - cpu0; },
      async slice() {
        const r = await autocannon({ ...target, duration: SLICE_S });
        const bad = r.non2xx + r.errors + r.timeouts;
        if (bad) throw new Error(`${name}: ${r.non2xx} non-2xx, ${r.errors} errors, ${r.timeouts} timeouts of ${r.requests.total}`);
        sum.requests += r.requests.total;
        sum.seconds += r.duration;
        sum.p99.push(r.latency.p99);
      },
      async stop() {
        await p.stop(d.child); // flushes what is buffered
        if (on && exportsOf[name] === before) throw new Error(`tracing ${name}, but the collector received no export from it`);
      },
    };
  };

  // A round: the three daemons side by side, measured in turns of SLICE_S seconds (SECONDS each in all), the order
  // of the turn rotating; each side's rate from its turns summed. Turns of a second interleave the sides within a
  // few seconds, so a neighbour's burst falls on all three instead of deciding one side of the ratio.
  const res = { off: [], on: [], sampled: [], ratio: [], wall: [], sampledRatio: [] };
  const NAMES = ['off', 'on', 'sampled'];
  for (let k = 0; k < ROUNDS; k++) {
    const sides = {};
    let failed;
    try {
      for (const name of NAMES) sides[name] = await side(name);
      await sleep(500); // the warm-ups' last exports and collections, before anything is counted
      for (const name of NAMES) sides[name].begin();
      for (let t = 0; t < Math.ceil(SECONDS / SLICE_S); t++) for (let j = 0; j < 3; j++) await sides[NAMES[(t + j + k) % 3]].slice();
      await sleep(500); // the last turn's tail (its exporter's batch, its collections)
      for (const name of NAMES) sides[name].end();
    } catch (err) {
      failed = err;
    }
    // Every side stopped, whatever happened; the first error is the one reported.
    const stops = await Promise.allSettled(NAMES.filter((n) => sides[n]).map((n) => sides[n].stop()));
    if (failed) throw failed;
    const stopFailed = stops.find((x) => x.status === 'rejected');
    if (stopFailed) throw stopFailed.reason;
    if (strayExports) throw new Error(`the collector received ${strayExports} export(s) from no traced side (tracing off must send none)`);
    const got = Object.fromEntries(NAMES.map((n) => {
      const s = sides[n].sum;
      return [n, { rps: s.requests / s.seconds, perCpu: s.requests / s.cpu, p99: median(s.p99) }];
    }));
    for (const name of NAMES) res[name].push(got[name]);
    res.ratio.push(got.on.perCpu / got.off.perCpu);
    res.wall.push(got.on.rps / got.off.rps);
    res.sampledRatio.push(got.sampled.perCpu / got.off.perCpu);
  }
  const ratio = median(res.ratio);
  const wall = median(res.wall);
  const sampled = median(res.sampledRatio);
  const line = (label, runs) =>
    `  ${label.padEnd(44)}${fmt(median(runs.map((x) => x.perCpu))).padStart(7)}/CPU-s ${fmt(median(runs.map((x) => x.rps))).padStart(7)}/s   p99 ${median(runs.map((x) => x.p99)).toFixed(1)} ms`;
  console.log(`bench/tracing  GET headroom, loopback, connections=${CONNECTIONS}, ${SECONDS} s per side in turns of ${SLICE_S} s x rounds=${ROUNDS} (medians)`);
  console.log(line('tracing off (no OTEL_* variable)', res.off));
  console.log(line('tracing on, always_on, OTLP/HTTP protobuf', res.on));
  console.log(line('tracing on, 10 % sampled', res.sampled));
  console.log(`  per round, on / off per CPU-second: ${res.ratio.map((x) => x.toFixed(2)).join(' ')}; wall: ${res.wall.map((x) => x.toFixed(2)).join(' ')}`);
  console.log(`  on / off per CPU-second ${ratio.toFixed(2)} (target >= ${TARGET}) ${ratio >= TARGET ? 'PASS' : 'MISS'}; wall ${wall.toFixed(2)}; 10 % sampled ${sampled.toFixed(2)}   collector: ${fmt(spans)} exports, ${fmt(bytes / 1e6, 1)} MB`);
  report('tracing', [
    result('GET headroom per daemon CPU-second, traces on (100 % sampled) / off', ratio, 'ratio', ['>=', TARGET]),
    result('GET headroom requests/s (wall), traces on / off', wall, 'ratio'),
    result('GET headroom per daemon CPU-second, 10 % sampled / off', sampled, 'ratio'),
    result('GET headroom p99, traces on', median(res.on.map((x) => x.p99)), 'ms'),
  ]);
} finally {
  await p.cleanup();
  collector.closeAllConnections();
  collector.close();
}
