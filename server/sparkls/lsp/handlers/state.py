"""`sparkls/documentState`: a document as the server holds it (version, length, hash), so a client or a test can
check that its buffer and the server's agree. It tells the client nothing the client does not have."""

from __future__ import annotations

import hashlib
from typing import Any

from pygls.exceptions import JsonRpcInvalidParams

from sparkls.lsp.protocol import SparkServer


def document_state(ls: SparkServer, params: Any) -> dict[str, object] | None:
    """`{"uri", "version", "length" (characters), "sha256" (of the UTF-8 text)}`, or null when it is not open."""
    uri = getattr(getattr(params, "textDocument", None), "uri", None)  # pygls reads custom params as namedtuples
    if not isinstance(uri, str):
        raise JsonRpcInvalidParams('sparkls/documentState takes {"textDocument": {"uri": ...}}')
    doc = ls.session.documents.get(uri)
    if doc is None:
        return None
    digest = hashlib.sha256(doc.source).hexdigest()  # `source`: the UTF-8 bytes, lone surrogates kept
    return {"uri": uri, "version": doc.version, "length": len(doc.text), "sha256": digest}


FEATURES = [
    ("sparkls/documentState", None, document_state),
]
