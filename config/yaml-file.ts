import fs from 'node:fs';
import { isMap, isNode, isScalar, LineCounter, parseDocument, type Document } from 'yaml';
import type { z } from 'zod';
import { BadInputError } from '../core/errors.ts';

/** A YAML file parsed against a zod schema, every problem located by file, line and field. */

export interface TaskFileProblem {
  file: string;
  line: number;
  field: string;
  message: string;
}

export function formatProblem(p: TaskFileProblem): string {
  return `${p.file}:${p.line}: ${p.field ? `${p.field}: ` : ''}${p.message}`;
}

/**
 * The line of a field: its key's line when it is a mapping key (a block value starts on a later line), else its
 * node's.
 */
function lineOf(doc: Document, counter: LineCounter, pathParts: PropertyKey[]): number {
  for (let n = pathParts.length; n >= 0; n--) {
    if (n > 0) {
      const parent =
        doc.getIn(pathParts.slice(0, n - 1) as (string | number)[], true) ?? (n === 1 ? doc.contents : undefined);
      const key = pathParts[n - 1];
      const pair = isMap(parent)
        ? parent.items.find((p) => (isScalar(p.key) ? p.key.value : p.key) === key)
        : undefined;
      if (pair && isNode(pair.key) && pair.key.range) return counter.linePos(pair.key.range[0]).line;
    }
    const node = n === 0 ? doc.contents : doc.getIn(pathParts.slice(0, n) as (string | number)[], true);
    if (isNode(node) && node.range) return counter.linePos(node.range[0]).line;
  }
  return 1;
}

function fieldName(parts: PropertyKey[]): string {
  return parts.map((p, i) => (typeof p === 'number' ? `[${p}]` : `${i ? '.' : ''}${String(p)}`)).join('');
}

/** Parses YAML text that starts at line `firstLine` of `file` (embedded YAML); no schema. */
export function parseYamlText(
  text: string,
  file: string,
  firstLine = 1,
): { value?: unknown; problems: TaskFileProblem[]; lineOf: (p: PropertyKey[]) => number } {
  const counter = new LineCounter();
  const doc = parseDocument(text, { lineCounter: counter, uniqueKeys: true, prettyErrors: false });
  const locate = (p: PropertyKey[]) => lineOf(doc, counter, p) + firstLine - 1;
  if (doc.errors.length > 0) {
    return {
      problems: doc.errors.map((e) => ({
        file,
        line: (e.linePos?.[0]?.line ?? counter.linePos(e.pos[0]).line) + firstLine - 1,
        field: '',
        message: `YAML syntax: ${e.message.split('\n')[0]}`,
      })),
      lineOf: locate,
    };
  }
  try {
    return { value: doc.toJS({ maxAliasCount: MAX_ALIAS_COUNT }) as unknown, problems: [], lineOf: locate };
  } catch (err) {
    // An alias bomb (aliases expanding to aliases, billions of nodes) is refused while expanding.
    return {
      problems: [{ file, line: firstLine, field: '', message: `YAML: ${(err as Error).message}` }],
      lineOf: locate,
    };
  }
}

/** Alias expansions allowed per document; the yaml package's default, named so the refusal is ours to explain. */
export const MAX_ALIAS_COUNT = 100;

/** The plain value of a YAML file (no schema); any problem is thrown as one error naming the file and line. */
export function readYamlValue(file: string): unknown {
  let text: string;
  try {
    text = fs.readFileSync(file, 'utf8');
  } catch (err) {
    throw new BadInputError(`${file}: cannot read file: ${(err as Error).message}`, { cause: err });
  }
  const parsed = parseYamlText(text, file);
  if (parsed.problems.length) throw new BadInputError(parsed.problems.map(formatProblem).join('\n'));
  return parsed.value;
}

/** Checks a parsed value against a schema; problems are located with `locate` (file line of a field path). */
export function validateParsed<S extends z.ZodType>(
  value: unknown,
  schema: S,
  file: string,
  locate: (p: PropertyKey[]) => number,
): { value?: z.infer<S>; problems: TaskFileProblem[] } {
  const parsed = schema.safeParse(value);
  if (parsed.success) return { value: parsed.data, problems: [] };
  return {
    problems: parsed.error.issues.flatMap((i) => {
      // An unknown key is reported on its parent object; name (and locate) the key itself.
      const paths = i.code === 'unrecognized_keys' ? i.keys.map((k) => [...i.path, k]) : [i.path];
      return paths.map((p) => ({
        file,
        line: locate(p),
        field: fieldName(p),
        message: i.code === 'unrecognized_keys' ? 'unknown field' : i.message,
      }));
    }),
  };
}

/** Parses one YAML file against a schema; returns the value or the problems (with line numbers). */
export function parseYamlFile<S extends z.ZodType>(
  file: string,
  schema: S,
): { value?: z.infer<S>; problems: TaskFileProblem[]; lineOf: (p: PropertyKey[]) => number } {
  let text: string;
  try {
    text = fs.readFileSync(file, 'utf8');
  } catch (err) {
    return {
      problems: [{ file, line: 1, field: '', message: `cannot read file: ${(err as Error).message}` }],
      lineOf: () => 1,
    };
  }
  const parsed = parseYamlText(text, file);
  if (parsed.problems.length) return parsed as { problems: TaskFileProblem[]; lineOf: (p: PropertyKey[]) => number };
  return { ...validateParsed(parsed.value, schema, file, parsed.lineOf), lineOf: parsed.lineOf };
}
