import type { CampaignState } from './campaign-workflow.ts';

/**
 * The campaign's current-details line in the Temporal UI (and `temporal workflow describe`), kept up to date at
 * every stage change, pause and resume: `step 12/50 training`, `paused before step 4/8: <reason>`.
 */
export function campaignDetails(campaignId: string, state: CampaignState, steps: number, waiting: boolean): string {
  const last = state.lastStep
    ? ` (step ${state.lastStep.step}: mean reward ${state.lastStep.meanReward.toFixed(3)}, ` +
      `${state.lastStep.informativeGroups} informative groups)`
    : '';
  if (waiting)
    return (
      `paused ${state.pausedAt ? `at ${state.pausedAt}` : `before step ${state.step + 1}/${steps}`}: ` +
      `${state.pauseReason ?? 'paused by a pause request'}. Resume: tbt campaign resume ${campaignId}`
    );
  const ending = state.stage === 'report' || state.stage === 'done' || state.stage === 'stopped';
  const pending = ending
    ? ''
    : state.stopAfterStep
      ? ' · stop requested: ends after this step'
      : state.paused
        ? ` · pause requested${state.pauseReason ? ` (${state.pauseReason})` : ''}: takes effect before the next ` +
          'training step'
        : '';
  const line = {
    ingest: 'ingesting candidates and starting the learner',
    probe: `probing ${state.candidates ?? '?'} candidates`,
    'evaluate-before': 'evaluating before training',
    train: `step ${state.step + 1}/${steps} training${last}`,
    'evaluate-after': `evaluating after training (${state.step}/${steps} steps trained)`,
    report: 'writing the report and releasing the learner',
    done: `done: ${state.step}/${steps} steps${state.report ? `; report ${state.report.html}` : ''}`,
    stopped: `stopped after step ${state.step}/${steps}${state.report ? `; report ${state.report.html}` : ''}`,
  }[state.stage];
  return `${line}${pending}`;
}
