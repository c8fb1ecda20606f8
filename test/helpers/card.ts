// Card rail test helpers: card-mode credentials naming a PaymentIntent, key/secret files, and the real daemon
// (bin/node-svc daemon) started with the card flags (test/helpers/daemon.ts only takes env).
import { spawn } from 'node:child_process';
import { randomBytes } from 'node:crypto';
import { writeFile } from 'node:fs/promises';
import { join } from 'node:path';
import type { LocalProcessor } from '../../src/rails/card/processor.js';
import { BIN, REPO_ROOT } from './cli.js';
import type { RunningDaemon } from './daemon.js';
import { mintCredential, signVoucher, type KeyPair } from './issuer.js';

/** A card-mode credential for `stream`, paying through PaymentIntent `pi`, in `asset` (default USD). */
export function cardCredential(issuer: KeyPair, payer: KeyPair, stream: string, pi: string, claims: Record<string, unknown> = {}): string {
  return mintCredential({ key: issuer, payer, claims: { stream, mode: 'card', asset: 'USD', cap: '5000000', unitPrice: '1', rate: undefined, paymentIntent: pi, ...claims } });
}

export const voucher = (payer: KeyPair, stream: string, amount: bigint | string) =>
  signVoucher(payer, { stream, amount: String(amount), units: String(amount) });

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
    '--card-webhook-secret-file': files.webhookSecret, '--settle-threshold': '1', ...over,
  };
  return Object.entries(flags).flatMap(([k, v]) => (v === undefined ? [] : [k, v]));
}

const LISTENING_RE = /listening on (http:\/\/\S+)/;

/** `node bin/node-svc --data-dir <dir> daemon --port 0 --host 127.0.0.1 --rate-limit 0 ...extra`; resolves once listening. */
export function startCardDaemon(dataDir: string, extra: string[], opts: { env?: Record<string, string>; startTimeoutMs?: number } = {}): Promise<RunningDaemon> {
  const env: NodeJS.ProcessEnv = {};
  for (const [k, v] of Object.entries(process.env)) if (!k.startsWith('NODE_SVC_')) env[k] = v;
  Object.assign(env, opts.env);
  const args = [BIN, '--data-dir', dataDir, 'daemon', '--port', '0', '--host', '127.0.0.1', '--rate-limit', '0', ...extra];
  const child = spawn(process.execPath, args, { cwd: REPO_ROOT, env, stdio: ['ignore', 'pipe', 'pipe'] });
  let out = '';
  let err = '';
  child.stdout!.setEncoding('utf8');
  child.stderr!.setEncoding('utf8');
  child.stderr!.on('data', (s: string) => { err += s; });
  const exited = new Promise<number | null>((resolve) => child.once('exit', (code) => resolve(code)));
  const timeoutMs = opts.startTimeoutMs ?? 30_000;
  return new Promise((resolve, reject) => {
    const timer = setTimeout(() => {
      child.kill('SIGKILL');
      reject(new Error(`daemon did not print "listening on" within ${timeoutMs} ms\nstdout: ${out}\nstderr: ${err}`));
    }, timeoutMs);
    child.once('error', (e) => { clearTimeout(timer); reject(e); });
    void exited.then((code) => {
      clearTimeout(timer);
      reject(new Error(`daemon exited with ${code} before listening\nstdout: ${out}\nstderr: ${err}`));
    });
    child.stdout!.on('data', (s: string) => {
      const before = out;
      out += s;
      const m = LISTENING_RE.exec(out);
      if (!m || LISTENING_RE.test(before)) return;
      clearTimeout(timer);
      resolve({
        url: m[1]!,
        pid: child.pid!,
        child,
        get stderr() { return err; },
        get stdout() { return out; },
        stop(signal: NodeJS.Signals = 'SIGTERM') {
          if (child.exitCode === null && child.signalCode === null) child.kill(signal);
          return exited;
        },
      });
    });
  });
}

export const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));

/** Poll `fn` until it returns a truthy value (bounded); the last value is in the error. */
export async function eventually<T>(fn: () => Promise<T | undefined | null | false> | T | undefined | null | false, what: string, timeoutMs = 15_000, everyMs = 50): Promise<T> {
  const end = Date.now() + timeoutMs;
  let last: unknown;
  for (;;) {
    last = await fn();
    if (last) return last as T;
    if (Date.now() > end) throw new Error(`${what}: not reached within ${timeoutMs} ms (last: ${JSON.stringify(last, (_k, v) => (typeof v === 'bigint' ? v.toString() : v))?.slice(0, 2000)})`);
    await sleep(everyMs);
  }
}
