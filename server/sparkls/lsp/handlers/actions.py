"""Code actions: listed instantly without an edit, computed on `codeAction/resolve` or by the apply command."""

from __future__ import annotations

import logging

from lsprotocol import types
from pygls.exceptions import JsonRpcInvalidParams

from sparkls.edit import actions
from sparkls.edit.diff import Edit
from sparkls.edit.generate import EditResult
from sparkls.lsp import convert
from sparkls.lsp.handlers.common import for_model, offset, resolves_edits, served, snapshot, workspace_edit
from sparkls.lsp.protocol import SparkServer
from sparkls.text.document import Document

log = logging.getLogger("sparkls")

APPLY = "sparkls.applyAction"
KIND = {"fix": types.CodeActionKind.QuickFix, "predicted": types.CodeActionKind.QuickFix}


def action_of(data: object) -> actions.Action:
    try:
        return actions.Action.from_data(data)
    except ValueError as e:
        raise JsonRpcInvalidParams(str(e)) from None


def _problems(ls: SparkServer, doc: Document, ctx: types.CodeActionContext) -> list[actions.Problem]:
    idx, enc = convert.index_of(doc), ls.session.encoding
    out = []
    for d in ctx.diagnostics:
        s = idx.offset(d.range.start.line, d.range.start.character, enc)
        e = idx.offset(d.range.end.line, d.range.end.character, enc)
        out.append(actions.Problem(s, max(s, e), d.message, d.source or ""))
    return out


def _listed(ls: SparkServer, doc: Document, a: actions.Action, ready: EditResult | None) -> types.CodeAction:
    """Listed without an edit (except a prediction that is ready), with exactly one way to get it: an editor that
    resolves an edit also runs the command, which would apply the rewrite twice. Rewrites and, with
    `editStreaming`, every action run as the streaming command; others resolve where the client can."""
    kind = KIND.get(a.kind, types.CodeActionKind.RefactorRewrite)
    if a.kind == "predicted" and ready is not None:
        return types.CodeAction(title=a.title, kind=kind, edit=workspace_edit(ls, doc, ready.edits), is_preferred=True)
    resolve = resolves_edits(ls) and (
        a.kind == "predicted" or (a.kind != "rewrite" and not ls.session.settings.edit_streaming)
    )
    if resolve:
        return types.CodeAction(title=a.title, kind=kind, data=a.to_data())
    return types.CodeAction(
        title=a.title, kind=kind, command=types.Command(title=a.title, command=APPLY, arguments=[a.to_data()])
    )


def code_action(ls: SparkServer, params: types.CodeActionParams) -> list[types.CodeAction]:
    doc = snapshot(ls, params.text_document.uri)
    start, end = offset(ls, doc, params.range.start), offset(ls, doc, params.range.end)
    if start == end:  # editors ask at every cursor move (VS Code's lightbulb): the cursor rests here
        ls.completions.cursor(doc, start)
    found = ls.edits.code_actions(doc, start, end, _problems(ls, doc, params.context))
    ready = ls.edits.prediction(doc)
    return [_listed(ls, doc, a, ready) for a in found]


async def run_action(ls: SparkServer, a: actions.Action) -> tuple[Document, list[Edit]] | None:
    """Run a chosen action on the snapshot it was listed for: (snapshot, edits), or None when the document
    moved on (stale) or the engine failed."""
    doc = for_model(ls, a.uri)
    if doc.version != a.version:
        log.info("code action %s listed for v%d, document is v%d: not run", a.kind, a.version, doc.version)
        return None
    result = await served(ls, a.uri, ls.edits.run_action(doc, a))
    if result is None:
        return None
    log.info(
        "%s %s: %d edits, %d chars changed, %.0f ms",
        result.request_id,
        a.kind,
        len(result.edits),
        sum(e.end - e.start + len(e.text) for e in result.edits),
        result.total_ms,
    )
    return doc, result.edits


async def code_action_resolve(ls: SparkServer, params: types.CodeAction) -> types.CodeAction:
    if params.data is None:  # listed with a command, not an edit to resolve: VS Code resolves it anyway
        return params
    found = await run_action(ls, action_of(params.data))
    if found is not None:
        params.edit = workspace_edit(ls, *found)
    return params


FEATURES = [
    (
        types.TEXT_DOCUMENT_CODE_ACTION,
        types.CodeActionOptions(
            code_action_kinds=[types.CodeActionKind.QuickFix, types.CodeActionKind.RefactorRewrite],
            resolve_provider=True,
        ),
        code_action,
    ),
    (types.CODE_ACTION_RESOLVE, None, code_action_resolve),
]
