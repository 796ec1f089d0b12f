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
      golden: [{ tool: 'move', arguments: {} }],
    },
  };
  assert.deepEqual(mergeWorldState(base, init), {
    catalog: {
      state: { books: [{ id: 'B1' }, { id: 'B2' }], open: false, hours: { mon: '9-5', tue: 'closed' } },
      limit: 5,
      golden: [{ tool: 'move', arguments: {} }],
    },
  });
  // Inputs are untouched; a type change replaces; a null replaces.
  assert.deepEqual(base.catalog.state.books, [{ id: 'B1' }]);
  assert.deepEqual(mergeWorldState({ a: [1] }, { a: { x: 1 } }), { a: { x: 1 } });
  assert.deepEqual(mergeWorldState({ a: { x: 1 } }, { a: null }), { a: null });
  assert.deepEqual(mergeWorldState({ a: 1 }, {}), { a: 1 });
});

test('golden calls are read per server in world_state order; malformed entries are named', () => {
  const { calls, problems } = goldenCallsOf({
    catalog: { golden: [{ tool: 'move_book', arguments: { id: 'B1', shelf: 'C4' } }, { tool: 'search_books' }] },
    loans: { state: {}, golden: [{ tool: 'checkout_book', arguments: { book_id: 'B1' } }, { arguments: {} }] },
    other: { golden: 'not a list' },
  });
  assert.deepEqual(calls, [
    { server: 'catalog', tool: 'move_book', arguments: { id: 'B1', shelf: 'C4' } },
    { server: 'catalog', tool: 'search_books', arguments: {} },
    { server: 'loans', tool: 'checkout_book', arguments: { book_id: 'B1' } },
  ]);
  assert.deepEqual(problems, [
    'world_state.loans.golden[1] must be {tool: name, arguments: {...}}',
    'world_state.other.golden must be a list of {tool, arguments}',
  ]);
});
