import assert from 'node:assert/strict';
import { test } from 'node:test';
import { compileNamedSql } from '../../core/named-sql.ts';
import { judgeSaysYes } from '../../core/judge-verdict.ts';

test('named parameters become positional, repeated names share one position', () => {
  assert.deepEqual(compileNamedSql('UPDATE t SET a = :a, b = :b WHERE id = :id AND a <> :a'), {
    text: 'UPDATE t SET a = $1, b = $2 WHERE id = $3 AND a <> $1',
    names: ['a', 'b', 'id'],
  });
});

test('casts, string literals, quoted identifiers, comments and dollar quotes are left alone', () => {
  const sql = `SELECT :n::int, ':not', "odd:name", $$ :also_not $$ -- :comment\n, /* :c */ :x`;
  assert.deepEqual(compileNamedSql(sql), {
    text: `SELECT $1::int, ':not', "odd:name", $$ :also_not $$ -- :comment\n, /* :c */ $2`,
    names: ['n', 'x'],
  });
});

test('judge verdict: yes only when the first or last word is yes (the reference parser)', () => {
  assert.equal(judgeSaysYes('Yes.'), true);
  assert.equal(judgeSaysYes('Yes:\nthe message is polite'), true);
  assert.equal(judgeSaysYes('It is; yes'), true);
  assert.equal(judgeSaysYes('The answer is yes'), true);
  assert.equal(judgeSaysYes('No, although one could say yes to part of it.'), false);
  assert.equal(judgeSaysYes('no ... YES'), true);
  // Only `. , ; :` and newlines are separators: "YES!" is not the word "yes".
  assert.equal(judgeSaysYes('no ... YES!'), false);
  assert.equal(judgeSaysYes('No, not yes-ish at all'), false);
  assert.equal(judgeSaysYes('Eyes open: no'), false);
  assert.equal(judgeSaysYes(''), false);
});

test("finding 11: doubled quotes keep later parameters bound ('won''t', \"a\"\"b\", E'\\'')", () => {
  assert.deepEqual(compileNamedSql(`UPDATE t SET note = 'won''t' WHERE id = :id AND owner = :owner`), {
    text: `UPDATE t SET note = 'won''t' WHERE id = $1 AND owner = $2`,
    names: ['id', 'owner'],
  });
  assert.deepEqual(compileNamedSql(`SELECT "a""b:c", '', E'it\\'s :no', :x, $fn$ :y $fn$, :z`), {
    text: `SELECT "a""b:c", '', E'it\\'s :no', $1, $fn$ :y $fn$, $2`,
    names: ['x', 'z'],
  });
});
