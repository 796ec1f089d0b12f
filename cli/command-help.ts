import { exitCodeHelp } from '../core/exit-codes.ts';
import type { CommandDefinition, FlagDefinition, FlagDefinitions } from './command-definition.ts';
import { globalFlags, tbtCommands } from './command-definitions.ts';

/** Help text and usage lines, rendered from the command definitions only. */

const WIDTH = 100;
const COLUMN = 30;

/** Words of `text` in lines of at most `width`, each after `indent` (the first after `firstIndent`). */
export function wrap(text: string, width: number, indent: string, firstIndent = indent): string {
  const lines: string[] = [];
  let line = firstIndent;
  let empty = true;
  for (const word of text.split(/\s+/).filter(Boolean)) {
    if (!empty && line.length + 1 + word.length > width) {
      lines.push(line);
      line = indent;
      empty = true;
    }
    line += empty ? word : ` ${word}`;
    empty = false;
  }
  lines.push(line);
  return lines.join('\n');
}

export function findCommand(path: string): CommandDefinition | undefined {
  return tbtCommands.find((c) => c.path === path);
}

export function subcommandsOf(command: CommandDefinition): CommandDefinition[] {
  const depth = command.path.split(' ').length + 1;
  return tbtCommands.filter((c) => c.path.startsWith(`${command.path} `) && c.path.split(' ').length === depth);
}

export function isGroup(command: CommandDefinition): boolean {
  return subcommandsOf(command).length > 0;
}

function flagUsage(name: string, flag: FlagDefinition): string {
  const one = flag.type === 'string' ? `--${name} ${flag.value ?? 'VALUE'}` : `--${name}`;
  if (flag.required) return flag.multiple ? `${one} [${one} ...]` : one;
  return flag.multiple ? `[${one} ...]` : `[${one}]`;
}

/** What follows the command's words: positionals, required flags, then the optional ones. */
export function usageArguments(command: CommandDefinition): string {
  const subs = subcommandsOf(command);
  if (subs.length) return `<${subs.map((s) => s.path.split(' ').at(-1)).join('|')}> [args]`;
  const flags = Object.entries(command.flags);
  return [
    ...(command.positionals ?? []).map((p) => (p.optional ? `[${p.name}]` : p.name)),
    ...flags.filter(([, f]) => f.required).map(([n, f]) => flagUsage(n, f)),
    ...flags.filter(([, f]) => !f.required).map(([n, f]) => flagUsage(n, f)),
  ].join(' ');
}

/** `usage: tbt <path> <arguments>`, wrapped under the arguments' start. */
export function usageLine(command: CommandDefinition): string {
  const head = `usage: tbt ${command.path} `;
  return wrap(usageArguments(command), WIDTH, ' '.repeat(head.length), head).trimEnd();
}

function defaultNote(flag: FlagDefinition): string {
  const shown = flag.defaultText ?? (typeof flag.default === 'string' ? flag.default : undefined);
  return shown === undefined ? '' : ` (default ${shown})`;
}

/** Two columns: a name, and a description wrapped under the second column. */
function entry(name: string, description: string): string {
  const first = `  ${name}`.padEnd(COLUMN);
  return name.length + 4 > COLUMN
    ? `  ${name}\n${wrap(description, WIDTH, ' '.repeat(COLUMN))}`
    : wrap(description, WIDTH, ' '.repeat(COLUMN), first);
}

function optionLines(flags: FlagDefinitions): string[] {
  return [
    ...Object.entries(flags).map(([name, f]) =>
      entry(
        `--${name}${f.type === 'string' ? ` ${f.value ?? 'VALUE'}` : ''}`,
        `${f.description}${f.multiple ? '; repeatable' : ''}${defaultNote(f)}`,
      ),
    ),
    entry('-h, --help', 'print this help and exit'),
  ];
}

/** `tbt <path> --help`: usage line, summary, details, then the subcommands or the arguments and flags. */
export function helpText(command: CommandDefinition): string {
  const parts = [usageLine(command), '', wrap(command.summary, WIDTH, '')];
  if (command.details) parts.push('', wrap(command.details, WIDTH, ''));
  const subs = subcommandsOf(command);
  if (subs.length) {
    parts.push('', 'subcommands:');
    for (const sub of subs) {
      const name = `  ${sub.path.split(' ').at(-1)} `;
      parts.push(wrap(usageArguments(sub), WIDTH, '      ', name).trimEnd(), wrap(sub.summary, WIDTH, '      '));
    }
    parts.push('', `'tbt ${command.path} <subcommand> --help' prints a subcommand's arguments and flags.`);
    return parts.join('\n');
  }
  if (command.positionals?.length) {
    parts.push('', 'arguments:', ...command.positionals.map((p) => entry(p.name, p.description)));
  }
  parts.push('', 'options:', ...optionLines(command.flags));
  return parts.join('\n');
}

/** `tbt --help` (and bare `tbt`): every command and subcommand, the global flags and the exit codes. */
export function topLevelHelp(): string {
  return [
    'usage: tbt [--unsandboxed] <command> [subcommand] [args]',
    '',
    'commands:',
    ...tbtCommands.map((c) => entry(c.path, c.summary)),
    '',
    'options (anywhere on the command line):',
    ...optionLines(globalFlags),
    '',
    'exit codes (every command):',
    ...exitCodeHelp.map(([code, meaning]) => entry(String(code), meaning)),
    '',
    "'tbt <command> --help' prints a command's usage, arguments and flags.",
  ].join('\n');
}

/** A usage error, as printed: the usage line, the message, and where the full help is. */
export function usageErrorText(command: CommandDefinition, message: string): string {
  return `${usageLine(command)}\ntbt ${command.path}: ${message}\n(see 'tbt ${command.path} --help')`;
}
