import { usageError } from '../../domain/errors.js';
import { parseDuration } from '../../domain/duration.js';
import { issueToken, revokeTokens, rotateToken } from '../../service/admin.js';
import type { CommandResult, GlobalOptions } from '../output.js';
import { withStore } from './context.js';

const shown = (t: { node: string; token: string }) =>
  `${t.token}\n\nThis is the bearer token of node ${t.node}. It is shown only now: store it in your node's secret store.`;

export const issue = (g: GlobalOptions, node: string): Promise<CommandResult> =>
  withStore(g, async (s) => {
    const t = await issueToken(s, node);
    return { data: t, human: shown(t) };
  });

export const rotate = (g: GlobalOptions, node: string, grace: string): Promise<CommandResult> => {
  const graceMs = parseDuration(grace);
  if (graceMs === undefined) throw usageError(`--grace "${grace}" is not a duration`, 'use e.g. 0, 90s, 10m, 24h or 7d');
  return withStore(g, async (s) => {
    const t = await rotateToken(s, node, graceMs);
    const old = t.previousValidUntil && graceMs > 0 ? `\nThe previous token keeps working until ${t.previousValidUntil}.` : '';
    return { data: t, human: shown(t) + old };
  });
};

export const revoke = (g: GlobalOptions, node: string): Promise<CommandResult> =>
  withStore(g, async (s) => {
    const r = await revokeTokens(s, node);
    return { data: r, human: `revoked ${r.revoked} token(s) of node ${node}` };
  });
