"""The language server: pygls setup and thin handlers.

Each handler reads its params, takes a snapshot from the session, calls one pipeline function and
converts the result. Every request gets exactly one response: a result, an empty result with a
logged reason (engine failure, binary file), an `InvalidParams` error (unknown document,
impossible position), or `RequestCancelled` (cancelled by the client or superseded by a newer
request for the same document, in which case the engine request is aborted).
"""

from __future__ import annotations

import asyncio
import inspect
import logging
from pathlib import Path
from typing import Any

from lsprotocol import types
from pygls.capabilities import ServerCapabilitiesBuilder
from pygls.exceptions import JsonRpcInvalidParams
from pygls.lsp.server import LanguageServer
from pygls.protocol import LanguageServerProtocol
from pygls.protocol.language_server import lsp_method

from sparkls import __version__, pipeline
from sparkls.document import Document
from sparkls.engine.base import EngineError
from sparkls.lsp import convert, edit_features
from sparkls.session import Session, UnknownDocument
from sparkls.settings import resolve
from sparkls.workspace import uri_path

log = logging.getLogger("sparkls")


class SparkProtocol(LanguageServerProtocol):
    """pygls' protocol without its own copy of every document: the session keeps the snapshots."""

    def structure_message(self, data: dict[str, Any]) -> Any:
        # pygls logs a request whose params do not match the method's types and never answers it.
        # Every request gets exactly one response: answer InvalidParams, then let pygls drop it.
        try:
            return super().structure_message(data)
        except Exception as e:
            if "id" in data and "method" in data:
                log.warning("malformed %s request %r: %s", data.get("method"), data.get("id"), e)
                self._send_response(data["id"], error=JsonRpcInvalidParams(
                    f"malformed params for {data.get('method')}").to_response_error())
            raise

    def _handle_cancel_notification(self, msg_id: Any) -> None:
        # lsprotocol structures CancelParams.id (int | str) as a str, so pygls misses the integer ids
        # that VS Code, Neovim and Emacs send, and the request runs on. Look the id up in both forms.
        candidates = [msg_id, str(msg_id)]
        if isinstance(msg_id, str) and msg_id.lstrip("-").isdigit():
            candidates.append(int(msg_id))
        key = next((k for k in candidates if k in self._request_futures), msg_id)
        super()._handle_cancel_notification(key)

    def _forward(self, method: str, params: Any):  # type: ignore[no-untyped-def]
        if (handler := self.fm.features.get(method)) is not None:
            yield handler, (params,), None

    @lsp_method(types.WORKSPACE_EXECUTE_COMMAND)
    async def lsp_workspace__execute_command(self, params: types.ExecuteCommandParams) -> Any:
        # pygls runs commands through a generator whose request future does not own the command's task,
        # so `$/cancelRequest` answered the request but never cancelled the command (a streaming edit
        # ran on). A coroutine here is the request's own task: cancelling it cancels the command.
        handler = self.fm.commands.get(params.command)
        if handler is None:
            raise JsonRpcInvalidParams(f"unknown command {params.command!r}")
        result = handler(*(params.arguments or []))
        return await result if inspect.isawaitable(result) else result

    @lsp_method(types.TEXT_DOCUMENT_DID_OPEN)
    def lsp_text_document__did_open(self, params: types.DidOpenTextDocumentParams):  # type: ignore[no-untyped-def]
        yield from self._forward(types.TEXT_DOCUMENT_DID_OPEN, params)

    @lsp_method(types.TEXT_DOCUMENT_DID_CHANGE)
    def lsp_text_document__did_change(self, params: types.DidChangeTextDocumentParams):  # type: ignore[no-untyped-def]
        yield from self._forward(types.TEXT_DOCUMENT_DID_CHANGE, params)

    @lsp_method(types.TEXT_DOCUMENT_DID_CLOSE)
    def lsp_text_document__did_close(self, params: types.DidCloseTextDocumentParams):  # type: ignore[no-untyped-def]
        yield from self._forward(types.TEXT_DOCUMENT_DID_CLOSE, params)


class SparkServer(LanguageServer):
    def __init__(self) -> None:
        super().__init__("sparkls", __version__, protocol_cls=SparkProtocol,
                         text_document_sync_kind=types.TextDocumentSyncKind.Incremental)
        self.session = Session()

    def log_to_client(self, message: str, kind: types.MessageType = types.MessageType.Info) -> None:
        try:
            self.window_log_message(types.LogMessageParams(type=kind, message=message))
        except Exception:  # the transport may be gone during shutdown
            log.debug("could not send logMessage", exc_info=True)


def workspace_roots(params: types.InitializeParams) -> list[Path]:
    """The workspace folders an editor opened (or its single root), as local paths."""
    uris = [f.uri for f in params.workspace_folders or []] or ([params.root_uri] if params.root_uri else [])
    roots = [p for p in (uri_path(u) for u in uris) if p is not None]
    if not roots and params.root_path:
        roots = [Path(params.root_path)]
    return roots


def create_server() -> SparkServer:
    server = SparkServer()

    @server.feature(types.INITIALIZE)
    def initialize(ls: SparkServer, params: types.InitializeParams) -> None:
        settings, problems = resolve(params.initialization_options)
        ls.session.settings = settings
        ls.session.encoding = convert.encoding_of(
            ServerCapabilitiesBuilder.choose_position_encoding(params.capabilities))
        logging.getLogger("sparkls").setLevel(settings.log_level.upper())
        for problem in problems:
            log.warning("settings: %s", problem)
            ls.window_show_message(types.ShowMessageParams(
                type=types.MessageType.Warning, message=f"sparkls settings: {problem}"))
        ls.session.set_workspace(workspace_roots(params))
        ls.session.start_engine()  # loads in the background; never blocks initialize
        log.info("initialized: engine=%s encoding=%s", settings.engine, ls.session.encoding)

    @server.feature(types.SHUTDOWN)
    async def shutdown(ls: SparkServer, params: None) -> None:
        await ls.session.shutdown()

    @server.feature(types.WORKSPACE_DID_CHANGE_CONFIGURATION)
    def did_change_configuration(ls: SparkServer, params: types.DidChangeConfigurationParams) -> None:
        settings, problems = resolve(params.settings, ls.session.settings)
        for problem in problems:
            log.warning("settings: %s", problem)
        if (settings.engine, settings.model, settings.model_path) != (
                ls.session.settings.engine, ls.session.settings.model, ls.session.settings.model_path):
            log.warning("engine or model changed: restart the server to use it")
            settings = ls.session.settings
        ls.session.configure(settings)

    @server.feature(types.TEXT_DOCUMENT_DID_OPEN)
    def did_open(ls: SparkServer, params: types.DidOpenTextDocumentParams) -> None:
        td = params.text_document
        doc = ls.session.open(td.uri, td.language_id, td.version, td.text)
        log.debug("open %s (%s, %d chars, tree=%s)", td.uri, doc.language, len(doc.text), doc.tree is not None)

    @server.feature(types.TEXT_DOCUMENT_DID_CHANGE)
    def did_change(ls: SparkServer, params: types.DidChangeTextDocumentParams) -> None:
        uri = params.text_document.uri
        try:
            doc = ls.session.snapshot(uri)
        except UnknownDocument:
            log.warning("didChange for a document that is not open: %s", uri)
            return
        for change in params.content_changes:
            start, end, text = convert.change_span(doc, change, ls.session.encoding)
            ls.session.record_change(doc, start, end, text, params.text_document.version)
            doc = doc.edit(start, end, text, params.text_document.version)
        ls.session.update(doc)

    @server.feature(types.TEXT_DOCUMENT_DID_CLOSE)
    def did_close(ls: SparkServer, params: types.DidCloseTextDocumentParams) -> None:
        ls.session.close(params.text_document.uri)

    async def suggestion_at(ls: SparkServer, uri: str, position: types.Position, invoked: bool = False,
                            ) -> tuple[Document, pipeline.Suggestion] | None:
        """Shared by both completion handlers: snapshot, supersede, run the pipeline, log."""
        session = ls.session
        try:
            doc = session.snapshot(uri)
        except UnknownDocument:
            raise JsonRpcInvalidParams(f"document is not open: {uri}") from None
        try:
            cursor = convert.cursor_offset(doc, position, session.encoding)  # type: ignore[arg-type]
        except convert.InvalidPosition as e:
            raise JsonRpcInvalidParams(str(e)) from None
        if doc.is_binary:
            log.info("no suggestion: %s looks binary", uri)
            return None
        try:
            s = await session.suggest(doc, cursor, invoked)
        except asyncio.CancelledError:
            log.info("request for %s cancelled or superseded", uri)
            raise
        except EngineError as e:
            log.error("engine failed: %s", e)
            ls.log_to_client(f"sparkls: engine failed: {e}", types.MessageType.Error)
            return None
        current = session.documents.get(uri)
        if current is None or current.version != doc.version:
            log.info("%s: dropped as stale (computed for v%d)", s.request_id, doc.version)
            return None
        return doc, s

    def predicted_insertion(ls: SparkServer, uri: str, position: types.Position) -> types.InlineCompletionList | None:
        """The latest next-edit prediction, when it is an insertion at the cursor of this version."""
        p = ls.session.predictions.get(uri)
        doc = ls.session.documents.get(uri)
        if p is None or doc is None or p.version != doc.version or not p.edits:
            return None
        first = p.edits[0]
        try:
            cursor = convert.cursor_offset(doc, position, ls.session.encoding)
        except convert.InvalidPosition:
            return None
        if len(p.edits) != 1 or first.start != cursor or first.end != cursor:
            return None
        log.info("%s: the predicted edit is an insertion at the cursor: offered inline", p.request_id)
        return convert.inline_items(doc, pipeline.Suggestion(uri, doc.version, cursor, first.text, "multi",
                                                             "nextedit", request_id=p.request_id), ls.session.encoding)

    @server.feature(types.TEXT_DOCUMENT_INLINE_COMPLETION, types.InlineCompletionOptions())
    async def inline_completion(ls: SparkServer, params: types.InlineCompletionParams) -> types.InlineCompletionList:
        kind = params.context.trigger_kind if params.context is not None else None
        invoked = kind == types.InlineCompletionTriggerKind.Invoked
        predicted = predicted_insertion(ls, params.text_document.uri, params.position)
        if predicted is not None:
            return predicted
        found = await suggestion_at(ls, params.text_document.uri, params.position, invoked)
        if found is None:
            return types.InlineCompletionList(items=[])
        return convert.inline_items(*found, ls.session.encoding)

    @server.feature(types.TEXT_DOCUMENT_COMPLETION, types.CompletionOptions(resolve_provider=False))
    async def completion(ls: SparkServer, params: types.CompletionParams) -> types.CompletionList:
        found = await suggestion_at(ls, params.text_document.uri, params.position)
        if found is None:
            return types.CompletionList(is_incomplete=True, items=[])
        return convert.completion_items(*found, ls.session.encoding)

    @server.feature("sparkls/metrics")
    async def metrics(ls: SparkServer, params: Any) -> dict[str, object]:
        """Recent suggestions with per-stage timings, the engine's recent requests, per-class summary."""
        return await ls.session.metrics()

    @server.feature("sparkls/health")
    async def health(ls: SparkServer, params: Any) -> dict[str, object]:
        engine = ls.session.start_engine()
        h = await engine.health()
        return {"ok": h.ok, "engine": h.engine, "model": h.model, "detail": h.detail, "stats": dict(h.stats)}

    edit_features.register(server)
    return server
