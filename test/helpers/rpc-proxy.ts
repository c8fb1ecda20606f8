// A chain RPC between the daemon and the sandbox chain on 127.0.0.1: forwards every JSON-RPC request, keeps every
// signed transaction the daemon sends (nonce, hash, target, fee, the settle call's channel), and can lose the answer to a chosen
// send after the chain took it (a gateway error, as a flaky network or RPC provider gives), or answer a chosen send
// with its hash without passing it on (a node that accepted it and then dropped it from its pool): the boundary a
// test cannot otherwise reach.
import { createServer, type Server } from 'node:http';
import type { AddressInfo } from 'node:net';
import { decodeFunctionData, keccak256, parseTransaction, type Hex } from 'viem';
import { ESCROW_ABI } from '../../src/rails/escrow/artifacts.js';

export interface SentTx {
  nonce: number;
  hash: Hex;
  /** The settle call's channel (undefined for any other call). */
  channel?: Hex;
  /** Whom the transaction calls (the escrow for a settle, the asset token for an x402 transfer), lower case. */
  to?: string;
  /** Its max fee per gas in wei, a decimal string (a fee-bumped replacement has a higher one at the same nonce). */
  maxFeePerGas?: string;
  /** The chain's answer was replaced by a gateway error. */
  answerLost: boolean;
  /** Answered with its hash, never passed on to the chain. */
  dropped?: boolean;
  /** The signed transaction as sent. */
  raw: Hex;
}

export interface RpcProxy {
  url: string;
  /** Every eth_sendRawTransaction, in order. */
  sent: SentTx[];
  /** Decide per send (before it is forwarded) whether its answer is lost; `earlier` are the sends before it. */
  loseAnswer: (tx: Omit<SentTx, 'answerLost'>, earlier: SentTx[]) => boolean;
  /** Decide per send (before it is forwarded) whether the chain never gets it: answered with its hash, as by a node that then dropped it. */
  drop: (tx: Omit<SentTx, 'answerLost'>, earlier: SentTx[]) => boolean;
  /** Change the chain's answer to a call (e.g. a node that counts a pending transaction the chain never got). */
  rewrite: (method: string, params: unknown[], result: unknown) => unknown;
  stop(): Promise<void>;
}

export async function startRpcProxy(target: string): Promise<RpcProxy> {
  const proxy: RpcProxy = { url: '', sent: [], loseAnswer: () => false, drop: () => false, rewrite: (_m, _p, result) => result, stop: async () => undefined };
  const server: Server = createServer((req, res) => {
    const chunks: Buffer[] = [];
    req.on('data', (c: Buffer) => chunks.push(c));
    req.on('end', async () => {
      const body = Buffer.concat(chunks).toString('utf8');
      let lose = false;
      let drop: Hex | undefined;
      let msg: { id?: unknown; method?: string; params?: unknown[] } = {};
      try {
        msg = JSON.parse(body) as typeof msg;
        if (msg.method === 'eth_sendRawTransaction' && typeof msg.params?.[0] === 'string') {
          const raw = msg.params[0] as Hex;
          const tx = parseTransaction(raw);
          let channel: Hex | undefined;
          try {
            const call = decodeFunctionData({ abi: ESCROW_ABI, data: tx.data! });
            if (call.functionName === 'settle') channel = (call.args as readonly unknown[])[0] as Hex;
          } catch { /* not a settle call */ }
          const t = { nonce: tx.nonce ?? 0, hash: keccak256(raw), channel, to: tx.to?.toLowerCase(), maxFeePerGas: tx.maxFeePerGas?.toString(), raw };
          if (proxy.drop(t, [...proxy.sent])) drop = t.hash;
          else lose = proxy.loseAnswer(t, [...proxy.sent]);
          proxy.sent.push({ ...t, answerLost: lose, ...(drop ? { dropped: true } : {}) });
        }
      } catch { /* forwarded as it came */ }
      if (drop) return void res.writeHead(200, { 'content-type': 'application/json' }).end(JSON.stringify({ jsonrpc: '2.0', id: msg.id ?? null, result: drop }));
      try {
        const r = await fetch(target, { method: 'POST', headers: { 'content-type': 'application/json' }, body });
        let text = await r.text();
        if (lose) return void res.writeHead(502, { 'content-type': 'text/plain' }).end('bad gateway');
        if (msg.method) {
          const answer = JSON.parse(text) as { result?: unknown };
          if ('result' in answer) text = JSON.stringify({ ...answer, result: proxy.rewrite(msg.method, msg.params ?? [], answer.result) });
        }
        res.writeHead(r.status, { 'content-type': 'application/json' }).end(text);
      } catch {
        res.writeHead(502).end();
      }
    });
  });
  await new Promise<void>((r) => server.listen(0, '127.0.0.1', r));
  proxy.url = `http://127.0.0.1:${(server.address() as AddressInfo).port}`;
  proxy.stop = () => new Promise<void>((r) => { server.closeAllConnections(); server.close(() => r()); });
  return proxy;
}
