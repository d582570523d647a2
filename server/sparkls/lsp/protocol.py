"""The protocol and server objects: pygls with exactly one response per request, and the services.

`SparkProtocol` answers a request whose params do not match its method with `InvalidParams` (pygls would
drop it), cancels commands and integer-id requests properly, and keeps no copy of the documents (the session
keeps the snapshots). `SparkServer` holds the session and the completion and edit services the handlers call.
"""

from __future__ import annotations

import inspect
import logging
from collections.abc import Callable, Iterator
from typing import Any

from lsprotocol import types
from pygls.exceptions import JsonRpcInvalidParams
from pygls.lsp.server import LanguageServer
from pygls.protocol import LanguageServerProtocol
from pygls.protocol.language_server import lsp_method

from sparkls import __version__
from sparkls.completion.service import CompletionService
from sparkls.edit.service import EditService
from sparkls.session import Session

log = logging.getLogger("sparkls")

Forward = Iterator[tuple[Callable[..., Any], tuple[Any, ...], None]]  # pygls runs what a method yields


class SparkProtocol(LanguageServerProtocol):
    """pygls' protocol without its own copy of every document: the session keeps the snapshots."""

    def structure_message(self, data: dict[str, Any]) -> Any:
        # pygls logs a request whose params do not match the method's types and never answers it.
        # Every request gets exactly one response: answer InvalidParams, then let pygls drop it.
        if "method" in data and "params" not in data:  # JSON-RPC lets a message leave out `params`
            data = {**data, "params": None}
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

    def _forward(self, method: str, params: Any) -> Forward:
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
    def lsp_text_document__did_open(self, params: types.DidOpenTextDocumentParams) -> Forward:
        yield from self._forward(types.TEXT_DOCUMENT_DID_OPEN, params)

    @lsp_method(types.TEXT_DOCUMENT_DID_CHANGE)
    def lsp_text_document__did_change(self, params: types.DidChangeTextDocumentParams) -> Forward:
        yield from self._forward(types.TEXT_DOCUMENT_DID_CHANGE, params)

    @lsp_method(types.TEXT_DOCUMENT_DID_CLOSE)
    def lsp_text_document__did_close(self, params: types.DidCloseTextDocumentParams) -> Forward:
        yield from self._forward(types.TEXT_DOCUMENT_DID_CLOSE, params)


class SparkServer(LanguageServer):
    def __init__(self) -> None:
        super().__init__("sparkls", __version__, protocol_cls=SparkProtocol,
                         text_document_sync_kind=types.TextDocumentSyncKind.Incremental)
        self.session = Session()
        self.completions = CompletionService(self.session)
        self.edits = EditService(self.session)

    def log_to_client(self, message: str, kind: types.MessageType = types.MessageType.Info) -> None:
        try:
            self.window_log_message(types.LogMessageParams(type=kind, message=message))
        except Exception:  # the transport may be gone during shutdown
            log.debug("could not send logMessage", exc_info=True)
