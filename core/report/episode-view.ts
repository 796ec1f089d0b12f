import { canonicalJson } from '../canonical-json.ts';
import { infrastructureErrorClass } from '../infrastructure-error-class.ts';

/**
 * One stored episode as data for reading (docs/episode-viewer.md): the facts (outcome, reward, finish reason,
 * infrastructure class), the prompt, the transcript in order (agent turns with their reasoning and tool calls,
 * user turns), and the grade (terminal-state diff against the golden state, assertions, the judge's verdicts).
 * The HTML page (episode-page.ts) and the text of `tbt episodes show` (episode-text.ts) render this same model,
 * so they show the same tool calls. Input types are structural (core/ imports nothing of the services), and
 * every record field is optional where an old or cut-short record may lack it.
 */

// ---------------------------------------------------------------------------------------------------
// Input: the `episodes` row of the control database and its `record` (rollout/episode-runner.ts EpisodeRecord)

interface StoredMessage {
  role: string;
  content: string;
}
interface StoredCompletion {
  turn: number;
  raw: string;
  finishReason: string;
  interpretation?: { reasoning: string; text: string; toolCalls: { name: string }[] };
}
interface StoredToolCall {
  turn: number;
  name: string;
  arguments: Record<string, unknown>;
  result: string;
  isError: boolean;
}
interface StoredGrade {
  stateMatches: boolean;
  resultHash: string;
  goldenHash: string;
  diff: { path: string; result: unknown; golden: unknown }[];
  assertions: { name: string; passed: boolean }[];
  rubrics: { question: string; answer: string; yes: boolean }[];
  cause?: string;
  taskError?: { file: string; line: number; exception: string };
}
interface RoleUsage {
  calls: number;
  input: number;
  output: number;
  cached: number;
}

export interface StoredEpisodeRecord {
  outcome: string;
  reward: number;
  finishReason: string;
  cause?: string;
  messages?: StoredMessage[];
  completions?: StoredCompletion[];
  toolCalls?: StoredToolCall[];
  grade?: StoredGrade;
  usage?: { policy: RoleUsage; user: RoleUsage; judge: RoleUsage };
  timings?: Record<string, number>;
  worker?: string;
  weightVersion?: number;
  contextOverflow?: string;
  unstorableCharacters?: number;
}

export interface StoredEpisode {
  id: string;
  taskUid: string;
  suite: string;
  scenario: string;
  domain: string;
  purpose: string;
  campaign: string | null;
  step: number | null;
  repetition: number;
  status: string;
  policyModel: string | null;
  startedAt: string | null;
  finishedAt: string | null;
  /** Null while the episode runs (or when its attempt crashed before saving). */
  record: StoredEpisodeRecord | null;
}

// ---------------------------------------------------------------------------------------------------
// Output

export interface Fact {
  label: string;
  value: string;
}

export interface ToolCallView {
  name: string;
  /** Canonical JSON of the arguments (keys sorted), as the text rendering prints them too. */
  arguments: string;
  result: string;
  isError: boolean;
}

export type TranscriptEntry =
  | {
      kind: 'agent';
      turn: number;
      reasoning: string;
      /** The visible text (reasoning and tool-call markup removed); the raw completion without interpretation. */
      text: string;
      toolCalls: ToolCallView[];
      /** The policy server's finish reason of the completion (`stop`, `length`, `tool_calls`). */
      completionFinish: string;
      /** The agent called the end_turn tool. */
      endedTurn: boolean;
    }
  | { kind: 'user'; text: string }
  /** A tool message without a recorded call (older records): shown so nothing of the transcript is hidden. */
  | { kind: 'tool'; text: string };

export interface GradeView {
  stateMatches: boolean;
  resultHash: string;
  goldenHash: string;
  /** One line per difference: `table[key].column: result (expected golden)`, values as canonical JSON. */
  diff: { path: string; result: string; golden: string }[];
  assertions: { name: string; passed: boolean }[];
  rubrics: { question: string; answer: string; yes: boolean }[];
}

export interface EpisodeView {
  id: string;
  taskUid: string;
  /** success, agent_failure, infrastructure_error, or running (no record yet). */
  outcome: string;
  reward: string;
  finishReason: string;
  /** Why it failed or could not be graded. */
  cause: string | null;
  /** Set for infrastructure errors: what kind of failure the cause names. */
  infrastructure: { class: string; cause: string } | null;
  facts: Fact[];
  /** System messages (the system prompt), collapsed on the page. */
  system: string[];
  /** Example turns and earlier conversation before the query. */
  context: { role: string; text: string }[];
  /** The task's query as the agent saw it. */
  query: string | null;
  transcript: TranscriptEntry[];
  grade: GradeView | null;
  notes: string[];
}

// ---------------------------------------------------------------------------------------------------

/**
 * The class of an infrastructure error, the one the metrics use (core/infrastructure-error-class.ts), read from
 * its cause; a deadline also names what did not answer in time.
 */
export function infrastructureClass(cause: string): string {
  const name = infrastructureErrorClass(cause);
  const hung = /no answer from (\w+) before the episode deadline/.exec(cause);
  return name === 'deadline' && hung ? `deadline (${hung[1]})` : name;
}

/** A file name for an episode's page: its id with unsafe characters replaced, plus a hash so no two ids collide. */
export function episodePageName(id: string, hash: (text: string) => string): string {
  const slug = id
    .replace(/[^A-Za-z0-9._-]+/g, '_')
    .replace(/^[._]+/, '')
    .slice(0, 80);
  return `${slug}-${hash(id).slice(0, 10)}.html`;
}

export function toolCallView(call: StoredToolCall): ToolCallView {
  return {
    name: call.name,
    arguments: canonicalJson(call.arguments ?? {}),
    result: call.result,
    isError: call.isError,
  };
}

/** `name {"arg":1}`: how both renderings print a tool call. */
export function toolCallLine(call: Pick<ToolCallView, 'name' | 'arguments'>): string {
  return `${call.name} ${call.arguments}`;
}

function rewardText(episode: StoredEpisode): string {
  const r = episode.record;
  if (!r) return 'n/a';
  if (r.outcome === 'infrastructure_error' || r.outcome === 'task_error') return 'none (not graded)';
  return String(r.reward);
}

function seconds(ms: number | undefined): string {
  return ms === undefined ? 'n/a' : `${(ms / 1000).toFixed(2)} s`;
}

function facts(episode: StoredEpisode): Fact[] {
  const r = episode.record;
  const out: Fact[] = [
    { label: 'task', value: episode.taskUid },
    { label: 'suite / scenario / domain', value: `${episode.suite} / ${episode.scenario} / ${episode.domain}` },
    { label: 'purpose', value: episode.purpose },
  ];
  if (episode.campaign) {
    const step = episode.step === null ? '' : `, step ${episode.step}`;
    out.push({ label: 'campaign', value: `${episode.campaign}${step}` });
  }
  out.push({ label: 'repetition', value: String(episode.repetition) });
  if (episode.policyModel) out.push({ label: 'policy model', value: episode.policyModel });
  if (r?.weightVersion !== undefined) out.push({ label: 'weight version', value: String(r.weightVersion) });
  if (r?.worker) out.push({ label: 'worker', value: r.worker });
  if (r?.timings) {
    const t = r.timings;
    out.push({
      label: 'time',
      value:
        `${seconds(t.totalMs)} (policy ${seconds(t.policyMs)}, tools ${seconds(t.toolMs)}, user ` +
        `${seconds(t.userMs)}, grading ${seconds(t.gradeMs)}, sandbox ${seconds(t.sandboxMs)})`,
    });
  }
  if (r?.usage) {
    const u = r.usage;
    const role = (name: string, x: RoleUsage) =>
      `${name} ${x.calls} call${x.calls === 1 ? '' : 's'}, ${x.input} in / ${x.output} out`;
    out.push({
      label: 'tokens',
      value: [role('policy', u.policy), role('user', u.user), role('judge', u.judge)].join('; '),
    });
  }
  if (episode.startedAt) out.push({ label: 'started', value: episode.startedAt });
  if (episode.finishedAt) out.push({ label: 'finished', value: episode.finishedAt });
  return out;
}

/** Index of the first message the agent wrote: the last `completions` assistant messages are its turns. */
function firstAgentMessage(messages: StoredMessage[], completions: number): number {
  const assistant = messages.flatMap((m, i) => (m.role === 'assistant' ? [i] : []));
  if (completions === 0 || assistant.length < completions) return messages.length;
  return assistant[assistant.length - completions]!;
}

function agentEntry(completion: StoredCompletion, calls: StoredToolCall[]): TranscriptEntry {
  const i = completion.interpretation;
  return {
    kind: 'agent',
    turn: completion.turn,
    reasoning: i?.reasoning ?? '',
    text: i ? i.text : completion.raw,
    toolCalls: calls.filter((c) => c.turn === completion.turn).map(toolCallView),
    completionFinish: completion.finishReason,
    endedTurn: i?.toolCalls.some((c) => c.name === 'end_turn') ?? false,
  };
}

/** The conversation after the query, in order: each agent turn with its tool calls, and the user's replies. */
function transcript(record: StoredEpisodeRecord, from: number): TranscriptEntry[] {
  const messages = record.messages ?? [];
  const completions = record.completions ?? [];
  const calls = record.toolCalls ?? [];
  const entries: TranscriptEntry[] = [];
  let agent = 0;
  let toolResults = 0;
  for (const m of messages.slice(from)) {
    if (m.role === 'assistant' && completions[agent]) entries.push(agentEntry(completions[agent++]!, calls));
    else if (m.role === 'user') entries.push({ kind: 'user', text: m.content });
    else if (m.role === 'tool' && toolResults++ >= calls.length) entries.push({ kind: 'tool', text: m.content });
  }
  // A completion whose message was not kept (the episode ended on it) still shows.
  for (const c of completions.slice(agent)) entries.push(agentEntry(c, calls));
  return entries;
}

function gradeView(grade: StoredGrade): GradeView {
  return {
    stateMatches: grade.stateMatches,
    resultHash: grade.resultHash,
    goldenHash: grade.goldenHash,
    diff: grade.diff.map((d) => ({ path: d.path, result: canonicalJson(d.result), golden: canonicalJson(d.golden) })),
    assertions: grade.assertions,
    rubrics: grade.rubrics.map((r) => ({ question: r.question, answer: r.answer, yes: r.yes })),
  };
}

/** The simulated user's replies in the conversation after the query, in words. */
function userReplies(r: StoredEpisodeRecord): string {
  const messages = r.messages ?? [];
  const n = messages.slice(firstAgentMessage(messages, r.completions?.length ?? 0)).filter((m) => m.role === 'user');
  return n.length === 1 ? '1 reply' : `${n.length} replies`;
}

function notes(episode: StoredEpisode): string[] {
  const r = episode.record;
  if (!r) return [`No record: the episode is ${episode.status === 'running' ? 'still running' : episode.status}.`];
  const out: string[] = [];
  if (r.contextOverflow) out.push(`The policy server refused the conversation: ${r.contextOverflow}`);
  if (r.unstorableCharacters)
    out.push(`${r.unstorableCharacters} characters Postgres cannot store were replaced by U+FFFD.`);
  if (!r.grade && r.outcome !== 'infrastructure_error') out.push('Not graded: the episode ended before grading.');
  if (r.finishReason === 'user_script_ended' || r.finishReason === 'user_finished')
    out.push(
      `The scripted user had no reply left (it gave ${userReplies(r)}): the conversation ended there, neither by the ` +
        "agent nor at a limit (episode.user.mode: scripted; the reference's simulated user is an LLM).",
    );
  const place = r.grade?.taskError;
  if (place)
    out.push(
      `Task error: the task's test code raised ${place.exception} at ${place.file}:${place.line} in two gradings ` +
        `of this episode; it is not scored or trained on. Fix the test (tbt tasks validate lists such tasks).`,
    );
  return out;
}

export function episodeView(episode: StoredEpisode): EpisodeView {
  const r = episode.record;
  const messages = r?.messages ?? [];
  const from = firstAgentMessage(messages, r?.completions?.length ?? 0);
  const preamble = messages.slice(0, from);
  const queryAt = preamble.map((m) => m.role).lastIndexOf('user');
  const outcome = r?.outcome ?? episode.status;
  const cause = r?.cause ?? null;
  return {
    id: episode.id,
    taskUid: episode.taskUid,
    outcome,
    reward: rewardText(episode),
    finishReason: r?.finishReason ?? 'n/a',
    cause,
    infrastructure:
      outcome === 'infrastructure_error'
        ? { class: infrastructureClass(cause ?? ''), cause: cause ?? 'no cause recorded' }
        : null,
    facts: facts(episode),
    system: preamble.filter((m) => m.role === 'system').map((m) => m.content),
    context: preamble
      .filter((m, i) => m.role !== 'system' && i !== queryAt)
      .map((m) => ({ role: m.role, text: m.content })),
    query: queryAt >= 0 ? preamble[queryAt]!.content : null,
    transcript: r ? transcript(r, from) : [],
    grade: r?.grade ? gradeView(r.grade) : null,
    notes: notes(episode),
  };
}
