import type { CampaignState } from './campaign-workflow.ts';

/**
 * What the pause, resume and stop Updates answer: when the request takes effect, given where the campaign is, or
 * why it is refused (nothing left to pause or stop, nothing paused). Pure, so the validators and the handlers
 * (campaign-workflow.ts) and the tests share one text.
 */

export type ControlAction = 'pause' | 'resume' | 'stop';

export type ControlAnswer = { refused: string } | { answer: string };

export function controlAnswer(
  action: ControlAction,
  state: CampaignState,
  steps: number,
  waitingPaused: boolean,
  /** The queue the campaign is paused on for want of a poller (queue-watch.ts), if it is. */
  queueWait?: string,
): ControlAnswer {
  const ending = ['evaluate-after', 'report', 'done', 'stopped'].includes(state.stage) || state.step >= steps;
  const next = state.step + 1;
  if (action === 'resume') {
    if (!state.paused) return { refused: 'the campaign is not paused: nothing to resume' };
    if (queueWait)
      return {
        answer:
          `resumed: ${state.pausedAt ?? 'the stage'} keeps waiting for a worker on ${queueWait}; ` +
          'it pauses again if none polls within a full wait',
      };
    if (state.pausedAt) return { answer: `resumed: ${state.pausedAt} runs again now` };
    if (waitingPaused) return { answer: `resumed: training step ${next} starts now` };
    return { answer: 'the pause requested earlier is withdrawn: training goes on without stopping' };
  }
  if (ending && !state.pausedAt)
    return {
      refused:
        `no training step is left (stage ${state.stage}): the evaluation and the report run to their end; ` +
        '`tbt campaign terminate` ends the campaign now',
    };
  if (action === 'pause') {
    if (state.paused) return { answer: `already paused${state.pauseReason ? `: ${state.pauseReason}` : ''}` };
    if (state.stage === 'train') return { answer: `pauses when training step ${next} ends, before step ${next + 1}` };
    return { answer: `pauses before training step ${next}, once the stages before training end (now: ${state.stage})` };
  }
  if (state.stopAfterStep) return { answer: 'a stop was already requested' };
  if (state.pausedAt) return { answer: `stops now: ${state.pausedAt} is abandoned and the report is written` };
  if (waitingPaused) return { answer: `stops now, before training step ${next}: the report is written` };
  if (state.stage === 'train') return { answer: `stops when training step ${next} ends; then the report is written` };
  return {
    answer:
      `stops before training step ${next}, once the stages before training end (now: ${state.stage}); ` +
      'then the report',
  };
}
