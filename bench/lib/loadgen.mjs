// A lean closed-loop HTTP/1.1 load generator for the write benches: `connections` keep-alive sockets, one request in
// flight on each (no pipelining), each request's bytes made by the caller and written in one call, each response
// read far enough to know its status and where it ends (Content-Length or chunked), its latency kept.
//
// Why not autocannon: on this 2-core machine the load generator shares the cores with the daemon it measures, and
// autocannon spent 51-58 µs of CPU per request (bench/commit's requests, signed ahead), charged to the subject but not
// to the baseline (an in-process SQLite loop). This one spends 24-39 µs, about what writing and reading a loopback
// socket costs (its own JavaScript is ~0.1 % of its profile); the benches print both figures (CPU per request of the
// daemon and of this process), so the cost of the instrument stays visible.
import { connect } from 'node:net';

const CRLF2 = Buffer.from('\r\n\r\n');
const EMPTY = Buffer.alloc(0);

/** Parses one response at the head of `buf`; returns { status, end } (end = bytes it takes) or null when incomplete.
 *  Throws on bytes that are not an HTTP/1.1 response: a bench must not count what it cannot read. */
function parseResponse(buf) {
  const headEnd = buf.indexOf(CRLF2);
  if (headEnd < 0) return null;
  const head = buf.toString('latin1', 0, headEnd);
  if (!head.startsWith('HTTP/1.1 ')) throw new Error(`not an HTTP/1.1 response: ${JSON.stringify(head.slice(0, 40))}`);
  const status = Number(head.slice(9, 12));
  const lower = head.toLowerCase();
  const bodyStart = headEnd + 4;
  const cl = /\r\ncontent-length:\s*(\d+)/.exec(lower);
  if (cl) {
    const end = bodyStart + Number(cl[1]);
    return buf.length >= end ? { status, end } : null;
  }
  if (/\r\ntransfer-encoding:\s*chunked/.test(lower)) {
    let at = bodyStart;
    for (;;) {
      const lineEnd = buf.indexOf('\r\n', at, 'latin1');
      if (lineEnd < 0) return null;
      const size = parseInt(buf.toString('latin1', at, lineEnd), 16);
      if (!Number.isFinite(size)) throw new Error('bad chunk size');
      const next = lineEnd + 2 + size + 2;
      if (buf.length < next) return null;
      if (size === 0) return { status, end: next };
      at = next;
    }
  }
  if (status === 204 || status === 304) return { status, end: bodyStart };
  throw new Error(`response without a length: ${JSON.stringify(head.slice(0, 80))}`);
}

/**
 * Runs `duration` seconds against `url` over `connections` sockets. `request(i)` gives the i-th connection's next
 * request as { method, path, headers, body } (body a string); it is called once per request, on that connection's
 * turn, so per-connection state (a stream's growing amount) stays ordered. Resolves with
 * { total, non2xx, errors, latency: { p50, p99 } (ms) } once every connection's last response is in.
 */
export function loadgen({ url, connections, duration, request }) {
  const { hostname, port } = new URL(url);
  const host = `${hostname}:${port}`;
  const latencies = [];
  let total = 0;
  let non2xx = 0;
  let errors = 0;
  const deadline = performance.now() + duration * 1000;
  const one = (i) => new Promise((resolve) => {
    const sock = connect({ host: hostname, port: Number(port), noDelay: true });
    let buf = EMPTY;
    let sentAt = 0;
    let done = false;
    const fail = () => { done = true; errors++; sock.destroy(); resolve(); };
    const send = () => {
      if (performance.now() >= deadline) { done = true; sock.end(); return resolve(); }
      const r = request(i);
      let text = `${r.method} ${r.path} HTTP/1.1\r\nhost: ${host}\r\n`;
      for (const [k, v] of Object.entries(r.headers ?? {})) text += `${k}: ${v}\r\n`;
      const body = r.body ?? '';
      text += `content-length: ${Buffer.byteLength(body)}\r\n\r\n${body}`;
      sentAt = performance.now();
      sock.write(text);
    };
    sock.on('connect', send);
    sock.on('data', (chunk) => {
      buf = buf.length ? Buffer.concat([buf, chunk]) : chunk;
      let res;
      try { res = parseResponse(buf); } catch { return fail(); }
      if (!res) return;
      if (res.end !== buf.length) return fail(); // bytes after the one response asked for
      buf = EMPTY;
      total++;
      latencies.push(performance.now() - sentAt);
      if (res.status < 200 || res.status > 299) non2xx++;
      send();
    });
    sock.on('error', () => { if (!done) { done = true; errors++; } resolve(); });
    sock.on('close', () => { if (!done) errors++; resolve(); }); // closed by the server before the run ended
  });
  return Promise.all(Array.from({ length: connections }, (_, i) => one(i))).then(() => {
    latencies.sort((a, b) => a - b);
    const at = (p) => latencies[Math.min(latencies.length - 1, Math.floor((latencies.length * p) / 100))] ?? NaN;
    return { total, non2xx, errors, latency: { p50: at(50), p99: at(99) } };
  });
}
