// `node-svc receipts jwks|keys|rotate|retire|verify`: the daemon's receipt keys (read from the store, like the other
// admin commands) and the offline check of a receipt (the SDK's verifyReceipt).
import { formatMicro } from '../../domain/amount.js';
import { EXIT, NodeSvcError, usageError } from '../../domain/errors.js';
import { checkNodeId, readJwksSource } from '../../service/admin.js';
import { ensureReceiptKey, listReceiptKeys, receiptJwks, retireReceiptKey, rotateReceiptKey } from '../../service/receipts.js';
import { verifyReceipt, type ReceiptResult } from '../../sdk/receipt.js';
import { table, type CommandResult, type GlobalOptions } from '../output.js';
import { withStore } from './context.js';

/** The JWKS to publish for receipt checkers (the first key is made if the daemon has not started yet). */
export const jwks = (g: GlobalOptions): Promise<CommandResult> =>
  withStore(g, async (s) => {
    await ensureReceiptKey(s);
    const data = await receiptJwks(s);
    return { data, human: JSON.stringify(data, null, 2) };
  });

export const keys = (g: GlobalOptions): Promise<CommandResult> =>
  withStore(g, async (s) => {
    const data = await listReceiptKeys(s);
    return {
      data: { data }, rows: data,
      human: data.length ? table(['KID', 'STATUS', 'CREATED', 'ISSUER'], data.map((k) => [k.kid, k.status, k.createdAt, k.issuer])) : 'no receipt key yet: the daemon makes one when it starts (or run `node-svc receipts jwks`)',
    };
  });

export const rotate = (g: GlobalOptions): Promise<CommandResult> =>
  withStore(g, async (s) => {
    const r = await rotateReceiptKey(s);
    return { data: r, human: `new receipt key ${r.kid} signs from now on; ${r.previous} stays in the JWKS (its receipts still verify) until \`node-svc receipts retire ${r.previous}\`\npublish the new JWKS: node-svc receipts jwks` };
  });

export const retire = (g: GlobalOptions, kid: string): Promise<CommandResult> =>
  withStore(g, async (s) => ({ data: await retireReceiptKey(s, kid), human: `receipt key ${kid} retired: left out of the JWKS, so receipts it signed no longer verify` }));

export async function verify(g: GlobalOptions, jwsArg: string, o: { jwks?: string; rpc?: string; node?: string }): Promise<CommandResult> {
  const { readFileSync } = await import('node:fs');
  const jws = (jwsArg === '-' ? readFileSync(0, 'utf8') : jwsArg).trim();
  if (!jws) throw usageError('no receipt given', 'pass the JWS as an argument, or "-" to read it from stdin');
  if (o.node !== undefined) checkNodeId(o.node);
  if (o.rpc !== undefined && !/^https?:\/\//i.test(o.rpc)) throw usageError(`--rpc "${o.rpc}" is not an http(s) URL`);
  const set = o.jwks !== undefined
    ? await readJwksSource(o.jwks)
    : await withStore(g, (s) => receiptJwks(s), { readonly: true }).catch((err: unknown) => {
      throw new NodeSvcError('config', `no --jwks given and the store cannot be read (${(err as Error).message})`, { hint: 'pass --jwks <file-or-url> with the daemon\'s receipt JWKS (node-svc receipts jwks)' });
    });
  if (!Array.isArray((set as { keys?: unknown })?.keys)) throw usageError(`${o.jwks ?? 'the store'} is not a JWKS`, 'expected {"keys": [ ... ]}: the output of node-svc receipts jwks');
  if (!(set as { keys: unknown[] }).keys.length) throw new NodeSvcError('config', 'the receipt JWKS has no keys', { hint: 'pass --jwks with the daemon\'s receipt JWKS (node-svc receipts jwks)' });
  const r = await verifyReceipt(jws, { jwks: set as { keys: unknown[] }, ...(o.node !== undefined ? { node: o.node } : {}), ...(o.rpc !== undefined ? { rpcUrl: o.rpc } : {}) });
  return { data: r, human: describe(r, o.rpc !== undefined), exitCode: r.valid ? EXIT.ok : EXIT.negative };
}

function describe(r: ReceiptResult, rpc: boolean): string {
  if (!r.valid) return `refused: ${r.refusal}\n  ${r.detail}`;
  const c = r.claims;
  const rail = c.escrow
    ? `escrow  chain ${c.escrow.chainId}  contract ${c.escrow.contract}${c.escrow.channel ? `  channel ${c.escrow.channel}` : ''}\n  tx       ${c.escrow.txHash}  block ${c.escrow.blockNumber}`
    : `card    ${c.card!.processor}  capture ${c.card!.captureId}${c.card!.paymentIntent ? `  payment intent ${c.card!.paymentIntent}` : ''}${c.card!.account ? `  account ${c.card!.account}` : ''}`;
  const chain = r.chain
    ? `on chain: the transaction is in block ${r.chain.blockNumber} (${r.chain.confirmations} confirmations)${r.chain.amountChecked ? ', its Settled log matches the amount' : ''}`
    : rpc && c.rail === 'card' ? 'on chain: not applicable (card rail)' : 'on chain: not checked (pass --rpc <url>)';
  return [
    `valid: receipt ${c.jti} for node ${c.node}, signed by key ${r.kid}`,
    `  stream   ${c.stream}`,
    `  final    ${formatMicro(c.amountMicro, c.asset)} (cumulative) at ${c.finalAt}`,
    `  rail     ${rail}`,
    `  issuer   ${c.iss}  (issued ${new Date(c.iat * 1000).toISOString()})`,
    `  ${chain}`,
  ].join('\n');
}
