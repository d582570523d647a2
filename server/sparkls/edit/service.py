"""Edits per document: next-edit predictions, chosen code actions, and the streaming edits running now.

Per document it keeps the edit history (every content change, for next-edit prompts), the latest prediction,
and what the buffer shows once that prediction is accepted: when the buffer shows exactly that, the next
prediction is prefetched at background priority. Streaming edits are registered by their progress token, so
`sparkls.redirect` finds the running one.
"""

from __future__ import annotations

import asyncio
import logging

from sparkls.edit import actions, diff, generate, live, nextedit
from sparkls.engine.base import Priority, new_request_id
from sparkls.session import Session
from sparkls.text.document import Document

log = logging.getLogger(__name__)

SHUTDOWN_WAIT_S = 3.0  # how long shutdown waits for a streaming edit to revert


class EditService:
    """Edits for the session's documents; subscribes to the session for their changes."""

    def __init__(self, session: Session) -> None:
        self.session = session
        self.histories: dict[str, nextedit.History] = {}
        self._frames: dict[str, nextedit.EditFrame] = {}  # the stable head of each document's next-edit prompts
        self._predictions: dict[str, generate.EditResult] = {}  # the latest next-edit per document
        self._accepted: dict[str, tuple[int, str]] = {}  # uri -> (cursor, text after accepting)
        self._prefetch: dict[str, asyncio.Task[None]] = {}
        self._streams: dict[str, live.StreamingEdit] = {}  # progress token -> running edit
        session.subscribe(self)

    # -- the session's documents -----------------------------------------------------------------
    def opened(self, doc: Document) -> None:
        for per_doc in (self.histories, self._predictions, self._accepted, self._frames):
            per_doc.pop(doc.uri, None)  # a (re)opened document starts a new history and version sequence

    def changed(self, old: Document, start: int, end: int, text: str) -> None:
        self.histories.setdefault(old.uri, nextedit.History()).record(old.text, start, end, text)

    def updated(self, doc: Document) -> None:
        self._maybe_prefetch(doc)

    def closed(self, uri: str) -> None:
        for per_doc in (self.histories, self._predictions, self._accepted, self._frames):
            per_doc.pop(uri, None)
        if (task := self._prefetch.pop(uri, None)) is not None:
            task.cancel()

    def reconfigured(self) -> None:
        pass

    async def shutdown(self) -> None:
        """Cancel the prefetches, and the streaming edits as the user would (each reverts its region first)."""
        for task in self._prefetch.values():
            task.cancel()
        await asyncio.gather(*(s.stop(SHUTDOWN_WAIT_S) for s in list(self._streams.values())))

    # -- next-edit -------------------------------------------------------------------------------
    def prediction(self, doc: Document) -> generate.EditResult | None:
        """The latest prediction when it is for this snapshot and changes something (none once the document matches
        an exclusion glob: `excludeFiles` changes take effect at once)."""
        p = self._predictions.get(doc.uri)
        if p is None or p.version != doc.version or not p.edits or self.session.excluded(doc.uri):
            return None
        return p

    def insertion_at(self, doc: Document, cursor: int) -> generate.EditResult | None:
        """The latest prediction when it is a single insertion at `cursor` (offered as inline completion)."""
        p = self.prediction(doc)
        if p is None or len(p.edits) != 1 or not p.edits[0].start == p.edits[0].end == cursor:
            return None
        return p

    async def predict(self, doc: Document, cursor: int, priority: int = Priority.INTERACTIVE) -> generate.EditResult:
        """The next edit around `cursor`, kept as the document's latest prediction."""
        if self.session.excluded(doc.uri):  # its text never goes to the model
            return generate.EditResult(doc.uri, doc.version, cursor, cursor, "", "", [], new_request_id("edit"))
        cached = self._predictions.get(doc.uri)
        if cached is not None and cached.version == doc.version and cached.start <= cursor <= cached.end:
            return cached
        result, self._frames[doc.uri] = await generate.predict(
            doc,
            cursor,
            self.histories.get(doc.uri),
            self.session.start_engine(),
            self.session.settings,
            priority,
            self._frames.get(doc.uri),
        )
        log.info(
            "%s next-edit v%d: %d edits, %.0f ms, %d tokens",
            result.request_id,
            doc.version,
            len(result.edits),
            result.total_ms,
            result.stats.decode_tokens,
        )
        self._predictions[doc.uri] = result
        if result.edits:  # what the buffer shows once it is accepted, and where the cursor is then
            last = result.edits[-1]
            cursor = last.start + len(last.text) + sum(len(e.text) - (e.end - e.start) for e in result.edits[:-1])
            self._accepted[doc.uri] = (cursor, diff.apply(doc.text, result.edits))
        return result

    def _maybe_prefetch(self, doc: Document) -> None:
        """The user accepted the latest prediction (the buffer now shows it): predict the next one at
        background priority, so it is ready (or under way) before they ask."""
        accepted = self._accepted.get(doc.uri)
        if accepted is None or len(accepted[1]) != len(doc.text) or accepted[1] != doc.text:
            return
        del self._accepted[doc.uri]
        if not self.session.settings.next_edit_prefetch:
            return
        if (task := self._prefetch.pop(doc.uri, None)) is not None:
            task.cancel()

        async def prefetch() -> None:
            try:
                await self.predict(doc, accepted[0], Priority.BACKGROUND)
            except asyncio.CancelledError:
                raise
            except Exception:
                log.exception("next-edit prefetch failed")

        log.info("predicted edit accepted on %s v%d: prefetching the next one", doc.uri, doc.version)
        self._prefetch[doc.uri] = asyncio.ensure_future(prefetch())

    # -- code actions ----------------------------------------------------------------------------
    def code_actions(
        self, doc: Document, start: int, end: int, problems: list[actions.Problem]
    ) -> list[actions.Action]:
        """The actions to offer for a range: none for an excluded document (its text never goes to the model);
        "Apply predicted edit" first when a prediction is ready for this version, else last (choosing it asks the
        model)."""
        if self.session.excluded(doc.uri):
            return []
        found = actions.available(doc, start, end, problems)
        predicted = actions.Action("predicted", doc.uri, doc.version, start, start, actions.TITLES["predicted"])
        return [predicted, *found] if self.prediction(doc) is not None else [*found, predicted]

    async def run_action(self, doc: Document, action: actions.Action) -> generate.EditResult:
        """A chosen code action on the snapshot it was listed for, computed at once."""
        if action.kind == "predicted":
            return await self.predict(doc, action.start, Priority.CODE_ACTION)
        instruction = actions.instruction_of(action, doc.language)
        return await generate.rewrite_region(
            doc, action.start, action.end, instruction, self.session.start_engine(), self.session.settings
        )

    def stream(self, token: str, buffer: live.Buffer, doc: Document, action: actions.Action) -> live.StreamingEdit:
        """A streaming edit for `action`, registered under `token` until `finished`."""
        s = live.StreamingEdit(
            buffer,
            self.session.start_engine(),
            self.session.settings,
            action.start,
            action.end,
            actions.instruction_of(action, doc.language),
        )
        self._streams[token] = s
        return s

    def finished(self, token: str) -> None:
        self._streams.pop(token, None)

    def redirect(self, instruction: str, uri: str | None = None) -> str | None:
        """Redirect the latest running streaming edit (of `uri`, when given); its token, or None (also when its
        document has come to match an exclusion glob: its region would go to the model again)."""
        running = [(t, s) for t, s in self._streams.items() if uri is None or s.uri == uri]
        if not running or self.session.excluded(running[-1][1].uri):
            return None
        token, s = running[-1]
        s.redirect(instruction)
        return token
