import assert from 'node:assert/strict';
import { test } from 'node:test';
import { applies, insertsAt, shown, textOf, view } from '../core/nextEdit';

const lines = ['def area(w, h):', '    return w * h', '', 'print(area(2, 3))'];
const at = (line: number, character: number) => ({ line, character });

test('text of a range spans lines', () => {
  assert.equal(textOf(lines, { start: at(0, 4), end: at(1, 10) }), 'area(w, h):\n    return');
  assert.equal(textOf(lines, { start: at(1, 11), end: at(1, 16) }), 'w * h');
});

test('a replacement is struck through and its new text shown after it, with the diff in the hover', () => {
  const v = view(lines, [{ range: { start: at(1, 11), end: at(1, 16) }, newText: 'w * h * d' }]);
  assert.deepEqual(v.removed, [{ start: at(1, 11), end: at(1, 16) }]);
  assert.deepEqual(v.added, [{ at: at(1, 16), text: 'w * h * d' }]);
  assert.match(v.markdown, /```diff\n- w \* h\n\+ w \* h \* d\n```/);
});

test('an insertion of new lines shows its first line and how many follow', () => {
  assert.equal(shown('\n    x = 1\n    y = 2\n'), '⏎     x = 1 … (+1 more)');
  assert.equal(shown('abc'), 'abc');
  const v = view(lines, [{ range: { start: at(1, 16), end: at(1, 16) }, newText: '\n    print(w)' }]);
  assert.deepEqual(v.removed, []);
  assert.equal(v.added[0].text, '⏎     print(w)');
});

test('a deletion shows nothing added', () => {
  const v = view(lines, [{ range: { start: at(2, 0), end: at(3, 0) }, newText: '' }]);
  assert.equal(v.added.length, 0);
  assert.equal(v.removed.length, 1);
});

test('a prediction applies only to the version it was made for', () => {
  const r = { textDocument: { uri: 'file:///a.py', version: 7 }, requestId: 'n1',
    edits: [{ range: { start: at(0, 0), end: at(0, 0) }, newText: 'x' }] };
  assert.equal(applies(r, 'file:///a.py', 7), true);
  assert.equal(applies(r, 'file:///a.py', 8), false);
  assert.equal(applies(r, 'file:///b.py', 7), false);
  assert.equal(applies({ ...r, edits: [] }, 'file:///a.py', 7), false);
});

test('a single insertion at the cursor is left to the inline completion', () => {
  const r = (range: { start: { line: number; character: number }; end: { line: number; character: number } }) =>
    ({ textDocument: { uri: 'file:///a.py', version: 1 }, requestId: 'n', edits: [{ range, newText: 'n x' }] });
  assert.equal(insertsAt(r({ start: at(8, 9), end: at(8, 9) }), at(8, 9)), true);
  assert.equal(insertsAt(r({ start: at(8, 2), end: at(8, 9) }), at(8, 9)), false);  // a replacement
  assert.equal(insertsAt(r({ start: at(7, 9), end: at(7, 9) }), at(8, 9)), false);  // elsewhere
});
