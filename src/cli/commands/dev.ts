import { delimiter, join, resolve as resolvePath } from 'node:path';
import { EXIT, NodeSvcError, usageError } from '../../domain/errors.js';
import { parseDuration } from '../../domain/duration.js';
import { existsSync, mkdirSync, realpathSync } from 'node:fs';
import { formatMicro, parseMicro } from '../../domain/amount.js';
import { loadState, newState, publicJwk, saveState } from '../../dev/state.js';
import { checkNodeId } from '../../service/admin.js';
import { mintControl, mintCredential, mintVoucher } from '../../dev/mint.js';
import type { CommandResult, GlobalOptions } from '../output.js';
import { clientFor } from './remote.js';
import { exitOnceStopped } from '../stop.js';

/** The sandbox's data dir: --data-dir, else NODE_SVC_DATA_DIR, else ./data/sandbox (never the default store). */
export const sandboxDir = (g: GlobalOptions, mode: 'escrow' | 'card' = 'escrow') =>
  g.dataDir || process.env.NODE_SVC_DATA_DIR || join('data', mode === 'card' ? 'sandbox-card' : 'sandbox');

export async function dev(g: GlobalOptions, o: { port: string; pace: string; quiet?: boolean; mode: string }): Promise<CommandResult> {
  if (o.mode !== 'escrow' && o.mode !== 'card') throw usageError(`--mode must be escrow or card, got "${o.mode}"`);
  const mode = o.mode;
  const port = Number(o.port);
  if (!/^\d+$/.test(o.port) || port > 65535) throw usageError(`--port must be 0-65535, got "${o.port}"`);
  const pace = Number(o.pace);
  if (!(pace > 0 && pace <= 3600)) throw usageError('--pace must be a number of seconds between 0 and 3600');
  const { resolve } = await import('node:path');
  const dataDir = resolve(sandboxDir(g, mode));
  const out = (line: string) => process.stdout.write(`${line}\n`);
  out(`starting the sandbox in ${dataDir} (${mode === 'card' ? 'local card processor, card rail' : 'local chain, escrow rail'}, daemon, webhook receiver, simulated payer)…`);
  const { startSandbox } = await import('../../dev/sandbox.js');
  const me = invokedAs();
  const { resolveStoreUrl } = await import('../../store/open.js');
  const sb = await startSandbox({ dataDir, store: resolveStoreUrl(g.store), mode, port, pace, quiet: !!o.quiet, out });
  // The signal handlers before the banner: a supervisor may stop it the moment it reads the URL (as daemon.ts).
  const stopped = new Promise<void>((resolveStop) => {
    const stop = () => {
      out('stopping the sandbox…');
      sb.stop().then(resolveStop, resolveStop);
    };
    process.once('SIGINT', stop);
    process.once('SIGTERM', stop);
  });
  // One write: a reader (a test, a script) that has seen the token line also has the "try" lines.
  out([
    '',
    `node-svc sandbox is running: ${sb.url}`,
    '  node     dev-node',
    `  token    ${sb.token}`,
    `  data     ${sb.dataDir}`,
    '',
    'try, in another shell:',
    ...(me !== 'node-svc' ? [`  alias node-svc=${me}    # node-svc is not on your PATH (or: npm link)`] : []),
    `  export NODE_SVC_URL=${sb.url} NODE_SVC_TOKEN=${sb.token}`,
    '  node-svc status',
    '  node-svc streams list',
    '  node-svc watch',
    `  node-svc streams finality ${sb.streams[0]}`,
    'Ctrl-C stops everything; a second `npm start` picks up where this one left off.',
    '',
  ].join('\n'));
  await stopped;
  exitOnceStopped();
  return { data: undefined, human: '' };
}

/** `node-svc` when that is on PATH, else the absolute path this process was started from (for the "try" lines). */
function invokedAs(): string {
  const self = process.argv[1] ? resolvePath(process.argv[1]) : '';
  for (const dir of (process.env.PATH ?? '').split(delimiter).filter(Boolean)) {
    const candidate = join(dir, 'node-svc');
    try {
      if (existsSync(candidate) && (!self || realpathSync(candidate) === realpathSync(self))) return 'node-svc';
    } catch { /* a dangling link: keep looking */ }
  }
  return self || 'node-svc';
}

function state(g: GlobalOptions) {
  const st = loadState(sandboxDir(g));
  if (!st) throw new NodeSvcError('config', `no sandbox keys in ${sandboxDir(g)}`, { hint: 'run `node-svc dev jwks` (creates the dev issuer and payer keys) or `node-svc dev` once first' });
  return st;
}

/** `dev jwks`: the dev issuer's public keys, to trust on your own node; creates the sandbox keys on first use. */
export async function jwks(g: GlobalOptions): Promise<CommandResult> {
  const dir = sandboxDir(g);
  let st = loadState(dir);
  if (!st) {
    mkdirSync(dir, { recursive: true, mode: 0o700 });
    saveState(dir, (st = newState()));
  }
  const doc = { keys: [{ ...publicJwk(st.issuer.privateJwk), kid: st.issuer.kid, alg: 'EdDSA', use: 'sig' }] };
  // The JWKS itself on every output (it is meant for a file); the issuer to pass to keys add goes to stderr on a terminal.
  if (process.stdout.isTTY) process.stderr.write(`trust it: node-svc dev jwks > dev-jwks.json && node-svc keys add --issuer ${st.issuer.iss} dev-jwks.json\n`);
  return { data: doc, human: JSON.stringify(doc, null, 2), plainWhenPiped: true };
}

/** `dev credential`: mint a credential as the sandbox issuer (JWS vouchers, signed by the sandbox payer). */
export async function credential(g: GlobalOptions, o: { stream: string; node?: string; cap: string; unitPrice: string; rate?: string; ttl: string; budget?: string }): Promise<CommandResult> {
  const cap = parseMicro(o.cap);
  const unit = parseMicro(o.unitPrice);
  const ttl = parseDuration(o.ttl);
  if (!cap || !unit) throw usageError('--cap and --unit-price must be positive whole micro units');
  if (!ttl) throw usageError(`--ttl "${o.ttl}" is not a duration`);
  const rate = o.rate === undefined ? undefined : parseMicro(o.rate);
  const st = state(g);
  if (o.node !== undefined) checkNodeId(o.node);
  const jws = mintCredential(o.node ? { ...st, node: o.node } : st, { stream: o.stream, capMicro: cap, unitPriceMicro: unit, ttlSeconds: Math.floor(ttl / 1000), ...(o.budget ? { budget: o.budget } : {}), ...(rate ? { rateMicroPerSecond: rate } : {}) });
  // Bare when piped too (JWS=$(node-svc dev credential …), … | node-svc verify -); --json gives the object.
  return { data: { credential: jws }, human: jws, plainWhenPiped: true };
}

export async function voucher(g: GlobalOptions, o: { stream: string; amount: string; units: string; send?: boolean; credential?: string }): Promise<CommandResult> {
  const amount = parseMicro(o.amount);
  const units = parseMicro(o.units);
  if (!amount || units === undefined) throw usageError('--amount (micro units, > 0) and --units are required');
  if (o.credential !== undefined && !o.send) throw usageError('--credential goes with --send (it registers the stream with the daemon)');
  const v = mintVoucher(state(g), o.stream, amount, units);
  if (!o.send) return { data: { voucher: v }, human: v, plainWhenPiped: true };
  const cred = o.credential === '-' ? (await readStdin()).trim() : o.credential?.trim();
  if (cred === '') throw usageError('--credential is empty');
  const client = clientFor(g);
  const r = await client.submitVoucher(o.stream, v, cred);
  let asset: string | undefined;
  try {
    asset = String((await client.headroom(o.stream)).asset); // for the human line only
  } catch { /* the amount still prints */ }
  const billed = formatMicro(String(r.billedMicro), asset);
  return { data: r, human: `voucher for ${o.stream}: ${r.accepted ? `accepted, billed ${billed}` : `not accepted (${r.reason}; billed stays ${billed})`}` };
}

async function readStdin(): Promise<string> {
  const chunks: Buffer[] = [];
  for await (const c of process.stdin) chunks.push(c as Buffer);
  return Buffer.concat(chunks).toString('utf8');
}

export async function control(g: GlobalOptions, kind: string, o: { stream?: string; budget?: string; reason?: string; amount?: string; print?: boolean; node?: string }): Promise<CommandResult> {
  if (o.node !== undefined) checkNodeId(o.node);
  const st = o.node ? { ...state(g), node: o.node } : state(g);
  const kinds: Record<string, () => [string, Record<string, unknown>]> = {
    revoke: () => ['stream.revoked', { stream: need(o.stream, '--stream'), ...(o.reason ? { reason: o.reason } : {}) }],
    halt: () => ['budget.halted', { budget: need(o.budget, '--budget'), reason: need(o.reason, '--reason (one of revoked, anomaly, sla, budget_closed, exposure, rate, payer_concurrency, cap, ceiling_dead)') }],
    release: () => ['budget.released', { budget: need(o.budget, '--budget'), ...(o.amount ? { amount: o.amount } : {}) }],
  };
  const make = kinds[kind];
  if (!make) throw usageError(`unknown control "${kind}"`, 'use revoke, halt or release');
  const [k, claims] = make();
  const message = mintControl(st, k, claims);
  if (o.print) return { data: { message }, human: message };
  const r = await clientFor(g).control(message);
  return { data: r, human: `${k}: ${r.applied ? `applied (event ${r.eventId})` : 'already applied'}`, exitCode: EXIT.ok };
}

function need(v: string | undefined, flag: string): string {
  if (!v) throw usageError(`${flag} is required`);
  return v;
}
