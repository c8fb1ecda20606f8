import { addKeys, listKeys, readJwksSource, removeKey } from '../../service/admin.js';
import { table, type CommandResult, type GlobalOptions } from '../output.js';
import { withStore } from './context.js';

export async function add(g: GlobalOptions, issuer: string, source: string): Promise<CommandResult> {
  const jwks = await readJwksSource(source); // fetched or read before the store is touched
  return withStore(g, async (s) => {
    const r = await addKeys(s, issuer, jwks, source);
    const parts = [r.added.length ? `trusted ${r.added.length} key(s) for ${issuer}: ${r.added.join(', ')}` : `no new keys for ${issuer}`];
    if (r.unchanged.length) parts.push(`already trusted: ${r.unchanged.join(', ')}`);
    return { data: r, human: parts.join('\n') };
  });
}

export const list = (g: GlobalOptions): Promise<CommandResult> =>
  withStore(g, async (s) => {
    const data = await listKeys(s);
    return { data: { data }, rows: data, human: data.length ? table(['KID', 'ALG', 'ISSUER', 'SOURCE'], data.map((k) => [k.kid, k.alg, k.issuer, k.source])) : 'no trusted keys yet: node-svc keys add --issuer <iss> <jwks-file-or-url>' };
  });

export const rm = (g: GlobalOptions, kid: string): Promise<CommandResult> =>
  withStore(g, async (s) => ({ data: await removeKey(s, kid), human: `removed key ${kid}` }));
