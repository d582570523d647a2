"""Commands: apply a chosen code action (streamed into the buffer, or at once), redirect a running one, and
count an accepted offer (`sparkls.accepted`, which every completion item and next-edit carries).

A streaming edit reports cancellable `$/progress` and applies lines as they come through `workspace/applyEdit`;
cancelling the request or the progress aborts the engine and keeps or reverts (`editCancel`)."""

from __future__ import annotations

import asyncio
import itertools
import logging
from typing import Any

from lsprotocol import types
from pygls.exceptions import JsonRpcInvalidParams

from sparkls.edit import actions, live
from sparkls.edit.diff import Edit
from sparkls.engine.base import EngineError
from sparkls.lsp.convert import ACCEPTED
from sparkls.lsp.handlers.actions import APPLY, action_of, run_action
from sparkls.lsp.handlers.common import begin_progress, field_of, for_model, workspace_edit
from sparkls.lsp.protocol import SparkServer
from sparkls.session import Change
from sparkls.text.document import Document

log = logging.getLogger("sparkls")

REDIRECT = "sparkls.redirect"
_tokens = itertools.count(1)


class LspBuffer:
    """`live.Buffer` over the LSP: snapshots from the session, edits by `workspace/applyEdit`."""

    def __init__(self, ls: SparkServer, uri: str, token: str | None) -> None:
        self.ls, self.uri, self.token = ls, uri, token

    def snapshot(self) -> Document:
        return self.ls.session.snapshot(self.uri)

    async def apply(self, doc: Document, edits: list[Edit]) -> bool:
        r = await self.ls.workspace_apply_edit_async(
            types.ApplyWorkspaceEditParams(edit=workspace_edit(self.ls, doc, edits), label="sparkls")
        )
        if not r.applied:
            log.info("client refused an edit for v%d: %s", doc.version, r.failure_reason)
        return bool(r.applied)

    async def changed(self, after_version: int, timeout_s: float) -> Document:
        return await self.ls.session.changed(self.uri, after_version, timeout_s)

    def changes(self, after_version: int) -> list[Change] | None:
        return self.ls.session.changes(self.uri, after_version)

    def progress(self, message: str) -> None:
        if self.token is not None:
            self.ls.work_done_progress.report(
                self.token, types.WorkDoneProgressReport(message=message, cancellable=True)
            )


def _report(o: live.Outcome, reason: str) -> dict[str, Any]:
    return {
        "reason": reason,
        "lines": o.lines,
        "applied": o.applied,
        "redirects": o.redirects,
        "requestIds": o.request_ids,
    }


async def run_stream(ls: SparkServer, doc: Document, a: actions.Action) -> dict[str, Any]:
    """One streaming edit: progress (cancellable), lines applied as they come, an outcome at the end."""
    token = f"sparkls-edit-{next(_tokens)}"
    use_progress = await begin_progress(ls, token, a.title, cancellable=True)
    s = ls.edits.stream(token, LspBuffer(ls, a.uri, token if use_progress else None), doc, a)
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
    except EngineError as e:  # ends the edit's progress with why; an outage is told once by the supervisor
        log.warning("engine failed during a streaming edit of %s: %s", a.uri, e)
        log.debug("engine failure in a streaming edit", exc_info=True)
        message = "engine failed"
        return _report(s.outcome, "error")
    finally:
        ls.edits.finished(token)
        if use_progress:
            ls.work_done_progress.end(token, types.WorkDoneProgressEnd(message=message))
    return _report(outcome, outcome.reason)


async def apply_action(ls: SparkServer, *args: Any) -> dict[str, Any]:
    """Run a chosen action; arguments: the action's data (with `instruction` for a rewrite), or (data,
    instruction). Streamed into the buffer with `editStreaming`, else one `workspace/applyEdit`."""
    if not args:
        raise JsonRpcInvalidParams(f"{APPLY} needs the action as its argument")
    data = dict(args[0]) if isinstance(args[0], dict) else args[0]
    if len(args) > 1 and isinstance(data, dict):
        data["instruction"] = str(args[1])
    a = action_of(data)
    if a.kind == "rewrite" and not a.instruction.strip():
        raise JsonRpcInvalidParams("a rewrite needs an instruction (the command's `instruction` argument)")
    doc = for_model(ls, a.uri)
    if doc.version != a.version:
        raise JsonRpcInvalidParams(
            f"the action was listed for version {a.version}; the document is at "
            f"{doc.version}: ask for code actions again"
        )
    if a.kind != "predicted" and ls.session.settings.edit_streaming:
        return await run_stream(ls, doc, a)
    found = await run_action(ls, a)
    if found is None:
        return {"reason": "stale", "lines": 0, "applied": 0, "redirects": 0, "requestIds": []}
    applied = await LspBuffer(ls, a.uri, None).apply(*found)
    return {
        "reason": "done" if applied else "refused",
        "lines": 0,
        "applied": int(applied),
        "redirects": 0,
        "requestIds": [],
    }


async def redirect(ls: SparkServer, *args: Any) -> dict[str, Any]:
    """Redirect the running streaming edit: arguments (instruction) or (instruction, uri)."""
    if not args or not str(args[0]).strip():
        raise JsonRpcInvalidParams(f"{REDIRECT} needs an instruction")
    instruction, uri = str(args[0]), (str(args[1]) if len(args) > 1 else None)
    token = ls.edits.redirect(instruction, uri)
    if token is None:
        excluded = uri is not None and ls.session.excluded(uri)
        return {
            "redirected": False,
            "reason": "the document matches an exclusion glob (excludeFiles)"
            if excluded
            else "no streaming edit is running",
        }
    return {"redirected": True, "token": token}


def accepted(ls: SparkServer, *args: Any) -> None:
    """The user accepted an offer: one argument, `{"requestId": str}`. An unknown (or forgotten) or already counted
    request id changes nothing (logged at debug)."""
    rid = field_of(args[0], "requestId") if len(args) == 1 else None
    if not isinstance(rid, str):
        raise JsonRpcInvalidParams(f'{ACCEPTED} takes one argument, {{"requestId": str}}')
    if not ls.acceptance.accepted(rid):
        log.debug("%s %s changes nothing (unknown, forgotten or already accepted or dismissed)", ACCEPTED, rid)


COMMANDS = [(APPLY, apply_action), (REDIRECT, redirect), (ACCEPTED, accepted)]
