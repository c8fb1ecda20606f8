// bench/lib/delivery-receiver: the loopback webhook receiver of bench/delivery, run as its own process (fork, IPC).
// node:http on 127.0.0.1 port 0; answers 204 as soon as the body has arrived. Per request it keeps the
// x-service-event-id and path (a delivery: one event to one subscription, each subscription posting to a path of its
// own) and the receive time (performance.timeOrigin + performance.now(), ms, sub-ms resolution), first arrival only;
// repeats are counted as duplicates. Latency asks for an event's first delivery. The parent asks for counts and times over IPC.
// With the argument `hang` it reads each request and never answers (a receiver that accepts and hangs).
import http from 'node:http';

const HANG = process.argv[2] === 'hang';

const now = () => performance.timeOrigin + performance.now();
let received = new Map(); // path + event id -> receive time (one per delivery)
let first = new Map(); // event id -> its first delivery's receive time
let requests = 0;
let duplicates = 0;
let unsigned = 0;

const server = http.createServer((req, res) => {
  const id = req.headers['x-service-event-id'];
  if (!req.headers['x-service-signature'] && !String(id).startsWith('raw-')) unsigned++;
  req.on('data', () => {});
  req.on('end', () => {
    const t = now();
    requests++;
    if (typeof id === 'string') {
      // One delivery is an event to a subscription: subscriptions of one bench post to their own paths (/hook/1, …).
      const key = `${req.url} ${id}`;
      if (received.has(key)) duplicates++;
      else {
        received.set(key, t);
        if (!first.has(id)) first.set(id, t);
      }
    }
    if (HANG) return; // the socket stays open, the request unanswered, until the sender gives up
    res.writeHead(204);
    res.end();
  });
});
server.keepAliveTimeout = 60_000;

process.on('message', (m) => {
  switch (m.cmd) {
    case 'count':
      return process.send({ re: m.re, requests, unique: received.size, duplicates, unsigned });
    case 'times':
      return process.send({ re: m.re, times: m.ids.map((id) => first.get(id) ?? null) });
    case 'reset':
      received = new Map(); first = new Map(); requests = 0; duplicates = 0; unsigned = 0;
      return process.send({ re: m.re });
    case 'clock':
      return process.send({ re: m.re, t: now() });
    case 'stop':
      server.close();
      server.closeAllConnections?.();
      process.send({ re: m.re }, () => process.exit(0));
  }
});
process.on('disconnect', () => process.exit(0)); // the bench went away: do not linger
server.listen(0, '127.0.0.1', () => process.send({ ready: true, port: server.address().port }));
