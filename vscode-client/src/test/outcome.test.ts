import assert from 'node:assert/strict';
import { test } from 'node:test';
import { describe } from '../core/outcome';

const o = (reason: string, lines = 0, redirects = 0) => ({ reason, lines, applied: lines, redirects });

test('each outcome of a streaming edit reads as one sentence without the sparkls prefix twice', () => {
  assert.equal(describe('sparkls: Rewrite with an instruction…', o('done', 3, 1)),
    'sparkls: Rewrite with an instruction: 3 lines, redirected 1×');
  assert.equal(describe('sparkls: Fix', o('cancelled', 1)), 'sparkls: Fix: stopped after 1 line');
  assert.match(describe('Fix', o('stale')), /changed first/);
  assert.match(describe('Fix', o('user-edit', 2)), /you edited the region \(2 lines applied\)/);
  assert.match(describe('Fix', o('error')), /engine failed/);
});
