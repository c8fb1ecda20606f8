import { readFileSync } from 'node:fs';
import { formatMicro } from '../../domain/amount.js';
import type { VerifyResult } from '../../domain/credential.js';
import { EXIT, NodeSvcError, usageError } from '../../domain/errors.js';
import { checkNodeId, trustedKeys } from '../../service/admin.js';
import { nodes } from '../../store/admin.js';
import { KeySet } from '../../sdk/keys.js';
import { Verifier } from '../../sdk/verifier.js';
import type { CommandResult, GlobalOptions } from '../output.js';
import { withStore } from './context.js';

export async function verify(g: GlobalOptions, jwsArg: string, o: { node?: string; remote?: boolean }): Promise<CommandResult> {
  const jws = (jwsArg === '-' ? readFileSync(0, 'utf8') : jwsArg).trim();
  if (!jws) throw usageError('no credential given', 'pass the JWS as an argument, or "-" to read it from stdin');
  if (o.remote) return (await import('./remote.js')).verifyRemote(g, jws);
  const node = o.node ?? process.env.NODE_SVC_NODE;
  if (node !== undefined) checkNodeId(node);
  const result = await withStore(g, async (s) => {
    const audience = node ?? (await onlyNode(s.q));
    const keys = await trustedKeys(s);
    if (!keys.length) throw new NodeSvcError('config', 'no trusted issuer keys yet, so nothing can be verified', { hint: 'add an issuer\'s keys: node-svc keys add --issuer <iss> <jwks-file-or-url>' });
    return new Verifier({ keys: new KeySet(keys), cacheSize: 0 }).verify(jws, { audience });
  }, { readonly: true });
  return { data: result, human: describe(result), exitCode: result.valid ? EXIT.ok : EXIT.negative };
}

async function onlyNode(q: Parameters<typeof nodes.list>[0]): Promise<string> {
  const all = await nodes.list(q);
  if (all.length === 1) return all[0]!.id;
  if (!all.length) throw usageError('no node registered, so there is no audience to check', 'add one with `node-svc nodes add <id>`, or pass --node <id>');
  throw usageError(`${all.length} nodes are registered; say which one the credential must be aimed at`, 'pass --node <id> or set NODE_SVC_NODE');
}

export function describe(r: VerifyResult): string {
  if (!r.valid) return `refused: ${r.refusal}\n  ${r.detail}`;
  return [
    `valid: credential ${r.credentialId} for node ${r.node}`,
    `  issuer   ${r.issuer}  (payer ${r.payer})`,
    `  stream   ${r.stream}  (budget ${r.budget}, ${r.mode} mode)`,
    `  cap      ${formatMicro(r.capMicro, r.asset)}  unit price ${formatMicro(r.unitPriceMicro, r.asset)}${r.rateMicroPerSecond ? `  rate <= ${formatMicro(r.rateMicroPerSecond, r.asset)}/s` : ''}`,
    `  expires  ${r.expiresAt}`,
  ].join('\n');
}
