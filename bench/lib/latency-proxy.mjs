// bench/lib/latency-proxy: a TCP proxy in front of PostgreSQL that adds a fixed network delay and counts what the
// daemon asks of the database (issue 21).
//
// startProxy({ port, rttMs }) listens on 127.0.0.1:0 and forwards each connection to 127.0.0.1:port. Every chunk,
// either way, is held rttMs / 2 before it is written on: each direction of each connection is a FIFO, a chunk going
// out at max(its arrival + delay, the previous chunk's send), so order is kept (one timer per direction, never one
// per chunk). Node's timers have 1 ms resolution, and a busy machine fires them late: the delay actually held is
// measured and reported (holdMs). No backpressure: a bench's traffic to its database is small.
//
// What it counts, per connection and in total:
// - round trips: each time the client speaks after hearing, i.e. a client→server chunk arriving after a
//   server→client chunk was written to the client (a connection's first chunk counts: the client spoke first);
// - statements: the frontend messages client→server are parsed (type byte + int32 length, split across chunks or
//   many to a chunk; the startup packet, SSLRequest and CancelRequest have no type byte): a statement is an Execute
//   ('E') or a simple Query ('Q'); Parse ('P'), Bind ('B') and the other types are counted by type. Each statement
//   is named by its SQL (the Parse of the prepared statement its portal was bound to), so stats() lists how often
//   each ran, and each round trip by the statements it carried ("BEGIN | SELECT …"; a COMMIT named with its
//   transaction's first statement, "COMMIT ⟵ INSERT …"; a connection's start as "(startup)", "(auth)"), to say what
//   costs what.
//
// Run as a forked child (`fork(this file, ['serve'])`), it keeps any number of proxies and answers over IPC:
// { cmd: 'start', port, rttMs } → { id, port }; { cmd: 'stats' | 'reset' | 'close', id }; { cmd: 'cpu' } → its
// process.cpuUsage(); { cmd: 'stop' }. The bench uses it so: its own event loop (load generators) cannot add delay.
import { createServer, connect } from 'node:net';
import { fileURLToPath } from 'node:url';

const now = () => performance.now();
const SSL_REQUEST = 80877103;
const GSSENC_REQUEST = 80877104;
const CANCEL_REQUEST = 80877102;
/** Messages longer than this are skipped, not buffered (COPY data, huge binds): counted by type, never named. */
const MAX_BUFFERED = 1 << 20;
/** Statement texts and round-trip signatures kept at most (texts are templates; a bound for a caller that is not). */
const MAX_KEYS = 2000;
const TEXT_CHARS = 110;
/** "COMMIT ⟵ <the transaction's first statement, at most TX_CHARS>". */
export const TX_OF = '⟵';
export const TX_CHARS = 60;

const shortText = (s) => { const t = s.replace(/\s+/g, ' ').trim(); return t.length > TEXT_CHARS ? `${t.slice(0, TEXT_CHARS - 1)}…` : t; };
const cstring = (buf, at) => { const end = buf.indexOf(0, at); return end < 0 ? ['', buf.length] : [buf.toString('utf8', at, end), end + 1]; };
const bump = (map, key, n = 1) => { if (map.size < MAX_KEYS || map.has(key)) map.set(key, (map.get(key) ?? 0) + n); };
/** Round trips by what they carried: key -> [round trips, statements, the texts]. */
const bumpRt = (map, rt) => {
  const key = rt.texts.length ? rt.texts.join(' | ') : '(no statement)';
  const v = map.get(key) ?? (map.size < MAX_KEYS ? [0, 0, rt.texts] : undefined);
  if (!v) return;
  v[0]++; v[1] += rt.statements;
  map.set(key, v);
};

function newCounters() {
  return { roundTrips: 0, statements: 0, queries: 0, executes: 0, parses: 0, binds: 0, chunksUp: 0, chunksDown: 0, bytesUp: 0, bytesDown: 0, messages: {} };
}
const addCounters = (into, c) => {
  for (const k of Object.keys(c)) {
    if (k === 'messages') for (const [t, n] of Object.entries(c.messages)) into.messages[t] = (into.messages[t] ?? 0) + n;
    else into[k] += c[k];
  }
  return into;
};

/**
 * The frontend side of one connection: a parser that needs no whole message in memory unless it must read it
 * (P, B, E, Q), fed chunk by chunk.
 */
class Frontend {
  constructor(onMessage) {
    this.onMessage = onMessage; // (type: string, body: Buffer | null) => void
    this.untyped = true; // the startup packet (and SSLRequest, CancelRequest) come first, without a type byte
    this.opaque = false; // TLS was accepted: nothing more can be read
    this.sslAsked = false;
    this.head = Buffer.alloc(0); // a message's header, or a whole message being buffered
    this.skip = 0; // bytes of a skipped message's body still to come
  }

  feed(chunk) {
    if (this.opaque) return;
    let buf = this.head.length ? Buffer.concat([this.head, chunk]) : chunk;
    this.head = Buffer.alloc(0);
    let i = 0;
    while (i < buf.length) {
      if (this.skip) {
        const n = Math.min(this.skip, buf.length - i);
        this.skip -= n;
        i += n;
        continue;
      }
      const rest = buf.length - i;
      if (this.untyped) {
        if (rest < 8) break;
        const len = buf.readInt32BE(i);
        const code = buf.readInt32BE(i + 4);
        if (len < 8) { this.opaque = true; return; } // not the protocol we know
        if (code === SSL_REQUEST || code === GSSENC_REQUEST) this.sslAsked = true; // the real startup follows (or TLS)
        else if (code !== CANCEL_REQUEST) this.untyped = false;
        this.onMessage(code === SSL_REQUEST || code === GSSENC_REQUEST ? '(ssl)' : code === CANCEL_REQUEST ? '(cancel)' : '(startup)', null);
        if (rest < len) { this.skip = len - rest; i = buf.length; break; }
        i += len;
        continue;
      }
      if (rest < 5) break;
      const type = String.fromCharCode(buf[i]);
      const len = buf.readInt32BE(i + 1);
      if (len < 4) { this.opaque = true; return; }
      const named = type === 'P' || type === 'B' || type === 'E' || type === 'Q';
      if (named && len <= MAX_BUFFERED) {
        if (rest < 1 + len) break; // wait for the whole message
        this.onMessage(type, buf.subarray(i + 5, i + 1 + len));
        i += 1 + len;
      } else {
        this.onMessage(type, null);
        const n = Math.min(len - 4, rest - 5);
        this.skip = len - 4 - n;
        i += 5 + n;
      }
    }
    if (i < buf.length) this.head = Buffer.from(buf.subarray(i)); // a partial header or message: keep a copy
  }
}

/** One direction of one connection: chunks written on after `delayMs`, in order. */
class Pipe {
  constructor(dst, delayMs, onSend) {
    this.dst = dst;
    this.delayMs = delayMs;
    this.onSend = onSend;
    this.queue = [];
    this.timer = undefined;
    this.last = 0;
    this.ended = false;
  }

  push(chunk, arrived = now()) {
    if (this.delayMs <= 0 && !this.queue.length) return this.#send(chunk, arrived);
    const at = Math.max(arrived + this.delayMs, this.last);
    this.last = at;
    this.queue.push([at, chunk, arrived]);
    if (!this.timer) this.#arm();
  }

  end() { this.push(null); }

  #arm() {
    const wait = this.queue[0][0] - now();
    this.timer = setTimeout(() => this.#flush(), Math.max(0, wait));
  }

  #flush() {
    this.timer = undefined;
    const t = now();
    // Within a quarter millisecond is due: the timer cannot be finer, and waiting a whole millisecond more is worse.
    while (this.queue.length && this.queue[0][0] <= t + 0.25) {
      const [, chunk, arrived] = this.queue.shift();
      this.#send(chunk, arrived);
    }
    if (this.queue.length) this.#arm();
  }

  #send(chunk, arrived) {
    if (chunk === null) { this.ended = true; this.dst.end(); return; }
    if (this.dst.destroyed) return;
    this.dst.write(chunk);
    this.onSend(chunk, now() - arrived);
  }

  close() { if (this.timer) clearTimeout(this.timer); this.timer = undefined; this.queue = []; }
}

/**
 * A proxy on 127.0.0.1:0 to 127.0.0.1:`port`, adding `rttMs` / 2 each way. Resolves with { port, rttMs, stats(),
 * reset(), close() }.
 */
export async function startProxy({ port, host = '127.0.0.1', rttMs = 0 }) {
  const oneWay = Math.max(0, Number(rttMs) / 2);
  const conns = new Set();
  let closedTotals = newCounters(); // connections closed since the last reset
  let opened = 0;
  let seq = 0;
  let byText = new Map(); // statement text -> executions
  let byRoundTrip = new Map(); // "text | text" -> [round trips that carried exactly these statements, statements]
  let hold = { n: 0, ms: 0 };

  const server = createServer((client) => {
    client.setNoDelay(true);
    const upstream = connect({ port, host });
    upstream.setNoDelay(true);
    // rt: the round trip in progress ({ texts, statements }); txFirst: the open transaction's first statement after BEGIN.
    const c = { id: ++seq, c: newCounters(), heard: true, prepared: new Map(), portals: new Map(), rt: null, inTx: false, txFirst: null };
    opened++;
    conns.add(c);
    /** The round trip in progress is over (the next one starts): counted by the statements it carried. */
    const closeRoundTrip = () => {
      if (!c.rt) return;
      bumpRt(byRoundTrip, c.rt);
      c.rt = null;
    };
    const fe = new Frontend((type, body) => {
      c.c.messages[type] = (c.c.messages[type] ?? 0) + 1;
      let text;
      if (type === 'Q') { c.c.statements++; c.c.queries++; text = body ? shortText(cstring(body, 0)[0]) : '(long query)'; }
      else if (type === 'P') {
        c.c.parses++;
        if (body) { const [name, at] = cstring(body, 0); c.prepared.set(name, shortText(cstring(body, at)[0])); }
      } else if (type === 'B') {
        c.c.binds++;
        if (body) { const [portal, at] = cstring(body, 0); const [stmt] = cstring(body, at); c.portals.set(portal, c.prepared.get(stmt) ?? `(prepared ${stmt})`); }
      } else if (type === 'E') {
        c.c.statements++; c.c.executes++;
        text = body ? c.portals.get(cstring(body, 0)[0]) ?? '(unknown portal)' : '(long execute)';
      } else if (type.startsWith('(') || type === 'p') text = type === 'p' ? '(auth)' : type;
      if (text === undefined) return;
      if (type === 'Q' || type === 'E') {
        bump(byText, text);
        // A COMMIT or ROLLBACK is named with its transaction's first statement, so that one transaction's end is
        // told from another's.
        if (/^BEGIN\b/i.test(text)) { c.inTx = true; c.txFirst = null; }
        else if (/^(COMMIT|ROLLBACK)\b/i.test(text)) { text = `${text} ${TX_OF} ${c.txFirst ?? '(nothing)'}`; c.inTx = false; c.txFirst = null; }
        else if (c.inTx && c.txFirst === null) c.txFirst = text.length > TX_CHARS ? `${text.slice(0, TX_CHARS - 1)}…` : text;
        if (c.rt) c.rt.statements++;
      }
      if (c.rt && c.rt.texts.length < 12) c.rt.texts.push(text);
    });
    const up = new Pipe(upstream, oneWay, (chunk, held) => { hold.n++; hold.ms += held; });
    const down = new Pipe(client, oneWay, (chunk, held) => {
      hold.n++; hold.ms += held;
      c.heard = true; // the client has now heard something: its next chunk is a new round trip
    });
    client.on('data', (chunk) => {
      if (c.heard) { c.heard = false; c.c.roundTrips++; closeRoundTrip(); c.rt = { texts: [], statements: 0 }; }
      c.c.chunksUp++; c.c.bytesUp += chunk.length;
      fe.feed(chunk);
      up.push(chunk);
    });
    upstream.on('data', (chunk) => {
      if (fe.sslAsked && !c.sawServer && chunk[0] === 0x53) fe.opaque = true; // 'S': TLS from here on
      c.sawServer = true;
      c.c.chunksDown++; c.c.bytesDown += chunk.length;
      down.push(chunk);
    });
    client.on('end', () => up.end());
    upstream.on('end', () => down.end());
    let gone = false;
    const done = () => {
      if (gone) return;
      gone = true;
      up.close(); down.close();
      client.destroy(); upstream.destroy();
      closeRoundTrip();
      if (conns.delete(c)) addCounters(closedTotals, c.c);
    };
    client.on('error', done);
    upstream.on('error', done);
    // One side closed: what it sent last is passed on (its end too) before both are torn down.
    client.on('close', () => setTimeout(done, oneWay + 5));
    upstream.on('close', () => setTimeout(done, oneWay + 5));
    c.done = done;
  });
  await new Promise((resolve, reject) => { server.once('error', reject); server.listen(0, '127.0.0.1', resolve); });

  const top = (map, n) => [...map].sort((a, b) => b[1] - a[1]).slice(0, n).map(([text, count]) => ({ text, count }));
  const topRt = (map, n) => [...map].sort((a, b) => b[1][0] - a[1][0]).slice(0, n).map(([text, [count, statements, parts]]) => ({ text, parts, count, statements }));
  return {
    port: server.address().port,
    rttMs: oneWay * 2,
    /** Totals since the last reset (closed connections included), the open connections one by one, the top texts. */
    stats({ top: n = 40 } = {}) {
      const total = newCounters();
      addCounters(total, closedTotals);
      for (const c of conns) addCounters(total, c.c);
      // The round trips in progress are counted by their statements so far.
      const rts = new Map([...byRoundTrip].map(([k, v]) => [k, [v[0], v[1], v[2]]]));
      for (const c of conns) if (c.rt) bumpRt(rts, c.rt);
      return {
        ...total,
        connectionsOpened: opened,
        connectionsOpen: conns.size,
        holdMs: hold.n ? hold.ms / hold.n : 0,
        perConnection: [...conns].map((c) => ({ id: c.id, ...c.c })),
        statementsByText: top(byText, n),
        roundTripsByStatements: topRt(rts, n),
      };
    },
    reset() {
      closedTotals = newCounters();
      opened = 0;
      byText = new Map();
      byRoundTrip = new Map();
      hold = { n: 0, ms: 0 };
      for (const c of conns) { c.c = newCounters(); c.rt = null; } // a round trip in progress was counted before
    },
    close() {
      return new Promise((resolve) => {
        server.close(() => resolve());
        for (const c of conns) c.done();
      });
    },
  };
}

// ---------------------------------------------------------------------------------------------------------------
// As a forked child: proxies on request over IPC.

async function serveChild() {
  const proxies = new Map();
  let next = 0;
  process.on('message', async (m) => {
    try {
      switch (m.cmd) {
        case 'start': {
          const p = await startProxy({ port: m.port, rttMs: m.rttMs });
          const id = ++next;
          proxies.set(id, p);
          return process.send({ re: m.re, id, port: p.port, rttMs: p.rttMs });
        }
        case 'stats': return process.send({ re: m.re, stats: proxies.get(m.id).stats(m.opts ?? {}) });
        case 'reset': proxies.get(m.id).reset(); return process.send({ re: m.re });
        case 'close': await proxies.get(m.id)?.close(); proxies.delete(m.id); return process.send({ re: m.re });
        case 'cpu': return process.send({ re: m.re, cpu: process.cpuUsage() });
        case 'stop': return process.send({ re: m.re }, () => process.exit(0));
      }
    } catch (err) {
      process.send({ re: m.re, error: String(err?.stack ?? err) });
    }
  });
  process.on('disconnect', () => process.exit(0)); // the bench went away
  process.send({ ready: true, pid: process.pid });
}

if (process.argv[1] === fileURLToPath(import.meta.url) && process.argv[2] === 'serve') await serveChild();
