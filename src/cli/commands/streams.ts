import { formatMicro } from '../../domain/amount.js';
import { EXIT, usageError } from '../../domain/errors.js';
import { table, type CommandResult, type GlobalOptions } from '../output.js';
import { clientFor } from './remote.js';

type Json = Record<string, any>;
const money = (m: string, asset: string) => formatMicro(m, asset);

export async function list(g: GlobalOptions, o: { cursor?: string; limit?: string; all?: boolean; status?: 'open' | 'closed' | 'all'; sort?: 'id' | 'activity' }): Promise<CommandResult> {
  const client = clientFor(g);
  if (o.limit !== undefined && !(/^\d+$/.test(o.limit) && Number(o.limit) >= 1 && Number(o.limit) <= 500)) throw usageError(`--limit must be from 1 to 500, got "${o.limit}"`);
  const data: Json[] = [];
  let cursor = o.cursor;
  do {
    const page = await client.listStreams({ ...(cursor ? { cursor } : {}), ...(o.limit ? { limit: Number(o.limit) } : {}), ...(o.status ? { status: o.status } : {}), ...(o.sort ? { sort: o.sort } : {}) });
    data.push(...page.data);
    cursor = page.nextCursor ?? undefined;
  } while (o.all && cursor);
  const human = data.length
    ? table(['STREAM', 'SOURCE', 'STATUS', 'STAGE', 'BILLED', 'CAP', 'FINALITY', 'FINAL'], data.map((s) => [s.stream, s.source ?? 'credential', s.status, s.degradationStage, money(s.billedMicro, s.asset), money(s.capMicro, s.asset), s.finality, money(s.finalMicro, s.asset)])) +
      (cursor && !o.all ? `\n(more: --cursor ${cursor}, or --all)` : '')
    : 'no streams yet: they appear when a credential aimed at this node is verified by the daemon';
  return { data: { data, nextCursor: cursor ?? null }, human, rows: data };
}

export async function verify(g: GlobalOptions, id: string): Promise<CommandResult> {
  const r = await clientFor(g).verifyStream(id);
  const human = r.payable ? `stream ${r.stream}: open and payable` : `stream ${r.stream}: NOT payable (${r.status}${r.reason ? `: ${r.reason}` : ''})`;
  return { data: r, human, exitCode: r.payable ? EXIT.ok : EXIT.negative };
}

export async function headroom(g: GlobalOptions, id: string): Promise<CommandResult> {
  const h: Json = await clientFor(g).headroom(id);
  const human = [
    `stream ${h.stream}  stage ${h.degradationStage}  (${h.status})`,
    `  remaining  ${money(h.remainingCapMicro, h.asset)} of ${money(h.capMicro, h.asset)}  = ${h.remainingUnits} units at ${money(h.unitPriceMicro, h.asset)}`,
    `  billed     ${money(h.billedMicro, h.asset)}`,
    `  rate       ${money(h.rate.observedMicroPerSecond, h.asset)}/s observed${h.rate.limitMicroPerSecond ? `, limit ${money(h.rate.limitMicroPerSecond, h.asset)}/s` : ', no limit'}`,
  ].join('\n');
  return { data: h, human };
}

export async function finality(g: GlobalOptions, id: string): Promise<CommandResult> {
  const f: Json = await clientFor(g).finality(id);
  const human = [
    `stream ${f.stream}  finality ${f.finality}${f.finality === 'final' ? '' : '  (not a credit signal)'}`,
    `  final (credit-safe)  ${money(f.finalMicro, f.asset)}`,
    `  checkpointed         ${money(f.checkpointedMicro, f.asset)}${f.frontier.reference ? `  ref ${f.frontier.reference}` : ''}`,
    `  billed truth         ${money(f.billedTruth.amountMicro, f.asset)} (${f.billedTruth.units} units)`,
    `  unsettled            ${money(f.unsettledMicro, f.asset)}`,
    ...(f.reason ? [`  why not final        ${f.reason}`] : []),
  ].join('\n');
  return { data: f, human };
}

export async function receipt(g: GlobalOptions, id: string): Promise<CommandResult> {
  const r = await clientFor(g).receipt(id);
  return { data: r, human: r.receipt, plainWhenPiped: true };
}
