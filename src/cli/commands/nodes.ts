import { addNode, listNodes, removeNode } from '../../service/admin.js';
import { table, type CommandResult, type GlobalOptions } from '../output.js';
import { withStore } from './context.js';

export const add = (g: GlobalOptions, id: string): Promise<CommandResult> =>
  withStore(g, async (s) => {
    const node = await addNode(s, id);
    return { data: node, human: `added node ${node.id}\nnext: node-svc tokens issue ${node.id}` };
  });

export const list = (g: GlobalOptions): Promise<CommandResult> =>
  withStore(g, async (s) => {
    const data = await listNodes(s);
    return { data: { data }, rows: data, human: data.length ? table(['NODE', 'TOKEN', 'CREATED'], data.map((n) => [n.id, n.hasToken ? 'active' : '-', n.createdAt])) : 'no nodes yet: node-svc nodes add <id>' };
  });

export const rm = (g: GlobalOptions, id: string): Promise<CommandResult> =>
  withStore(g, async (s) => ({ data: await removeNode(s, id), human: `removed node ${id} and its tokens` }));
