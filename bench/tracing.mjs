// bench/tracing: GET /v1/streams/{id}/headroom with OpenTelemetry traces on at 100 % sampling
// (OTEL_TRACES_SAMPLER=always_on, OTLP/HTTP protobuf, the default) vs off (no OTEL_* variable: nothing loaded), the
// same data dir and daemon flags, autocannon in this process. The collector is a trivial local HTTP server here that
// drains each export and answers 200. The daemon is restarted for each side (one per data dir), rounds alternate
// which side goes first; prints medians and the median per-round ratios.
// Two rates per side: requests/s (wall clock) and requests per CPU-second of the daemon process (utime + stime from
// /proc: its capacity on one core, exporting included). On this shared 2-core machine the wall rate swings with the
// neighbours' load (rounds of one run measured 0.61 to 0.95); the CPU-normalized rate does not, so it carries the
// target. For the record, the same with 10 % of traces sampled (parentbased_traceidratio 0.1): what an operator who
// cannot afford every trace would run. Target (issue #23): on at 100 % >= 0.85 x off.
// Five rounds by default: a round is ~20 s, and on this machine one or two rounds of a run can fall on a busy
// neighbour (rounds of one run measured 0.60 to 0.93); the median of five is moved only when three of them are.
// Env: BENCH_ROUNDS (5), BENCH_SECONDS (4), BENCH_CONNECTIONS (50).
import { createServer } from 'node:http';
import { report, result } from './lib/report.mjs';
import { cpuSeconds, fmt, median, prepare } from './lib/setup.mjs';

const ROUNDS = Number(process.env.BENCH_ROUNDS ?? 5);
const SECONDS = Number(process.env.BENCH_SECONDS ?? 4);
const CONNECTIONS = Number(process.env.BENCH_CONNECTIONS ?? 50);
const TARGET = 0.85;

// Tracing is this bench's choice: the caller's own OTEL_* variables would turn it on in the "off" daemon too.
for (const k of Object.keys(process.env)) if (k.startsWith('OTEL_')) delete process.env[k];
const { default: autocannon } = await import('autocannon');
let spans = 0; // export requests received (each a batch of up to 4096 spans, the daemon's default)
let bytes = 0;
const collector = createServer((req, res) => {
  req.on('data', (c) => { bytes += c.length; });
  req.on('end', () => { spans++; res.writeHead(200, { 'content-type': 'application/x-protobuf' }).end(); });
});
await new Promise((r) => collector.listen(0, '127.0.0.1', r));
const ON = {
  OTEL_EXPORTER_OTLP_ENDPOINT: `http://127.0.0.1:${collector.address().port}`,
  OTEL_TRACES_SAMPLER: 'always_on',
  OTEL_SERVICE_NAME: 'node-svc-bench',
};
const SAMPLED = { ...ON, OTEL_TRACES_SAMPLER: 'parentbased_traceidratio', OTEL_TRACES_SAMPLER_ARG: '0.1' };
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

  /** One side: a fresh daemon (tracing off, on, or sampled), warmed, then SECONDS of autocannon; stopped after. */
  const side = async (name) => {
    const on = name !== 'off';
    const before = { spans, bytes };
    const d = await p.daemon([], SIDES[name]);
    try {
      const target = { url: `${d.url}/v1/streams/traced/headroom`, headers: p.auth, connections: CONNECTIONS, pipelining: 1 };
      await autocannon({ ...target, duration: 2 }); // JIT, statements, the exporter's first batches
      const cpu0 = cpuSeconds(d.child.pid);
      const r = await autocannon({ ...target, duration: SECONDS });
      const cpu = cpuSeconds(d.child.pid) - cpu0;
      const bad = r.non2xx + r.errors + r.timeouts;
      if (bad) throw new Error(`${name}: ${r.non2xx} non-2xx, ${r.errors} errors, ${r.timeouts} timeouts of ${r.requests.total}`);
      return { rps: r.requests.average, perCpu: r.requests.total / cpu, p99: r.latency.p99 };
    } finally {
      await p.stop(d.child); // flushes what is buffered
      if (on && spans === before.spans) throw new Error('tracing on, but the collector received no export');
      if (!on && spans !== before.spans) throw new Error('tracing off, but the collector received an export');
    }
  };

  const res = { off: [], on: [], sampled: [], ratio: [], wall: [], sampledRatio: [] };
  for (let k = 0; k < ROUNDS; k++) {
    const order = k % 2 ? ['sampled', 'on', 'off'] : ['off', 'on', 'sampled'];
    const got = {};
    for (const name of order) got[name] = await side(name);
    for (const name of order) res[name].push(got[name]);
    res.ratio.push(got.on.perCpu / got.off.perCpu);
    res.wall.push(got.on.rps / got.off.rps);
    res.sampledRatio.push(got.sampled.perCpu / got.off.perCpu);
  }
  const ratio = median(res.ratio);
  const wall = median(res.wall);
  const sampled = median(res.sampledRatio);
  const line = (label, runs) =>
    `  ${label.padEnd(44)}${fmt(median(runs.map((x) => x.perCpu))).padStart(7)}/CPU-s ${fmt(median(runs.map((x) => x.rps))).padStart(7)}/s   p99 ${median(runs.map((x) => x.p99)).toFixed(1)} ms`;
  console.log(`bench/tracing  GET headroom, loopback, connections=${CONNECTIONS} ${SECONDS}s x rounds=${ROUNDS} (medians)`);
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
