"""The steps every handler shares: snapshot -> offset -> call the core -> drop if stale -> errors answered."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable
from typing import Any, Protocol, TypeVar

from lsprotocol import types
from pygls.exceptions import JsonRpcInvalidParams

from sparkls.edit.diff import Edit
from sparkls.engine.base import EngineError, EngineUnavailable
from sparkls.lsp import convert
from sparkls.lsp.protocol import SparkServer
from sparkls.session import UnknownDocument
from sparkls.text.document import Document
from sparkls.text.positions import Encoding

log = logging.getLogger("sparkls")


class Result(Protocol):
    @property
    def version(self) -> int: ...

    @property
    def request_id(self) -> str: ...


R = TypeVar("R", bound=Result)


def snapshot(ls: SparkServer, uri: str) -> Document:
    """The document's current snapshot; `InvalidParams` when it is not open."""
    try:
        return ls.session.snapshot(uri)
    except UnknownDocument:
        raise JsonRpcInvalidParams(f"document is not open: {uri}") from None


def for_model(ls: SparkServer, uri: str) -> Document:
    """The snapshot of a document whose text may go to the model (not one matching an exclusion glob)."""
    doc = snapshot(ls, uri)
    if ls.session.excluded(uri):
        raise JsonRpcInvalidParams(f"{uri} matches an exclusion glob (excludeFiles): its text never goes to the model")
    return doc


def offset(ls: SparkServer, doc: Document, position: types.Position, encoding: Encoding | None = None) -> int:
    """A position in the negotiated encoding (or `encoding`) as a string offset; `InvalidParams` when impossible."""
    try:
        return convert.cursor_offset(doc, position, encoding or ls.session.encoding)
    except convert.InvalidPosition as e:
        raise JsonRpcInvalidParams(str(e)) from None


async def served(ls: SparkServer, uri: str, work: Awaitable[R]) -> R | None:
    """The core's result, or None when the engine failed (logged; an outage is told once, by the supervisor) or
    the document moved on while it ran (stale: its edits or text would land in the wrong place)."""
    try:
        result = await work
    except asyncio.CancelledError:
        log.info("request for %s cancelled or superseded", uri)
        raise
    except EngineUnavailable as e:  # down and restarting: the user was told once, not on every keystroke
        log.debug("no suggestion for %s: %s", uri, e)
        return None
    except EngineError as e:  # the supervisor tells an outage once; one request's failure is a log line
        log.warning("engine failed on %s: %s", uri, e)
        log.debug("engine failure on %s", uri, exc_info=True)
        return None
    if not ls.session.is_current(uri, result.version):
        log.info("%s: dropped as stale (computed for v%d)", result.request_id, result.version)
        return None
    return result


def field_of(params: Any, name: str) -> Any:
    """A field of custom params: pygls gives a custom method's params as named tuples, a command's as dicts."""
    return params.get(name) if isinstance(params, dict) else getattr(params, name, None)


def offer(ls: SparkServer, request_id: str, source: str, length: int) -> types.Command | None:
    """Remember an answer sent with an edit as offered (`lsp.acceptance`); the command its item carries, which
    the client runs on accept (None for an answer without a request id)."""
    if not request_id:
        return None
    ls.acceptance.offered(request_id, source, length)
    return convert.accepted_command(request_id)


def document_changes(ls: SparkServer) -> bool:
    """Whether the client takes versioned `documentChanges` in a `WorkspaceEdit`."""
    caps = ls.client_capabilities.workspace
    we = caps.workspace_edit if caps is not None else None
    return bool(we is not None and we.document_changes)


def resolves_edits(ls: SparkServer) -> bool:
    """Whether the client resolves a code action's edit with `codeAction/resolve`."""
    td = ls.client_capabilities.text_document
    ca = td.code_action if td is not None else None
    rs = ca.resolve_support if ca is not None else None
    return bool(rs is not None and "edit" in rs.properties)


def takes_snippets(ls: SparkServer) -> bool:
    """Whether the client's completion takes snippet-format items."""
    td = ls.client_capabilities.text_document
    c = td.completion if td is not None else None
    item = c.completion_item if c is not None else None
    return bool(item is not None and item.snippet_support)


def supports_progress(ls: SparkServer) -> bool:
    w = ls.client_capabilities.window
    return bool(w is not None and w.work_done_progress)


async def begin_progress(ls: SparkServer, token: str, title: str, cancellable: bool, message: str = "") -> bool:
    """Create and begin a server-initiated `$/progress`; False when the client cannot show one."""
    if not supports_progress(ls):
        return False
    try:
        await asyncio.wait_for(ls.work_done_progress.create_async(token), 5)
        ls.work_done_progress.begin(
            token, types.WorkDoneProgressBegin(title=title, cancellable=cancellable, message=message or None)
        )
    except Exception:
        log.info("client did not create progress %s; going on without it", token, exc_info=True)
        return False
    return True


def workspace_edit(ls: SparkServer, doc: Document, edits: list[Edit]) -> types.WorkspaceEdit:
    return convert.workspace_edit(doc, edits, ls.session.encoding, document_changes(ls))
