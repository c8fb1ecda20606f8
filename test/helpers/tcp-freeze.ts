// A TCP proxy on 127.0.0.1 in front of a server (the test's PostgreSQL) that can be frozen: a network between the
// daemon and its database that starts dropping packets. Frozen, it forwards nothing either way (new connections are
// accepted, and their bytes held too) and closes nothing: no error, no reset, as with a partition (only TCP's own
// timers, minutes later, would tell); a connection the server ends meanwhile ends for the client only once thawed.
// Thawed, what was held goes on, in order.
import { connect, createServer, type AddressInfo, type Socket } from 'node:net';

export interface FreezingProxy {
  port: number;
  /** Chunks forwarded from the server to its clients so far (answers). */
  readonly answered: number;
  freeze(): void;
  thaw(): void;
  /**
   * The connections open now go silent for good, both ways, and are never closed (a NAT or firewall that forgot them,
   * a failover behind the same address): what either side sends on them is dropped. New connections pass.
   */
  cut(): void;
  close(): Promise<void>;
}

export async function startFreezingProxy(targetPort: number): Promise<FreezingProxy> {
  let frozen = false;
  let answered = 0;
  const sockets = new Set<Socket>();
  /** Sockets of connections cut(): what they send or receive is dropped. */
  const silent = new WeakSet<Socket>();
  /** Writes held while frozen, replayed in order on thaw. */
  let held: Array<() => void> = [];
  const pass = (to: Socket) => (chunk: Buffer) => {
    if (silent.has(to)) return;
    if (frozen) held.push(() => to.write(chunk));
    else to.write(chunk);
  };
  const server = createServer((client) => {
    const upstream = connect(targetPort, '127.0.0.1');
    // The server's side ending (its idle-in-transaction timeout, say) reaches the client only once thawed, as its FIN
    // would cross a partition; the client's side ending is passed on at once (nothing to observe there).
    const serverGone = () => { if (silent.has(client)) return; if (frozen) held.push(() => client.destroy()); else client.destroy(); };
    for (const s of [client, upstream]) sockets.add(s);
    // A cut connection's end does not cross either (the server's session lives on until its own timeouts).
    client.on('error', () => { if (!silent.has(client)) upstream.destroy(); });
    client.on('close', () => { sockets.delete(client); if (!silent.has(client)) upstream.destroy(); });
    upstream.on('error', serverGone);
    upstream.on('close', () => { sockets.delete(upstream); serverGone(); });
    client.on('data', pass(upstream));
    const answer = pass(client);
    upstream.on('data', (chunk: Buffer) => {
      if (!frozen && !silent.has(client)) answered++;
      answer(chunk);
    });
  });
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  return {
    port: (server.address() as AddressInfo).port,
    get answered() { return answered; },
    freeze: () => { frozen = true; },
    cut: () => { for (const s of sockets) silent.add(s); },
    thaw: () => {
      frozen = false;
      const h = held;
      held = [];
      for (const w of h) w();
    },
    close: async () => {
      for (const s of sockets) s.destroy();
      await new Promise<void>((resolve) => server.close(() => resolve()));
    },
  };
}
