import assert from 'node:assert/strict';
import { test } from 'node:test';
import { type EngineRequest, modelName, status, tokensPerSecond } from '../core/status';

const ready = { ok: true, engine: 'llamacpp', model: '/cache/qwen2.5-coder-0.5b-instruct-q4_k_m.gguf', detail: 'threads=1' };
const req = (decode_tokens: number, decode_ms: number): EngineRequest =>
  ({ requestId: 'r', decode_tokens, decode_ms, ttft_ms: 40, finish_reason: 'stop' });

test('tokens per second come from the newest request that decoded more than one token', () => {
  assert.equal(tokensPerSecond([req(100, 1000), req(30, 500), req(1, 0)]), 60);
  assert.equal(tokensPerSecond([req(1, 10)]), undefined);
  assert.equal(tokensPerSecond([]), undefined);
});

test('a ready engine shows the model and the last speed', () => {
  const s = status('running', ready, [req(90, 1000)], false);
  assert.equal(s.text, '$(sparkle) qwen2.5-coder-0.5b · 90 tok/s');
  assert.match(s.tooltip, /llamacpp engine/);
  assert.equal(s.error, false);
});

test('loading, failed, generating and stopped each look different', () => {
  assert.match(status('running', { ...ready, ok: false, detail: 'loading' }, [], false).text, /loading~spin.*loading/);
  const failed = status('running', { ...ready, ok: false, detail: 'load failed: no such file' }, [], false);
  assert.equal(failed.error, true);
  assert.match(failed.tooltip, /no such file/);
  assert.match(status('running', ready, [], true).text, /^\$\(sync~spin\) /);
  assert.equal(status('stopped', undefined, [], false).error, true);
  assert.match(status('starting', undefined, [], false).text, /loading~spin/);
});

test('model names drop the folder, the extension, -instruct and the quantization', () => {
  assert.equal(modelName('/m/qwen2.5-coder-1.5b-instruct-q4_k_m.gguf'), 'qwen2.5-coder-1.5b');
  assert.equal(modelName('/ckpt/Qwen2.5-Coder-0.5B/'), 'Qwen2.5-Coder-0.5B');
  assert.equal(modelName('starcoder2-3b.Q8_0.gguf'), 'starcoder2-3b');
  assert.equal(modelName('fake (scripted)'), 'fake (scripted)');
});
