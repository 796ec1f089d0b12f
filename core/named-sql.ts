/**
 * `:name` placeholders in tool SQL -> positional `$n` parameters. Quoted strings, quoted identifiers,
 * comments, dollar-quoted bodies and `::type` casts are left alone, so argument values are always bound,
 * never spliced into the statement text.
 */

export interface CompiledSql {
  text: string;
  names: string[];
}

export function compileNamedSql(sql: string): CompiledSql {
  const names: string[] = [];
  let out = '';
  let i = 0;
  while (i < sql.length) {
    const ch = sql[i]!;
    const rest = sql.slice(i);
    const skip = (end: RegExp) => {
      const m = end.exec(sql.slice(i + 1));
      const stop = m ? i + 1 + m.index + m[0].length : sql.length;
      out += sql.slice(i, stop);
      i = stop;
    };
    if (ch === "'") skip(/'(?!')/);
    else if (ch === '"') skip(/"/);
    else if (rest.startsWith('--')) skip(/\n/);
    else if (rest.startsWith('/*')) skip(/\*\//);
    else if (ch === '$' && /^\$[A-Za-z_]*\$/.test(rest)) {
      const tag = /^\$[A-Za-z_]*\$/.exec(rest)![0];
      const end = sql.indexOf(tag, i + tag.length);
      const stop = end < 0 ? sql.length : end + tag.length;
      out += sql.slice(i, stop);
      i = stop;
    } else if (ch === ':' && sql[i + 1] === ':') {
      out += '::';
      i += 2;
    } else if (ch === ':' && /^:[A-Za-z_][A-Za-z0-9_]*/.test(rest)) {
      const name = /^:([A-Za-z_][A-Za-z0-9_]*)/.exec(rest)![1]!;
      let index = names.indexOf(name);
      if (index < 0) index = names.push(name) - 1;
      out += `$${index + 1}`;
      i += name.length + 1;
    } else {
      out += ch;
      i += 1;
    }
  }
  return { text: out, names };
}
