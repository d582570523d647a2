"""Edit features: code actions (listed instantly, run on resolve or as a streaming command),
`sparkls.redirect`, and next-edit (`sparkls/inlineEdit`, the "Apply predicted edit" action).

Handlers are adapters: snapshot, one call into `actions` / `editing` / `streaming`, convert. Every
edit sent carries the version it was computed for; a result whose document moved on is dropped.
"""

from __future__ import annotations

import asyncio
import itertools
import logging
from typing import TYPE_CHECKING, Any

from lsprotocol import types
from pygls.exceptions import JsonRpcInvalidParams

from sparkls import actions, editing, streaming
from sparkls.document import Document
from sparkls.edits import Edit
from sparkls.engine.base import EngineError, Priority
from sparkls.lsp import convert
from sparkls.session import UnknownDocument

if TYPE_CHECKING:
    from sparkls.lsp.server import SparkServer

log = logging.getLogger("sparkls")

APPLY = "sparkls.applyAction"
REDIRECT = "sparkls.redirect"
COMMANDS = [APPLY, REDIRECT]
KIND = {"fix": types.CodeActionKind.QuickFix, "predicted": types.CodeActionKind.QuickFix}
_tokens = itertools.count(1)


def _snapshot(ls: SparkServer, uri: str) -> Document:
    try:
        return ls.session.snapshot(uri)
    except UnknownDocument:
        raise JsonRpcInvalidParams(f"document is not open: {uri}") from None


def _for_model(ls: SparkServer, uri: str) -> Document:
    """The snapshot of a document whose text may go to the model (not one matching an exclusion glob)."""
    doc = _snapshot(ls, uri)
    if ls.session.excluded(uri):
        raise JsonRpcInvalidParams(f"{uri} matches an exclusion glob (excludeFiles): its text never goes to the model")
    return doc


def _offset(doc: Document, pos: types.Position, encoding: str) -> int:
    try:
        return convert.cursor_offset(doc, pos, encoding)  # type: ignore[arg-type]
    except convert.InvalidPosition as e:
        raise JsonRpcInvalidParams(str(e)) from None


def _document_changes(ls: SparkServer) -> bool:
    caps = ls.client_capabilities.workspace
    we = caps.workspace_edit if caps is not None else None
    return bool(we is not None and we.document_changes)


def _edit(ls: SparkServer, doc: Document, es: list[Edit]) -> types.WorkspaceEdit:
    return convert.workspace_edit(doc, es, ls.session.encoding, _document_changes(ls))


def _problems(doc: Document, ctx: types.CodeActionContext, encoding: str) -> list[actions.Problem]:
    idx = convert.index_of(doc)
    out = []
    for d in ctx.diagnostics:
        s = idx.offset(d.range.start.line, d.range.start.character, encoding)  # type: ignore[arg-type]
        e = idx.offset(d.range.end.line, d.range.end.character, encoding)  # type: ignore[arg-type]
        out.append(actions.Problem(s, max(s, e), d.message, d.source or ""))
    return out


def _resolves_edits(ls: SparkServer) -> bool:
    td = ls.client_capabilities.text_document
    ca = td.code_action if td is not None else None
    rs = ca.resolve_support if ca is not None else None
    return bool(rs is not None and "edit" in rs.properties)


def _action(ls: SparkServer, a: actions.Action) -> types.CodeAction:
    """Listed without an edit, and exactly one way to get it (an editor that resolves an edit also runs
    the command, which would apply the rewrite twice): the streaming command (`editStreaming`), else
    `codeAction/resolve` where the client resolves edits, else the command that applies it at once."""
    kind = KIND.get(a.kind, types.CodeActionKind.RefactorRewrite)
    if a.kind != "rewrite" and not ls.session.settings.edit_streaming and _resolves_edits(ls):
        return types.CodeAction(title=a.title, kind=kind, data=a.to_data())
    return types.CodeAction(title=a.title, kind=kind,
                            command=types.Command(title=a.title, command=APPLY, arguments=[a.to_data()]))


def register(server: SparkServer) -> None:
    @server.feature(types.TEXT_DOCUMENT_CODE_ACTION, types.CodeActionOptions(
        code_action_kinds=[types.CodeActionKind.QuickFix, types.CodeActionKind.RefactorRewrite],
        resolve_provider=True))
    def code_action(ls: SparkServer, params: types.CodeActionParams) -> list[types.CodeAction]:
        doc = _snapshot(ls, params.text_document.uri)
        if ls.session.excluded(doc.uri):
            return []  # its text never goes to the model: no action to offer
        enc = ls.session.encoding
        start, end = _offset(doc, params.range.start, enc), _offset(doc, params.range.end, enc)
        found = actions.available(doc, start, end, _problems(doc, params.context, enc))
        # "Rewrite with an instruction" needs the instruction: clients ask the user and send the command
        # with it, so it is always a command.
        listed = [_action(ls, a) for a in found]
        p = ls.session.predictions.get(doc.uri)
        if p is not None and p.version == doc.version and p.edits:
            listed.insert(0, types.CodeAction(title=actions.TITLES["predicted"], kind=types.CodeActionKind.QuickFix,
                                              edit=_edit(ls, doc, p.edits), is_preferred=True))
        else:  # no prediction yet: choosing this one asks the model
            a = actions.Action("predicted", doc.uri, doc.version, start, start, actions.TITLES["predicted"])
            listed.append(types.CodeAction(title=a.title, kind=types.CodeActionKind.QuickFix, data=a.to_data())
                          if _resolves_edits(ls) else _action(ls, a))
        return listed

    @server.feature(types.CODE_ACTION_RESOLVE)
    async def code_action_resolve(ls: SparkServer, params: types.CodeAction) -> types.CodeAction:
        try:
            a = actions.Action.from_data(params.data)
        except ValueError as e:
            raise JsonRpcInvalidParams(str(e)) from None
        found = await _compute(ls, a)
        if found is not None:
            params.edit = _edit(ls, *found)
        return params

    @server.command(APPLY)
    async def apply_action(ls: Any, *args: Any) -> dict[str, Any]:
        """Stream a chosen action into the buffer; arguments: the action's data (with `instruction` for
        a rewrite), or (data, instruction)."""
        if not args:
            raise JsonRpcInvalidParams(f"{APPLY} needs the action as its argument")
        data = dict(args[0]) if isinstance(args[0], dict) else args[0]
        if len(args) > 1 and isinstance(data, dict):
            data["instruction"] = str(args[1])
        try:
            a = actions.Action.from_data(data)
        except ValueError as e:
            raise JsonRpcInvalidParams(str(e)) from None
        if a.kind == "rewrite" and not a.instruction.strip():
            raise JsonRpcInvalidParams("a rewrite needs an instruction (the command's `instruction` argument)")
        doc = _for_model(ls, a.uri)
        if doc.version != a.version:
            raise JsonRpcInvalidParams(f"the action was listed for version {a.version}; the document is at "
                                       f"{doc.version}: ask for code actions again")
        if a.kind != "predicted" and ls.session.settings.edit_streaming:
            return await run_stream(ls, doc, a)
        found = await _compute(ls, a)  # at once: one workspace/applyEdit
        if found is None:
            return {"reason": "stale", "lines": 0, "applied": 0, "redirects": 0, "requestIds": []}
        applied = await LspBuffer(ls, a.uri, None).apply(*found)
        return {"reason": "done" if applied else "refused", "lines": 0, "applied": int(applied), "redirects": 0,
                "requestIds": []}

    @server.command(REDIRECT)
    async def redirect(ls: Any, *args: Any) -> dict[str, Any]:
        """Redirect the running streaming edit: arguments (instruction) or (instruction, uri)."""
        if not args or not str(args[0]).strip():
            raise JsonRpcInvalidParams(f"{REDIRECT} needs an instruction")
        uri = str(args[1]) if len(args) > 1 else None
        running = [(t, s) for t, s in ls.session.streams.items()
                   if uri is None or s.uri == uri]
        if not running:
            return {"redirected": False, "reason": "no streaming edit is running"}
        token, s = running[-1]
        s.redirect(str(args[0]))
        return {"redirected": True, "token": token}

    @server.feature("sparkls/inlineEdit")
    async def inline_edit(ls: SparkServer, params: Any) -> dict[str, Any]:
        """Next-edit: {textDocument: {uri, version?}, position} -> edits anywhere in the window."""
        try:
            uri = params.textDocument.uri
            pos = types.Position(line=int(params.position.line), character=int(params.position.character))
        except (AttributeError, TypeError, ValueError):
            raise JsonRpcInvalidParams("sparkls/inlineEdit needs textDocument.uri and position") from None
        doc = _snapshot(ls, uri)
        version = getattr(params.textDocument, "version", None)
        cursor = _offset(doc, pos, ls.session.encoding)
        empty = {"textDocument": {"uri": uri, "version": doc.version}, "edits": [], "requestId": None}
        if ls.session.excluded(uri):
            return empty
        if version is not None and int(version) != doc.version:
            log.info("inlineEdit for v%s, document is v%d: nothing predicted", version, doc.version)
            return empty
        try:
            result = await ls.session.predict(doc, cursor)
        except EngineError as e:
            log.error("engine failed: %s", e)
            return empty
        current = ls.session.documents.get(uri)
        if current is None or current.version != result.version:
            return empty
        tes = convert.text_edits(doc, result.edits, ls.session.encoding)
        idx = convert.index_of(doc)
        window = types.Range(start=types.Position(*idx.position(result.start, ls.session.encoding)),
                             end=types.Position(*idx.position(result.end, ls.session.encoding)))
        return {"textDocument": {"uri": uri, "version": doc.version}, "requestId": result.request_id,
                "edits": [ls.protocol._converter.unstructure(te) for te in tes],
                "range": ls.protocol._converter.unstructure(window)}


async def _compute(ls: SparkServer, a: actions.Action) -> tuple[Document, list[Edit]] | None:
    """Run a chosen action on the snapshot it was listed for: (snapshot, edits), or None when the
    document moved on (stale) or the engine failed (logged, told to the client)."""
    doc = _for_model(ls, a.uri)
    if doc.version != a.version:
        log.info("code action %s listed for v%d, document is v%d: not run", a.kind, a.version, doc.version)
        return None
    try:
        if a.kind == "predicted":
            result = await ls.session.predict(doc, a.start, Priority.CODE_ACTION)
        else:
            result = await editing.run_action(doc, a, ls.session.start_engine(), ls.session.settings)
    except EngineError as e:
        log.error("engine failed: %s", e)
        ls.log_to_client(f"sparkls: engine failed: {e}", types.MessageType.Error)
        return None
    current = ls.session.documents.get(a.uri)
    if current is None or current.version != result.version:
        log.info("%s: dropped as stale (computed for v%d)", result.request_id, result.version)
        return None
    log.info("%s %s: %d edits, %d chars changed, %.0f ms", result.request_id, a.kind, len(result.edits),
             sum(e.end - e.start + len(e.text) for e in result.edits), result.total_ms)
    return doc, result.edits


class LspBuffer:
    """`streaming.Buffer` over the LSP: snapshots from the session, edits by `workspace/applyEdit`."""

    def __init__(self, ls: SparkServer, uri: str, token: str | None) -> None:
        self.ls, self.uri, self.token = ls, uri, token

    def snapshot(self) -> Document:
        return self.ls.session.snapshot(self.uri)

    async def apply(self, doc: Document, es: list[Edit]) -> bool:
        r = await self.ls.workspace_apply_edit_async(types.ApplyWorkspaceEditParams(
            edit=_edit(self.ls, doc, es), label="sparkls"))
        if not r.applied:
            log.info("client refused an edit for v%d: %s", doc.version, r.failure_reason)
        return bool(r.applied)

    async def changed(self, after_version: int, timeout_s: float) -> Document:
        return await self.ls.session.changed(self.uri, after_version, timeout_s)

    def changes(self, after_version: int) -> list[tuple[int, int, int, str]] | None:
        return self.ls.session.changes(self.uri, after_version)

    def progress(self, message: str) -> None:
        if self.token is not None:
            self.ls.work_done_progress.report(self.token, types.WorkDoneProgressReport(
                message=message, cancellable=True))


def _supports_progress(ls: SparkServer) -> bool:
    w = ls.client_capabilities.window
    return bool(w is not None and w.work_done_progress)


async def run_stream(ls: SparkServer, doc: Document, a: actions.Action) -> dict[str, Any]:
    """One streaming edit: progress (cancellable), lines applied as they come, an outcome at the end.
    Cancelling the request or the progress aborts the engine and keeps or reverts (`editCancel`)."""
    token = f"sparkls-edit-{next(_tokens)}"
    use_progress = _supports_progress(ls)
    if use_progress:
        try:
            await asyncio.wait_for(ls.work_done_progress.create_async(token), 5)
            ls.work_done_progress.begin(token, types.WorkDoneProgressBegin(title=a.title, cancellable=True))
        except Exception:
            log.info("client did not create progress %s; streaming without it", token, exc_info=True)
            use_progress = False
    buffer = LspBuffer(ls, a.uri, token if use_progress else None)
    s = streaming.StreamingEdit(buffer, ls.session.start_engine(), ls.session.settings, a.start, a.end,
                                actions.instruction_of(a, doc.language))
    ls.session.streams[token] = s
    task = asyncio.ensure_future(s.run())
    cancel = ls.work_done_progress.tokens.get(token) if use_progress else None
    if cancel is not None:
        cancel.add_done_callback(lambda f: task.cancel() if f.cancelled() else None)
    message = "done"
    try:
        outcome = await asyncio.shield(task)
        message = outcome.reason
    except asyncio.CancelledError:
        task.cancel()
        await asyncio.gather(task, return_exceptions=True)
        message = "cancelled"
        if cancel is not None and cancel.cancelled():  # cancelled from the progress UI: answer normally
            return _report(s.outcome, "cancelled")
        raise
    except EngineError as e:
        log.error("engine failed: %s", e)
        ls.log_to_client(f"sparkls: engine failed: {e}", types.MessageType.Error)
        message = "engine failed"
        return _report(s.outcome, "error")
    finally:
        ls.session.streams.pop(token, None)
        if use_progress:
            ls.work_done_progress.end(token, types.WorkDoneProgressEnd(message=message))
    return _report(outcome, outcome.reason)


def _report(o: streaming.Outcome, reason: str) -> dict[str, Any]:
    return {"reason": reason, "lines": o.lines, "applied": o.applied, "redirects": o.redirects,
            "requestIds": o.request_ids}
