"""Next-edit: `sparkls/inlineEdit` returns the predicted edits anywhere in a window around the cursor."""

from __future__ import annotations

import logging
from typing import Any

from lsprotocol import types
from pygls.exceptions import JsonRpcInvalidParams

from sparkls.lsp import convert
from sparkls.lsp.handlers.common import offset, served, snapshot
from sparkls.lsp.protocol import SparkServer

log = logging.getLogger("sparkls")


async def inline_edit(ls: SparkServer, params: Any) -> dict[str, Any]:
    """{textDocument: {uri, version?}, position} -> {textDocument, requestId, edits, range}."""
    try:
        uri = params.textDocument.uri
        pos = types.Position(line=int(params.position.line), character=int(params.position.character))
        version = getattr(params.textDocument, "version", None)
        version = None if version is None else int(version)
    except (AttributeError, TypeError, ValueError):
        raise JsonRpcInvalidParams("sparkls/inlineEdit needs textDocument.uri (and an integer version) and position"
                                   ) from None
    doc = snapshot(ls, uri)
    cursor = offset(ls, doc, pos)
    empty = {"textDocument": {"uri": uri, "version": doc.version}, "edits": [], "requestId": None}
    if version is not None and version != doc.version:
        log.info("inlineEdit for v%s, document is v%d: nothing predicted", version, doc.version)
        return empty
    result = await served(ls, uri, ls.edits.predict(doc, cursor))
    if result is None:
        return empty
    enc, unstructure = ls.session.encoding, ls.protocol._converter.unstructure
    idx = convert.index_of(doc)
    window = types.Range(start=types.Position(*idx.position(result.start, enc)),
                         end=types.Position(*idx.position(result.end, enc)))
    return {"textDocument": {"uri": uri, "version": doc.version}, "requestId": result.request_id,
            "edits": [unstructure(te) for te in convert.text_edits(doc, result.edits, enc)],
            "range": unstructure(window)}


FEATURES = [("sparkls/inlineEdit", None, inline_edit)]
