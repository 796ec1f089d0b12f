import { BadInputError } from './errors.ts';

/**
 * A tool's input schema in the form the reference offers it to the model (docs/reference-rules.md §2): its MCP
 * client converts every listed tool before anything else sees it (microsoft/thinkingbox/thinkingbox/tools/
 * client/worker.py, `convert_and_add_tools`), so scenario overrides and argument typing start from the converted
 * schema.
 *
 * 1. Every `$ref` is resolved: an object holding `$ref` becomes a copy of its target, converted in turn; the
 *    object's other keys (a `description` beside the `$ref`) are dropped. Only local pointers (`#/a/b`, with `~1`
 *    and `~0` unescaped, no percent-decoding) into objects resolve, against the schema as listed. A missing target
 *    and a cycle (a `$ref` reached again inside its own expansion, even in an unused definition) are errors.
 * 2. The top-level `$defs` is dropped; `definitions` and nested `$defs` stay (their `$ref`s resolved too).
 * 3. `title` is dropped from the schema itself and from each of its top-level properties' schemas, nowhere deeper:
 *    titles inside nested objects, array items or `anyOf` members stay, and a property named `title` stays.
 * Key order is kept, as the reference's dicts keep it. Unlike the reference, which fails on them, property schemas
 * that are not objects (`true`) are left as they are.
 */

type JsonObject = Record<string, unknown>;

function isObject(value: unknown): value is JsonObject {
  return typeof value === 'object' && value !== null && !Array.isArray(value);
}

/** Object.fromEntries, not assignment: a key such as `__proto__` must stay an ordinary key. */
function withoutKey(object: JsonObject, key: string): JsonObject {
  return Object.fromEntries(Object.entries(object).filter(([k]) => k !== key));
}

/** The value a local JSON pointer names in `root`, or undefined (also for JSON null, as the reference reads it). */
function pointerTarget(root: unknown, pointer: string): unknown {
  if (!pointer.startsWith('#/')) return undefined;
  let node: unknown = root;
  for (const escaped of pointer.slice(2).split('/')) {
    if (!isObject(node)) return undefined;
    const token = escaped.replaceAll('~1', '/').replaceAll('~0', '~');
    node = Object.hasOwn(node, token) ? node[token] : undefined;
  }
  return node ?? undefined;
}

function dereferenced(root: unknown, node: unknown, expanding: Set<string>): unknown {
  if (Array.isArray(node)) return node.map((item) => dereferenced(root, item, expanding));
  if (!isObject(node)) return node;
  if (!Object.hasOwn(node, '$ref'))
    return Object.fromEntries(Object.entries(node).map(([k, v]) => [k, dereferenced(root, v, expanding)]));
  const pointer = node.$ref;
  if (typeof pointer !== 'string') throw new BadInputError(`$ref is not a string: ${JSON.stringify(pointer)}`);
  if (expanding.has(pointer)) throw new BadInputError(`circular $ref ${pointer}`);
  const target = pointerTarget(root, pointer);
  if (target === undefined) throw new BadInputError(`$ref ${pointer} names nothing in the schema`);
  expanding.add(pointer);
  const expanded = dereferenced(root, target, expanding);
  expanding.delete(pointer);
  return expanded;
}

/** The reference's form of one tool's input schema; throws BadInputError where the reference's conversion fails. */
export function referenceToolSchema(inputSchema: JsonObject): JsonObject {
  const resolved = dereferenced(inputSchema, inputSchema, new Set());
  if (!isObject(resolved)) throw new BadInputError(`the schema's $ref resolves to ${JSON.stringify(resolved)}`);
  const schema = withoutKey(withoutKey(resolved, '$defs'), 'title');
  const properties = schema.properties;
  if (!isObject(properties)) return schema;
  return {
    ...schema,
    properties: Object.fromEntries(
      Object.entries(properties).map(([name, property]) => [
        name,
        isObject(property) ? withoutKey(property, 'title') : property,
      ]),
    ),
  };
}
