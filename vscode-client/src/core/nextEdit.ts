// A predicted next edit (`sparkls/inlineEdit`) turned into what the editor shows: removed ranges and added text.

export interface Position {
  line: number;
  character: number;
}

export interface Range {
  start: Position;
  end: Position;
}

export interface TextEdit {
  range: Range;
  newText: string;
}

export interface InlineEditResult {
  textDocument: { uri: string; version: number };
  requestId: string | null;
  edits: TextEdit[];
  range?: Range;
  /** `sparkls.accepted` with the request id: run once the edit is applied, so the server counts the accept. */
  command?: { title: string; command: string; arguments?: unknown[] };
}

export interface EditView {
  /** Ranges whose text the edit removes (shown struck through). */
  removed: Range[];
  /** Text shown after a position (the first line of what the edit adds, with a marker when it goes on). */
  added: { at: Position; text: string }[];
  /** The whole change as a markdown diff, for the hover. */
  markdown: string;
}

function isEmpty(r: Range): boolean {
  return r.start.line === r.end.line && r.start.character === r.end.character;
}

/** The text of `range` in the document's `lines`. */
export function textOf(lines: string[], range: Range): string {
  if (range.start.line === range.end.line) {
    return (lines[range.start.line] ?? '').slice(range.start.character, range.end.character);
  }
  const parts = [(lines[range.start.line] ?? '').slice(range.start.character)];
  for (let l = range.start.line + 1; l < range.end.line; l++) parts.push(lines[l] ?? '');
  parts.push((lines[range.end.line] ?? '').slice(0, range.end.character));
  return parts.join('\n');
}

/** One line for an after-text decoration: the first line added (marked ⏎ when the edit starts a new line),
 * and how many more lines follow. */
export function shown(text: string): string {
  const lines = text.replace(/\n$/, '').split('\n');
  const start = lines.length > 1 && lines[0].trim() === '' ? 1 : 0;
  const more = lines.length - start - 1;
  return (start === 1 ? '⏎ ' : '') + lines[start].trimEnd() + (more > 0 ? ` … (+${more} more)` : '');
}

/** What to show for `edits` against the document's `lines`. */
export function view(lines: string[], edits: TextEdit[]): EditView {
  const removed: Range[] = [];
  const added: { at: Position; text: string }[] = [];
  const diff: string[] = [];
  for (const e of edits) {
    const old = textOf(lines, e.range);
    if (!isEmpty(e.range)) removed.push(e.range);
    if (e.newText !== '') added.push({ at: e.range.end, text: shown(e.newText) });
    for (const l of old === '' ? [] : old.split('\n')) diff.push(`- ${l}`);
    for (const l of e.newText === '' ? [] : e.newText.split('\n')) diff.push(`+ ${l}`);
  }
  const markdown = diff.length > 0 ? '**sparkls: predicted edit** (Tab applies, Escape dismisses)\n\n```diff\n' +
    diff.join('\n') + '\n```' : '';
  return { removed, added, markdown };
}

/** A prediction is shown only for the document version it was computed for. */
export function applies(result: InlineEditResult, uri: string, version: number): boolean {
  return result.edits.length > 0 && result.textDocument.uri === uri && result.textDocument.version === version;
}

/** Whether the prediction is one insertion at `cursor` (the server offers it as the inline completion there). */
export function insertsAt(result: InlineEditResult, cursor: Position): boolean {
  if (result.edits.length !== 1) return false;
  const { start, end } = result.edits[0].range;
  return isEmpty(result.edits[0].range) && start.line === cursor.line && start.character === cursor.character &&
    end.line === cursor.line;
}
