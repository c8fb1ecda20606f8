// Card rail configuration from flags/env: every problem reported at once, naming the option. Keys and secrets are
// never echoed (only their kind: test or live, secret or restricted).
import { readFileSync } from 'node:fs';
import { configError } from '../../domain/errors.js';
import type { RailFlags, RailSetup } from '../config.js';
import type { RailEnv } from '../rail.js';
import type { SettlementPolicy } from '../settler.js';

const KEY_RE = /^(sk|rk)_(test|live)_[A-Za-z0-9_]{8,}$/;
const ACCOUNT_RE = /^acct_[A-Za-z0-9]{1,64}$/;

function readSecret(flag: string, path: string, problems: string[]): string | undefined {
  try {
    const v = readFileSync(path, 'utf8').trim();
    if (!v) problems.push(`${flag} ${path} is empty`);
    return v || undefined;
  } catch (err) {
    problems.push(`${flag} ${path} cannot be read (${(err as NodeJS.ErrnoException).code ?? 'error'})`);
    return undefined;
  }
}

export async function cardRailFromFlags(f: RailFlags, env: NodeJS.ProcessEnv, o: { env: RailEnv; policy: SettlementPolicy; problems: string[] }): Promise<RailSetup> {
  const problems = o.problems;
  const railEnv = o.env;
  const escrowOnly = (['rpcUrl', 'chainId', 'contract', 'assetToken', 'walletKeyFile', 'confirmations', 'rebroadcastAfter', 'x402SettleWait'] as const).filter((k) => f[k] !== undefined);
  if (escrowOnly.length) problems.push(`--${escrowOnly.map(kebab).join(', --')}: escrow settings, but card mode takes no chain or wallet settings`);

  let key: string | undefined;
  if (f.cardKeyFile && env.NODE_SVC_CARD_KEY) problems.push('both --card-key-file and NODE_SVC_CARD_KEY are set: give the card key one way');
  else if (f.cardKeyFile) key = readSecret('--card-key-file', f.cardKeyFile, problems);
  else if (env.NODE_SVC_CARD_KEY) key = env.NODE_SVC_CARD_KEY.trim();
  else problems.push('--card-key-file (or NODE_SVC_CARD_KEY) is required in card mode: the processor secret key (sk_…) or restricted key (rk_…)');
  const keyFrom = f.cardKeyFile ? '--card-key-file' : 'NODE_SVC_CARD_KEY';
  if (key !== undefined) {
    const m = KEY_RE.exec(key);
    if (!m) problems.push(`${keyFrom} does not hold a processor secret or restricted key (sk_test_/rk_test_/sk_live_/rk_live_…)`);
    else if (railEnv === 'sandbox' && m[2] === 'live') problems.push(`${keyFrom} holds a LIVE key (${m[1]}_live_…), but --rail sandbox takes only test keys (sk_test_/rk_test_)`);
    else if (railEnv === 'production' && m[2] === 'test') problems.push(`${keyFrom} holds a test key (${m[1]}_test_…), but --rail production takes only live keys (sk_live_/rk_live_)`);
  }

  if (!f.cardAccount) problems.push("--card-account is required in card mode: the node's connected account (acct_…)");
  else if (!ACCOUNT_RE.test(f.cardAccount)) problems.push('--card-account must be a connected account id (acct_…)');

  if (f.cardApi !== undefined) {
    if (railEnv !== 'sandbox') problems.push('--card-api is only accepted with --rail sandbox (production talks to the processor itself)');
    else {
      let ok = false;
      try {
        const u = new URL(f.cardApi);
        ok = (u.protocol === 'http:' || u.protocol === 'https:') && (u.pathname === '/' || u.pathname === '') && !u.username && !u.password;
      } catch {
        ok = false;
      }
      if (!ok) problems.push('--card-api must be an http(s) base URL without a path, e.g. http://127.0.0.1:12111');
    }
  }

  let webhookSecret: string | undefined;
  if (f.cardWebhookSecretFile) {
    webhookSecret = readSecret('--card-webhook-secret-file', f.cardWebhookSecretFile, problems);
    if (webhookSecret !== undefined && !/^whsec_[A-Za-z0-9+/=_-]{8,}$/.test(webhookSecret)) {
      problems.push('--card-webhook-secret-file does not hold a webhook signing secret (whsec_…)');
      webhookSecret = undefined;
    }
  }

  if (problems.length) throw configError(`rail configuration refused:\n  - ${problems.join('\n  - ')}`);
  const { CardRail } = await import('./adapter.js');
  const rail = new CardRail({
    env: railEnv, key: key!, account: f.cardAccount!,
    ...(webhookSecret ? { webhookSecret } : {}),
    ...(f.cardApi ? { api: f.cardApi } : {}),
  });
  await rail.preflight();
  return { rail, policy: o.policy };
}

const kebab = (s: string) => s.replace(/[A-Z]/g, (c) => `-${c.toLowerCase()}`);
