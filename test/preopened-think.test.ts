import assert from 'node:assert/strict';
import os from 'node:os';
import path from 'node:path';
import { after, test } from 'node:test';
import { repoRoot } from '../config/environment.ts';
import type { VisibleTurn } from '../core/user-simulator-prompt.ts';
import { referenceMessages } from '../datasets/thinkingbox/episode-grading.ts';
import type { EpisodeEnvironment, EpisodeTask, GradeRequest } from '../rollout/episode-environment.ts';
import { playEpisode, type EpisodeOptions } from '../rollout/episode-runner.ts';
import type { Endpoint } from '../rollout/policy-client.ts';
import { createChatDriver, createTokenDriver, type PolicyDriver } from '../rollout/policy-driver.ts';
import type { SimulatedUser } from '../rollout/simulated-user.ts';
import { ungradedReport } from '../sandbox/terminal-state-grader.ts';
import { startPolicyServer, type PolicyServerHandle } from '../infra/embedded-policy-server.ts';

/**
 * Qwen3.5's chat template ends its generation prompt with `<think>\n`: a completion starts inside reasoning and
 * has no opening tag of its own. Cut at its token cap before its `</think>`, it is all reasoning: the simulated
 * user is never shown it, it is never the reply graded as `x.response`, and `x.messages` holds it as reasoning.
 * A reasoning-only completion is no action (docs/reference-rules.md §2): the agent is asked again until the episode
 * budget, never the user. Real episodes on the built-in server with the template itself
 * (test/fixtures/chat-templates/qwen3.5.jinja), in token mode (training) and chat mode (evaluation against a server
 * that does not split reasoning out).
 */

const servers: PolicyServerHandle[] = [];
after(async () => {
  for (const s of servers) await s.stop();
});

let served: Endpoint | undefined;
async function qwen35(): Promise<Endpoint> {
  if (!served) {
    const server = await startPolicyServer({
      engine: 'builtin',
      chatTemplate: path.join(repoRoot, 'test', 'fixtures', 'chat-templates', 'qwen3.5.jinja'),
      logFile: path.join(os.tmpdir(), `tbt-preopened-think-${process.pid}.log`),
    });
    servers.push(server);
    served = { baseUrl: server.baseUrl, model: server.model };
  }
  return served;
}

const task: EpisodeTask = {
  uid: 'preopened/cut',
  query: 'Which bread is left today?',
  user_context: 'You want rye bread and ask until you hear about it.',
  limits: { max_user_turns: 2, max_agent_turns: 2 },
};
const options: EpisodeOptions = {
  sampling: { temperature: 0, topP: 1 },
  // Four tokens: every completion is cut inside the reasoning the template opened; the budget ends the episode.
  limits: { maxAgentTurns: 2, maxTokensPerTurn: 4, episodeTokenBudget: 256, wallClockMs: 120_000 },
  prompt: { toolsInPrompt: false, example: false },
};

/** Plays one episode; returns its record, what the simulated user was shown, and what grading got. */
async function cutEpisode(policy: PolicyDriver) {
  const shown: VisibleTurn[][] = [];
  const graded: GradeRequest[] = [];
  const user: SimulatedUser = {
    async reply(transcript) {
      shown.push([...transcript]);
      return { text: 'Any rye?', modelCall: false, usage: { input: 0, output: 0, cached: 0 } };
    },
  };
  const environment: EpisodeEnvironment = {
    systemMessages: ['You are a careful agent.', 'You help the customers of a small bakery.'],
    examples: [],
    gradeTimeoutMs: 10_000,
    async open() {
      return {
        tools: {
          listTools: async () => [],
          callTool: async () => ({ text: '', isError: true }),
          close: async () => {},
        },
        grade: async (request) => {
          graded.push(request);
          return { ...ungradedReport(), cause: 'stub grading' };
        },
        close: async () => {},
      };
    },
  };
  const record = await playEpisode({ environment, policy, user }, task, 'test:preopened', options);
  return { record, shown, graded };
}

function assertReasoningOnly({ record, shown, graded }: Awaited<ReturnType<typeof cutEpisode>>): void {
  assert.notEqual(record.outcome, 'infrastructure_error', record.cause);
  assert.ok(record.completions.length > 2, 'the agent was asked again after its cut reasoning, and not counted');
  const first = record.completions[0]!.raw;
  assert.ok(first.trim() !== '' && !first.includes('</think>'), `not cut inside reasoning: ${JSON.stringify(first)}`);
  assert.equal(record.completions[0]!.finishReason, 'length');
  for (const c of record.completions) {
    // Each is cut, or (asked again many times) ends its turn inside the reasoning: reasoning all the same.
    assert.ok(['length', 'stop'].includes(c.finishReason), c.finishReason);
    assert.equal(c.thinkPreopened, true);
    // Whatever the tiny model wrote, up to a `</think>` of its own, is reasoning.
    assert.equal(c.interpretation.reasoning, c.raw.split('</think>')[0]!.trim(), JSON.stringify(c.raw));
    assert.equal(c.interpretation.text, '', JSON.stringify(c.raw));
  }
  assert.equal(record.finishReason, 'token_budget');
  assert.deepEqual(shown, [], 'the simulated user was never asked to answer reasoning');
  assert.equal(graded.length, 1);
  assert.equal(graded[0]!.lastAssistantText, '', 'no reply for x.response');
  // `x.messages`: the cut completion is reasoning (tag think); nothing is something the agent said (tag text).
  const tags = referenceMessages(graded[0]!.messages ?? [], [])
    .filter((m) => m.T === 'Text' && m.role === 'assistant')
    .map((m) => (m as { metadata: { tag?: string } }).metadata.tag);
  assert.equal(tags[0], 'think');
  assert.ok(!tags.includes('text'), JSON.stringify(tags));
}

test('token mode: a completion cut inside the pre-opened think is reasoning, never said to anyone', async () => {
  assertReasoningOnly(await cutEpisode(createTokenDriver(await qwen35())));
});

test('chat mode: the same, from a server that leaves the reasoning in the content', async () => {
  const outcome = await cutEpisode(createChatDriver(await qwen35()));
  assert.equal(outcome.record.completions[0]!.reasoning, undefined, 'the server split nothing out');
  assertReasoningOnly(outcome);
});
