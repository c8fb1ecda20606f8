// Card rail test helpers: card-mode credentials naming a PaymentIntent, key/secret files, and the real daemon
// (bin/node-svc daemon) started with the card flags (test/helpers/daemon.ts only takes env).
import { randomBytes } from 'node:crypto';
import { writeFile } from 'node:fs/promises';
import { join } from 'node:path';
import type { LocalProcessor } from '../../src/rails/card/processor.js';
import { startDaemon, type RunningDaemon } from './daemon.js';
import { waitFor } from './wait.js';
import { mintCredential, signVoucher, type KeyPair } from './issuer.js';

/** A card-mode credential for `stream`, paying through PaymentIntent `pi`, in `asset` (default USD). */
export function cardCredential(issuer: KeyPair, payer: KeyPair, stream: string, pi: string, claims: Record<string, unknown> = {}): string {
  return mintCredential({ key: issuer, payer, claims: { stream, mode: 'card', asset: 'USD', cap: '5000000', unitPrice: '1', rate: undefined, paymentIntent: pi, ...claims } });
}

export const voucher = (payer: KeyPair, stream: string, amount: bigint | string) =>
  signVoucher(payer, { stream, amount: String(amount), units: String(amount) });

export { controlMessage } from './issuer.js';

export const newWebhookSecret = () => `whsec_${randomBytes(24).toString('base64')}`;

/** Write a secret to a file (mode 0600), as an operator would; returns the path. */
export async function writeSecretFile(dir: string, name: string, value: string): Promise<string> {
  const path = join(dir, name);
  await writeFile(path, `${value}\n`, { mode: 0o600 });
  return path;
}

/** The card flags for a local processor, overridable one by one (a value of undefined drops the flag). */
export function cardFlags(p: LocalProcessor, files: { key: string; webhookSecret?: string }, account: string, over: Record<string, string | undefined> = {}): string[] {
  const flags: Record<string, string | undefined> = {
    '--mode': 'card', '--rail': 'sandbox', '--card-key-file': files.key, '--card-account': account, '--card-api': p.url,
    '--card-webhook-secret-file': files.webhookSecret, '--settle-threshold': '1', '--settle-poll': '200ms', ...over,
  };
  return Object.entries(flags).flatMap(([k, v]) => (v === undefined ? [] : [k, v]));
}

/** The real daemon with rail flags: `daemon --port 0 --host 127.0.0.1 --rate-limit 0 ...extra`. */
export function startCardDaemon(dataDir: string, extra: string[], opts: { env?: Record<string, string>; startTimeoutMs?: number } = {}): Promise<RunningDaemon> {
  return startDaemon(dataDir, { ...opts, rateLimit: 0, args: extra });
}

export { sleep } from './wait.js';
export const eventually = <T>(fn: Parameters<typeof waitFor<T>>[0], what: string, timeoutMs = 15000, everyMs = 50) => waitFor<T>(fn, what, timeoutMs, everyMs);
