import assert from 'node:assert/strict';
import { test } from 'node:test';
import { mergeSystemMessages } from '../../core/system-message-merge.ts';
import { systemMessagesManifestEntry } from '../../rollout/system-message-handling.ts';

test('several system messages become one, first, joined by a blank line, in order; the rest keep their order', () => {
  const merged = mergeSystemMessages([
    { role: 'system', content: 'agent' },
    { role: 'system', content: 'domain' },
    { role: 'user', content: 'hi' },
    { role: 'assistant', content: 'hello' },
    { role: 'system', content: 'late' },
    { role: 'user', content: 'bye' },
  ]);
  assert.deepEqual(merged, [
    { role: 'system', content: 'agent\n\ndomain\n\nlate' },
    { role: 'user', content: 'hi' },
    { role: 'assistant', content: 'hello' },
    { role: 'user', content: 'bye' },
  ]);
});

test('a conversation with one system message or none is returned as it is', () => {
  const one = [
    { role: 'system', content: 'agent' },
    { role: 'user', content: 'hi' },
  ];
  assert.equal(mergeSystemMessages(one), one);
  const none = [{ role: 'user', content: 'hi' }];
  assert.equal(mergeSystemMessages(none), none);
});

test('the manifest entry names the handling, and says so when the server could not render the check', () => {
  assert.deepEqual(systemMessagesManifestEntry({ systemMessages: 'merged', rendered: true }), {
    system_messages: 'merged',
  });
  assert.deepEqual(systemMessagesManifestEntry({ systemMessages: 'separate', rendered: false }), {
    system_messages: 'separate',
    system_messages_rendered: false,
  });
});
