// What the user did with the ghost text the server offered, as `sparkls/acceptance` events: shown, partly accepted
// (a word or a line) or dismissed. A whole accept is the item's own `sparkls.accepted` command, which VS Code runs.
//
// VS Code's stable API (engine ^1.91) tells an inline completion provider neither that its item was shown nor that
// it was partly accepted or rejected (`handleDidShowCompletionItem` and the like are a proposed API, which a
// published extension cannot use), so this is told from what the extension sees:
// - shown: VS Code got the item for a request it had not cancelled (it shows the first item that fits);
// - partial: one change inserts more than one character of the ghost text where it stands (accept word or line;
//   a single character is the user typing it, which the server's typed-ahead answer continues);
// - dismissed: the item was shown and then the document changed otherwise, the cursor moved elsewhere or another
//   editor became active, before an accept. A newer item shown at the cursor replaces the last one silently.
// An insertion of the whole rest is the accept: its command follows, and nothing more is told.

import type { Position, Range } from './nextEdit';

export const ACCEPTED = 'sparkls.accepted';
export const ACCEPTANCE = 'sparkls/acceptance';

export interface AcceptanceEvent {
  requestId: string;
  event: 'shown' | 'partial' | 'dismissed';
  /** For `partial`: the characters (code points) of the offer accepted so far. */
  acceptedChars?: number;
}

/** A change to a document, in its positions (VS Code's `TextDocumentContentChangeEvent`). */
export interface Change {
  range: Range;
  text: string;
}

/** The request id of a `sparkls.accepted` command's arguments, if they are its one `{requestId}`. */
export function acceptedRequestId(args: unknown[] | undefined): string | undefined {
  const first = args?.length === 1 ? args[0] : undefined;
  const id = typeof first === 'object' && first !== null ? (first as { requestId?: unknown }).requestId : undefined;
  return typeof id === 'string' ? id : undefined;
}

function samePosition(a: Position, b: Position): boolean {
  return a.line === b.line && a.character === b.character;
}

/** Where `at` is after `text` is inserted there. */
export function after(at: Position, text: string): Position {
  const lines = text.split('\n');
  return lines.length === 1 ? { line: at.line, character: at.character + text.length }
    : { line: at.line + lines.length - 1, character: lines[lines.length - 1].length };
}

interface Shown {
  requestId: string;
  uri: string;
  at: Position;  // where the rest of the ghost text stands
  rest: string;
  accepted: string;  // what accepts of a word or line inserted so far
  inserted: boolean;  // the whole rest was inserted: the accept's command comes next
}

/** The ghost text shown now, and what becomes of it; `send` tells the server. */
export class GhostTextTracker {
  private current: Shown | undefined;

  constructor(private readonly send: (e: AcceptanceEvent) => void) {}

  /** VS Code got `text` for `requestId`, to insert at `at` in `uri`, for a request still current. */
  shown(requestId: string, uri: string, at: Position, text: string): void {
    if (this.current?.requestId === requestId || text === '') return;
    this.current = { requestId, uri, at, rest: text.replace(/\r\n/g, '\n'), accepted: '', inserted: false };
    this.send({ requestId, event: 'shown' });
  }

  /** A document changed: text of the ghost text inserted where it stands continues it; anything else there
   * dismisses it. */
  changed(uri: string, changes: readonly Change[]): void {
    const c = this.current;
    if (c === undefined || c.uri !== uri || changes.length === 0) return;
    const [first] = changes;
    const text = first.text.replace(/\r\n/g, '\n');  // a CRLF document gets the ghost text's lines with CRLF
    const continues = changes.length === 1 && text !== '' && c.rest.startsWith(text) &&
      samePosition(first.range.start, c.at) && samePosition(first.range.end, c.at);
    if (c.inserted || !continues) {
      this.end();
      return;
    }
    c.at = after(c.at, text);
    c.rest = c.rest.slice(text.length);
    if (c.rest === '') {
      c.inserted = true;
    } else if (text.length > 1) {
      c.accepted += text;
      this.send({ requestId: c.requestId, event: 'partial', acceptedChars: Array.from(c.accepted).length });
    }
  }

  /** The cursor of the active editor is at `cursor` (`empty`: no selection): elsewhere than the ghost text
   * dismisses it. */
  moved(uri: string, cursor: Position, empty: boolean): void {
    const c = this.current;
    if (c === undefined || c.inserted || (c.uri === uri && empty && samePosition(cursor, c.at))) return;
    this.end();
  }

  /** The accept command of `requestId` ran (the server counts it). */
  accepted(requestId: string | undefined): void {
    if (requestId !== undefined && this.current?.requestId === requestId) this.current = undefined;
  }

  /** The ghost text is gone unaccepted (another editor, a change elsewhere): dismissed, unless it was all
   * inserted. */
  end(): void {
    const c = this.current;
    this.current = undefined;
    if (c !== undefined && !c.inserted) this.send({ requestId: c.requestId, event: 'dismissed' });
  }

  /** Forget the ghost text without telling (the server it came from is stopping). */
  forget(): void {
    this.current = undefined;
  }
}
