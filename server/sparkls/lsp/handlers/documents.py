"""The server's and the documents' lifecycle: initialize, settings, open/change/close, shutdown."""

from __future__ import annotations

import asyncio
import logging
import time
from pathlib import Path

from lsprotocol import types
from pygls.capabilities import ServerCapabilitiesBuilder

from sparkls.engine.base import Health, Starting
from sparkls.lsp import convert
from sparkls.lsp.handlers.common import begin_progress
from sparkls.lsp.protocol import SparkServer
from sparkls.session import UnknownDocument
from sparkls.settings import resolve
from sparkls.workspace.files import uri_path

log = logging.getLogger("sparkls")
STAGE_POLL_S = 0.25  # how often a starting engine is asked what it is doing


def workspace_roots(params: types.InitializeParams) -> list[Path]:
    """The workspace folders an editor opened (or its single root), as local paths."""
    uris = [f.uri for f in params.workspace_folders or []] or ([params.root_uri] if params.root_uri else [])
    roots = [p for p in (uri_path(u) for u in uris) if p is not None]
    if not roots and params.root_path:
        roots = [Path(params.root_path)]
    return roots


def _guarded(ls: SparkServer, wire: object) -> object:
    """The client's settings less what it may not set (over a network transport), with the server's own;
    a refused setting is named in a message."""
    if ls.guard is None:
        return wire
    wire, refused = ls.guard.settings(wire)
    for message in refused:
        _warn(ls, message)
    return wire


def _warn(ls: SparkServer, message: str) -> None:
    log.warning("%s", message)
    ls.window_show_message(types.ShowMessageParams(type=types.MessageType.Warning, message=f"sparkls: {message}"))


def initialize(ls: SparkServer, params: types.InitializeParams) -> None:
    settings, problems = resolve(_guarded(ls, params.initialization_options))  # a TCP token was taken out already
    encoding = convert.encoding_of(ServerCapabilitiesBuilder.choose_position_encoding(params.capabilities))
    logging.getLogger("sparkls").setLevel(settings.log_level.upper())
    for problem in problems:
        log.warning("settings: %s", problem)
        ls.window_show_message(
            types.ShowMessageParams(type=types.MessageType.Warning, message=f"sparkls settings: {problem}")
        )
    ls.session.notify = lambda level, message: _tell(ls, level, message)
    roots = workspace_roots(params)
    if ls.guard is not None:
        roots, refused = ls.guard.folders(roots)
        for message in refused:
            _warn(ls, message)
    ls.session.initialize(settings, encoding, roots)  # the engine loads in the background
    log.info("initialized: engine=%s encoding=%s", settings.engine, encoding)


def _tell(ls: SparkServer, level: str, message: str) -> None:
    """The engine's news: an outage as one `window/showMessage` (once per outage), its end as a log message."""
    log.warning("engine: %s", message)
    if level == "error":
        ls.window_show_message(types.ShowMessageParams(type=types.MessageType.Error, message=f"sparkls: {message}"))
    else:
        ls.log_to_client(f"sparkls: {message}")


async def initialized(ls: SparkServer, params: types.InitializedParams) -> None:
    await show_start(ls)


async def show_start(ls: SparkServer) -> None:
    """Show the engine's start as `$/progress`, one report per stage where the engine can say (vLLM: engine
    core, weights, compile, KV cache); requests meanwhile wait up to `engineStartWaitMs`. A start that fails ends
    the progress with why; the supervisor tells the user once, as for any outage."""
    engine = ls.session.engine
    if engine is None:
        return
    ls.engine_starts += 1  # a progress token is used once: a rebuild's start is `sparkls-engine-start-2`, ...
    token = "sparkls-engine-start" + (f"-{ls.engine_starts}" if ls.engine_starts > 1 else "")
    name = ls.session.settings.engine
    shown = await begin_progress(ls, token, f"sparkls: starting {name}", cancellable=False, message="loading model")
    started = time.monotonic()
    waiting = asyncio.ensure_future(engine.ready())
    told = 0  # stages reported: each one, even one shorter than a poll
    while True:
        finished = waiting.done()
        stages = engine.start_stages() if isinstance(engine, Starting) else []
        for stage in stages[told:]:
            if stage != "ready":
                log.info("engine %s: %s (%.1f s)", name, stage, time.monotonic() - started)
                if shown:
                    ls.work_done_progress.report(token, types.WorkDoneProgressReport(message=stage))
        told = len(stages)
        if finished:
            break
        await asyncio.wait([waiting], timeout=STAGE_POLL_S)
    try:
        waiting.result()
        h = await engine.health()
    except Exception as e:  # the engine reports a failed load here or in `health`
        h = Health(False, name, detail=f"load failed: {e}")
    took = time.monotonic() - started
    log.info("engine %s: %s (%s) after %.1f s", name, "ready" if h.ok else "not ready", h.detail, took)
    if shown:
        ls.work_done_progress.end(
            token, types.WorkDoneProgressEnd(message=f"ready in {took:.1f} s" if h.ok else f"failed: {h.detail}")
        )


async def shutdown(ls: SparkServer, params: None) -> None:
    await ls.session.shutdown()


async def did_change_configuration(ls: SparkServer, params: types.DidChangeConfigurationParams) -> None:
    """New settings take effect now: the log level, and the engine rebuilt (its start shown as progress) when
    one of its options changed."""
    settings, problems = resolve(_guarded(ls, params.settings), ls.session.settings)
    for problem in problems:
        log.warning("settings: %s", problem)
    logging.getLogger("sparkls").setLevel(settings.log_level.upper())
    if ls.session.configure(settings):
        await ls.session.rebuild_engine()
        await show_start(ls)


def did_open(ls: SparkServer, params: types.DidOpenTextDocumentParams) -> None:
    td = params.text_document
    doc = ls.session.open(td.uri, td.language_id, td.version, td.text)
    log.debug("open %s (%s, %d chars, tree=%s)", td.uri, doc.language, len(doc.text), doc.tree is not None)


def did_change(ls: SparkServer, params: types.DidChangeTextDocumentParams) -> None:
    uri, version = params.text_document.uri, params.text_document.version
    try:
        doc = ls.session.snapshot(uri)
    except UnknownDocument:
        log.warning("didChange for a document that is not open: %s", uri)
        return
    for change in params.content_changes:
        start, end, text = convert.change_span(doc, change, ls.session.encoding)
        doc = ls.session.change(doc, start, end, text, version)
    ls.session.update(doc)


def did_close(ls: SparkServer, params: types.DidCloseTextDocumentParams) -> None:
    ls.session.close(params.text_document.uri)


FEATURES = [
    (types.INITIALIZE, None, initialize),
    (types.INITIALIZED, None, initialized),
    (types.SHUTDOWN, None, shutdown),
    (types.WORKSPACE_DID_CHANGE_CONFIGURATION, None, did_change_configuration),
    (types.TEXT_DOCUMENT_DID_OPEN, None, did_open),
    (types.TEXT_DOCUMENT_DID_CHANGE, None, did_change),
    (types.TEXT_DOCUMENT_DID_CLOSE, None, did_close),
]
