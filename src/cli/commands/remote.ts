import { NodeSvcError } from '../../domain/errors.js';
import type { CommandResult, GlobalOptions } from '../output.js';

export async function verifyRemote(_g: GlobalOptions, _jws: string): Promise<CommandResult> {
  throw new NodeSvcError('unavailable', '--remote needs the daemon API, which this build does not have yet');
}
