// verifyReceipt: check a signed settlement receipt (issue #24) offline against the daemon's receipt JWKS and, given an
// RPC URL, against the chain it names. Used by `node-svc receipts verify`; never throws, answers by name.
import { RECEIPT_ALG, RECEIPT_TYP, type ReceiptClaims, type ReceiptRefusal } from '../domain/receipts.js';
import { parseMicro } from '../domain/amount.js';
import { checkHeader, decodeHeader, decodeJson, splitCompact, verifySignature } from './jws.js';
import { jwkProblems, KeySet, type Jwk } from './keys.js';

export interface VerifyReceiptOptions {
  /** The receipt JWKS ({keys: [...]}: `node-svc receipts jwks`, GET /v1/receipts/jwks.json), or a KeySet made from it. */
  jwks: { keys: unknown[] } | KeySet;
  /** The node the receipt must name (refused as wrong_node otherwise). */
  node?: string;
  /** An escrow receipt is also checked on this chain RPC: the transaction, its block, contract and amount. */
  rpcUrl?: string;
  /** RPC timeout per call, ms (default 10 s). */
  rpcTimeoutMs?: number;
}

/** What the chain said about an escrow receipt (with rpcUrl). */
export interface ChainCheck {
  chainId: number;
  txHash: string;
  blockNumber: number;
  /** Blocks from the receipt's block to the chain's latest, inclusive. */
  confirmations: number;
  /** Whether the amount was compared with the contract's Settled log (receipts of an escrow channel). */
  amountChecked: boolean;
}

export type ReceiptResult =
  | { valid: true; kid: string; claims: ReceiptClaims; chain: ChainCheck | null }
  | { valid: false; refusal: ReceiptRefusal; detail: string };

const MAX_RECEIPT_BYTES = 16 * 1024;
const ADDR_RE = /^0x[0-9a-fA-F]{40}$/;
const HASH_RE = /^0x[0-9a-fA-F]{64}$/;
const no = (refusal: ReceiptRefusal, detail: string): ReceiptResult => ({ valid: false, refusal, detail });
const same = (a: unknown, b: unknown) => typeof a === 'string' && typeof b === 'string' && a.toLowerCase() === b.toLowerCase();

/** The receipt keys of a JWKS; untrustable entries (private members, other algorithms) are left out. */
export function receiptKeySet(jwks: { keys: unknown[] }): KeySet {
  const keys = Array.isArray(jwks?.keys) ? (jwks.keys as Jwk[]) : [];
  return new KeySet(keys.filter((k) => !jwkProblems(k, [RECEIPT_ALG]).length).map((k) => ({ kid: k.kid as string, issuer: '', alg: RECEIPT_ALG, jwk: k })));
}

/** `{valid: true, kid, claims, chain}` or `{valid: false, refusal, detail}`; never throws. */
export async function verifyReceipt(jws: unknown, opts: VerifyReceiptOptions): Promise<ReceiptResult> {
  try {
    const offline = verifyReceiptOffline(jws, opts);
    if (!offline.valid || !opts.rpcUrl || offline.claims.rail !== 'escrow') return offline;
    const chain = await checkOnChain(offline.claims, opts.rpcUrl, opts.rpcTimeoutMs ?? 10_000);
    return 'refusal' in chain ? chain : { ...offline, chain };
  } catch (err) {
    return no('malformed', `receipt could not be verified (${err instanceof Error ? err.name : 'error'})`);
  }
}

function verifyReceiptOffline(input: unknown, opts: VerifyReceiptOptions): ReceiptResult {
  if (typeof input !== 'string') return no('malformed', 'receipt must be a string');
  const jws = input.trim();
  if (jws.length > MAX_RECEIPT_BYTES) return no('malformed', `receipt is longer than ${MAX_RECEIPT_BYTES} bytes`);
  const parts = splitCompact(jws);
  if (!parts) return no('malformed', 'not a compact JWS (three base64url parts)');
  const header = decodeHeader(parts[0]);
  if (!header) return no('malformed', 'protected header is not a base64url JSON object with unique member names');
  const keys = opts.jwks instanceof KeySet ? opts.jwks : receiptKeySet(opts.jwks);
  const checked = checkHeader(header, RECEIPT_TYP, new Set([RECEIPT_ALG]), [keys]);
  if ('refusal' in checked) return no(checked.refusal as ReceiptRefusal, checked.refusal === 'unknown_key' ? `no key of the receipt JWKS has kid "${String(header.kid)}" (another daemon's key, or a retired one)` : checked.detail);
  if (!verifySignature(checked, parts)) return no('bad_signature', `signature does not verify with receipt key "${checked.kid}": the receipt was changed after signing, or another key signed it`);
  const c = decodeJson(parts[1]);
  if (!c) return no('malformed', 'payload is not a base64url JSON object with unique member names');
  for (const name of ['iss', 'iat', 'jti', 'node', 'stream', 'asset', 'amountMicro', 'finalAt', 'rail'] as const)
    if (c[name] === undefined || c[name] === null) return no('missing_claim', `claim "${name}" is missing`);
  const bad = claimProblem(c);
  if (bad) return no('malformed', bad);
  const claims = c as unknown as ReceiptClaims;
  if (opts.node !== undefined && claims.node !== opts.node) return no('wrong_node', `the receipt is for node "${claims.node}", not "${opts.node}"`);
  return { valid: true, kid: checked.kid, claims, chain: null };
}

function claimProblem(c: Record<string, unknown>): string | undefined {
  for (const name of ['iss', 'jti', 'node', 'stream', 'asset'] as const) if (typeof c[name] !== 'string' || !c[name]) return `claim "${name}" must be a non-empty string`;
  if (typeof c.iat !== 'number' || !Number.isSafeInteger(c.iat)) return 'claim "iat" must be a NumericDate';
  if (parseMicro(c.amountMicro) === undefined) return 'claim "amountMicro" must be a decimal string of micro units';
  if (typeof c.finalAt !== 'string' || Number.isNaN(Date.parse(c.finalAt))) return 'claim "finalAt" must be an RFC 3339 time';
  if (c.rail === 'escrow') {
    const e = c.escrow as Record<string, unknown> | undefined;
    if (typeof e !== 'object' || e === null) return 'claim "escrow" must be an object for rail escrow';
    if (typeof e.chainId !== 'number' || !Number.isSafeInteger(e.chainId) || e.chainId <= 0) return 'escrow.chainId must be a positive integer';
    if (typeof e.contract !== 'string' || !ADDR_RE.test(e.contract)) return 'escrow.contract must be an address';
    if (typeof e.txHash !== 'string' || !HASH_RE.test(e.txHash)) return 'escrow.txHash must be a 32-byte hex hash';
    if (typeof e.blockNumber !== 'number' || !Number.isSafeInteger(e.blockNumber) || e.blockNumber < 0) return 'escrow.blockNumber must be a block number';
    if (e.channel !== undefined && (typeof e.channel !== 'string' || !HASH_RE.test(e.channel))) return 'escrow.channel must be a 32-byte hex channel id';
    return undefined;
  }
  if (c.rail === 'card') {
    const k = c.card as Record<string, unknown> | undefined;
    if (typeof k !== 'object' || k === null) return 'claim "card" must be an object for rail card';
    if (typeof k.processor !== 'string' || !k.processor || typeof k.captureId !== 'string' || !k.captureId) return 'card.processor and card.captureId must be non-empty strings';
    return undefined;
  }
  return 'claim "rail" must be escrow or card';
}

/** Re-read the receipt's transaction on the chain: a ChainCheck when everything agrees, else the refusal naming what differs. */
async function checkOnChain(claims: ReceiptClaims, rpcUrl: string, timeout: number): Promise<ChainCheck | Extract<ReceiptResult, { valid: false }>> {
  const e = claims.escrow!;
  // Loaded only here: an offline check never pays for viem.
  const { createPublicClient, decodeEventLog, http } = await import('viem');
  const { ESCROW_ABI } = await import('../rails/escrow/artifacts.js');
  const client = createPublicClient({ transport: http(rpcUrl, { timeout, retryCount: 1 }) });
  const unavailable = (err: unknown) => no('chain_unavailable', `cannot read the chain at the RPC (${(err as { shortMessage?: string }).shortMessage ?? (err as Error).message ?? String(err)}): nothing is confirmed`.split('\n')[0]!) as Extract<ReceiptResult, { valid: false }>;
  const notFound = (err: unknown, name: string) => (err as Error)?.name === name;
  let chainId: number;
  try {
    chainId = await client.getChainId();
  } catch (err) {
    return unavailable(err);
  }
  const refuse = (r: ReceiptRefusal, d: string) => no(r, d) as Extract<ReceiptResult, { valid: false }>;
  if (chainId !== e.chainId) return refuse('chain_mismatch', `the RPC serves chain ${chainId}; the receipt names chain ${e.chainId}`);
  const hash = e.txHash as `0x${string}`;
  let tx;
  try {
    tx = await client.getTransaction({ hash });
  } catch (err) {
    if (notFound(err, 'TransactionNotFoundError')) return refuse('tx_not_found', `transaction ${hash} is not on chain ${chainId}`);
    return unavailable(err);
  }
  if (tx.blockNumber === null) return refuse('tx_not_mined', `transaction ${hash} is known but not mined`);
  if (!same(tx.to, e.contract)) return refuse('wrong_contract', `transaction ${hash} was sent to ${String(tx.to)}, not the receipt's contract ${e.contract}`);
  let receipt;
  try {
    receipt = await client.getTransactionReceipt({ hash });
  } catch (err) {
    if (notFound(err, 'TransactionReceiptNotFoundError')) return refuse('tx_not_mined', `transaction ${hash} has no receipt: not mined`);
    return unavailable(err);
  }
  if (receipt.status !== 'success') return refuse('tx_failed', `transaction ${hash} reverted in block ${receipt.blockNumber}`);
  if (receipt.blockNumber !== BigInt(e.blockNumber)) return refuse('block_mismatch', `transaction ${hash} is in block ${receipt.blockNumber}, the receipt says ${e.blockNumber}`);
  let amountChecked = false;
  if (e.channel) {
    let settled: bigint | undefined;
    for (const l of receipt.logs) {
      if (!same(l.address, e.contract)) continue;
      try {
        const ev = decodeEventLog({ abi: ESCROW_ABI, data: l.data, topics: l.topics });
        if (ev.eventName === 'Settled' && same(ev.args.channelId, e.channel)) settled = BigInt(ev.args.cumulativeAmount);
      } catch {
        continue;
      }
    }
    if (settled === undefined) return refuse('amount_mismatch', `transaction ${hash} has no Settled log for channel ${e.channel}`);
    if (settled !== BigInt(claims.amountMicro)) return refuse('amount_mismatch', `the chain settled cumulative ${settled} on channel ${e.channel}; the receipt says ${claims.amountMicro}`);
    amountChecked = true;
  }
  let latest: bigint;
  try {
    latest = await client.getBlockNumber({ cacheTime: 0 });
  } catch (err) {
    return unavailable(err);
  }
  return { chainId, txHash: hash, blockNumber: e.blockNumber, confirmations: Number(latest - receipt.blockNumber + 1n), amountChecked };
}
