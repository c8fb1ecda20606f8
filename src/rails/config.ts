// Rail configuration from flags/env: every problem reported at once, naming the option. Keys never echoed.
import { readFileSync } from 'node:fs';
import type { Hex } from 'viem';
import { configError } from '../domain/errors.js';
import { parseDuration, parseSettlePoll } from '../domain/duration.js';
import { parseMicro } from '../domain/amount.js';
import type { Rail, RailEnv } from './rail.js';
import type { X402Exact } from './escrow/x402.js';
import type { X402Sender } from '../service/x402.js';
import { DEFAULT_POLICY, type SettlementPolicy } from './settler.js';

export interface RailFlags {
  mode?: string;
  rail?: string;
  rpcUrl?: string;
  chainId?: string;
  contract?: string;
  assetToken?: string;
  walletKeyFile?: string;
  rebroadcastAfter?: string;
  x402SettleWait?: string;
  settleStuckAfter?: string;
  confirmations?: string;
  settleThreshold?: string;
  settleInterval?: string;
  settlePoll?: string;
  cardKeyFile?: string;
  cardAccount?: string;
  cardApi?: string;
  cardWebhookSecretFile?: string;
}

export interface RailSetup {
  rail: Rail;
  policy: SettlementPolicy;
  /** Escrow: the x402 `exact` checks on the same chain, asset token and wallet (the facilitator sends through the rail). */
  x402?: { exact: X402Exact; sender: X402Sender; settleWaitMs?: number };
}

export async function railFromFlags(f: RailFlags, env: NodeJS.ProcessEnv = process.env): Promise<RailSetup | undefined> {
  if (!f.mode) {
    const stray = (['rail', 'rpcUrl', 'chainId', 'contract', 'assetToken', 'walletKeyFile', 'rebroadcastAfter', 'x402SettleWait', 'cardKeyFile', 'cardAccount', 'cardApi', 'cardWebhookSecretFile'] as const).filter((k) => f[k] !== undefined);
    if (stray.length) throw configError(`--${stray.map(kebab).join(', --')} given without --mode`, 'add --mode escrow (or card)');
    return undefined;
  }
  const problems: string[] = [];
  if (f.mode !== 'escrow' && f.mode !== 'card') problems.push(`--mode must be escrow or card, got "${f.mode}"`);
  const railEnv = (f.rail ?? 'sandbox') as RailEnv;
  if (railEnv !== 'sandbox' && railEnv !== 'production') problems.push(`--rail must be sandbox or production, got "${f.rail}"`);
  const policy: SettlementPolicy = { ...DEFAULT_POLICY };
  if (f.settleThreshold !== undefined) {
    const t = parseMicro(f.settleThreshold);
    if (t === undefined) problems.push('--settle-threshold must be a whole number of micro units');
    else policy.thresholdMicro = t;
  }
  if (f.settleInterval !== undefined) {
    const ms = parseDuration(f.settleInterval);
    if (ms === undefined) problems.push('--settle-interval must be a duration (e.g. 30s, 5m)');
    else policy.maxAgeMs = ms;
  }
  if (f.settlePoll !== undefined) {
    const ms = parseSettlePoll(f.settlePoll);
    if (ms === undefined) problems.push('--settle-poll must be a duration from 100ms to 60s (e.g. 250ms, 1s)');
    else policy.pollMs = ms;
  }
  if (f.settleStuckAfter !== undefined) {
    const ms = parseDuration(f.settleStuckAfter);
    if (ms === undefined || ms < 1000) problems.push('--settle-stuck-after must be a duration of at least 1s (e.g. 60s, 5m)');
    else policy.stuckAfterMs = ms;
  }
  if (f.mode === 'card') {
    const { cardRailFromFlags } = await import('./card/config.js');
    return cardRailFromFlags(f, env, { env: railEnv, policy, problems });
  }
  // escrow
  if (f.cardKeyFile || env.NODE_SVC_CARD_KEY || env.NODE_SVC_CARD_KEY_FILE) problems.push('card processor keys are set, but escrow mode takes no card credentials (unset --card-key-file / NODE_SVC_CARD_KEY*)');
  // Symmetric with card mode refusing every chain setting: named, never echoed (a webhook secret file path is not a secret, its content is).
  const cardOnly = (['cardAccount', 'cardApi', 'cardWebhookSecretFile'] as const).filter((k) => f[k] !== undefined);
  if (cardOnly.length) problems.push(`--${cardOnly.map(kebab).join(', --')}: card settings, but escrow mode takes no card processor settings`);
  if (!f.rpcUrl) problems.push('--rpc-url is required in escrow mode');
  else if (!/^https?:\/\//.test(f.rpcUrl)) problems.push('--rpc-url must be an http(s) URL');
  const chainId = Number(f.chainId);
  if (!f.chainId) problems.push('--chain-id is required in escrow mode');
  else if (!Number.isSafeInteger(chainId) || chainId <= 0) problems.push('--chain-id must be a positive integer');
  if (!f.contract) problems.push('--contract is required in escrow mode');
  else if (!/^0x[0-9a-fA-F]{40}$/.test(f.contract)) problems.push('--contract must be a 0x-prefixed 20-byte address');
  if (!f.assetToken) problems.push('--asset-token is required in escrow mode: the ERC-20 (6 decimals) the operator accepts; a channel in any other token is not payable');
  else if (!/^0x[0-9a-fA-F]{40}$/.test(f.assetToken)) problems.push('--asset-token must be a 0x-prefixed 20-byte address');
  let rebroadcastMs: number | undefined;
  if (f.rebroadcastAfter !== undefined) {
    rebroadcastMs = parseDuration(f.rebroadcastAfter);
    if (rebroadcastMs === undefined || rebroadcastMs < 1000) problems.push('--rebroadcast-after must be a duration of at least 1s (e.g. 30s)');
  }
  let settleWaitMs: number | undefined;
  if (f.x402SettleWait !== undefined) {
    settleWaitMs = parseDuration(f.x402SettleWait);
    if (settleWaitMs === undefined || settleWaitMs > 600_000) problems.push('--x402-settle-wait must be a duration of at most 10m (e.g. 10s; 0 answers at once)');
  }
  let key: Hex | undefined;
  if (!f.walletKeyFile) problems.push('--wallet-key-file is required in escrow mode (the payee wallet that sends settle transactions)');
  else {
    try {
      const raw = readFileSync(f.walletKeyFile, 'utf8').trim();
      const hex = raw.startsWith('0x') ? raw : `0x${raw}`;
      if (!/^0x[0-9a-fA-F]{64}$/.test(hex)) problems.push(`--wallet-key-file ${f.walletKeyFile} does not hold a 32-byte hex private key`);
      else key = hex as Hex;
    } catch (err) {
      problems.push(`--wallet-key-file ${f.walletKeyFile} cannot be read (${(err as NodeJS.ErrnoException).code ?? 'error'})`);
    }
  }
  let confirmations = railEnv === 'sandbox' ? 2 : 0;
  if (f.confirmations !== undefined) {
    confirmations = Number(f.confirmations);
    if (!/^\d{1,3}$/.test(f.confirmations)) problems.push('--confirmations must be an integer from 0 to 999 (0: use the chain\'s finalized block)');
  }
  if (problems.length) throw configError(`rail configuration refused:\n  - ${problems.join('\n  - ')}`);
  const { EscrowRail } = await import('./escrow/adapter.js');
  const rail = new EscrowRail({
    env: railEnv, rpcUrl: f.rpcUrl!, chainId, contract: f.contract as Hex, assetToken: f.assetToken as Hex, walletKey: key!, confirmations,
    ...(rebroadcastMs ? { rebroadcastMs } : {}),
  });
  await rail.preflight();
  const { X402Exact } = await import('./escrow/x402.js');
  const exact = new X402Exact({ rpcUrl: f.rpcUrl!, chainId, assetToken: f.assetToken as Hex, wallet: rail.address, confirmations });
  return { rail, policy, x402: { exact, sender: rail, ...(settleWaitMs !== undefined ? { settleWaitMs } : {}) } };
}

const kebab = (s: string) => s.replace(/[A-Z]/g, (c) => `-${c.toLowerCase()}`);
