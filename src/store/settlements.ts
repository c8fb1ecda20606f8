// Settlements and the stream frontier they move: the only SQL for them.
import { newId } from '../domain/ids.js';
import type { Sql } from './sql.js';

export interface SettlementRow {
  id: string;
  node_id: string;
  stream: string;
  rail: 'escrow' | 'card';
  amount_micro: bigint;
  status: 'pending' | 'submitted' | 'checkpointed' | 'final' | 'failed';
  reference: string | null;
  detail: string | null;
  block_number: bigint | null;
  error: string | null;
  created_at: bigint;
  submitted_at: bigint | null;
  checkpointed_at: bigint | null;
  final_at: bigint | null;
  /** Broadcasts of its transaction (first send, rebroadcasts, fee-bumped replacements). */
  attempts: bigint;
  last_broadcast_at: bigint | null;
}

/** Larger of two (SQLite's scalar MAX, PostgreSQL's GREATEST), written once for both. */
const larger = (a: string, b: string) => `CASE WHEN ${a} > ${b} THEN ${a} ELSE ${b} END`;

export const settlements = {
  open: (q: Sql, rail: string) =>
    q.all<SettlementRow>("SELECT * FROM settlements WHERE status IN ('pending', 'submitted', 'checkpointed') AND rail = ? ORDER BY created_at", [rail], true),
  /** The highest amount already settled or on its way for a stream (failed ones do not count). */
  frontier: async (q: Sql, nodeId: string, stream: string): Promise<bigint> =>
    (await q.value<bigint | null>("SELECT MAX(amount_micro) AS a FROM settlements WHERE node_id = ? AND stream = ? AND status != 'failed'", [nodeId, stream], true)) ?? 0n,
  inFlight: async (q: Sql, nodeId: string, stream: string) =>
    !!(await q.get("SELECT 1 FROM settlements WHERE node_id = ? AND stream = ? AND status IN ('pending', 'submitted')", [nodeId, stream])),
  insert: async (q: Sql, s: { nodeId: string; stream: string; rail: string; amount: bigint; now: number }) => {
    const id = newId('stl');
    await q.run("INSERT INTO settlements(id, node_id, stream, rail, amount_micro, status, created_at) VALUES (?, ?, ?, ?, ?, 'pending', ?)", [id, s.nodeId, s.stream, s.rail, s.amount, s.now]);
    return id;
  },
  submitted: (q: Sql, id: string, reference: string, detail: string | null, now: number) =>
    q.run(`UPDATE settlements SET status = 'submitted', reference = ?, detail = ?, submitted_at = COALESCE(submitted_at, ?), error = NULL,
      attempts = ${larger('attempts', '1')}, last_broadcast_at = COALESCE(last_broadcast_at, ?) WHERE id = ?`, [reference, detail, now, now, id]),
  /** Sent again (same transaction) or replaced (same nonce, higher fees: a new reference); `note` says which and why. */
  rebroadcast: (q: Sql, id: string, reference: string, detail: string, note: string, now: number) =>
    q.run("UPDATE settlements SET reference = ?, detail = ?, error = ?, attempts = attempts + 1, last_broadcast_at = ? WHERE id = ? AND status = 'submitted'",
      [reference, detail, note, now, id]),
  /** The transactions it has sent or is about to send (recorded before a rebroadcast leaves the process). */
  transactions: (q: Sql, id: string, detail: string) => q.run("UPDATE settlements SET detail = ? WHERE id = ? AND status IN ('submitted', 'checkpointed')", [detail, id]),
  /** A problem worth showing that does not end the settlement (status unchanged). */
  note: (q: Sql, id: string, error: string) => q.run('UPDATE settlements SET error = ? WHERE id = ?', [error, id]),
  /** The newest settlement of a stream, when it is not final: what the finality view shows as in progress. */
  latestUnfinished: async (q: Sql, nodeId: string, stream: string) => {
    const r = await q.get<SettlementRow>('SELECT * FROM settlements WHERE node_id = ? AND stream = ? ORDER BY created_at DESC LIMIT 1', [nodeId, stream], true);
    return r && r.status !== 'final' ? r : undefined;
  },
  checkpointed: (q: Sql, id: string, block: bigint | null, now: number) =>
    q.run("UPDATE settlements SET status = 'checkpointed', block_number = ?, checkpointed_at = COALESCE(checkpointed_at, ?) WHERE id = ?", [block, now, id]),
  final: (q: Sql, id: string, now: number) => q.run("UPDATE settlements SET status = 'final', final_at = ? WHERE id = ?", [now, id]),
  backToSubmitted: (q: Sql, id: string, error: string) => q.run("UPDATE settlements SET status = 'submitted', block_number = NULL, error = ? WHERE id = ?", [error, id]),
  failed: (q: Sql, id: string, error: string) => q.run("UPDATE settlements SET status = 'failed', error = ? WHERE id = ?", [error, id]),
  forStream: (q: Sql, nodeId: string, stream: string) =>
    q.all<SettlementRow>('SELECT * FROM settlements WHERE node_id = ? AND stream = ? ORDER BY created_at', [nodeId, stream], true),
};

/** Streams of a mode with billed truth above what is settled or on its way: candidates for the policy. */
export function unsettledStreams(q: Sql, mode: string) {
  return q.all<{
    node_id: string; id: string; billed_micro: bigint; status: string; exp: bigint; updated_at: bigint; budget: string; settled: bigint;
    oldest_unsettled_at: bigint | null; in_flight: bigint; rev_ahead: bigint; budget_status: string | null;
  }>(`
    SELECT s.node_id, s.id, s.billed_micro, s.status, s.exp, s.updated_at, s.budget,
      COALESCE((SELECT MAX(amount_micro) FROM settlements t WHERE t.node_id = s.node_id AND t.stream = s.id AND t.status != 'failed'), 0) AS settled,
      (SELECT MIN(v.received_at) FROM vouchers v WHERE v.node_id = s.node_id AND v.stream = s.id
         AND v.amount_micro > COALESCE((SELECT MAX(amount_micro) FROM settlements t WHERE t.node_id = s.node_id AND t.stream = s.id AND t.status != 'failed'), 0)) AS oldest_unsettled_at,
      CASE WHEN EXISTS (SELECT 1 FROM settlements t WHERE t.node_id = s.node_id AND t.stream = s.id AND t.status IN ('pending', 'submitted')) THEN 1 ELSE 0 END AS in_flight,
      CASE WHEN EXISTS (SELECT 1 FROM revocations r WHERE r.node_id = s.node_id AND r.stream = s.id) THEN 1 ELSE 0 END AS rev_ahead,
      (SELECT b.status FROM budgets b WHERE b.node_id = s.node_id AND b.id = s.budget) AS budget_status
    FROM streams s WHERE s.mode = ? AND s.billed_micro > 0`, [mode], true);
}

/** Move the stream's frontier: checkpointed (pending information) or final (the credit-safe amount). Monotone. */
export const frontier = {
  checkpointed: (q: Sql, nodeId: string, stream: string, amount: bigint, reference: string, now: number) =>
    q.run(`UPDATE streams SET checkpointed_micro = ${larger('checkpointed_micro', '@amount')},
      frontier_micro = CASE WHEN @amount > frontier_micro THEN @amount ELSE frontier_micro END,
      frontier_finality = CASE WHEN @amount > frontier_micro THEN 'checkpointed' ELSE frontier_finality END,
      frontier_reference = CASE WHEN @amount > frontier_micro THEN @reference ELSE frontier_reference END,
      frontier_checkpointed_at = CASE WHEN @amount > frontier_micro THEN @now ELSE frontier_checkpointed_at END,
      frontier_final_at = CASE WHEN @amount > frontier_micro THEN NULL ELSE frontier_final_at END,
      updated_at = @now WHERE node_id = @node AND id = @stream`, { amount, reference, now, node: nodeId, stream }),
  final: (q: Sql, nodeId: string, stream: string, amount: bigint, reference: string, now: number) =>
    q.run(`UPDATE streams SET final_micro = ${larger('final_micro', '@amount')}, checkpointed_micro = ${larger('checkpointed_micro', '@amount')},
      frontier_finality = CASE WHEN @amount >= frontier_micro THEN 'final' ELSE frontier_finality END,
      frontier_final_at = CASE WHEN @amount >= frontier_micro THEN @now ELSE frontier_final_at END,
      frontier_reference = CASE WHEN @amount >= frontier_micro THEN @reference ELSE frontier_reference END,
      frontier_micro = ${larger('frontier_micro', '@amount')},
      updated_at = @now WHERE node_id = @node AND id = @stream`, { amount, reference, now, node: nodeId, stream }),
};
