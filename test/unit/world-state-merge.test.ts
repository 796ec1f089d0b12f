import assert from 'node:assert/strict';
import { test } from 'node:test';
import { goldenCallsOf, mergeWorldState } from '../../core/world-state-merge.ts';

test('init merges into world_state: dicts recursively, lists concatenated, scalars replaced', () => {
  const base = {
    catalog: { state: { books: [{ id: 'B1' }], open: true, hours: { mon: '9-5', tue: '9-5' } }, limit: 3 },
  };
  const init = {
    catalog: {
      state: { books: [{ id: 'B2' }], open: false, hours: { tue: 'closed' } },
      limit: 5,
      golden_test_case: { tool_interactions: [{ tool: 'move', parameters: {} }] },
    },
  };
  assert.deepEqual(mergeWorldState(base, init), {
    catalog: {
      state: { books: [{ id: 'B1' }, { id: 'B2' }], open: false, hours: { mon: '9-5', tue: 'closed' } },
      limit: 5,
      golden_test_case: { tool_interactions: [{ tool: 'move', parameters: {} }] },
    },
  });
  // Inputs are untouched; a type change replaces; a null replaces.
  assert.deepEqual(base.catalog.state.books, [{ id: 'B1' }]);
  assert.deepEqual(mergeWorldState({ a: [1] }, { a: { x: 1 } }), { a: { x: 1 } });
  assert.deepEqual(mergeWorldState({ a: { x: 1 } }, { a: null }), { a: null });
  assert.deepEqual(mergeWorldState({ a: 1 }, {}), { a: 1 });
  // A falsy scenario value is replaced outright (the bench's empty `data_patch:` and `rubrics:`).
  assert.deepEqual(mergeWorldState({ a: null, b: [], c: {} }, { a: { t: [1] }, b: { x: 1 }, c: [2] }), {
    a: { t: [1] },
    b: { x: 1 },
    c: [2],
  });
});

test('golden calls are read per server in world_state order; malformed entries are named', () => {
  const tc = (tool_interactions: unknown) => ({ golden_test_case: { tool_interactions } });
  const { calls, problems } = goldenCallsOf({
    catalog: tc([{ tool: 'move_book', parameters: { id: 'B1', shelf: 'C4' } }, { tool: 'search_books' }]),
    loans: { state: {}, ...tc([{ tool: 'checkout_book', parameters: { book_id: 'B1' } }, { parameters: {} }]) },
    other: tc('not a list'),
    none: { golden_test_case: null },
  });
  assert.deepEqual(calls, [
    { server: 'catalog', tool: 'move_book', arguments: { id: 'B1', shelf: 'C4' } },
    { server: 'catalog', tool: 'search_books', arguments: {} },
    { server: 'loans', tool: 'checkout_book', arguments: { book_id: 'B1' } },
  ]);
  assert.deepEqual(problems, [
    'world_state.loans.golden_test_case.tool_interactions[1] must be {tool: name, parameters: {...}}',
    'world_state.other.golden_test_case.tool_interactions must be a list of {tool, parameters}',
  ]);
});
