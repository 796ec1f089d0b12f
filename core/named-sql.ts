/**
 * `:name` placeholders in tool SQL -> positional `$n` parameters. Quoted strings (with doubled quotes,
 * and backslash escapes in `E'...'`), quoted identifiers, comments, dollar-quoted bodies and `::type`
 * casts are left alone, so argument values are always bound, never spliced into the statement text.
 */

export interface CompiledSql {
  text: string;
  names: string[];
}

/** Index just past the quoted run opened at `start`; a doubled quote stays inside it. */
function endOfQuoted(sql: string, start: number, quote: string, backslashEscapes: boolean): number {
  let i = start + 1;
  while (i < sql.length) {
    const ch = sql[i]!;
    if (backslashEscapes && ch === '\\') i += 2;
    else if (ch === quote && sql[i + 1] === quote) i += 2;
    else if (ch === quote) return i + 1;
    else i += 1;
  }
  return sql.length;
}

const dollarTag = /^\$(?:[A-Za-z_][A-Za-z0-9_]*)?\$/;
const placeholder = /^:([A-Za-z_][A-Za-z0-9_]*)/;

export function compileNamedSql(sql: string): CompiledSql {
  const names: string[] = [];
  let out = '';
  let i = 0;
  const copyTo = (stop: number) => {
    out += sql.slice(i, stop);
    i = stop;
  };
  while (i < sql.length) {
    const ch = sql[i]!;
    const rest = sql.slice(i);
    // An E string starts at `E'` that is not the end of an identifier (`name'` is not valid SQL anyway).
    const escapeString = (ch === 'E' || ch === 'e') && sql[i + 1] === "'" && !/[A-Za-z0-9_$]/.test(sql[i - 1] ?? '');
    if (escapeString) copyTo(endOfQuoted(sql, i + 1, "'", true));
    else if (ch === "'") copyTo(endOfQuoted(sql, i, "'", false));
    else if (ch === '"') copyTo(endOfQuoted(sql, i, '"', false));
    else if (rest.startsWith('--')) {
      const end = sql.indexOf('\n', i);
      copyTo(end < 0 ? sql.length : end + 1);
    } else if (rest.startsWith('/*')) {
      const end = sql.indexOf('*/', i + 2);
      copyTo(end < 0 ? sql.length : end + 2);
    } else if (ch === '$' && dollarTag.test(rest) && !/[A-Za-z0-9_]/.test(sql[i - 1] ?? '')) {
      const tag = dollarTag.exec(rest)![0];
      const end = sql.indexOf(tag, i + tag.length);
      copyTo(end < 0 ? sql.length : end + tag.length);
    } else if (ch === ':' && sql[i + 1] === ':') copyTo(i + 2);
    else if (ch === ':' && placeholder.test(rest)) {
      const name = placeholder.exec(rest)![1]!;
      let index = names.indexOf(name);
      if (index < 0) index = names.push(name) - 1;
      out += `$${index + 1}`;
      i += name.length + 1;
    } else copyTo(i + 1);
  }
  return { text: out, names };
}
