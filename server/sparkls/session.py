"""The session: open documents, settings, the engine, the workspace index and the change log.

Handlers read frozen `Document` snapshots from here. The session knows no feature: completion and edit
services keep their own per-document state and follow the documents as `Listener`s (a document opened, one
content change, the new snapshot published, a document closed, settings or workspace changed, shutdown).
Only the session's own methods change its fields.
"""

from __future__ import annotations

import asyncio
import collections
import contextlib
import logging
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Protocol

from sparkls.engine import Engine, create_engine
from sparkls.engine.base import Health
from sparkls.engine.options import EngineOptions
from sparkls.engine.supervisor import SupervisedEngine
from sparkls.settings import Settings
from sparkls.text.document import Document
from sparkls.text.positions import Encoding
from sparkls.workspace import files

log = logging.getLogger(__name__)

CHANGE_LOG = 2048  # content changes kept per document for streaming edits to follow their region

Change = tuple[int, int, int, str]  # (version, start, end, text): one content change, string offsets


class UnknownDocument(KeyError):
    pass


class Listener(Protocol):
    """What a feature hears of the documents (all calls on the event loop, in order)."""

    def opened(self, doc: Document) -> None: ...

    def changed(self, old: Document, start: int, end: int, text: str) -> None: ...

    def updated(self, doc: Document) -> None: ...

    def closed(self, uri: str) -> None: ...

    def reconfigured(self) -> None: ...

    async def shutdown(self) -> None: ...


class Session:
    def __init__(self, settings: Settings | None = None, engine: Engine | None = None) -> None:
        self.settings = settings or Settings()
        self.encoding: Encoding = "utf-16"
        self.documents: dict[str, Document] = {}
        self.engine = engine
        self.workspace: files.WorkspaceIndex | None = None  # set on initialize (also with no folders: the globs)
        self._listeners: list[Listener] = []
        self._changes: dict[str, collections.deque[Change]] = {}
        self._watchers: dict[str, list[asyncio.Future[Document]]] = {}
        self._shut_down = False
        self._built: EngineOptions | None = None  # what the supervised engine was built from
        self._rebuilding = asyncio.Lock()
        # How the user hears of the engine (level "error" or "info"): set by the LSP layer; logs meanwhile.
        self.notify: Callable[[str, str], None] = lambda level, message: log.info("%s: %s", level, message)

    def subscribe(self, listener: Listener) -> None:
        self._listeners.append(listener)

    # -- settings and workspace ------------------------------------------------------------------
    def initialize(self, settings: Settings, encoding: Encoding, roots: Sequence[Path]) -> None:
        """The client's `initialize`: settings, the negotiated position encoding, the workspace folders; the
        engine starts loading in the background."""
        self.settings, self.encoding = settings, encoding
        self.set_workspace(roots)
        self.start_engine()

    def configure(self, settings: Settings) -> bool:
        """New settings; the workspace index follows a change of the exclusion globs. True when the engine's
        options changed (`engine_options`: engine, model, threads, URL, ...): `rebuild_engine` then builds it anew;
        a change of the supervisor's options alone takes effect at once."""
        old, self.settings = self.settings, settings
        if settings.exclude_files != old.exclude_files and self.workspace is not None:
            self._index(self.workspace.roots)
        self._reconfigured()
        if not isinstance(self.engine, SupervisedEngine):
            return False
        self.engine.options = settings.supervisor_options()
        return settings.engine_options() != self._built

    async def rebuild_engine(self) -> None:
        """Build the engine from the current settings in place of the running one (which is closed first);
        one rebuild at a time, each from the settings of its moment, none when they match what runs."""
        async with self._rebuilding:
            options = self.settings.engine_options()
            if not isinstance(self.engine, SupervisedEngine) or options == self._built:
                return
            log.info("engine settings changed: rebuilding the %s engine", self.settings.engine)
            self._built = options
            await self.engine.replace(
                lambda recorder: create_engine(options, recorder), self.settings.supervisor_options()
            )

    def set_workspace(self, roots: Sequence[Path]) -> None:
        """The workspace folders (the only places other files are read from) and the exclusion globs."""
        self._index(roots)
        self._reconfigured()

    def _index(self, roots: Sequence[Path]) -> None:
        self.workspace = files.WorkspaceIndex(list(roots), (*files.DEFAULT_EXCLUDES, *self.settings.exclude_files))

    def _reconfigured(self) -> None:
        for listener in self._listeners:
            listener.reconfigured()

    def excluded(self, uri: str) -> bool:
        """A document whose path matches an exclusion glob: never part of a prompt."""
        return files.refused(uri, self.workspace)

    # -- documents -------------------------------------------------------------------------------
    def open(self, uri: str, language_id: str | None, version: int, text: str) -> Document:
        doc = Document.open(uri, language_id, version, text, self.settings.parse_limit_bytes)
        self.documents[uri] = doc
        self._changes.pop(uri, None)  # a (re)opened document starts a new version sequence
        for listener in self._listeners:
            listener.opened(doc)
        return doc

    def snapshot(self, uri: str) -> Document:
        try:
            return self.documents[uri]
        except KeyError:
            raise UnknownDocument(uri) from None

    def is_current(self, uri: str, version: int) -> bool:
        """Whether `uri` is still open at `version` (a result computed for another version is stale)."""
        doc = self.documents.get(uri)
        return doc is not None and doc.version == version

    def change(self, old: Document, start: int, end: int, text: str, version: int) -> Document:
        """Apply one `didChange` content change to a snapshot and log it (streaming edits follow their region
        through the log; features hear of it). The result is published by `update`."""
        self._changes.setdefault(old.uri, collections.deque(maxlen=CHANGE_LOG)).append((version, start, end, text))
        for listener in self._listeners:
            listener.changed(old, start, end, text)
        return old.edit(start, end, text, version)

    def update(self, doc: Document) -> None:
        """Publish a new snapshot: waiters for a newer version wake up, features hear of it."""
        self.documents[doc.uri] = doc
        for fut in self._watchers.pop(doc.uri, []):
            if not fut.done():
                fut.set_result(doc)
        for listener in self._listeners:
            listener.updated(doc)

    def changes(self, uri: str, after_version: int) -> list[Change] | None:
        """The content changes since `after_version`, in order; None when the log no longer reaches back."""
        changes = self._changes.get(uri)
        doc = self.documents.get(uri)
        if doc is None or doc.version <= after_version:
            return []
        if not changes or changes[0][0] > after_version + 1:
            return None
        return [c for c in changes if c[0] > after_version]

    async def changed(self, uri: str, after_version: int, timeout_s: float) -> Document:
        """The snapshot of `uri` once its version is past `after_version`."""
        doc = self.snapshot(uri)
        while doc.version <= after_version:
            fut: asyncio.Future[Document] = asyncio.get_running_loop().create_future()
            self._watchers.setdefault(uri, []).append(fut)
            doc = await asyncio.wait_for(fut, timeout_s)
        return doc

    def close(self, uri: str) -> None:
        self.documents.pop(uri, None)
        self._changes.pop(uri, None)
        for listener in self._listeners:
            listener.closed(uri)

    # -- engine ----------------------------------------------------------------------------------
    def start_engine(self) -> Engine:
        """The engine, built on first use from the settings and supervised (restarted when it dies or hangs,
        with backoff; one message per outage)."""
        if self.engine is None:
            options = self._built = self.settings.engine_options()
            self.engine = SupervisedEngine(
                lambda recorder: create_engine(options, recorder),
                self.settings.supervisor_options(),
                on_outage=lambda m: self.notify("error", m),
                on_recovered=lambda m: self.notify("info", m),
            )
            with contextlib.suppress(RuntimeError):  # outside an event loop (a script): nothing watches the start
                self.engine.start()
        return self.engine

    async def health(self) -> Health:
        return await self.start_engine().health()

    async def shutdown(self) -> None:
        """Stop the features' work and close the engine; safe to call again (`shutdown`, then the transport
        closing)."""
        if self._shut_down:
            return
        self._shut_down = True
        for listener in self._listeners:
            await listener.shutdown()
        if self.engine is not None:
            await self.engine.close()
