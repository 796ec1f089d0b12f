import { BadInputError } from '../../core/errors.ts';

/**
 * `.format(init=...)` of Python for the `{init[key]}`/`{init.key}` fields a format_query task uses; `{{`/`}}`
 * escape.
 */
export function formatWithInit(text: string, init: unknown): string {
  return text.replace(/\{\{|\}\}|\{init((?:\[[^\]]*\]|\.[A-Za-z_]\w*)*)\}/g, (whole, access: string | undefined) => {
    if (whole === '{{') return '{';
    if (whole === '}}') return '}';
    let value: unknown = init;
    for (const [, bracket, dot] of (access ?? '').matchAll(/\[([^\]]*)\]|\.(\w+)/g)) {
      const key = bracket ?? dot!;
      value =
        Array.isArray(value) && /^\d+$/.test(key) ? value[Number(key)] : (value as Record<string, unknown>)?.[key];
      if (value === undefined) throw new BadInputError(`format_query: {init${access}} is not in the init result`);
    }
    return typeof value === 'string' ? value : JSON.stringify(value);
  });
}
