import { parseArgs } from 'node:util';
import type { CommandDefinition, FlagDefinitions } from './command-definition.ts';
import { findCommand, isGroup } from './command-help.ts';
import { commandErrorExit, consoleIo, HelpRequest, UsageError, type CommandIo } from './command-support.ts';

/** Flag parsing derived from a command's definition: the parser accepts exactly what the help describes. */

/** The parseArgs options of a definition (only the keys parseArgs knows), typed as the definition's flags. */
function parserOptions<F extends FlagDefinitions>(flags: F): F {
  return Object.fromEntries(
    Object.entries(flags).map(([name, f]) => [
      name,
      {
        type: f.type,
        ...(f.multiple ? { multiple: true } : {}),
        ...(f.default !== undefined ? { default: f.default } : {}),
      },
    ]),
  ) as unknown as F;
}

type ParsedFlags<F extends FlagDefinitions> = ReturnType<
  typeof parseArgs<{ args: string[]; options: F; strict: true; allowPositionals: true }>
>['values'];

type RequiredNames<F extends FlagDefinitions> = {
  [K in keyof F]: F[K] extends { required: true } ? K : never;
}[keyof F];

/** The parsed values; a required flag's value is always there (parseCommandLine checks). */
type FlagValues<F extends FlagDefinitions> = Omit<ParsedFlags<F>, RequiredNames<F>> & {
  [K in RequiredNames<F> & keyof ParsedFlags<F>]-?: NonNullable<ParsedFlags<F>[K]>;
};

export interface CommandLine<F extends FlagDefinitions> {
  values: FlagValues<F>;
  positionals: string[];
}

/** True when `--help` or `-h` stands before any `--`. */
export function asksForHelp(args: readonly string[]): boolean {
  const end = args.indexOf('--');
  return (end < 0 ? args : args.slice(0, end)).some((a) => a === '--help' || a === '-h');
}

/**
 * Parses `args` (the words after the command's path) strictly against the definition: unknown flags, missing
 * values, missing required flags and a wrong number of arguments are UsageErrors; `--help` is a HelpRequest.
 */
export function parseCommandLine<F extends FlagDefinitions>(
  command: CommandDefinition<F>,
  args: string[],
): CommandLine<F> {
  if (asksForHelp(args)) throw new HelpRequest(command);
  const positionalDefinitions = command.positionals ?? [];
  let parsed;
  try {
    parsed = parseArgs({
      args,
      options: parserOptions(command.flags),
      strict: true,
      allowPositionals: positionalDefinitions.length > 0,
    });
  } catch (err) {
    // Node's hint about '--' is noise for a mistyped flag.
    throw new UsageError((err as Error).message.replace(/\. To specify a positional argument .*$/s, ''));
  }
  const values = parsed.values as Record<string, unknown>;
  for (const [name, flag] of Object.entries(command.flags)) {
    if (flag.required && values[name] === undefined)
      throw new UsageError(`--${name} ${flag.value ?? 'VALUE'} is required${flag.multiple ? ' (repeatable)' : ''}`);
  }
  const { positionals } = parsed;
  const missing = positionalDefinitions.filter((p) => !p.optional)[positionals.length];
  if (missing) throw new UsageError(`${missing.name} is required`);
  if (positionals.length > positionalDefinitions.length)
    throw new UsageError(`unexpected argument '${positionals[positionalDefinitions.length]}'`);
  return { values: parsed.values as unknown as FlagValues<F>, positionals };
}

/** The deepest command that `argv` names (`tasks validate ...` names `tasks validate`), and the words after it. */
export function resolveCommand(argv: readonly string[]): { command: CommandDefinition; rest: string[] } | undefined {
  let command = argv[0] === undefined ? undefined : findCommand(argv[0]);
  if (!command) return undefined;
  let used = 1;
  while (isGroup(command) && argv[used] !== undefined) {
    const sub = findCommand(`${command.path} ${argv[used]}`);
    if (!sub) break;
    command = sub;
    used += 1;
  }
  return { command, rest: argv.slice(used) };
}

/**
 * parseCommandLine for a command without its own error handling: on `--help` or a usage error, prints it (help
 * on stdout, the usage line and message on stderr) and returns the exit code instead.
 */
export function commandLineOrExit<F extends FlagDefinitions>(
  command: CommandDefinition<F>,
  args: string[],
  io: CommandIo = consoleIo,
): CommandLine<F> | number {
  try {
    return parseCommandLine(command, args);
  } catch (err) {
    return commandErrorExit(err, command, io);
  }
}
