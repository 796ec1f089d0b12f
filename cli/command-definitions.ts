import {
  BAND_NAMES,
  DEFAULT_MIN_CLEAN_RUNS,
  DEFAULT_RETAINED_BANDS,
  DEFAULT_SEED,
  DEFAULT_TEST_FRACTION,
} from '../core/difficulty.ts';
import { defaultRetention, defaultTemplateMaxAgeDays } from '../infra/retention.ts';
import { workerKinds } from '../infra/local-workers.ts';
import { defineCommand, type CommandDefinition, type FlagDefinition } from './command-definition.ts';

/**
 * Every `tbt` command and subcommand: the one source of `tbt --help`, each command's help and usage line, and
 * the flags each command parses (cli/command-line.ts). Commands are listed in the order help shows them.
 */

const noFlags = {} as const;

const workerList = `${workerKinds.slice(0, -1).join(', ')} and ${workerKinds.at(-1)}`;

const campaignId = { name: 'WORKFLOW_ID', description: "the campaign's workflow id (printed by `tbt train`)" };

export const upCommand = defineCommand({
  path: 'up',
  summary: 'start the local Temporal dev server, Postgres and the Typesense stand-in (idempotent)',
  flags: noFlags,
});

export const downCommand = defineCommand({
  path: 'down',
  summary: "stop this checkout's workers, then the local servers",
  flags: noFlags,
});

export const statusCommand = defineCommand({
  path: 'status',
  summary: 'show whether the local servers run (exit 1 if not)',
  flags: noFlags,
});

export const tasksCommand = defineCommand({
  path: 'tasks',
  summary: 'check, describe, import and prepare task suites',
  flags: noFlags,
});

export const tasksValidateCommand = defineCommand({
  path: 'tasks validate',
  summary: 'check suites: schema, golden replay passes, null agent fails, one-row mutation fails',
  details: 'The last line reads tasks=N domains=D golden_pass=N null_fail=N mutation_fail=N; exit 1 on any problem.',
  positionals: [{ name: 'DIR', description: 'a task suite folder, or a folder of suites' }],
  flags: {
    concurrency: { type: 'string', value: 'N', default: '4', description: 'tasks validated at once (1 to 64)' },
    warm: { type: 'string', value: 'N', description: 'started tool servers kept ready per server (imported suites)' },
    'start-timeout-ms': {
      type: 'string',
      value: 'MS',
      description: 'how long a tool server may take to start (imported suites)',
    },
    'server-start': {
      type: 'string',
      value: 'HOW',
      description: "'template' (default): fork tool servers from a template; 'process': spawn each cold",
    },
  },
});

export const tasksSchemaCommand = defineCommand({
  path: 'tasks schema',
  summary: 'write JSON Schema files of the scenario and task files, for editors',
  flags: {
    out: { type: 'string', value: 'DIR', required: true, description: 'folder the schema files are written to' },
  },
});

export const tasksImportThinkingboxCommand = defineCommand({
  path: 'tasks import-thinkingbox',
  summary: 'import a ThinkingBox-format dataset as a suite (docs/thinkingbox-datasets.md)',
  details:
    'Writes the suite even when some files or tasks have problems; they are listed and the exit code is 1. ' +
    "Dataset code runs in a bubblewrap sandbox; without one it is refused unless 'tbt --unsandboxed'.",
  flags: {
    data: { type: 'string', value: 'DATASET_DIR', required: true, description: 'the dataset folder' },
    list: { type: 'string', value: 'TESTLIST.yaml', required: true, description: 'the uids to import' },
    servers: {
      type: 'string',
      value: 'FILE',
      defaultText: 'DATASET_DIR/../servers/servers.yaml',
      description: "the dataset's tool servers",
    },
    agent: { type: 'string', value: 'NAME', defaultText: 'the only agent, else think', description: 'agent/NAME.yaml' },
    'exclude-uids': {
      type: 'string',
      value: 'FILE',
      description: 'uids marked evaluation-only: they never enter a training pool (YAML list or one per line)',
    },
    out: { type: 'string', value: 'DIR', defaultText: '$TBT_STATE_DIR/imported/<name>', description: 'suite folder' },
    name: { type: 'string', value: 'NAME', defaultText: "the dataset folder's name", description: 'suite name' },
  },
});

export const tasksPrepareEnvCommand = defineCommand({
  path: 'tasks prepare-env',
  summary: "build (once, cached) an imported dataset's Python environment",
  details:
    "Installs its server packages' dependencies, pinned by thinkingbox/dataset-env/constraints.txt, inside the " +
    'dataset sandbox (network only to the package index): each must be a PEP 508 requirement (no pip options), ' +
    'and only wheels install unless --allow-sdist names the projects whose build code may run (in the sandbox). ' +
    'See docs/dataset-sandbox.md for what this trusts.',
  positionals: [{ name: 'SUITE_DIR', description: "an imported suite's folder" }],
  flags: {
    'allow-sdist': {
      type: 'string',
      value: 'NAME',
      multiple: true,
      description: "project that may be built from its sdist, in the sandbox (':all:' for any; e.g. sly)",
    },
    'allow-urls': {
      type: 'boolean',
      default: false,
      description: 'allow `name @ https://...` requirements (wheels only, unless --allow-sdist)',
    },
  },
});

export const prepareCommand = defineCommand({
  path: 'prepare',
  summary: 'select training tasks by probe difficulty (reference-compatible flags)',
  details:
    "Reads probe results (JSONL, one attempt per line; several files add up), estimates each task's success " +
    'probability with a Jeffreys posterior, assigns difficulty bands and writes the selected task list.',
  flags: {
    policy: { type: 'string', value: 'FILE', multiple: true, required: true, description: 'probe results (JSONL)' },
    'output-dir': {
      type: 'string',
      value: 'DIR',
      required: true,
      description: 'where selected.yaml (or train.yaml + test.yaml), aggregates.jsonl and manifest.json are written',
    },
    'exclude-uids': {
      type: 'string',
      value: 'FILE',
      description:
        'uids dropped before anything else (the benchmark list): a YAML list (.yaml/.yml/.json, or text starting ' +
        "with '-'), {uids: [...]}, or one uid per line",
    },
    'uid-field': { type: 'string', value: 'PATH', default: 'uid', description: 'dotted path of the task uid' },
    'success-field': {
      type: 'string',
      value: 'PATH',
      default: 'test_result.result',
      description: 'dotted path of the success boolean',
    },
    'system-error-field': {
      type: 'string',
      value: 'PATH',
      defaultText: 'none',
      description: 'dotted path of a boolean; a true row counts as a system error and its success field is not read',
    },
    'min-clean-runs': {
      type: 'string',
      value: 'N',
      default: String(DEFAULT_MIN_CLEAN_RUNS),
      description: 'reject uids with fewer clean runs',
    },
    'retain-band': {
      type: 'string',
      value: 'NAME',
      multiple: true,
      defaultText: DEFAULT_RETAINED_BANDS.join(', '),
      description: `band to keep (bands: ${BAND_NAMES.join(', ')})`,
    },
    mode: {
      type: 'string',
      value: 'selection|split',
      default: 'selection',
      description: 'one selected list, or a train/test split',
    },
    'test-fraction': {
      type: 'string',
      value: 'F',
      default: String(DEFAULT_TEST_FRACTION),
      description: 'split mode: fraction of each dataset file sent to test',
    },
    seed: {
      type: 'string',
      value: 'N',
      default: String(DEFAULT_SEED),
      description: 'split mode: seed of the deterministic ranking',
    },
  },
});

export const evalCommand = defineCommand({
  path: 'eval',
  summary: 'coverage-gated metrics: aggregate and compare result files, run and schedule evaluations',
  details:
    'No score is printed or written unless every (task, repetition) key is present exactly once and no row is ' +
    'an infrastructure error.',
  flags: noFlags,
});

export const evalAggregateCommand = defineCommand({
  path: 'eval aggregate',
  summary: 'pass@1, unbiased pass@k and pass^k, observed k/k, per domain, with intervals and costs',
  details:
    'Checks coverage, then reports pass@1, unbiased pass@k and pass^k, observed K/K, per domain, with intervals, ' +
    "and cost when --prices is given, in two scopes: policy only (the evaluated model's inference tokens, as the " +
    'reference counts) and all roles (adds the simulated user and the judge).',
  flags: {
    results: {
      type: 'string',
      value: 'FILE',
      multiple: true,
      required: true,
      description: 'result lines (JSONL): our episode results or ThinkingBox result lines',
    },
    repeats: { type: 'string', value: 'K', required: true, description: 'repetitions expected per task' },
    out: { type: 'string', value: 'FILE', required: true, description: 'the aggregate JSON written' },
    format: {
      type: 'string',
      value: 'episode|thinkingbox',
      default: 'episode',
      description:
        'default field paths. episode: uid, repetition, success, infrastructure_error, domain, tokens; ' +
        'thinkingbox: uid, metadata.repetition, test_result.result, is_system_error + ' +
        "test_result.is_system_error, (the uid's file), usage",
    },
    'uid-field': { type: 'string', value: 'PATH', description: 'dotted path of the task uid' },
    'repetition-field': {
      type: 'string',
      value: 'PATH',
      description: "dotted path of the repetition index; '' = number rows per uid in file order",
    },
    'success-field': { type: 'string', value: 'PATH', description: 'dotted path of the success boolean' },
    'system-error-field': {
      type: 'string',
      value: 'PATH',
      multiple: true,
      description:
        'dotted path of an infrastructure-error boolean (any true = error; later fields are read only while ' +
        'earlier ones are false)',
    },
    'domain-field': {
      type: 'string',
      value: 'PATH',
      description: "dotted path of the domain; '' = the uid's dataset file (prefix before ':')",
    },
    'tokens-field': {
      type: 'string',
      value: 'PATH',
      description:
        'dotted path of token counts: {policy|user|judge: {input, output, cached_input}} (input = uncached input ' +
        'tokens), or a list of OpenAI-style usage objects {input_tokens, output_tokens, ' +
        'input_tokens_details.cached_tokens} (policy)',
    },
    tasks: {
      type: 'string',
      value: 'FILE',
      description: 'expected task uids (YAML list or one per line); every one must be present',
    },
    prices: {
      type: 'string',
      value: 'FILE',
      description:
        'price table YAML {policy|user|judge: {input_per_million, output_per_million, cached_input_per_million}}',
    },
    seed: { type: 'string', value: 'N', default: '42', description: 'seed of the bootstrap intervals' },
  },
});

export const evalCompareCommand = defineCommand({
  path: 'eval compare',
  summary: "paired per-task comparison of two 'eval aggregate' outputs (B minus A), with bootstrap intervals",
  details: 'Compares pass@1 and the all-attempts-pass rate over the same tasks, overall and per domain.',
  positionals: [
    { name: 'A.json', description: "the baseline 'eval aggregate --out' file" },
    { name: 'B.json', description: "the 'eval aggregate --out' file compared with it" },
  ],
  flags: {
    resamples: { type: 'string', value: 'N', default: '10000', description: 'paired bootstrap resamples' },
    seed: { type: 'string', value: 'N', default: '42', description: 'seed of the bootstrap' },
    out: { type: 'string', value: 'FILE', description: 'also write the comparison as JSON' },
  },
});

export const evalRunCommand = defineCommand({
  path: 'eval run',
  summary: "coverage-gated evaluation through Temporal of a campaign's latest checkpoint (or the base policy)",
  details: 'Every (task, repetition) key runs exactly once without an infrastructure error before a score is printed.',
  flags: {
    config: { type: 'string', value: 'FILE', required: true, description: 'campaign config (YAML)' },
    campaign: {
      type: 'string',
      value: 'WORKFLOW_ID',
      defaultText: 'the base policy',
      description: 'the campaign whose latest checkpoint is evaluated',
    },
    repeats: { type: 'string', value: 'K', defaultText: "the config's evaluation.repeats", description: 'repetitions' },
    tasks: {
      type: 'string',
      value: 'all|FILE.yaml',
      defaultText: "the campaign's pool",
      description: 'every task of the suite, or a uid list file',
    },
  },
});

export const evalScheduleCommand = defineCommand({
  path: 'eval schedule',
  summary: "a Temporal Schedule that re-evaluates a campaign's latest checkpoint (overlap: skip)",
  flags: {
    campaign: { type: 'string', value: 'WORKFLOW_ID', required: true, description: 'the campaign to re-evaluate' },
    config: { type: 'string', value: 'FILE', required: true, description: 'campaign config (YAML)' },
    cron: { type: 'string', value: 'EXPR', required: true, description: 'cron expression of the schedule' },
    repeats: { type: 'string', value: 'K', defaultText: "the config's evaluation.repeats", description: 'repetitions' },
    id: { type: 'string', value: 'SCHEDULE_ID', defaultText: '<campaign>-reeval', description: 'schedule id' },
  },
});

export const episodesCommand = defineCommand({
  path: 'episodes',
  summary: 'run episodes in-process and read recorded episodes',
  flags: noFlags,
});

export const episodesRunCommand = defineCommand({
  path: 'episodes run',
  summary: 'run episodes in this process (no Temporal) and write one result line per episode',
  details:
    "The result lines are readable by 'tbt eval aggregate' and 'tbt prepare'; --records also keeps full episode " +
    "records (for 'tbt parity'). Without --policy-url an embedded policy server is started.",
  flags: {
    suite: { type: 'string', value: 'DIR', required: true, description: 'the task suite' },
    out: { type: 'string', value: 'results.jsonl', required: true, description: 'result lines written here' },
    uid: { type: 'string', value: 'UID', multiple: true, defaultText: 'every task', description: 'task to run' },
    repeats: { type: 'string', value: 'K', default: '1', description: 'episodes per task (1 to 10000)' },
    concurrency: { type: 'string', value: 'N', default: '2', description: 'episodes at once (1 to 64)' },
    'policy-url': {
      type: 'string',
      value: 'URL',
      defaultText: 'an embedded server',
      description: 'OpenAI-compatible base URL ending in /v1 (with --model)',
    },
    model: { type: 'string', value: 'NAME', description: 'model name at --policy-url' },
    mode: { type: 'string', value: 'chat|tokens', default: 'chat', description: 'policy API mode' },
    user: {
      type: 'string',
      value: 'llm|scripted',
      default: 'llm',
      description: "simulated user: the reference's LLM user played by the policy's server, or the task's replies",
    },
    temperature: { type: 'string', value: 'T', default: '1', description: 'sampling temperature (0 to 10)' },
    stop: { type: 'string', value: 'S', multiple: true, description: 'stop sequence' },
    'max-tokens-per-turn': { type: 'string', value: 'N', default: '128', description: 'tokens per agent turn' },
    'max-agent-turns': { type: 'string', value: 'N', default: '4', description: 'agent actions per episode' },
    example: { type: 'boolean', default: false, description: 'include a worked example in the prompt' },
    records: { type: 'string', value: 'records.jsonl', description: 'also write full episode records here' },
  },
});

export const episodesShowCommand = defineCommand({
  path: 'episodes show',
  summary: 'print a recorded episode as text: transcript, tool calls, judge verdicts, terminal-state diff',
  positionals: [{ name: 'ID', description: "the episode's id" }],
  flags: {
    html: { type: 'string', value: 'FILE', description: "also write the episode's page (static HTML) to FILE" },
  },
});

export const parityCommand = defineCommand({
  path: 'parity',
  summary: 'interpret every recorded output through the training and evaluation paths; exit 1 on any difference',
  positionals: [
    {
      name: 'EPISODES_JSONL|CAMPAIGN_ID',
      description: "an 'episodes run --records' file, or a campaign whose recorded episodes are read from Postgres",
    },
  ],
  flags: noFlags,
});

export const reportCommand = defineCommand({
  path: 'report',
  summary: "a campaign's static HTML report (inline SVG plots, no network) and markdown summary",
  details:
    'Writes DIR/index.html (self-contained: inline CSS and SVG, no scripts, no network) and DIR/summary.md. ' +
    'At least one input is required.',
  flags: {
    out: { type: 'string', value: 'DIR', required: true, description: 'where index.html and summary.md go' },
    probe: {
      type: 'string',
      value: 'FILE',
      description: "aggregates.jsonl of 'tbt prepare': difficulty-band histogram, retained bands highlighted",
    },
    steps: {
      type: 'string',
      value: 'FILE',
      description:
        'training steps, one JSON object per line: {step, mean_reward, informative_group_fraction, loss, ' +
        'grad_norm, groups, infra_errors_refilled, zero_variance_replaced, wall_s}',
    },
    before: {
      type: 'string',
      value: 'FILE',
      description: "'tbt eval aggregate --out' file of the starting checkpoint (needs --after)",
    },
    after: {
      type: 'string',
      value: 'FILE',
      description: "'tbt eval aggregate --out' file of the trained checkpoint (needs --before)",
    },
    eval: {
      type: 'string',
      value: 'FILE',
      description: "a single 'tbt eval aggregate --out' file, without comparison",
    },
    costs: {
      type: 'string',
      value: 'FILE',
      description:
        'JSON {"probing": USD, "training": USD, "evaluation": USD}, each optional; evaluation defaults to the sum ' +
        "of the eval files' all-roles campaign costs",
    },
    title: {
      type: 'string',
      value: 'TEXT',
      defaultText: '"Campaign <ID>" or "Training campaign report"',
      description: 'page title',
    },
    campaign: { type: 'string', value: 'ID', description: 'campaign id shown under the title' },
    'episode-pages': {
      type: 'boolean',
      default: false,
      description:
        "per evaluation, a table of its tasks linking to DIR/episodes/*.html, the pages of each task's first " +
        'passed, failed and infrastructure-errored episode (read from the control database; docs/episode-viewer.md)',
    },
  },
});

export const trainCommand = defineCommand({
  path: 'train',
  summary: 'start a training campaign (or follow the running one of the same config)',
  flags: {
    config: { type: 'string', value: 'FILE', required: true, description: 'campaign config (YAML)' },
    'dry-run': {
      type: 'boolean',
      default: false,
      description: "print the plan, the hyperparameters and the learner's per-node launch commands; start nothing",
    },
    wait: { type: 'boolean', default: false, description: 'follow the campaign until it ends' },
    id: {
      type: 'string',
      value: 'WORKFLOW_ID',
      defaultText: '<name>-<timestamp>',
      description: 'workflow id of a new campaign',
    },
  },
});

export const campaignCommand = defineCommand({
  path: 'campaign',
  summary: 'status, pause, resume, stop, terminate or follow a running campaign',
  flags: noFlags,
});

export const campaignStatusCommand = defineCommand({
  path: 'campaign status',
  summary: "print the campaign's status query (JSON)",
  positionals: [campaignId],
  flags: noFlags,
});

export const campaignPauseCommand = defineCommand({
  path: 'campaign pause',
  summary: 'pause the campaign before its next step',
  positionals: [campaignId],
  flags: {
    reason: {
      type: 'string',
      value: 'TEXT',
      description: 'why, shown in tbt campaign status and the Temporal UI (default: who paused it and when)',
    },
  },
});

export const campaignResumeCommand = defineCommand({
  path: 'campaign resume',
  summary: 'resume a paused, failed or terminated campaign from its last committed step',
  positionals: [campaignId],
  flags: noFlags,
});

export const campaignStopCommand = defineCommand({
  path: 'campaign stop',
  summary: 'stop the campaign after its current step',
  positionals: [campaignId],
  flags: noFlags,
});

export const campaignTerminateCommand = defineCommand({
  path: 'campaign terminate',
  summary: "end the campaign now: its workflow and running children, and this host's learner and policy server",
  details:
    'Temporal terminates the current run with the reason (its children go with it: parent close policy ' +
    'TERMINATE). `tbt campaign resume` starts it again from its last committed step (checkpoints, episodes kept).',
  positionals: [campaignId],
  flags: {
    reason: {
      type: 'string',
      value: 'TEXT',
      description: 'why, recorded in the workflow history (default: who terminated it and when)',
    },
  },
});

export const campaignFollowCommand = defineCommand({
  path: 'campaign follow',
  summary: 'follow the campaign with a progress line until it ends',
  positionals: [campaignId],
  flags: noFlags,
});

export const gcCommand = defineCommand({
  path: 'gc',
  summary:
    'prune old weight exports, batch files of committed steps and unused template databases, rotate big logs ' +
    '(docs/operations.md)',
  flags: {
    'keep-exports': {
      type: 'string',
      value: 'K',
      defaultText: String(defaultRetention.keepExports),
      description: 'weight exports kept per campaign (>= 1)',
    },
    'max-log-mb': {
      type: 'string',
      value: 'N',
      defaultText: String(defaultRetention.maxLogBytes / 1024 / 1024),
      description: 'logs over N MB are rotated (>= 1)',
    },
    'templates-older-than': {
      type: 'string',
      value: 'DAYS',
      defaultText: String(defaultTemplateMaxAgeDays),
      description: 'template databases no sandbox uses are dropped once this old (a replaced one at once; >= 1)',
    },
    'episodes-older-than': {
      type: 'string',
      value: 'DAYS',
      description: 'also delete episode and campaign step rows with no activity for DAYS (>= 1; never by default)',
    },
    'dry-run': { type: 'boolean', default: false, description: 'list what would go; remove nothing' },
  },
});

export const workersCommand = defineCommand({
  path: 'workers',
  summary: `the ${workerList} workers as local background processes`,
  flags: noFlags,
});

export const workersUpCommand = defineCommand({
  path: 'workers up',
  summary: `start the ${workerList} workers that do not run yet`,
  flags: noFlags,
});

export const workersDownCommand = defineCommand({
  path: 'workers down',
  summary: 'stop the workers, and the learner and policy server processes they started',
  flags: noFlags,
});

export const workersStatusCommand = defineCommand({
  path: 'workers status',
  summary: 'show which workers run (exit 1 unless all do)',
  flags: noFlags,
});

export const workflowsCommand = defineCommand({
  path: 'workflows',
  summary: 'checks of the workflow code against the workflows the server holds',
  flags: noFlags,
});

export const workflowsReplayCheckCommand = defineCommand({
  path: 'workflows replay-check',
  summary: 'replay the histories of running workflows against the code about to be deployed (exit 1 if one breaks)',
  details:
    "Lists the workflows running on the orchestrator's task queue (and, with --closed-hours, those closed since), " +
    'replays each history against the bundle and prints one line per workflow and a summary line ' +
    '`replay-check: bundle ID workflows=N ok=N nondeterministic=N errors=N`. A nondeterministic workflow means ' +
    'the new code changed what it does without patched(): deploying it would fail that workflow.',
  flags: {
    bundle: {
      type: 'string',
      value: 'DIR|FILE.js',
      defaultText: "this checkout's workflows/: out/workflow-bundle when fresh, else built now",
      description: "a pre-built bundle ('npm run build:workflows -- DIR') or a bundle file",
    },
    'closed-hours': {
      type: 'string',
      value: 'H',
      description: 'also workflows closed in the last H hours (default: running ones only)',
    },
    'task-queue': {
      type: 'string',
      value: 'QUEUE',
      defaultText: '<TBT_TASK_QUEUE_PREFIX>-orchestrator',
      description: 'the task queue whose workflows are replayed',
    },
    limit: { type: 'string', value: 'N', default: '1000', description: 'at most N workflows' },
  },
});

export const uiScreenshotCommand = defineCommand({
  path: 'ui-screenshot',
  summary: 'find a campaign in the Temporal UI by its search attribute and save a screenshot (headless Chromium)',
  flags: {
    campaign: { type: 'string', value: 'WORKFLOW_ID', required: true, description: 'the campaign to find' },
    out: { type: 'string', value: 'FILE.png', required: true, description: 'the screenshot written' },
  },
});

export const demoCommand = defineCommand({
  path: 'demo',
  summary: 'the main job on the embedded default: servers, workers and a complete short campaign, then its report',
  positionals: [{ name: 'CONFIG', optional: true, description: 'campaign config (default config/local.yaml)' }],
  flags: noFlags,
});

/** Every command and subcommand, in help order; a group's subcommands follow it. */
export const tbtCommands: readonly CommandDefinition[] = [
  upCommand,
  downCommand,
  statusCommand,
  tasksCommand,
  tasksValidateCommand,
  tasksSchemaCommand,
  tasksImportThinkingboxCommand,
  tasksPrepareEnvCommand,
  prepareCommand,
  evalCommand,
  evalAggregateCommand,
  evalCompareCommand,
  evalRunCommand,
  evalScheduleCommand,
  episodesCommand,
  episodesRunCommand,
  episodesShowCommand,
  parityCommand,
  reportCommand,
  trainCommand,
  campaignCommand,
  campaignStatusCommand,
  campaignPauseCommand,
  campaignResumeCommand,
  campaignStopCommand,
  campaignTerminateCommand,
  campaignFollowCommand,
  gcCommand,
  workersCommand,
  workersUpCommand,
  workersDownCommand,
  workersStatusCommand,
  workflowsCommand,
  workflowsReplayCheckCommand,
  uiScreenshotCommand,
  demoCommand,
];

/** Flags `tbt` itself takes, anywhere on the command line. */
export const globalFlags: Readonly<Record<string, FlagDefinition>> = {
  unsandboxed: {
    type: 'boolean',
    description:
      'run dataset code (ThinkingBox tool servers, test code) even where bubblewrap does not work, without ' +
      'isolation (TBT_UNSANDBOXED=1; inherited by workers this command starts)',
  },
};
