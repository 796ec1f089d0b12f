/**
 * The shape of one `tbt` command or subcommand. Help, usage lines and flag parsing are all derived from these
 * definitions (cli/command-definitions.ts), so what the help says and what the parser accepts cannot drift.
 */

export interface FlagDefinition {
  type: 'string' | 'boolean';
  /** Repeatable: the values come as a list. */
  multiple?: boolean;
  /** What the value is, in usage lines (`--concurrency N`); string flags only. */
  value?: string;
  /** The parser's default (a string flag's default is text, as on the command line). */
  default?: string | boolean;
  /** A default the command computes itself, as the help shows it. */
  defaultText?: string;
  /** Shown without brackets in the usage line; a missing one is a usage error. */
  required?: boolean;
  description: string;
}

export type FlagDefinitions = Readonly<Record<string, FlagDefinition>>;

export interface PositionalDefinition {
  name: string;
  description: string;
  optional?: boolean;
}

export interface CommandDefinition<F extends FlagDefinitions = FlagDefinitions> {
  /** Words after `tbt`: `tasks validate`. A command with subcommands is a group (`tasks`). */
  path: string;
  /** One line for the command lists. */
  summary: string;
  /** Further paragraphs of its help. */
  details?: string;
  positionals?: readonly PositionalDefinition[];
  flags: F;
}

/** Keeps each flag's literal type, so the parsed values are typed from the definition. */
export function defineCommand<const F extends FlagDefinitions>(definition: CommandDefinition<F>): CommandDefinition<F> {
  return definition;
}
