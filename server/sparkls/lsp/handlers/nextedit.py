"""Next-edit: `sparkls/inlineEdit` returns the predicted edits anywhere in a window around the cursor, with the
`sparkls.accepted` command the client runs when the user applies them; `predicted` reads the request and predicts
(also for `textDocument/copilotInlineEdit`, in `copilot`)."""

from __future__ import annotations

import logging
from typing import Any

from lsprotocol import types
from pygls.exceptions import JsonRpcInvalidParams

from sparkls.edit.generate import EditResult
from sparkls.lsp import convert
from sparkls.lsp.handlers.common import offer, offset, served, snapshot
from sparkls.lsp.protocol import SparkServer
from sparkls.text.document import Document
from sparkls.text.positions import Encoding

log = logging.getLogger("sparkls")


async def predicted(
    ls: SparkServer,
    params: Any,
    method: str,
    encoding: Encoding | None = None,
) -> tuple[Document, EditResult | None]:
    """`{textDocument: {uri, version?}, position}` (positions in `encoding`, else the negotiated one) -> the
    snapshot and the prediction at the position: None when the version asked for is not the document's (stale),
    or the engine failed."""
    try:
        uri = params.textDocument.uri
        pos = types.Position(line=int(params.position.line), character=int(params.position.character))
        version = getattr(params.textDocument, "version", None)
        version = None if version is None else int(version)
    except (AttributeError, TypeError, ValueError):
        raise JsonRpcInvalidParams(f"{method} needs textDocument.uri (and an integer version) and position") from None
    doc = snapshot(ls, uri)
    cursor = offset(ls, doc, pos, encoding)
    if version is not None and version != doc.version:
        log.info("%s for v%s, document is v%d: nothing predicted", method, version, doc.version)
        return doc, None
    return doc, await served(ls, uri, ls.edits.predict(doc, cursor))


async def inline_edit(ls: SparkServer, params: Any) -> dict[str, Any]:
    """{textDocument: {uri, version?}, position} -> {textDocument, requestId, edits, range, command} (no edits:
    {textDocument, requestId: null, edits: []})."""
    doc, result = await predicted(ls, params, "sparkls/inlineEdit")
    uri = doc.uri
    empty = {"textDocument": {"uri": uri, "version": doc.version}, "edits": [], "requestId": None}
    if result is None:
        return empty
    enc, unstructure = ls.session.encoding, ls.protocol._converter.unstructure
    idx = convert.index_of(doc)
    window = types.Range(
        start=types.Position(*idx.position(result.start, enc)), end=types.Position(*idx.position(result.end, enc))
    )
    answer = {
        "textDocument": {"uri": uri, "version": doc.version},
        "requestId": result.request_id,
        "edits": [unstructure(te) for te in convert.text_edits(doc, result.edits, enc)],
        "range": unstructure(window),
    }
    command = offer(ls, result.request_id, "nextEdit", sum(len(e.text) for e in result.edits)) if result.edits else None
    if command is not None:
        answer["command"] = unstructure(command)
    return answer


FEATURES = [("sparkls/inlineEdit", None, inline_edit)]
