import { EXIT, NodeSvcError, usageError } from '../../domain/errors.js';
import { ApiError, createClient } from '../../sdk/client.js';
import type { CommandResult, GlobalOptions } from '../output.js';
import { describe } from './verify.js';

/**
 * The daemon's base URL, checked before anything is sent: `127.0.0.1:8787` (no scheme) or a path such as
 * `…/v1` would otherwise fail later as an unreadable network error. Names where the value came from.
 */
export function daemonUrl(g: GlobalOptions): string {
  const raw = g.url ?? 'http://127.0.0.1:8787';
  const name = g.urlFrom === 'env' ? 'NODE_SVC_URL' : '--url';
  const example = 'e.g. http://127.0.0.1:8787';
  let u: URL | undefined;
  try {
    u = new URL(raw);
  } catch { /* below */ }
  if (!u || (u.protocol !== 'http:' && u.protocol !== 'https:'))
    throw usageError(`${name} "${raw}" is not an http(s) URL`, /^[\w.-]+:\d+/.test(raw) || /^\[/.test(raw) ? `add the scheme: http://${raw}` : example);
  if (u.username || u.password) throw usageError(`${name} must not carry credentials; pass the token with --token or NODE_SVC_TOKEN`);
  if ((u.pathname !== '/' && u.pathname !== '') || u.search || u.hash)
    throw usageError(`${name} "${raw}" must be the daemon's base URL, without a path or query`, `use ${u.origin}`);
  return u.origin;
}

export function clientFor(g: GlobalOptions) {
  const url = daemonUrl(g);
  if (!g.token) throw usageError('no bearer token for the daemon', 'pass --token <ACCESS_TOKEN> or set NODE_SVC_TOKEN (node-svc tokens issue <node> makes one)');
  return createClient({ url, token: g.token });
}

/** `verify --remote`: the same answer, asked of the daemon (so live-state refusals apply). */
export async function verifyRemote(g: GlobalOptions, jws: string): Promise<CommandResult> {
  try {
    const r = await clientFor(g).verifyAllowance(jws);
    return { data: r, human: describe(r as never), exitCode: EXIT.ok };
  } catch (err) {
    if (err instanceof ApiError && err.problem.code === 'credential_refused') {
      const data = { valid: false, refusal: err.problem.refusal, detail: err.problem.detail };
      return { data, human: describe(data as never), exitCode: EXIT.negative };
    }
    throw err instanceof NodeSvcError ? err : new NodeSvcError('internal', String(err));
  }
}
