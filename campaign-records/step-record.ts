/** One training step of a campaign as the control database keeps it (`campaign_steps.record`). */
export interface StepRecord {
  campaignId: string;
  step: number;
  groups: { uid: string; rewards: number[]; episodeIds: string[] }[];
  informativeGroups: number;
  zeroVarianceGroups: number;
  replacements: number;
  lostGroups: number;
  infraErrors: number;
  leakedInfraEpisodes: number;
  fallback: 'train_on_fewer' | 'keep_zero_variance' | null;
  meanReward: number;
  update: Record<string, unknown>;
  repeatedUpdate: boolean;
  checkpoint: string;
  exportPath: string;
  /** Version every policy server holds after this step (its export). */
  weightVersion: number;
  /** Version the step's episodes were sampled from. */
  sampledWeightVersion: number;
  /** Episodes dropped (and refilled) for lagging more than max_staleness versions. */
  staleEpisodes: number;
  /** Seconds each server's weight sync took. */
  syncSeconds: number[];
}
