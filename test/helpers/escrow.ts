// Escrow test helpers: viem wallets on the sandbox chain, revert assertions by custom error name, and the real
// daemon (bin/node-svc daemon) started with the escrow flags (test/helpers/daemon.ts only takes env).
import { writeFile } from 'node:fs/promises';
import { join } from 'node:path';
import { BaseError, ContractFunctionRevertedError, createWalletClient, decodeErrorResult, http, type Hex } from 'viem';
import { privateKeyToAccount } from 'viem/accounts';
import { expect } from 'vitest';
import { ESCROW_ABI } from '../../src/rails/escrow/artifacts.js';
import type { SandboxChain } from '../../src/rails/escrow/sandbox.js';
import { startDaemon, type RunningDaemon } from './daemon.js';
import { waitFor } from './wait.js';

/** secp256k1 group order: a signature (r, s) is also valid as (r, n − s) with the other recovery bit. */
export const SECP256K1_N = 0xfffffffffffffffffffffffffffffffebaaedce6af48a03bbfd25e8cd0364141n;

export const chainOf = (c: SandboxChain) => ({
  id: c.chainId, name: 'sandbox', nativeCurrency: { name: 'Ether', symbol: 'ETH', decimals: 18 }, rpcUrls: { default: { http: [c.rpcUrl] } },
});

export const walletFor = (c: SandboxChain, key: Hex) =>
  createWalletClient({ chain: chainOf(c), transport: http(c.rpcUrl), account: privateKeyToAccount(key) });

/** The channel as the contract holds it. */
export async function channelOf(c: SandboxChain, id: Hex) {
  const [payer, payee, token, deposit, settled, closeRequestedAt, closed] = (await c.client.readContract({
    address: c.escrow, abi: ESCROW_ABI, functionName: 'channels', args: [id],
  })) as readonly [Hex, Hex, Hex, bigint, bigint, bigint, boolean];
  return { payer, payee, token, deposit, settled, closeRequestedAt, closed };
}

/**
 * Send an escrow call from `key` and wait for its receipt. Simulated first (eth_call), so a revert throws with the
 * contract's custom error decoded (ganache's eth_estimateGas error data is not in the shape viem decodes).
 */
export async function escrowCall(c: SandboxChain, key: Hex, functionName: 'open' | 'settle' | 'requestClose' | 'withdraw' | 'deposit', args: readonly unknown[]) {
  const account = privateKeyToAccount(key);
  const { request } = await c.client.simulateContract({ address: c.escrow, abi: ESCROW_ABI, functionName, args, account } as never);
  const hash = await walletFor(c, key).writeContract(request as never);
  const receipt = await c.client.waitForTransactionReceipt({ hash, pollingInterval: 50 });
  expect(receipt.status).toBe('success');
  return receipt;
}

/**
 * The custom error name of a revert, from viem's decoded error or from the raw revert data in the cause chain
 * (ganache puts it in `data.result`, which viem does not decode).
 */
export function revertName(err: unknown): string | undefined {
  if (!(err instanceof BaseError)) return undefined;
  const decoded = err.walk((e) => e instanceof ContractFunctionRevertedError && !!e.data?.errorName) as ContractFunctionRevertedError | null;
  if (decoded?.data?.errorName) return decoded.data.errorName;
  let raw: Hex | undefined;
  err.walk((e) => {
    const d = (e as { data?: unknown }).data;
    const hex = typeof d === 'string' ? d : typeof d === 'object' && d !== null ? (d as { result?: unknown }).result : undefined;
    if (typeof hex === 'string' && /^0x[0-9a-fA-F]{8}/.test(hex)) raw = hex as Hex;
    return raw !== undefined;
  });
  if (!raw) return undefined;
  try {
    return decodeErrorResult({ abi: ESCROW_ABI, data: raw }).errorName;
  } catch {
    return `unknown ${raw.slice(0, 10)}`;
  }
}

/** `p` must reject with the contract's custom error `name`. */
export async function expectRevert(p: Promise<unknown>, name: string): Promise<void> {
  let err: unknown;
  try {
    await p;
  } catch (e) {
    err = e;
  }
  expect(err, `expected a revert with ${name}`).toBeInstanceOf(BaseError);
  expect(revertName(err), (err as Error).message).toBe(name);
}

/** Flip a 65-byte signature to its high-s twin: s → n − s and v 27 ↔ 28 (the same signer, not canonical). */
export function highS(sig: Hex): Hex {
  const r = sig.slice(2, 66);
  const s = BigInt(`0x${sig.slice(66, 130)}`);
  const v = parseInt(sig.slice(130, 132), 16);
  return `0x${r}${(SECP256K1_N - s).toString(16).padStart(64, '0')}${(v === 27 ? 28 : 27).toString(16)}`;
}

/** Replace the v byte of a 65-byte signature. */
export const withV = (sig: Hex, v: number): Hex => `${sig.slice(0, 130)}${v.toString(16).padStart(2, '0')}` as Hex;

/** Write the operator's key to a file (mode 0600), as an operator would; returns the path. */
export async function writeKeyFile(dir: string, key: string, name = 'wallet.key'): Promise<string> {
  const path = join(dir, name);
  await writeFile(path, `${key}\n`, { mode: 0o600 });
  return path;
}

/** The escrow flags for `chain`, overridable one by one (a value of undefined drops the flag). */
export function escrowFlags(chain: SandboxChain, walletKeyFile: string, over: Record<string, string | undefined> = {}): string[] {
  const flags: Record<string, string | undefined> = {
    '--mode': 'escrow', '--rail': 'sandbox', '--rpc-url': chain.rpcUrl, '--chain-id': String(chain.chainId), '--contract': chain.escrow, '--asset-token': chain.token,
    '--wallet-key-file': walletKeyFile, '--confirmations': '2', '--settle-threshold': '1',
    // the settler looks at the chain every 200 ms instead of every second: each stage of a settlement sooner, the same checks
    '--settle-poll': '200ms', ...over,
  };
  return Object.entries(flags).flatMap(([k, v]) => (v === undefined ? [] : [k, v]));
}

/** The real daemon with rail flags: `daemon --port 0 --host 127.0.0.1 --rate-limit 0 ...extra`. */
export function startEscrowDaemon(dataDir: string, extra: string[], opts: { env?: Record<string, string>; startTimeoutMs?: number } = {}): Promise<RunningDaemon> {
  return startDaemon(dataDir, { ...opts, rateLimit: 0, args: extra });
}

export { sleep } from './wait.js';
export const eventually = <T>(fn: Parameters<typeof waitFor<T>>[0], what: string, timeoutMs = 20000, everyMs = 100) => waitFor<T>(fn, what, timeoutMs, everyMs);
