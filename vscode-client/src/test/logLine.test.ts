import assert from 'node:assert/strict';
import { test } from 'node:test';
import { LogLines } from '../core/logLine';

test('each server log line shows at its own level, without the date and level the channel adds', () => {
  const lines = new LogLines();
  assert.deepEqual(lines.read('2026-12-06 17:25:59,342 INFO sparkls: engine ready'),
    { level: 'info', text: 'sparkls: engine ready' });
  assert.deepEqual(lines.read('2026-12-06 17:25:59,343 WARNING sparkls.engine: restarting'),
    { level: 'warn', text: 'sparkls.engine: restarting' });
  assert.deepEqual(lines.read('2026-12-06 17:25:59,344 DEBUG sparkls.engine.llama.cpp: print_info: n_vocab = 151936'),
    { level: 'debug', text: 'sparkls.engine.llama.cpp: print_info: n_vocab = 151936' });
});

test('a line without a head continues the record before it (a traceback stays an error)', () => {
  const lines = new LogLines();
  lines.read('2026-12-06 17:25:59,342 ERROR sparkls: the worker died');
  assert.deepEqual(lines.read('Traceback (most recent call last):'), { level: 'error', text: 'Traceback (most recent call last):' });
  lines.read('2026-12-06 17:25:59,350 INFO sparkls: back');
  assert.equal(lines.read('  a continued line').level, 'info');
});
