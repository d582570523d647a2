"""A rewrite applied to the buffer while it is generated: a completed line at a time, interruptible.

`StreamingEdit` drives one region: after each completed line it lays the lines so far over the
original region (`rewrite.compose`: the buffer always holds whole code), diffs that against what the
buffer holds now and applies the minimal edits, guarded by the version they were computed for,
through a `Buffer` (the LSP layer's `workspace/applyEdit`). It then waits until the client's
`didChange` shows the edit. `RegionTracker` follows the region through edits elsewhere in the file;
an edit inside the region that is not ours is the user's, and stops the stream instead of fighting
them. Cancelling `run` aborts the engine (the generation task is cancelled; the engine stream aborts
within one token) and then keeps or reverts what was applied; `redirect` aborts the running
generation and continues from the buffer as it is, with a new instruction. No LSP types here.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from dataclasses import dataclass, field
from typing import Any, Protocol

from sparkls.edit import diff, rewrite
from sparkls.edit.generate import LineGeneration, request_for
from sparkls.engine.base import Engine, EngineError, GenerationStats, Priority, new_request_id
from sparkls.session import Change
from sparkls.settings import Settings
from sparkls.text.document import Document, file_name

log = logging.getLogger(__name__)


class UserEdited(Exception):
    """Someone else changed the region while the rewrite streamed."""


class Buffer(Protocol):
    def snapshot(self) -> Document: ...

    async def apply(self, doc: Document, edits: list[diff.Edit]) -> bool:
        """Apply edits computed for `doc` (its version guards them); False when the client refused."""
        ...

    async def changed(self, after_version: int, timeout_s: float) -> Document:
        """The snapshot once its version is past `after_version` (raises TimeoutError)."""
        ...

    def changes(self, after_version: int) -> list[Change] | None:
        """The content changes that made the versions after `after_version`; None if not all are known."""
        ...

    def progress(self, message: str) -> None: ...


class RegionTracker:
    """Where the region is, followed through every content change since our snapshot: a change above
    shifts it, one below leaves it, one inside is ours when the region then holds what we sent."""

    def __init__(self, doc: Document, start: int, end: int) -> None:
        self.version = doc.version
        self.start, self.end = start, end
        self.region = doc.text[start:end]
        self.expected: str | None = None  # what the region holds once our pending edit lands
        self._touched = False  # a change inside the region that is not verified as ours yet

    def _follow(self, start: int, end: int, text: str) -> None:
        delta = len(text) - (end - start)
        if end < self.start or (end == self.start and start < self.start):
            self.start, self.end = self.start + delta, self.end + delta
        elif start > self.end:
            return
        elif start < self.start or end > self.end:
            raise UserEdited("an edit across the region's boundary")
        else:
            rel = start - self.start
            self.region = self.region[:rel] + text + self.region[end - self.start :]
            self.end += delta
            self._touched = True

    def expect(self, target: str | None) -> None:
        """`target`: what the region holds once the edit just sent lands; None: the client refused that edit."""
        self.expected = target
        if target is None:
            self._touched = False

    def locate(self, doc: Document, changes: list[Change] | None, settled: bool = True) -> bool:
        """Follow the region to `doc`; True when no edit of ours is pending. `settled`: the client has
        answered our last applyEdit, so a region that differs from what we sent was edited by the user."""
        if doc.version != self.version:
            if changes is None:
                raise UserEdited("lost track of the document's changes")
            for version, start, end, text in changes:
                if version > self.version:
                    self._follow(start, end, text)
            self.version = doc.version
            if doc.text[self.start : self.end] != self.region:
                raise UserEdited("lost track of the region")
        if self._touched:
            if self.expected is not None and self.region == self.expected:
                self.expected, self._touched = None, False
            elif self.expected is None or settled:
                raise UserEdited("the region was edited while the rewrite streamed")
        return self.expected is None


@dataclass
class Outcome:
    reason: str  # done | cancelled | user-edit | refused
    region: str  # what the region holds at the end
    lines: int = 0
    applied: int = 0  # workspace/applyEdit calls that the client applied
    redirects: int = 0
    request_ids: list[str] = field(default_factory=list)
    stats: list[GenerationStats] = field(default_factory=list)


class StreamingEdit:
    def __init__(
        self, buffer: Buffer, engine: Engine, settings: Settings, start: int, end: int, instruction: str
    ) -> None:
        self.buffer, self.engine, self.settings = buffer, engine, settings
        doc = buffer.snapshot()
        self.uri = doc.uri
        self.tracker = RegionTracker(doc, start, end)
        self.original = doc.text[start:end]
        self.instruction = instruction
        self.outcome = Outcome("done", self.original)
        self._redirect: str | None = None
        self._gen_task: asyncio.Task[None] | None = None
        self._sent_version = -1  # the version our last edit was computed for
        self._run_task: asyncio.Task[Any] | None = None

    async def stop(self, timeout_s: float) -> None:
        """Cancel the edit as the user would (the region reverts with `editCancel: revert`), waiting at most
        `timeout_s` for it to finish (the server is shutting down)."""
        task = self._run_task
        if task is not None and not task.done():
            task.cancel()
            await asyncio.wait([task], timeout=timeout_s)

    # -- control -----------------------------------------------------------------------------------
    def redirect(self, instruction: str) -> None:
        """Abort the running generation; continue from the buffer as it is with `instruction`."""
        self._redirect = instruction
        if self._gen_task is not None and not self._gen_task.done():
            self._gen_task.cancel()

    # -- the loop ----------------------------------------------------------------------------------
    async def run(self) -> Outcome:
        self._run_task = asyncio.current_task()
        try:
            while True:
                self._redirect = None
                self._gen_task = asyncio.ensure_future(self._generate(self.instruction))
                try:
                    await asyncio.shield(self._gen_task)
                except asyncio.CancelledError:
                    if self._redirect is None or not self._gen_task.cancelled():
                        raise  # our own task was cancelled: the user cancelled
                    self.instruction = self._redirect  # redirected: go on from the buffer as it is
                    self.outcome.redirects += 1
                    log.info("edit redirected: %s", self.instruction)
                    continue
                return self.outcome
        except asyncio.CancelledError:
            await self._stop_generation()
            await self._after_cancel()
            self.outcome.reason = "cancelled"
            raise
        except EngineError:  # the engine failed mid-rewrite: no half-rewritten region is left behind
            await self._after_cancel()
            self.outcome.reason = "error"
            raise
        except UserEdited as e:
            await self._stop_generation()
            log.info("streaming edit stopped: %s", e)
            self.outcome.reason = "user-edit"
            return self.outcome
        except TimeoutError:
            await self._stop_generation()
            log.warning("streaming edit stopped: the client did not report an applied edit in time")
            self.outcome.reason = "timeout"
            return self.outcome

    async def _stop_generation(self) -> None:
        task = self._gen_task
        if task is not None and not task.done():
            task.cancel()
            await asyncio.gather(task, return_exceptions=True)

    async def _after_cancel(self) -> None:
        if self.settings.edit_cancel != "revert":
            return
        try:
            await self._show(self.original)
            self.outcome.region = self.original
        except (UserEdited, TimeoutError) as e:
            log.info("not reverting the cancelled edit: %s", e)

    async def _generate(self, instruction: str) -> None:
        doc = self.buffer.snapshot()
        if not self._locate(doc, settled=False):  # an edit sent before a redirect has not landed yet
            await self._landed(self._sent_version, settled=False)
            doc = self.buffer.snapshot()
        base = self.tracker.region
        rid = new_request_id("stream")
        prompt = rewrite.render(doc, self.tracker.start, self.tracker.end, instruction, file_name(doc.uri))
        priority = Priority.INTERACTIVE if self.outcome.redirects else Priority.CODE_ACTION
        gen = LineGeneration(
            self.engine, request_for(prompt.text, base, self.settings, priority, rid), prompt.indent, prompt.secrets
        )  # the model sees placeholders; the buffer gets the secrets back
        self.outcome.request_ids.append(rid)
        try:
            async for lines in gen:
                await self._show(rewrite.compose(base, lines))
                self.outcome.lines = len(lines)
                self.buffer.progress(f"{len(lines)} lines")
        finally:
            self.outcome.stats.append(gen.stats)
        await self._show(rewrite.compose(base, gen.lines, final=True))

    async def _show(self, target: str) -> None:
        """Make the region hold `target`: minimal edits, then wait for the client to report them."""
        for _attempt in range(2):
            doc = self.buffer.snapshot()
            self._locate(doc)
            if self.tracker.region == target:
                return
            es = diff.region_edits(doc.text, self.tracker.start, self.tracker.end, target)
            self.tracker.expect(target)
            self._sent_version = doc.version
            if await self._apply(doc, es):
                self.outcome.applied += 1
                await self._landed(doc.version)
                self.outcome.region = target
                return
            self.tracker.expect(None)  # refused (the version moved on): look again, once
        raise UserEdited("the client refused the edit twice")

    async def _apply(self, doc: Document, edits: list[diff.Edit]) -> bool:
        """Send edits and wait for the client's answer, even through a cancel: the edit may already be in the
        editor's buffer, and a revert must start from what the buffer holds, not from a guess."""
        sent = asyncio.ensure_future(self.buffer.apply(doc, edits))
        try:
            return await asyncio.shield(sent)
        except asyncio.CancelledError:
            timeout_s = self.settings.edit_apply_timeout_ms / 1000
            with contextlib.suppress(Exception):
                if await asyncio.wait_for(sent, timeout_s):
                    self.outcome.applied += 1
                    await self._landed(doc.version)  # its didChange came first: the region is located
            raise

    def _locate(self, doc: Document, settled: bool = True) -> bool:
        return self.tracker.locate(doc, self.buffer.changes(self.tracker.version), settled)

    async def _landed(self, version: int, settled: bool = True) -> None:
        """Wait until the client's didChange shows the edit we sent for `version`."""
        doc = self.buffer.snapshot()
        while not (doc.version > version and self._locate(doc, settled)):
            doc = await self.buffer.changed(doc.version, self.settings.edit_apply_timeout_ms / 1000)
