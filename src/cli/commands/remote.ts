import { EXIT, NodeSvcError, usageError } from '../../domain/errors.js';
import { ApiError, createClient } from '../../sdk/client.js';
import type { CommandResult, GlobalOptions } from '../output.js';
import { describe } from './verify.js';

export function clientFor(g: GlobalOptions) {
  if (!g.token) throw usageError('no bearer token for the daemon', 'pass --token <ACCESS_TOKEN> or set NODE_SVC_TOKEN (node-svc tokens issue <node> makes one)');
  return createClient({ url: g.url ?? 'http://127.0.0.1:8787', token: g.token });
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
