import {
  buildAgentSystemPrompt,
  DONE_MARKER,
  END_TURN_TOOL,
  exampleTurns,
  toolsSection,
  type PromptTool,
} from '../core/agent-prompt.ts';
import { BadInputError, ContextOverflowError, InfrastructureError, errorMessage } from '../core/errors.ts';
import { interpretCompletion, interpretNativeMessage, type Interpretation } from '../core/interpret/index.ts';
import { THINK_OPEN } from '../core/interpret/think-blocks.ts';
import type { SystemMessageHandling } from '../core/system-message-merge.ts';
import type { VisibleTurn } from '../core/user-simulator-prompt.ts';
import type { Judge } from './judge-client.ts';
import type {
  EnvironmentToolResult,
  EpisodeEnvironment,
  EpisodeTask,
  OpenedEnvironment,
} from './episode-environment.ts';
import type { ChatMessage, SamplingParams } from './policy-client.ts';
import type { Generation, PolicyDriver, Trajectory } from './policy-driver.ts';
import type { SimulatedUser } from './simulated-user.ts';
import { ReplayDiverged, toolReplayMismatch, type ResumeEntry, type TurnCheckpoint } from './turn-checkpoints.ts';
import type { GradeReport, Outcome } from '../sandbox/terminal-state-grader.ts';

/**
 * One full episode (docs/reference-rules.md §2): a fresh backend (sandbox database or tool-server processes), its own
 * MCP session, the agent loop with a simulated user, then terminal-state grading. It ends in exactly one outcome:
 * success, agent failure (with a finish reason) or infrastructure error (with a cause). Nothing here waits without a
 * deadline. An abandoned episode (its activity cancelled) ends in none of them: it stops where it waits, releases its
 * backend and rejects.
 */

export type FinishReason =
  | 'done'
  | 'end_turn'
  | 'single_turn'
  | 'user_turn_limit'
  | 'user_script_ended'
  /** Recorded by older code where user_script_ended is recorded now. */
  | 'user_finished'
  | 'agent_turn_limit'
  | 'token_budget'
  | 'context_overflow'
  | 'wall_clock_timeout'
  | 'infrastructure_error';

/**
 * Ends that are graded on the terminal state. As in the reference, reaching a turn or token limit ends the
 * episode and its state is graded; only our own addition, the wall clock, ends it ungraded (reward 0;
 * docs/reference-rules.md §3).
 */
const GRADED: ReadonlySet<FinishReason> = new Set([
  'done',
  'end_turn',
  'single_turn',
  'user_turn_limit',
  'user_script_ended',
  'user_finished',
  'agent_turn_limit',
  'token_budget',
  'context_overflow',
]);

export interface EpisodeLimits {
  /**
   * Cap on agent actions when the task sets none (null = unlimited, as in the reference): a completion's visible
   * text, its tool calls (one action however many) and each direct response count one each
   * (docs/reference-rules.md §2).
   */
  maxAgentTurns: number | null;
  maxTokensPerTurn: number;
  episodeTokenBudget: number;
  wallClockMs: number;
}

export interface EpisodeOptions {
  sampling: Omit<SamplingParams, 'maxTokens'>;
  limits: EpisodeLimits;
  /** Put tool descriptions in the system prompt (templates without tool support) and show a worked example. */
  prompt: { toolsInPrompt: boolean; example: boolean };
}

export interface RecordedToolCall {
  turn: number;
  name: string;
  arguments: Record<string, unknown>;
  result: string;
  isError: boolean;
}
export interface RecordedCompletion {
  turn: number;
  raw: string;
  native?: unknown;
  finishReason: string;
  /** The reasoning the chat server split out of `raw` (`reasoning_content`), when it did. */
  reasoning?: string;
  /** `raw` started inside a `<think>` the chat template opened (rollout/think-opening.ts). */
  thinkPreopened?: boolean;
  interpretation: Interpretation;
}
/** One role's calls and token counts within an episode (policy, simulated user or judge). */
export interface RoleCallUsage {
  calls: number;
  input: number;
  output: number;
  cached: number;
}

export interface EpisodeRecord {
  outcome: Outcome;
  reward: number;
  finishReason: FinishReason;
  cause?: string;
  messages: ChatMessage[];
  completions: RecordedCompletion[];
  toolCalls: RecordedToolCall[];
  grade?: GradeReport;
  usage: { policy: RoleCallUsage; user: RoleCallUsage; judge: RoleCallUsage };
  timings: { totalMs: number; policyMs: number; toolMs: number; userMs: number; gradeMs: number; sandboxMs: number };
  trajectory?: Trajectory;
  /** Tools as the agent saw them (for re-interpretation by `tbt parity`). */
  tools?: { name: string; inputSchema: Record<string, unknown> }[];
  /** host:pid of the worker process that ran the episode. */
  worker?: string;
  /** Weight version of the policy server(s) it sampled from (set in campaigns; 0 = the base weights). */
  weightVersion?: number;
  /**
   * Set when the opening had several system messages: `merged` when the policy's chat template takes only one
   * and got them as one (`messages` keeps them apart, as the agent's tests read them).
   */
  systemMessages?: SystemMessageHandling;
  /** The policy server's refusal, when the episode ended with `context_overflow`. */
  contextOverflow?: string;
  /** NUL characters and lone surrogates replaced by U+FFFD so that Postgres could store the record. */
  unstorableCharacters?: number;
  /** Attempts that found turns an earlier attempt saved, and what they did with them (rollout/turn-checkpoints.ts). */
  resume?: ResumeEntry[];
}

export interface EpisodeDependencies {
  environment: EpisodeEnvironment;
  policy: PolicyDriver;
  user: SimulatedUser;
  judge?: Judge;
  /** Called after every agent turn (the activity heartbeats here). */
  onTurn?: (progress: { turn: number; toolCalls: number; userReplies: number }) => void;
  /**
   * Abandons the episode (its activity was cancelled): every step in flight is given up at once, the backend is
   * released, and the episode rejects with the signal's reason. The clients above abort their requests on it too.
   */
  signal?: AbortSignal;
  /**
   * Turns an earlier attempt completed, replayed before the episode goes on live. A replayed tool result that differs
   * from its recording rejects the episode with ReplayDiverged (its backend released): the caller starts it over.
   */
  replay?: TurnCheckpoint[];
  /** Saves each completed turn, for a later attempt to resume from (the recording layer writes it durably). */
  saveTurn?: (checkpoint: TurnCheckpoint) => Promise<void>;
}

/** `during` is set when the deadline passed while waiting on a dependency (a hang: infrastructure). */
class WallClockExceeded extends Error {
  constructor(readonly during?: string) {
    super(during ? `no answer from ${during} before the episode deadline` : 'episode deadline passed');
  }
}

function usage(): RoleCallUsage {
  return { calls: 0, input: 0, output: 0, cached: 0 };
}

function emptyRecord(): EpisodeRecord {
  return {
    outcome: 'agent_failure',
    reward: 0,
    finishReason: 'done',
    messages: [],
    completions: [],
    toolCalls: [],
    usage: { policy: usage(), user: usage(), judge: usage() },
    timings: { totalMs: 0, policyMs: 0, toolMs: 0, userMs: 0, gradeMs: 0, sandboxMs: 0 },
  };
}

/** Runs one step of an episode under its deadline and adds the step's time to the record's timings. */
type TimedStep = <T>(
  what: keyof EpisodeRecord['timings'],
  step: () => Promise<T>,
  onLateResult?: (value: T) => void,
  ownBudgetMs?: number,
) => Promise<T>;

/**
 * Bounds a step by the episode deadline. Generation is the agent's own time: it runs to its end (bounded by
 * the client timeout, which the runner caps at the time left plus a grace period, so a hung server is an
 * infrastructure error) and the deadline is checked after it. Every other step races the deadline, and
 * losing that race is an infrastructure error: the agent does not make a tool or the user simulator hang.
 * Grading runs after the agent is done and is not the agent's time: it has its own bound (`ownBudgetMs`).
 * Every step, generation included, also races the episode's abort signal: an abandoned episode waits for nothing.
 * A step given up that still succeeds later is handed to `onLateResult` (a backend that arrives late is released).
 */
function deadlineBound(record: EpisodeRecord, deadline: number, signal?: AbortSignal): TimedStep {
  return async <T>(
    what: keyof EpisodeRecord['timings'],
    step: () => Promise<T>,
    onLateResult?: (value: T) => void,
    ownBudgetMs?: number,
  ): Promise<T> => {
    signal?.throwIfAborted();
    const left = ownBudgetMs ?? deadline - Date.now();
    if (left <= 0) throw new WallClockExceeded();
    const t = Date.now();
    let timer: NodeJS.Timeout | undefined;
    let onAbort: (() => void) | undefined;
    try {
      const running = step();
      let givenUp = false;
      const giveUp = (reject: (reason: unknown) => void, reason: unknown) => {
        if (!givenUp && onLateResult) running.then(onLateResult, () => undefined);
        givenUp = true;
        reject(reason);
      };
      const racers: Promise<T>[] = [running];
      if (what !== 'policyMs')
        racers.push(
          new Promise<never>((_, reject) => {
            timer = setTimeout(() => giveUp(reject, new WallClockExceeded(what.replace(/Ms$/, ''))), left);
          }),
        );
      if (signal)
        racers.push(
          new Promise<never>((_, reject) => {
            onAbort = () => giveUp(reject, signal.reason);
            signal.addEventListener('abort', onAbort, { once: true });
          }),
        );
      const value = await Promise.race(racers);
      if (what === 'policyMs' && Date.now() > deadline) throw new WallClockExceeded();
      return value;
    } finally {
      clearTimeout(timer);
      if (onAbort) signal?.removeEventListener('abort', onAbort);
      record.timings[what] += Date.now() - t;
    }
  };
}

/** Client timeout for one policy call: what is left of the episode plus a grace period. */
function callTimeoutMs(deadline: number): number {
  return Math.max(1000, deadline - Date.now() + 30_000);
}

/** An episode once its backend is open: what the steps of its agent loop share. */
interface EpisodeInPlay {
  deps: EpisodeDependencies;
  task: EpisodeTask;
  options: EpisodeOptions;
  record: EpisodeRecord;
  deadline: number;
  timed: TimedStep;
  opened: OpenedEnvironment;
  /** The tools' names and input schemas, which type the arguments of the agent's tool calls. */
  typingSpecs: { name: string; inputSchema: Record<string, unknown> }[];
  /** The conversation as the simulated user sees it. */
  transcript: VisibleTurn[];
  /** The last reply the agent wrote to the user (or the history's): `x.response`, and what rubrics judge. */
  lastReply: string;
  /** Tools whose call ends the episode: our `end_turn`, or a dataset's `is_end_turn` tools. */
  endTurnTools: ReadonlySet<string>;
  maxAgentTurns: number;
  /** Agent actions so far, as the reference counts them toward its agent-turn limit. */
  actions: number;
  conversational: boolean;
  userReplies: number;
  /** The last completion was cut at its token cap showing only reasoning: the next one goes on inside it. */
  cutInReasoning: boolean;
  /** When the episode's own time began (moved back by the time of the turns a resumed attempt restores). */
  started: number;
  /** The turn in play, recorded as it happens (or replayed from its checkpoint). */
  current?: Partial<Pick<TurnCheckpoint, 'generation' | 'userReply'>> &
    Pick<TurnCheckpoint, 'toolResults'> & { checkpoint?: TurnCheckpoint };
}

/**
 * Plays one episode, from opening its backend to grading; all ends in the record, except bad input, which throws,
 * and abandonment (`deps.signal` aborted), which rejects with the signal's reason: nothing of it is graded.
 */
export async function playEpisode(
  deps: EpisodeDependencies,
  task: EpisodeTask,
  owner: string,
  options: EpisodeOptions,
): Promise<EpisodeRecord> {
  const started = Date.now() - (deps.replay?.at(-1)?.elapsedMs ?? 0);
  const deadline = started + options.limits.wallClockMs;
  const record = emptyRecord();
  const timed = deadlineBound(record, deadline, deps.signal);
  let opened: OpenedEnvironment | undefined;
  try {
    // A backend that arrives after the deadline or the abandonment is released at once, not left to the sweeper.
    opened = await timed(
      'sandboxMs',
      () => deps.environment.open(owner),
      (late) => void late.close(),
    );
    const run = await startConversation({ deps, task, options, record, deadline, timed, opened, started });
    let finish: FinishReason | undefined;
    for (let turn = 0; finish === undefined; turn++) {
      run.current = { checkpoint: deps.replay?.[turn], toolResults: [] };
      finish = await agentTurn(run, turn);
      if (finish === undefined) await turnCompleted(run, turn);
    }
    record.finishReason = finish;
    record.trajectory = deps.policy.trajectory();
    if (!GRADED.has(record.finishReason)) {
      record.cause = `limit reached: ${record.finishReason}`;
      return record;
    }
    await gradeEpisode(run);
    return record;
  } catch (err) {
    // Whatever the step in flight threw once its requests were aborted, the episode was abandoned, not failed.
    if (deps.signal?.aborted) throw deps.signal.reason;
    if (err instanceof BadInputError || err instanceof ReplayDiverged) throw err;
    return failedEpisode(record, err, deps.policy, options);
  } finally {
    record.timings.totalMs = Date.now() - started;
    await opened?.close();
  }
}

/** The opening of the conversation: system prompt, examples, earlier turns and the query, sent to the policy. */
async function startConversation(
  setup: Pick<EpisodeInPlay, 'deps' | 'task' | 'options' | 'record' | 'deadline' | 'timed' | 'opened' | 'started'>,
): Promise<EpisodeInPlay> {
  const { deps, task, options, record, timed, opened } = setup;
  const verbatim = opened.formatted?.systemMessages ?? deps.environment.systemMessages;
  const listed = await timed('toolMs', () => opened.tools.listTools());
  const tools: PromptTool[] = verbatim ? listed : [...listed, END_TURN_TOOL];
  const typingSpecs = tools.map((t) => ({ name: t.name, inputSchema: t.inputSchema }));
  const endTurnTools = new Set(listed.filter((t) => t.endsTurn).map((t) => t.name));
  if (!verbatim) endTurnTools.add(END_TURN_TOOL.name);
  record.tools = typingSpecs;
  const examples = options.prompt.example ? deps.environment.examples : [];
  const query = opened.formatted?.query ?? task.query;
  const system = verbatim
    ? [...verbatim, ...(options.prompt.toolsInPrompt ? [toolsSection(tools)] : [])]
    : [
        buildAgentSystemPrompt(deps.environment.instructions ?? '', tools, {
          ...options.prompt,
          hasScenarioExamples: examples.length > 0,
        }),
      ];
  const history = opened.history;
  record.messages.push(
    ...system.map((content) => ({ role: 'system' as const, content })),
    ...exampleTurns(examples),
    ...(history?.messages ?? []),
    {
      role: 'user',
      content: query,
    },
  );
  // Tools not described in the system prompt go to the server, whose chat template renders them.
  const serverTools = options.prompt.toolsInPrompt
    ? undefined
    : tools.map((t) => ({
        type: 'function',
        function: { name: t.name, description: t.description, parameters: t.inputSchema },
      }));
  const started = await timed('toolMs', () => deps.policy.start(record.messages, serverTools));
  if (started.systemMessages) record.systemMessages = started.systemMessages;
  return {
    ...setup,
    typingSpecs,
    transcript: [...(history?.transcript ?? []), { role: 'user', text: query }],
    lastReply: history?.lastReply ?? '',
    endTurnTools,
    maxAgentTurns: task.limits.max_agent_turns ?? options.limits.maxAgentTurns ?? Infinity,
    actions: 0,
    // As the reference: no simulated user without a (non-empty) context to play from.
    conversational: Boolean(task.user_context) || task.user_replies !== undefined,
    userReplies: 0,
    cutInReasoning: false,
  };
}

/**
 * One agent turn: a completion, then its tool calls or else a user turn. Returns how the episode ends, if it does.
 * The reference's agent-turn limit counts actions, not completions (docs/reference-rules.md §2): a visible text, a
 * completion's tool calls and a direct response count; reasoning alone does not.
 */
async function agentTurn(run: EpisodeInPlay, turn: number): Promise<FinishReason | undefined> {
  const completion = await agentCompletion(run, turn);
  if ('finish' in completion) return completion.finish;
  const { generation, interpretation } = completion;
  const progress = () =>
    run.deps.onTurn?.({ turn, toolCalls: run.record.toolCalls.length, userReplies: run.userReplies });
  const reasoningOnly = isReasoningOnly(interpretation, generation.finishReason, run.cutInReasoning);
  run.cutInReasoning = reasoningOnly && generation.finishReason === 'length';
  if (reasoningOnly) {
    progress();
    return askAgain(run, generation);
  }
  // Visible text is said to the user whether or not tool calls follow it (the reference's transcript and
  // `x.response` hold it too); a completion showing nothing leaves the last reply as it was.
  if (interpretation.text !== '') {
    run.lastReply = interpretation.text;
    run.actions += 1;
    if (interpretation.toolCalls.length > 0) run.transcript.push({ role: 'assistant', text: interpretation.text });
  }
  if (interpretation.toolCalls.length === 0) {
    progress();
    // A message without tool calls goes to the user (an empty one too: the reference then asks the user with
    // nothing new said).
    return userTurn(run, interpretation.text);
  }
  const { finish, observations } = await callTools(run, turn, generation, interpretation);
  progress();
  if (finish) return finish;
  run.record.messages.push(...observations);
  await run.timed('toolMs', () => run.deps.policy.observe(observations));
  return undefined;
}

/**
 * Reasoning and nothing else (no visible text, no tool call), or a completion cut at its token cap before it
 * showed anything: no message to the user and no action. A completion after one cut inside its reasoning that
 * shows nothing ends that reasoning (token mode goes on inside the cut turn): reasoning only, even when empty.
 */
function isReasoningOnly(interpretation: Interpretation, finishReason: string, afterCut: boolean): boolean {
  if (interpretation.text !== '' || interpretation.toolCalls.length > 0) return false;
  return interpretation.reasoning.trim() !== '' || finishReason === 'length' || afterCut;
}

/**
 * The agent is asked again, its reasoning kept in the conversation, as the reference's OpenAI-compatible
 * reasoning session does (its loop calls the model again while the last message is a reasoning one). A finished
 * turn is closed and a new assistant turn opened (in token mode, the template's tokens, mask 0); a turn cut at its
 * token cap goes on where it stopped.
 */
async function askAgain(run: EpisodeInPlay, generation: Generation): Promise<undefined> {
  if (generation.finishReason !== 'length') await run.timed('toolMs', () => run.deps.policy.observe([]));
  return undefined;
}

/**
 * The turn's completion, within the turn and token limits, recorded; or the limit that ends the episode. A
 * completion cut at its token cap is interpreted like any other (the reference reads whatever came back): a
 * finished tool call in it runs, an unfinished one comes back as an error; only an exhausted episode budget ends
 * the episode.
 */
async function agentCompletion(
  run: EpisodeInPlay,
  turn: number,
): Promise<{ finish: FinishReason } | { generation: Generation; interpretation: Interpretation }> {
  const { deps, options, record } = run;
  if (run.actions >= run.maxAgentTurns) return { finish: 'agent_turn_limit' };
  const room = options.limits.episodeTokenBudget - deps.policy.tokensAfterPrompt();
  if (room <= 0) return { finish: 'token_budget' };
  const maxTokens = Math.min(options.limits.maxTokensPerTurn, room);
  let generation: Generation;
  const recorded = run.current?.checkpoint?.generation;
  try {
    generation = recorded
      ? deps.policy.replay(recorded)
      : await run.timed('policyMs', () =>
          deps.policy.generate({ ...options.sampling, maxTokens, timeoutMs: callTimeoutMs(run.deadline) }),
        );
  } catch (err) {
    if (!(err instanceof ContextOverflowError)) throw err;
    // The conversation outgrew the model's context: the agent's doing, graded like a token limit.
    record.contextOverflow = err.message;
    return { finish: 'context_overflow' };
  }
  if (run.current) run.current.generation = generation;
  Object.assign(record.usage.policy, {
    calls: record.usage.policy.calls + 1,
    input: record.usage.policy.input + generation.usage.input,
    output: record.usage.policy.output + generation.usage.output,
    cached: record.usage.policy.cached + generation.usage.cached,
  });
  const thinkPreopened = generation.thinkPreopened ?? false;
  const interpretation =
    generation.native?.length || generation.reasoning
      ? interpretNativeMessage(
          { content: generation.raw, reasoning_content: generation.reasoning, tool_calls: generation.native },
          run.typingSpecs,
          { thinkPreopened },
        )
      : interpretCompletion(generation.raw, run.typingSpecs, { thinkPreopened });
  record.completions.push({
    turn,
    raw: generation.raw,
    native: generation.native,
    finishReason: generation.finishReason,
    ...(generation.reasoning ? { reasoning: generation.reasoning } : {}),
    ...(thinkPreopened ? { thinkPreopened } : {}),
    interpretation,
  });
  // The conversation (`x.messages`) holds the think the template opened, so every later reading of the message
  // finds the reasoning as the model wrote it, cut or not.
  record.messages.push({
    role: 'assistant',
    content: thinkPreopened ? `${THINK_OPEN}${generation.raw}` : generation.raw,
    ...(generation.native?.length ? { tool_calls: generation.native } : {}),
  });
  return { generation, interpretation };
}

/**
 * The completion's tool calls, in order; their results are the next observations. As in the reference, a
 * completion that calls an end-turn tool runs none of its calls: the episode ends, and each end-turn call is
 * recorded with an empty response (the test's `x.tool_calls`). Calls that would pass the agent-turn limit (the
 * completion's visible text reached it) do not run either.
 */
async function callTools(
  run: EpisodeInPlay,
  turn: number,
  generation: Generation,
  interpretation: Interpretation,
): Promise<{ finish?: FinishReason; observations: ChatMessage[] }> {
  const ending = interpretation.toolCalls.filter((call) => run.endTurnTools.has(call.name));
  for (const call of ending)
    run.record.toolCalls.push({ turn, name: call.name, arguments: call.arguments, result: '', isError: false });
  if (ending.length > 0) return { finish: 'end_turn', observations: [] };
  if (run.actions >= run.maxAgentTurns)
    return { finish: endsWithDone(interpretation.text) ? 'done' : 'agent_turn_limit', observations: [] };
  run.actions += 1;
  const observations: ChatMessage[] = [];
  // Direct responses (ThinkingBox `direct_response` tools) follow the results as assistant messages.
  const directs: ChatMessage[] = [];
  for (const call of interpretation.toolCalls) {
    const callId = generation.native?.[call.index]?.id;
    let result: EnvironmentToolResult;
    if (call.parseError !== undefined)
      result = { text: `Error: could not parse the tool call: ${call.parseError}`, isError: true };
    else result = await run.timed('toolMs', () => run.opened.tools.callTool(call.name, call.arguments));
    toolResultTaken(run, turn, { name: call.name, text: result.text, isError: result.isError });
    run.record.toolCalls.push({
      turn,
      name: call.name,
      arguments: call.arguments,
      result: result.text,
      isError: result.isError,
    });
    observations.push({ role: 'tool', content: result.text, ...(callId ? { tool_call_id: callId } : {}) });
    if (result.directResponse !== undefined) directs.push({ role: 'assistant', content: result.directResponse });
  }
  // The reference shows each direct response as a visible assistant message: an action too.
  run.actions += directs.length;
  for (const d of directs) run.transcript.push({ role: 'assistant', text: d.content });
  return { observations: [...observations, ...directs] };
}

function endsWithDone(text: string): boolean {
  return text.trimEnd().endsWith(DONE_MARKER);
}

/** The agent's message to the user: it ends the episode (done, a limit, single turn) or the user replies. */
async function userTurn(run: EpisodeInPlay, text: string): Promise<FinishReason | undefined> {
  const { deps, record } = run;
  run.transcript.push({ role: 'assistant', text });
  if (endsWithDone(text)) return 'done';
  // The reference checks its agent-turn limit before anything about the user.
  if (run.actions >= run.maxAgentTurns) return 'agent_turn_limit';
  if (!run.conversational) return 'single_turn';
  if (run.userReplies >= run.task.limits.max_user_turns) return 'user_turn_limit';
  // No reply the agent could still answer: spare the simulated user's call.
  if (deps.policy.tokensAfterPrompt() >= run.options.limits.episodeTokenBudget) return 'token_budget';
  const recorded = run.current?.checkpoint;
  const reply = recorded
    ? (recorded.userReply ?? null)
    : await run.timed('userMs', () => deps.user.reply(run.transcript, run.userReplies));
  if (reply && run.current) run.current.userReply = reply;
  // Only a scripted user runs out (the LLM user, like the reference's, may not end the conversation): say so, as
  // the agent did not end it and its limits were not reached.
  if (!reply) return 'user_script_ended';
  run.userReplies += 1;
  Object.assign(record.usage.user, {
    calls: record.usage.user.calls + (reply.modelCall ? 1 : 0),
    input: record.usage.user.input + reply.usage.input,
    output: record.usage.user.output + reply.usage.output,
    cached: record.usage.user.cached + reply.usage.cached,
  });
  run.transcript.push({ role: 'user', text: reply.text });
  const userMessage: ChatMessage = { role: 'user', content: reply.text };
  record.messages.push(userMessage);
  await run.timed('toolMs', () => deps.policy.observe([userMessage]));
  return undefined;
}

/**
 * A tool result of the turn in play: recorded for its checkpoint, or, on replay, checked against the recording
 * (the backend is being brought back to the recorded state; a difference means it cannot be).
 */
function toolResultTaken(run: EpisodeInPlay, turn: number, live: TurnCheckpoint['toolResults'][number]): void {
  const current = run.current!;
  const at = current.toolResults.length;
  current.toolResults.push(live);
  if (!current.checkpoint) return;
  const mismatch = toolReplayMismatch(current.checkpoint.toolResults[at], live, turn);
  if (mismatch) throw new ReplayDiverged(mismatch);
}

/**
 * A turn that did not end the episode is complete: a live one is saved for a later attempt; a replayed one must have
 * run every recorded tool call.
 */
async function turnCompleted(run: EpisodeInPlay, turn: number): Promise<void> {
  const { checkpoint, generation, toolResults, userReply } = run.current!;
  if (checkpoint) {
    if (toolResults.length !== checkpoint.toolResults.length)
      throw new ReplayDiverged(
        `turn ${turn}: the replay ran ${toolResults.length} tool calls, the recording ${checkpoint.toolResults.length}`,
      );
    return;
  }
  if (!generation || !run.deps.saveTurn) return;
  await run.deps.saveTurn({
    turn,
    elapsedMs: Date.now() - run.started,
    generation,
    toolResults,
    ...(userReply ? { userReply } : {}),
  });
}

/** Grades the terminal state; grading is not the agent's time and has its own bound. */
async function gradeEpisode(run: EpisodeInPlay): Promise<void> {
  const { deps, record } = run;
  const lastAssistantText = run.lastReply;
  const grade = await run.timed(
    'gradeMs',
    () =>
      run.opened.grade({
        lastAssistantText,
        toolCalls: record.toolCalls,
        messages: record.messages,
        judge: deps.judge,
      }),
    undefined,
    deps.environment.gradeTimeoutMs,
  );
  record.grade = grade;
  record.outcome = grade.outcome;
  record.reward = grade.reward;
  record.cause = grade.cause;
  for (const r of grade.rubrics) {
    record.usage.judge.calls += 1;
    record.usage.judge.input += r.usage.input;
    record.usage.judge.output += r.usage.output;
  }
  if (grade.outcome === 'infrastructure_error') record.finishReason = 'infrastructure_error';
}

/** An episode cut short by an error (not bad input): the agent's time running out, or an infrastructure error. */
function failedEpisode(
  record: EpisodeRecord,
  err: unknown,
  policy: PolicyDriver,
  options: EpisodeOptions,
): EpisodeRecord {
  record.trajectory = policy.trajectory();
  // The agent's own time running out is an agent failure; the deadline passing while a tool, the user
  // simulator, the tokenizer or a sandbox hangs is not the agent's doing.
  if (err instanceof WallClockExceeded && err.during === undefined) {
    record.finishReason = 'wall_clock_timeout';
    record.cause = `episode exceeded its wall-clock limit of ${options.limits.wallClockMs} ms`;
    return record;
  }
  record.outcome = 'infrastructure_error';
  record.finishReason = 'infrastructure_error';
  record.cause =
    err instanceof InfrastructureError || err instanceof WallClockExceeded
      ? err.message
      : `unexpected error: ${errorMessage(err)}`;
  return record;
}
