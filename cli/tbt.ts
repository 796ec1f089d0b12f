import { allowUnsandboxedDatasetCode, readEnvironment } from '../config/environment.ts';
import { redactSecretsInText } from '../core/secret-text.ts';
import { down, status, up } from './commands/infra.ts';

/** `tbt`: one entry point; each subcommand lives in cli/commands/. */

/** TBT_DEBUG through the schema; a bad environment must not hide the error being reported. */
function debugEnabled(): boolean {
  try {
    return readEnvironment().TBT_DEBUG === '1';
  } catch {
    return false;
  }
}

type Command = (args: string[]) => Promise<number | void>;

const commands: Record<string, { summary: string; run: Command }> = {
  up: { summary: 'start the local Temporal dev server and Postgres (idempotent)', run: up },
  down: { summary: 'stop the local servers', run: down },
  status: { summary: 'show whether the servers run (exit 1 if not)', run: status },
  tasks: {
    summary: 'tasks validate <dir>: check task suites',
    run: async (a) => (await import('./commands/tasks.ts')).tasks(a),
  },
  prepare: {
    summary: 'select training tasks by probe difficulty (reference-compatible flags)',
    run: async (a) => (await import('./commands/prepare.ts')).prepare(a),
  },
  eval: {
    summary: 'eval aggregate|compare: metrics from episode or ThinkingBox result files',
    run: async (a) => (await import('./commands/eval.ts')).evaluate(a),
  },
  episodes: {
    summary: 'episodes run --suite DIR ...: run episodes in-process, write result lines',
    run: async (a) => (await import('./commands/episodes.ts')).episodes(a),
  },
  parity: {
    summary: 'parity <episodes.jsonl | campaign>: training vs evaluation interpretation of every output',
    run: async (a) => (await import('./commands/parity.ts')).parity(a),
  },
  report: {
    summary: 'report --out DIR [--probe --steps --before --after --eval --costs]: static HTML + markdown',
    run: async (a) => (await import('./commands/report.ts')).report(a),
  },
  train: {
    summary: 'train --config F [--dry-run] [--wait]: start (or follow) a training campaign',
    run: async (a) => (await import('./commands/campaign.ts')).train(a),
  },
  campaign: {
    summary: 'campaign status|pause|resume|stop|follow ID',
    run: async (a) => (await import('./commands/campaign.ts')).campaign(a),
  },
  gc: {
    summary: 'gc [--keep-exports K] [--max-log-mb N] [--dry-run]: prune old weight exports and batches, rotate logs',
    run: async (a) => (await import('./commands/gc.ts')).gc(a),
  },
  workers: {
    summary: 'workers up|down|status: the orchestrator, rollout and gpu workers as local processes',
    run: async (a) => (await import('./commands/workers.ts')).workers(a),
  },
  'ui-screenshot': {
    summary: 'ui-screenshot --campaign ID --out FILE.png: find a campaign in the Temporal UI by search attribute',
    run: async (a) => (await import('./commands/ui-screenshot.ts')).uiScreenshot(a),
  },
  demo: {
    summary: 'run the main job on the embedded default',
    run: async (a) => (await import('./commands/demo.ts')).demo(a),
  },
};

function usage(): string {
  return [
    'usage: tbt [--unsandboxed] <command> [args]',
    '',
    ...Object.entries(commands).map(([n, c]) => `  ${n.padEnd(10)} ${c.summary}`),
    '',
    '  --unsandboxed  run dataset code (ThinkingBox tool servers, test code) even where bubblewrap does not work,',
    '                 without isolation (TBT_UNSANDBOXED=1; inherited by workers this command starts)',
  ].join('\n');
}

async function main(argv: string[]): Promise<number> {
  // A host-level switch, accepted anywhere on the command line: never part of a campaign's config.
  if (argv.includes('--unsandboxed')) {
    allowUnsandboxedDatasetCode();
    argv = argv.filter((a) => a !== '--unsandboxed');
  }
  const [name, ...rest] = argv;
  if (!name || name === '--help' || name === '-h') {
    console.log(usage());
    return name ? 0 : 2;
  }
  const command = commands[name];
  if (!command) {
    console.error(`tbt: unknown command '${name}'\n\n${usage()}`);
    return 2;
  }
  return (await command.run(rest)) ?? 0;
}

main(process.argv.slice(2)).then(
  (code) => process.exit(code),
  (err: unknown) => {
    // Scrubbed: a message can carry a URL with its password (a driver error, a bad flag value).
    console.error(`tbt: ${redactSecretsInText(err instanceof Error ? err.message : String(err))}`);
    if (debugEnabled() && err instanceof Error) console.error(redactSecretsInText(err.stack ?? ''));
    // Bad flags (node:util parseArgs's own errors included) exit 2, like a usage error; anything else 1.
    const usage =
      err instanceof Error &&
      (err.name === 'UsageError' || /^ERR_PARSE_ARGS/.test(String((err as { code?: string }).code)));
    process.exit(usage ? 2 : 1);
  },
);
