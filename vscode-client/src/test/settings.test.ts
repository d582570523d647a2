import assert from 'node:assert/strict';
import { test } from 'node:test';
import { needsRestart, serverSettings } from '../core/settings';

test('the server gets its settings as plain JSON without the client keys', () => {
  const section = {
    engine: 'fake', threads: 2, excludeFiles: ['*.secret'], server: { command: ['x'] }, nextEdit: { enabled: true },
    trace: { server: 'off' }, get: () => 1,
  };
  assert.deepEqual(serverSettings(section), { engine: 'fake', threads: 2, excludeFiles: ['*.secret'] });
});

test('only launch changes restart the server; engine, model and the rest are sent to it', () => {
  const affects = (changed: string[]) => (s: string) => changed.some((c) => c === s || c.startsWith(`${s}.`));
  assert.equal(needsRestart(affects(['sparkls.server.python'])), true);
  assert.equal(needsRestart(affects(['sparkls.engine'])), false);
  assert.equal(needsRestart(affects(['sparkls.modelPath'])), false);
  assert.equal(needsRestart(affects(['sparkls.suffixTokens'])), false);
  assert.equal(needsRestart(affects(['editor.fontSize'])), false);
});
