// bench/lib/delivery-daemon: the daemon of bench/delivery, run as its own process (fork, IPC) so that its RSS and
// CPU are its own. It is the real daemon (startDaemon from dist/daemon.js: API + delivery worker) and records events
// the way the service layer does, with recordEvent inside a write transaction, on the parent's command:
//   burst: N events in transactions of B, back to back (yielding to the event loop between transactions);
//   paced: one event per transaction at a steady rate (open loop: not waiting for earlier commits), the nodes in
//   turn, each with the time just before its transaction began.
// BENCH_DIST (a directory holding a built dist/) runs a candidate build instead of this checkout's dist/.
const dist = process.env.BENCH_DIST ? new URL(`file://${process.env.BENCH_DIST.replace(/\/?$/, '/')}`) : new URL('../../dist/', import.meta.url);
const { startDaemon } = await import(new URL('daemon.js', dist).href);
const { recordEvent } = await import(new URL('store/events.js', dist).href);

const now = () => performance.timeOrigin + performance.now();
const dataDir = process.argv[2];
const d = await startDaemon({ dataDir, host: '127.0.0.1', port: 0, rateLimit: 0 });
const store = d.deps.store;
let k = 0;
const record = (tx, node) => {
  const b = `b${++k}`;
  return recordEvent(tx, node, 'budget.halted', `budget:${b}`, { budget: b, reason: 'anomaly' });
};
const tick = () => new Promise((r) => setImmediate(r));
const sleep = (ms) => new Promise((r) => setTimeout(r, ms));
let stopping = false;
// High-water marks of the process's memory parts, sampled (what makes up the RSS).
const mem = { rss: 0, heapTotal: 0, heapUsed: 0, external: 0, arrayBuffers: 0 };
setInterval(() => { const m = process.memoryUsage(); for (const k of Object.keys(mem)) mem[k] = Math.max(mem[k], m[k]); }, 50).unref();

async function burst({ node, n, batch }) {
  const t0 = now();
  const one = (m) => store.write(async (tx) => { for (let j = 0; j < m; j++) await record(tx, node); });
  for (let i = 0; i < n && !stopping; i += batch) {
    await one(Math.min(batch, n - i));
    await tick();
  }
  return { t0, t1: now() };
}

async function paced({ node, nodes = [node], rate, seconds }) {
  const n = Math.round(rate * seconds);
  const gap = 1000 / rate;
  let turn = 0;
  const one = () => { const node = nodes[turn++ % nodes.length]; return store.write((tx) => record(tx, node)); };
  const out = [];
  let late = 0;
  const start = now() + 5;
  // Open loop, as requests arrive: each event's transaction starts at its time whether or not the ones before it have
  // committed (the store commits the writes that overlap together, as it does for concurrent requests). A closed
  // loop (await each commit before the next) measured the fsync, not the rate: about 300 events/s here.
  const pending = new Set();
  for (let i = 0; i < n && !stopping; i++) {
    const due = start + i * gap;
    const wait = due - now();
    if (wait > 0) await sleep(wait);
    const t = now();
    if (t - due > gap) late++;
    const p = one().then((e) => { out.push([e.id, t]); pending.delete(p); });
    pending.add(p);
    if (pending.size >= 10_000) await Promise.race(pending); // bounded: a store that stalls stops the producer
  }
  await Promise.all(pending);
  return { records: out, late, t0: start, t1: now() };
}

process.on('message', async (m) => {
  try {
    switch (m.cmd) {
      case 'burst': return process.send({ re: m.re, ...(await burst(m)) });
      case 'paced': return process.send({ re: m.re, ...(await paced(m)) });
      case 'clock': return process.send({ re: m.re, t: now() });
      case 'stats': return process.send({ re: m.re, stats: d.worker.stats, inFlight: d.worker.inFlight, rss: process.memoryUsage().rss, mem });
      case 'stop':
        stopping = true;
        await d.stop();
        return process.send({ re: m.re }, () => process.exit(0));
    }
  } catch (err) {
    process.send({ re: m.re, error: String(err?.stack ?? err) });
  }
});
process.on('disconnect', () => { stopping = true; d.stop().finally(() => process.exit(0)); });
process.send({ ready: true, url: d.url });
