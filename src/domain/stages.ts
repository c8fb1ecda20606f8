// Degradation stages (DESIGN §5): pure, BigInt only.
export const STAGES = ['normal', 'low', 'critical', 'halted'] as const;
export type Stage = (typeof STAGES)[number];

export interface StageInput {
  payable: boolean;
  capMicro: bigint;
  remainingMicro: bigint;
  limitMicroPerSecond: bigint | null;
  observedMicroPerSecond: bigint;
  lowPercentLeft: number;
  criticalPercentLeft: number;
  lowRatePercent: number;
}

export function degradationStage(i: StageInput): Stage {
  if (!i.payable || i.remainingMicro <= 0n) return 'halted';
  const leftAtMost = (pct: number) => i.remainingMicro * 100n <= i.capMicro * BigInt(pct);
  const limit = i.limitMicroPerSecond;
  if (leftAtMost(i.criticalPercentLeft) || (limit !== null && i.observedMicroPerSecond > limit)) return 'critical';
  if (leftAtMost(i.lowPercentLeft) || (limit !== null && i.observedMicroPerSecond * 100n > limit * BigInt(i.lowRatePercent))) return 'low';
  return 'normal';
}
