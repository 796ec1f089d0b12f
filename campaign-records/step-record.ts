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
  /** Groups dropped because their task's own test code raised twice (outcome task_error); absent when none. */
  taskErrorGroups?: { uid: string; cause: string }[];
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
  /** Versions the trained episodes lag behind the weights the update started from (absent: older records). */
  episodeLag?: { mean: number; max: number };
  /**
   * Trained tokens per sampler weight version (`{"3": 1200, "4": 310}`): with `training.partial_rollouts` an episode
   * interrupted by a sync mixes two. Absent when no trained episode carried token versions (or older records).
   */
  versionMix?: Record<string, number>;
  /**
   * Wall seconds of the step's phases (workflow time; absent: older records): sampling its groups (done during the
   * previous step when steps overlap), update and export, waiting for episodes in flight before the sync, the sync.
   */
  phaseSeconds?: { sample: number; update: number; drain: number; sync: number };
  /**
   * True when the learner had already trained this step on another batch than the one this run drew (a re-run step
   * whose lost episodes now succeeded): `groups`, `meanReward`, `leakedInfraEpisodes` and `episodeLag` then describe
   * the batch trained, the selection counts (informative, replaced, lost, refilled, stale) this run's drawing.
   * Absent: the batch drawn is the batch trained (or the record predates the check).
   */
  batchMismatch?: boolean;
  /** With `batchMismatch`: the ids of the episodes trained, sorted (absent when the learner had not kept them). */
  trainedEpisodeIds?: string[];
}
