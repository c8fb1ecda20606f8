// Placeholder until the card rail lands: refuses with a clear message.
import { configError } from '../../domain/errors.js';
import type { RailFlags, RailSetup } from '../config.js';
import type { RailEnv } from '../rail.js';
import type { SettlementPolicy } from '../settler.js';

export async function cardRailFromFlags(_f: RailFlags, _env: NodeJS.ProcessEnv, o: { env: RailEnv; policy: SettlementPolicy; problems: string[] }): Promise<RailSetup> {
  o.problems.push('--mode card needs the card rail, which this build does not include yet');
  throw configError(`rail configuration refused:\n  - ${o.problems.join('\n  - ')}`);
}
