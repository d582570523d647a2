"""A test editor on top of pytest-lsp's client: it keeps the buffer, applies `workspace/applyEdit`
like an editor (refusing an edit for a stale version), and reports every change with `didChange`."""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from dataclasses import dataclass, field

from lsprotocol import types
from pytest_lsp import LanguageClient
from sparkls.tools.client import read_code_actions_as_code_actions

from tests.e2e.lsp_client import open_doc, position
from tests.edit_support import apply_lsp, lsp_offset


@dataclass
class Editor:
    client: LanguageClient
    encoding: str = "utf-16"
    texts: dict[str, str] = field(default_factory=dict)
    versions: dict[str, int] = field(default_factory=dict)
    states: list[str] = field(default_factory=list)  # the buffer after each applied edit
    refused: int = 0
    on_applied: Callable[[Editor, str], None] | None = None  # called after each applied edit (uri)
    # A slow editor (as VS Code can be): the edit is in its buffer at once, but `didChange` and the answer to
    # `workspace/applyEdit` follow this much later.
    report_delay_s: float = 0.0
    _held: list[types.DidChangeTextDocumentParams] | None = None

    def __post_init__(self) -> None:
        async def apply_edit(
            ls: LanguageClient,
            params: types.ApplyWorkspaceEditParams,
        ) -> types.ApplyWorkspaceEditResult:
            if not self.report_delay_s:
                return self._apply_edit(params)
            self._held = []
            result = self._apply_edit(params)
            held, self._held = self._held, None
            await asyncio.sleep(self.report_delay_s)
            for change in held:
                self.client.text_document_did_change(change)
            return result

        self.client.feature(types.WORKSPACE_APPLY_EDIT)(apply_edit)
        read_code_actions_as_code_actions(self.client)

    async def wait_states(self, n: int, timeout_s: float = 60.0) -> None:
        """Until at least `n` edits have been applied (a streaming edit is under way)."""
        for _ in range(int(timeout_s / 0.02)):
            if len(self.states) >= n:
                return
            await asyncio.sleep(0.02)
        raise AssertionError(f"only {len(self.states)} edits applied, expected {n}")

    def open(self, uri: str, text: str, language: str = "python") -> None:
        self.texts[uri], self.versions[uri] = text, 1
        open_doc(self.client, uri, text, language)

    def pos(self, uri: str, offset: int) -> types.Position:
        return position(self.texts[uri], offset, self.encoding)

    def type(self, uri: str, offset: int, end: int, text: str) -> None:
        """The user replaces text[offset:end] with `text`."""
        old = self.texts[uri]
        rng = types.Range(start=self.pos(uri, offset), end=self.pos(uri, end))
        self._change(
            uri, old[:offset] + text + old[end:], [types.TextDocumentContentChangePartial(range=rng, text=text)]
        )

    def _change(self, uri: str, new: str, changes: list[types.TextDocumentContentChangePartial]) -> None:
        self.texts[uri] = new
        self.versions[uri] += 1
        change = types.DidChangeTextDocumentParams(
            text_document=types.VersionedTextDocumentIdentifier(uri=uri, version=self.versions[uri]),
            content_changes=list(changes),
        )
        if self._held is not None:
            self._held.append(change)
        else:
            self.client.text_document_did_change(change)

    def _apply_edit(self, params: types.ApplyWorkspaceEditParams) -> types.ApplyWorkspaceEditResult:
        # Versioned TextDocumentEdits, or (clients without documentChanges) the plain `changes` map.
        parts = [
            (tde.text_document.uri, tde.text_document.version, tde.edits) for tde in params.edit.document_changes or []
        ]
        parts += [(uri, None, es) for uri, es in (params.edit.changes or {}).items()]
        for uri, version, text_edits in parts:
            if version is not None and version != self.versions.get(uri):
                self.refused += 1
                return types.ApplyWorkspaceEditResult(applied=False, failure_reason="version mismatch")
            old = self.texts[uri]
            tde = types.TextDocumentEdit(
                text_document=types.OptionalVersionedTextDocumentIdentifier(uri=uri, version=version),
                edits=list(text_edits),
            )
            new = apply_lsp(old, tde.edits, self.encoding)
            # Report the edits as content changes, last first, so each range is valid when applied in turn.
            ordered = sorted(
                tde.edits,
                key=lambda e: lsp_offset(old, e.range.start.line, e.range.start.character, self.encoding),
                reverse=True,
            )
            self._change(
                uri, new, [types.TextDocumentContentChangePartial(range=e.range, text=e.new_text) for e in ordered]
            )
            self.states.append(new)
            if self.on_applied is not None:
                self.on_applied(self, uri)
        return types.ApplyWorkspaceEditResult(applied=True)


def apply_workspace_edit(text: str, edit: types.WorkspaceEdit, version: int, encoding: str = "utf-16") -> str:
    if edit.document_changes is None:  # a client without documentChanges support gets `changes`
        ((_, text_edits),) = edit.changes.items()
        return apply_lsp(text, text_edits, encoding)
    (tde,) = edit.document_changes
    assert tde.text_document.version == version, "the edit must carry the version it was computed for"
    return apply_lsp(text, tde.edits, encoding)
