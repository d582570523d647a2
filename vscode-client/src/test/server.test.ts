import assert from 'node:assert/strict';
import { test } from 'node:test';
import { findOnPath, serverLaunch } from '../core/server';

const nowhere = () => undefined;

test('an explicit command wins over the interpreter and the PATH', () => {
  const how = serverLaunch({ command: ['/opt/sparkls', 'serve', '--tcp', '127.0.0.1:9'], python: '/usr/bin/python3' },
    () => '/usr/bin/sparkls');
  assert.deepEqual(how, { command: '/opt/sparkls', args: ['serve', '--tcp', '127.0.0.1:9'] });
});

test('an interpreter runs the server as a module', () => {
  assert.deepEqual(serverLaunch({ command: [' '], python: ' /venv/bin/python ' }, nowhere),
    { command: '/venv/bin/python', args: ['-m', 'sparkls', 'serve'] });
});

test('with no settings the sparkls on the PATH serves over stdio', () => {
  assert.deepEqual(serverLaunch({ command: [], python: '' }, (n) => (n === 'sparkls' ? '/home/u/.local/bin/sparkls' : undefined)),
    { command: '/home/u/.local/bin/sparkls', args: ['serve'] });
});

test('a missing server gives a message with the install command', () => {
  const how = serverLaunch({ command: [], python: '' }, nowhere);
  assert.ok('error' in how);
  assert.match(how.error, /not found on the PATH/);
  assert.match(how.error, /pip install "sparkls\[default\]"/);
});

test('the PATH is searched in order and empty entries are skipped', () => {
  const seen: string[] = [];
  const found = findOnPath('sparkls', '::/a/:/b:/c', (f) => { seen.push(f); return f.startsWith('/b/'); });
  assert.equal(found, '/b/sparkls');
  assert.deepEqual(seen, ['/a/sparkls', '/b/sparkls']);
  assert.equal(findOnPath('sparkls.exe', 'C:\\x;D:\\y', (f) => f === 'D:\\y/sparkls.exe', ';'), 'D:\\y/sparkls.exe');
});
