"""The language server: a `SparkServer` with every feature's handlers registered.

Every request gets exactly one response: a result, an empty result with a logged reason (engine failure,
binary file), an `InvalidParams` error (unknown document, impossible position), or `RequestCancelled`
(cancelled by the client or superseded by a newer request for the same document, in which case the engine
request is aborted). The handlers live in `lsp.handlers`, one module per feature.
"""

from __future__ import annotations

from sparkls.lsp.handlers import actions, commands, completion, documents, nextedit
from sparkls.lsp.protocol import SparkServer


def create_server() -> SparkServer:
    server = SparkServer()
    for module in (documents, completion, actions, nextedit):
        for method, options, handler in module.FEATURES:
            server.feature(method, options)(handler)
    for name, command in commands.COMMANDS:
        server.command(name)(command)
    return server
