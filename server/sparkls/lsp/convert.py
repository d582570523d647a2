"""Between LSP types and the pipeline's offsets and strings (the only place that knows both)."""

from __future__ import annotations

import weakref
from collections.abc import Sequence

from lsprotocol import types

from sparkls.completion.pipeline import Suggestion
from sparkls.edit.diff import Edit
from sparkls.text.document import Document
from sparkls.text.positions import ENCODINGS, Encoding, LineIndex

WORD_CHARS = frozenset("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789_$")
ACCEPTED = "sparkls.accepted"  # the command an offer carries, run by the client when the user accepts it


def encoding_of(kind: str | types.PositionEncodingKind | None) -> Encoding:
    value = kind.value if isinstance(kind, types.PositionEncodingKind) else (kind or "utf-16")
    found: Encoding = "utf-16"
    for e in ENCODINGS:
        if e == value:
            found = e
    return found


_indexes: weakref.WeakKeyDictionary[Document, LineIndex] = weakref.WeakKeyDictionary()


def index_of(doc: Document) -> LineIndex:
    """Line starts of a snapshot, computed once per snapshot."""
    idx = _indexes.get(doc)
    if idx is None:
        idx = _indexes[doc] = LineIndex.of(doc.text)
    return idx


def change_span(
    doc: Document,
    change: types.TextDocumentContentChangeEvent,
    encoding: Encoding,
) -> tuple[int, int, str]:
    """One `didChange` content change (incremental or whole text) as (start, end, new text) offsets."""
    if isinstance(change, types.TextDocumentContentChangePartial):
        idx = index_of(doc)
        start = idx.offset(change.range.start.line, change.range.start.character, encoding)
        end = idx.offset(change.range.end.line, change.range.end.character, encoding)
        return start, max(start, end), change.text
    return 0, len(doc.text), change.text


class InvalidPosition(ValueError):
    pass


def cursor_offset(doc: Document, position: types.Position, encoding: Encoding) -> int:
    idx = index_of(doc)
    if not idx.is_valid(position.line, position.character, encoding):
        raise InvalidPosition(
            f"position {position.line}:{position.character} ({encoding}) is outside {doc.uri} "
            f"(version {doc.version}, {len(idx.starts)} lines)"
        )
    return idx.offset(position.line, position.character, encoding)


def _position(idx: LineIndex, offset: int, encoding: Encoding) -> types.Position:
    line, character = idx.position(offset, encoding)
    return types.Position(line=line, character=character)


def accepted_command(request_id: str) -> types.Command:
    """The command an offer carries: the client runs it on accept, so the server counts the acceptance."""
    return types.Command(title="sparkls: accepted", command=ACCEPTED, arguments=[{"requestId": request_id}])


def inline_items(
    doc: Document,
    s: Suggestion,
    encoding: Encoding,
    command: types.Command | None = None,
) -> types.InlineCompletionList:
    if not s.text:
        return types.InlineCompletionList(items=[])
    idx = index_of(doc)
    pos = _position(idx, s.cursor, encoding)
    return types.InlineCompletionList(
        items=[
            types.InlineCompletionItem(insert_text=s.text, range=types.Range(start=pos, end=pos), command=command),
        ]
    )


def snippet_text(text: str) -> str:
    """`text` as an LSP snippet that inserts exactly `text` (`\\`, `$` and `}` escaped)."""
    return text.replace("\\", "\\\\").replace("$", "\\$").replace("}", "\\}")


def completion_items(
    doc: Document, s: Suggestion, encoding: Encoding, snippets: bool = False, command: types.Command | None = None
) -> types.CompletionList:
    """One completion item whose `textEdit` replaces the word before the cursor (so clients filter it).

    For a client that takes snippets the text goes as a snippet (escaped, so it inserts literally): clients
    such as Neovim insert only the first word of a plain-text item, but the whole of a snippet."""
    if not s.text:
        return types.CompletionList(is_incomplete=True, items=[])
    idx = index_of(doc)
    start = s.cursor
    while start > 0 and doc.text[start - 1] in WORD_CHARS:
        start -= 1
    word = doc.text[start : s.cursor]
    new_text = word + s.text
    first_line = new_text.split("\n", 1)[0].strip() or new_text.strip()
    label = first_line if len(first_line) <= 60 else first_line[:57] + "..."
    return types.CompletionList(
        is_incomplete=True,
        items=[
            types.CompletionItem(
                label=label,
                kind=types.CompletionItemKind.Snippet if "\n" in s.text else types.CompletionItemKind.Text,
                detail="sparkls",
                filter_text=word or None,
                sort_text="0",
                insert_text_format=types.InsertTextFormat.Snippet if snippets else types.InsertTextFormat.PlainText,
                text_edit=types.TextEdit(
                    range=types.Range(start=_position(idx, start, encoding), end=_position(idx, s.cursor, encoding)),
                    new_text=snippet_text(new_text) if snippets else new_text,
                ),
                command=command,
            )
        ],
    )


def text_edits(doc: Document, edits: Sequence[Edit], encoding: Encoding) -> list[types.TextEdit]:
    """Pipeline edits (offsets into `doc.text`) as LSP `TextEdit`s in the negotiated encoding."""
    idx = index_of(doc)
    return [
        types.TextEdit(
            range=types.Range(start=_position(idx, e.start, encoding), end=_position(idx, e.end, encoding)),
            new_text=e.text,
        )
        for e in edits
    ]


def workspace_edit(
    doc: Document, edits: Sequence[Edit], encoding: Encoding, document_changes: bool = True
) -> types.WorkspaceEdit:
    """A `WorkspaceEdit` of minimal edits guarded by the version they were computed for (a
    `TextDocumentEdit`); a client without `documentChanges` support gets the plain `changes` map."""
    tes = text_edits(doc, edits, encoding)
    if not document_changes:
        return types.WorkspaceEdit(changes={doc.uri: tes})
    return types.WorkspaceEdit(
        document_changes=[
            types.TextDocumentEdit(
                text_document=types.OptionalVersionedTextDocumentIdentifier(uri=doc.uri, version=doc.version),
                edits=list(tes),
            )
        ]
    )
