// bench/headroom: GET /v1/streams/{id}/headroom at a fixed 2,000 req/s (below saturation) on a stream with no
// voucher history and on one with 50,000 vouchers older than the rate window (the window's anchor must not read
// them all), open loop paced every millisecond. Rounds alternate the two streams; prints median p50/p99 and the
// p99 ratio.
// Targets (issue #22, DESIGN §15): p99 < 5 ms; with 50k vouchers within 2x of the empty stream.
// Env: BENCH_RATE (2000), BENCH_SECONDS (5), BENCH_ROUNDS (3), BENCH_VOUCHERS (50000).
import Database from 'better-sqlite3';
import { Agent, request } from 'node:http';
import { join } from 'node:path';
import { report, result } from './lib/report.mjs';
import { fmt, median, pct, prepare } from './lib/setup.mjs';

const RATE = Number(process.env.BENCH_RATE ?? 2000);
const SECONDS = Number(process.env.BENCH_SECONDS ?? 5);
const ROUNDS = Number(process.env.BENCH_ROUNDS ?? 3);
const VOUCHERS = Number(process.env.BENCH_VOUCHERS ?? 50_000);
const P99_TARGET_MS = 5;
const RATIO_TARGET = 2;

const p = prepare('headroom');
try {
  const d = await p.daemon();
  const post = async (path, body) => {
    const r = await fetch(`${d.url}${path}`, { method: 'POST', headers: { ...p.auth, 'content-type': 'application/json' }, body: JSON.stringify(body) });
    if (r.status !== 200) throw new Error(`POST ${path} → ${r.status} ${await r.text()}`);
    return r.json();
  };
  for (const s of ['empty', 'history']) await post('/v1/allowances/verify', { credential: p.credential(s) });
  // 50k accepted vouchers on "history", all received before the rate window (over the last day), by direct SQL.
  const db = new Database(join(p.dataDir, 'node-svc.db'));
  const now = Date.now();
  db.transaction(() => {
    const ins = db.prepare("INSERT INTO vouchers(node_id, stream, amount_micro, units, signed_at, received_at, voucher) VALUES ('node-a', 'history', ?, ?, ?, ?, 'v')");
    for (let i = 1; i <= VOUCHERS; i++) {
      const at = now - 86_400_000 + Math.floor((i * (86_400_000 - 120_000)) / VOUCHERS);
      ins.run(i * 1000, i * 1000, Math.floor(at / 1000), at);
    }
    db.prepare("UPDATE streams SET billed_micro = ?, billed_units = ? WHERE node_id = 'node-a' AND id = 'history'").run(VOUCHERS * 1000, VOUCHERS * 1000);
  })();
  db.close();
  // One recent voucher on each, through the API: both have a non-zero observed rate inside the window.
  await post('/v1/streams/empty/vouchers', { voucher: p.voucher('empty', 5000) });
  await post('/v1/streams/history/vouchers', { voucher: p.voucher('history', VOUCHERS * 1000 + 5000) });
  for (const s of ['empty', 'history']) {
    const h = await (await fetch(`${d.url}/v1/streams/${s}/headroom`, { headers: p.auth })).json();
    if (h.rate.observedMicroPerSecond === '0') throw new Error(`${s}: no observed rate ${JSON.stringify(h)}`);
  }
  const count = (await (await fetch(`${d.url}/v1/streams/history/finality`, { headers: p.auth })).json()).billedTruth.amountMicro;
  if (count !== String(VOUCHERS * 1000 + 5000)) throw new Error(`history stream not billed as built: ${count}`);

  // Open loop at a fixed rate, paced every millisecond (autocannon's overallRate sends each second's quota in a
  // burst, which measures its own queue): latency is from the moment a request was due to its answer's end.
  const agent = new Agent({ keepAlive: true, maxSockets: 256 });
  const url = new URL(d.url);
  const run = (stream, seconds = SECONDS) =>
    new Promise((resolve, reject) => {
      const lat = [];
      let sent = 0;
      let done = 0;
      let failed = 0;
      const why = new Map(); // what failed: the status code or the socket error's code, counted
      const fail = (what) => { failed++; why.set(what, (why.get(what) ?? 0) + 1); };
      const total = RATE * seconds;
      const t0 = performance.now();
      const one = (due) => {
        const req = request({ host: url.hostname, port: url.port, path: `/v1/streams/${stream}/headroom`, headers: p.auth, agent }, (res) => {
          res.resume();
          res.once('end', () => {
            if (res.statusCode !== 200) fail(`HTTP ${res.statusCode}`);
            lat.push(performance.now() - due);
            if (++done === total) finish();
          });
        });
        req.once('error', (e) => { fail(e.code ?? e.message); if (++done === total) finish(); });
        req.end();
      };
      const finish = () => {
        clearInterval(timer);
        if (failed) return reject(new Error(`${stream}: ${failed} of ${total} requests failed (${[...why].map(([w, n]) => `${w}: ${n}`).join(', ')})`));
        resolve({ rps: total / ((performance.now() - t0) / 1000), p50: pct(lat, 50), p99: pct(lat, 99) });
      };
      const timer = setInterval(() => {
        const due = Math.min(total, Math.floor(((performance.now() - t0) * RATE) / 1000));
        while (sent < due) one(t0 + (++sent * 1000) / RATE);
      }, 1);
    });
  await run('empty', 2);
  await run('history', 2);
  const res = { empty: [], history: [], ratio: [] };
  for (let k = 0; k < ROUNDS; k++) {
    const a = await run('empty');
    const b = await run('history');
    res.empty.push(a);
    res.history.push(b);
    res.ratio.push(b.p99 / a.p99);
  }
  agent.destroy();
  const line = (label, runs) => `  ${label.padEnd(34)}${fmt(median(runs.map((x) => x.rps))).padStart(7)}/s   p50 ${median(runs.map((x) => x.p50)).toFixed(2)} ms   p99 ${median(runs.map((x) => x.p99)).toFixed(2)} ms`;
  const p99e = median(res.empty.map((x) => x.p99));
  const p99h = median(res.history.map((x) => x.p99));
  const ratio = median(res.ratio);
  const okRatio = ratio <= RATIO_TARGET;
  console.log(`bench/headroom  fixed ${fmt(RATE)} req/s, ${SECONDS}s x rounds=${ROUNDS} (medians)`);
  console.log(`${line('stream without voucher history', res.empty)}   (target p99 < ${P99_TARGET_MS} ms) ${p99e < P99_TARGET_MS ? 'ok' : 'MISSED'}`);
  console.log(`${line(`stream with ${fmt(VOUCHERS)} old vouchers`, res.history)}   (target p99 < ${P99_TARGET_MS} ms) ${p99h < P99_TARGET_MS ? 'ok' : 'MISSED'}`);
  console.log(`  p99 ratio ${fmt(VOUCHERS)} vouchers / empty: ${ratio.toFixed(2)} (target <= ${RATIO_TARGET}) ${okRatio ? 'ok' : 'MISSED'}`);
  // The result line (last stdout line; bench/README.md): same targets as above; report() sets exit code 1 on a miss.
  report('headroom', [
    result('headroom p99, stream without voucher history', p99e, 'ms', ['<', P99_TARGET_MS]),
    result(`headroom p99, stream with ${fmt(VOUCHERS)} old vouchers`, p99h, 'ms', ['<', P99_TARGET_MS]),
    result(`p99 ratio ${fmt(VOUCHERS)} vouchers / empty`, ratio, 'ratio', ['<=', RATIO_TARGET]),
  ]);
} finally {
  await p.cleanup();
}
