import { allowUnsandboxedDatasetCode, readEnvironment } from '../config/environment.ts';
import { exitClassOf, exitCodes } from '../core/exit-codes.ts';
import { redactSecretsInText } from '../core/secret-text.ts';
import { HelpRequest, InputError, UsageError } from './command-support.ts';
import { tbtCommands } from './command-definitions.ts';
import { helpText, isGroup, subcommandsOf, topLevelHelp, usageErrorText } from './command-help.ts';
import { asksForHelp, parseCommandLine, resolveCommand } from './command-line.ts';

/**
 * `tbt`: one entry point. What each command accepts and its help come from cli/command-definitions.ts; the
 * command line is checked against that definition before a command runs, so `--help` and a bad flag never start
 * anything. Each command's code lives in cli/commands/.
 */

/** TBT_DEBUG through the schema; a bad environment must not hide the error being reported. */
function debugEnabled(): boolean {
  try {
    return readEnvironment().TBT_DEBUG === '1';
  } catch {
    return false;
  }
}

type Runner = (args: string[]) => Promise<number | void>;

/** Each top-level command's code, loaded only when it runs (help stays fast and needs no server). */
const runners: Record<string, Runner> = {
  up: async () => (await import('./commands/infra.ts')).up(),
  down: async () => (await import('./commands/infra.ts')).down(),
  status: async () => (await import('./commands/infra.ts')).status(),
  tasks: async (a) => (await import('./commands/tasks.ts')).tasks(a),
  prepare: async (a) => (await import('./commands/prepare.ts')).prepare(a),
  eval: async (a) => (await import('./commands/eval.ts')).evaluate(a),
  episodes: async (a) => (await import('./commands/episodes.ts')).episodes(a),
  parity: async (a) => (await import('./commands/parity.ts')).parity(a),
  report: async (a) => (await import('./commands/report.ts')).report(a),
  train: async (a) => (await import('./commands/campaign.ts')).train(a),
  campaign: async (a) => (await import('./commands/campaign.ts')).campaign(a),
  gc: async (a) => (await import('./commands/gc.ts')).gc(a),
  workers: async (a) => (await import('./commands/workers.ts')).workers(a),
  workflows: async (a) => (await import('./commands/workflows-replay-check.ts')).workflows(a),
  'ui-screenshot': async (a) => (await import('./commands/ui-screenshot.ts')).uiScreenshot(a),
  demo: async (a) => (await import('./commands/demo.ts')).demo(a),
};

function errorMessage(err: unknown): string {
  // Scrubbed: a message can carry a URL with its password (a driver error, a bad flag value).
  return redactSecretsInText(err instanceof Error ? err.message : String(err));
}

async function main(argv: string[]): Promise<number> {
  // A host-level switch, accepted anywhere on the command line: never part of a campaign's config.
  if (argv.includes('--unsandboxed')) {
    allowUnsandboxedDatasetCode();
    argv = argv.filter((a) => a !== '--unsandboxed');
  }
  if (argv.length === 0 || argv[0] === '--help' || argv[0] === '-h') {
    console.log(topLevelHelp());
    return argv.length === 0 ? 2 : 0;
  }
  const resolved = resolveCommand(argv);
  if (!resolved) {
    console.error(`tbt: unknown command '${argv[0]}'\n\n${topLevelHelp()}`);
    return 2;
  }
  const { command, rest } = resolved;
  if (asksForHelp(rest)) {
    console.log(helpText(command));
    return 0;
  }
  const top = command.path.split(' ')[0]!;
  try {
    if (isGroup(command)) {
      const names = subcommandsOf(command).map((s) => s.path.split(' ').at(-1));
      throw new UsageError(
        rest[0] === undefined ? 'a subcommand is required' : `unknown subcommand '${rest[0]}' (${names.join(', ')})`,
      );
    }
    // The whole command line is checked against the definition before anything starts.
    parseCommandLine(command, rest);
    return (await runners[top]!(argv.slice(1))) ?? 0;
  } catch (err) {
    if (err instanceof HelpRequest) {
      console.log(helpText(err.command));
      return 0;
    }
    // Bad flags (node:util parseArgs's own errors included) exit 2 with the usage line.
    if (err instanceof UsageError || /^ERR_PARSE_ARGS/.test(String((err as { code?: string }).code))) {
      console.error(usageErrorText(command, errorMessage(err)));
      return exitCodes.usage;
    }
    if (err instanceof InputError) {
      console.error(`tbt: ${errorMessage(err)}`);
      return exitCodes.badInput;
    }
    return reportFailure(err);
  }
}

/**
 * Prints an error and returns its exit code by class (core/exit-codes.ts). Infrastructure and unclassified errors
 * end with a `tbt: class=NAME exit=N` line: their message alone does not say that the input is not at fault.
 */
function reportFailure(err: unknown): number {
  const exitClass = exitClassOf(err);
  console.error(`tbt: ${errorMessage(err)}`);
  if (debugEnabled() && err instanceof Error) console.error(redactSecretsInText(err.stack ?? ''));
  if (exitClass !== 'badInput') console.error(`tbt: class=${exitClass} exit=${exitCodes[exitClass]}`);
  return exitCodes[exitClass];
}

// Every top-level command of the definitions has code here (test/unit/cli-help.test.ts runs each one).
for (const c of tbtCommands)
  if (!c.path.includes(' ') && !runners[c.path]) throw new Error(`tbt: no code for ${c.path}`);

// An error no command awaited (a pool's idle client losing Postgres) would end Node with its own exit 1.
process.on('uncaughtException', (err) => process.exit(reportFailure(err)));

main(process.argv.slice(2)).then(
  (code) => process.exit(code),
  (err: unknown) => process.exit(reportFailure(err)),
);
