import assert from 'node:assert/strict';
import { test } from 'node:test';
import { type AcceptanceEvent, acceptedRequestId, after, GhostTextTracker } from '../core/acceptance';

const at = (line: number, character: number) => ({ line, character });
const insert = (line: number, character: number, text: string) =>
  [{ range: { start: at(line, character), end: at(line, character) }, text }];
const URI = 'file:///a.py';

function tracker(): { t: GhostTextTracker; sent: AcceptanceEvent[] } {
  const sent: AcceptanceEvent[] = [];
  return { t: new GhostTextTracker((e) => sent.push(e)), sent };
}

test('ghost text is told shown once, and accepted whole it is told nothing more (its command counts it)', () => {
  const { t, sent } = tracker();
  t.shown('s1', URI, at(1, 8), 'rn msg');
  t.shown('s1', URI, at(1, 8), 'rn msg');  // the same item again
  t.changed(URI, insert(1, 8, 'rn msg'));  // Tab inserts all of it
  t.moved(URI, at(1, 14), true);
  t.accepted('s1');
  t.moved(URI, at(5, 0), true);
  assert.deepEqual(sent, [{ requestId: 's1', event: 'shown' }]);
});

test('accepting a word then a line is told as partial with the characters accepted so far', () => {
  const { t, sent } = tracker();
  t.shown('s1', URI, at(1, 8), 'rn x + 1\n    y = 2');
  t.changed(URI, insert(1, 8, 'rn '));
  t.moved(URI, at(1, 11), true);
  t.changed(URI, insert(1, 11, 'x + 1\n'));
  t.moved(URI, at(2, 0), true);
  assert.deepEqual(sent.slice(1), [{ requestId: 's1', event: 'partial', acceptedChars: 3 },
    { requestId: 's1', event: 'partial', acceptedChars: 9 }]);
});

test('a single character typed as the ghost text shows is no accept, and the ghost text stays', () => {
  const { t, sent } = tracker();
  t.shown('s1', URI, at(1, 8), 'rn msg');
  t.changed(URI, insert(1, 8, 'r'));
  t.moved(URI, at(1, 9), true);
  assert.deepEqual(sent, [{ requestId: 's1', event: 'shown' }]);
  t.changed(URI, insert(1, 9, 'x'));  // then something else: dismissed
  assert.deepEqual(sent.at(-1), { requestId: 's1', event: 'dismissed' });
});

test('typing something else, moving the cursor away or leaving the editor dismisses the ghost text once', () => {
  for (const leave of [
    (t: GhostTextTracker) => t.changed(URI, insert(1, 8, 'x')),
    (t: GhostTextTracker) => t.changed(URI, insert(0, 0, 'r')),  // the same text elsewhere
    (t: GhostTextTracker) => t.moved(URI, at(3, 0), true),
    (t: GhostTextTracker) => t.moved(URI, at(1, 8), false),  // a selection
    (t: GhostTextTracker) => t.end(),
  ]) {
    const { t, sent } = tracker();
    t.shown('s1', URI, at(1, 8), 'rn msg');
    leave(t);
    t.end();
    assert.deepEqual(sent, [{ requestId: 's1', event: 'shown' }, { requestId: 's1', event: 'dismissed' }]);
  }
});

test('a change in another document leaves the ghost text alone', () => {
  const { t, sent } = tracker();
  t.shown('s1', URI, at(1, 8), 'rn msg');
  t.changed('file:///other.py', insert(1, 8, 'x'));
  assert.equal(sent.length, 1);
});

test('a newer item at the cursor replaces the shown one without dismissing it', () => {
  const { t, sent } = tracker();
  t.shown('s1', URI, at(1, 8), 'rn msg');
  t.changed(URI, insert(1, 8, 'r'));
  t.shown('s2', URI, at(1, 9), 'n msg');  // the typed-ahead rest
  t.changed(URI, insert(1, 9, 'n msg'));
  t.accepted('s2');
  assert.deepEqual(sent, [{ requestId: 's1', event: 'shown' }, { requestId: 's2', event: 'shown' }]);
});

test('in a CRLF document the inserted lines still continue the ghost text', () => {
  const { t, sent } = tracker();
  t.shown('s1', URI, at(1, 8), 'rn x\n    y = 2\n    z = 3');
  t.changed(URI, insert(1, 8, 'rn x\r\n'));
  assert.deepEqual(sent.at(-1), { requestId: 's1', event: 'partial', acceptedChars: 5 });
  t.moved(URI, at(2, 0), true);
  assert.equal(sent.length, 2);
});

test('partial characters are code points, not UTF-16 units', () => {
  const { t, sent } = tracker();
  t.shown('s1', URI, at(0, 0), 'x = "😀" + y');
  t.changed(URI, insert(0, 0, 'x = "😀"'));
  assert.deepEqual(sent.at(-1), { requestId: 's1', event: 'partial', acceptedChars: 7 });
});

test('the accept command arguments give their request id only in the one shape the server sends', () => {
  assert.equal(acceptedRequestId([{ requestId: 'sugg-3' }]), 'sugg-3');
  assert.equal(acceptedRequestId([{ requestId: 3 }]), undefined);
  assert.equal(acceptedRequestId(['sugg-3']), undefined);
  assert.equal(acceptedRequestId([]), undefined);
  assert.equal(acceptedRequestId(undefined), undefined);
});

test('a position after inserted text moves along the line or to the last inserted line', () => {
  assert.deepEqual(after(at(1, 8), 'rn '), at(1, 11));
  assert.deepEqual(after(at(1, 8), 'x\n    y'), at(2, 5));
});
