"""The language server: a `SparkServer` with every feature's handlers registered.

Every request gets exactly one response: a result, an empty result with a logged reason (engine failure,
binary file), an `InvalidParams` error (unknown document, impossible position), or `RequestCancelled`
(cancelled by the client or superseded by a newer request for the same document, in which case the engine
request is aborted). The handlers live in `lsp.handlers`, one module per feature. The feature requests and the
commands are counted for the Prometheus metrics (`lsp.telemetry`, served from `initialize` when `metricsPort` is set).
"""

from __future__ import annotations

from typing import Any

from lsprotocol import types

from sparkls.lsp.handlers import actions, commands, completion, copilot, documents, nextedit, state
from sparkls.lsp.protocol import SparkServer
from sparkls.lsp.telemetry import Handler, Telemetry

# The requests counted for the metrics, by kind (commands count under their own names).
KINDS = {
    types.TEXT_DOCUMENT_INLINE_COMPLETION: "inline",
    types.TEXT_DOCUMENT_COMPLETION: "completion",
    types.TEXT_DOCUMENT_CODE_ACTION: "codeAction",
    types.CODE_ACTION_RESOLVE: "codeActionResolve",
    "sparkls/inlineEdit": "nextEdit",
    copilot.METHOD: "nextEdit",
}


def create_server() -> SparkServer:
    server = SparkServer()
    telemetry = Telemetry(server.session, server.completions, server.acceptance)
    for module in (documents, completion, actions, nextedit, copilot, state):
        for method, options, handler in module.FEATURES:
            if method == types.INITIALIZE:
                handler = serving_metrics(telemetry, handler)
            elif method in KINDS:
                handler = telemetry.counted(KINDS[method], handler)
            server.feature(method, options)(handler)
    for name, command in commands.COMMANDS:
        server.command(name)(telemetry.counted(name, command))
    return server


def serving_metrics(telemetry: Telemetry, initialize: Handler) -> Handler:
    """`initialize`, then the metrics served on the port the settings name (a port taken is shown, not fatal)."""

    def initialize_and_serve(ls: SparkServer, params: types.InitializeParams) -> Any:
        result = initialize(ls, params)
        problem = telemetry.start(ls.session.settings.metrics_port)
        if problem is not None:
            ls.window_show_message(
                types.ShowMessageParams(type=types.MessageType.Warning, message=f"sparkls: {problem}")
            )
        return result

    return initialize_and_serve
