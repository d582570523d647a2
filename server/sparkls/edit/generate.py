"""One rewrite or next-edit prediction, from a snapshot to minimal edits, with timings (no LSP types).

snapshot + region -> rewrite prompt (secrets masked) -> engine stream -> completed lines, secrets put back
(`LineGeneration`) -> rewritten region -> minimal edits. An answer that garbles a placeholder is not applied; a
prediction that drops a secret is not offered. Cancelling the calling task aborts the engine request (the
engine's stream does it on CancelledError/GeneratorExit); the closing fence aborts it too.
"""

from __future__ import annotations

import logging
import math
import re
import time
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass, field

from sparkls.edit import diff, nextedit, rewrite
from sparkls.engine.base import (
    CHARS_PER_TOKEN,
    Delta,
    Engine,
    Finished,
    GenerationRequest,
    GenerationStats,
    Priority,
    new_request_id,
)
from sparkls.settings import Settings
from sparkls.text.document import Document, file_name
from sparkls.workspace import redact

log = logging.getLogger(__name__)

_LINES = re.compile(r"[^\n]*\n|[^\n]+")
TOKENS_PER_LINE = 24  # a next edit may write `nextEditMaxLines` lines, and one more to end with


@dataclass(frozen=True)
class EditResult:
    uri: str
    version: int  # the snapshot the edits apply to
    start: int  # the rewritten region (or next-edit window) in that snapshot
    end: int
    original: str
    text: str  # the region as the model rewrote it
    edits: list[diff.Edit]
    request_id: str
    stats: GenerationStats = field(default_factory=GenerationStats)
    total_ms: float = 0.0


def request_for(prompt_text: str, region: str, settings: Settings, priority: int, rid: str) -> GenerationRequest:
    """A rewrite request: enough tokens for the region and some growth."""
    need = int(len(region) / CHARS_PER_TOKEN * 1.5) + 96
    return GenerationRequest(
        prompt_text, max_tokens=min(settings.max_tokens_rewrite, need), stop=rewrite.STOPS, priority=priority, id=rid
    )


class LineGeneration:
    """Stream an engine request as completed lines of the answer's code block, the prompt's placeholders replaced by
    the secrets they stand for; `stats` once done."""

    def __init__(
        self, engine: Engine, request: GenerationRequest, indent: str = "", secrets: redact.Secrets = ()
    ) -> None:
        self.engine = engine
        self.request = request
        self.indent = indent
        self.secrets = secrets
        self.reader = rewrite.LineReader()
        self.stats = GenerationStats()

    @property
    def lines(self) -> list[str]:
        lines = rewrite.reindent(self.reader.lines, self.indent)
        if not self.secrets:
            return lines
        text = redact.unmask("".join(lines), self.secrets)  # a private key's body is several lines
        return _LINES.findall(text)

    async def __aiter__(self) -> AsyncIterator[list[str]]:
        """Yields all lines so far (reindented) after each new completed line, and once more at the end."""
        stream = self.engine.stream(self.request)
        try:
            async for event in stream:
                if isinstance(event, Finished):
                    self.stats = event.stats
                    break
                if isinstance(event, Delta) and not self.reader.done:
                    if self.reader.feed(event.text):
                        yield self.lines
                    if self.reader.done:  # closing fence: the answer is complete
                        await self.engine.abort(self.request.id)
        finally:
            await stream.aclose()
        if self.reader.finish():
            yield self.lines


def garbled(text: str, original: str) -> bool:
    """Whether a rewrite holds a redaction placeholder that the original did not (one the model made up or changed:
    the secret it stood for would be lost, and the placeholder written into the code)."""
    mark = redact.PLACEHOLDER[:-1]  # "<redacted", numbered or not
    return text.count(mark) > original.count(mark)


async def rewrite_region(
    doc: Document,
    start: int,
    end: int,
    instruction: str,
    engine: Engine,
    settings: Settings,
    priority: int = Priority.CODE_ACTION,
) -> EditResult:
    """Rewrite doc.text[start:end] by `instruction`; the whole answer, as minimal edits."""
    t0 = time.perf_counter()
    rid = new_request_id("edit")
    p = rewrite.render(doc, start, end, instruction, file_name(doc.uri))
    gen = LineGeneration(engine, request_for(p.text, p.region, settings, priority, rid), p.indent, p.secrets)
    async for _ in gen:
        pass
    lines = rewrite.trim_echo(gen.lines, p.region, doc.text[:start], doc.text[end:])
    text = rewrite.compose(p.region, lines, final=True)
    if garbled(text, p.region):
        log.warning("%s: the answer garbles a placeholder of a redacted secret: not applied", rid)
        text = p.region
    es = diff.region_edits(doc.text, start, end, text)
    return EditResult(
        doc.uri, doc.version, start, end, p.region, text, es, rid, gen.stats, (time.perf_counter() - t0) * 1000
    )


async def predict(
    doc: Document,
    cursor: int,
    history: nextedit.History | None,
    engine: Engine,
    settings: Settings,
    priority: int = Priority.INTERACTIVE,
    frame: nextedit.EditFrame | None = None,
) -> tuple[EditResult, nextedit.EditFrame]:
    """The next edit at `cursor`'s line, predicted from the document's recent edits (edit/nextedit.py), and the
    prompt frame the document's next prediction can grow (pass it back)."""
    t0 = time.perf_counter()
    rid = new_request_id("next")
    p = nextedit.render(
        doc,
        cursor,
        history,
        file_name(doc.uri),
        settings.next_edit_lines_before,
        settings.next_edit_lines_after,
        frame,
        settings.next_edit_max_lines,
    )
    recent = nextedit.recent_words(history)  # taken now: the history may grow while the model decodes
    answer, stats, line_lps = await continue_diff(
        engine,
        GenerationRequest(
            p.text,
            max_tokens=TOKENS_PER_LINE * (settings.next_edit_max_lines + 1),
            stop=nextedit.STOPS,
            priority=priority,
            id=rid,
            logprobs=True,
        ),
        p.removed,
        settings.next_edit_min_confidence,
        (settings.next_edit_repeat_min_confidence, lambda so_far: nextedit.may_repeat(recent, so_far)),
    )
    got, why = choose(doc.text, p, complete(answer, stats), line_lps, recent, settings)
    if why:
        log.info(
            "%s: predicted edit %s: %s",
            rid,
            why,
            "not offered" if got is None else f"its first {len(got.added)} added lines offered",
        )
    s, e, text = nextedit.applied(doc.text, p, got)
    original = doc.text[s:e]
    es = diff.region_edits(doc.text, s, e, text) if text != original else []
    return (
        EditResult(doc.uri, doc.version, s, e, original, text, es, rid, stats, (time.perf_counter() - t0) * 1000),
        p.frame,
    )


def complete(answer: str, stats: GenerationStats) -> str:
    """The answer without an added line that the token limit cut short."""
    last = answer.rfind("\n") + 1
    return answer[:last] if stats.finish_reason == "length" and answer[last:].startswith("+") else answer


def choose(
    text: str,
    p: nextedit.DiffPrompt,
    answer: str,
    line_lps: list[float],
    recent: nextedit.Words,
    settings: Settings,
) -> tuple[nextedit.Answer | None, str]:
    """The change to offer: the model's whole change, else the longest sure beginning of it that the gate lets
    through (None when nothing passes); and why the whole change is not offered ("" when it is, or when the model
    changed nothing)."""
    why = ""
    for c in nextedit.candidates(p, answer, line_lps):  # the whole change first
        s, e, new = nextedit.applied(text, p, c)
        no = refusal(text[s:e], new, p, c, recent, settings)
        if not no:
            return c, why
        why = why or no
    return None, why


def refusal(
    original: str,
    text: str,
    p: nextedit.DiffPrompt,
    got: nextedit.Answer,
    recent: nextedit.Words,
    settings: Settings,
) -> str:
    """Why a predicted change (the region `original` becoming `text`) is not offered, or "" when it is."""
    size = got.last - got.first + len(got.added)
    if size > settings.next_edit_max_lines:
        return f"changes {size} lines (> nextEditMaxLines)"
    if any(text.count(v) < original.count(v) for _, v in p.secrets):
        return "drops or changes a redacted secret"  # a next edit never touches a secret
    if got.confidence >= settings.next_edit_min_confidence:
        return ""
    if got.confidence >= settings.next_edit_repeat_min_confidence and nextedit.repeats(recent, p, got):
        return ""
    return f"confidence {got.confidence:.2f} < nextEditMinConfidence {settings.next_edit_min_confidence}"


async def continue_diff(
    engine: Engine,
    request: GenerationRequest,
    forced: str,
    min_confidence: float = 0.0,
    repeat: tuple[float, Callable[[str], bool]] | None = None,
) -> tuple[str, GenerationStats, list[float]]:
    """The model's continuation of a next-edit diff until it goes back to context, or until the gate could no longer
    offer any change that includes the line being written (decoding on is waste); then the request is aborted:
    a token of an added line falls under `min_confidence` and, with `repeat` (the repeat gate's probability and
    `nextedit.may_repeat` for this document), under that too or the change can no longer repeat the recent edits.
    Returns the answer with the prompt's `forced` last line before it, the stats, and per answer line the lowest
    token log-probability (0.0 for the forced line)."""
    answer, stats, lows, low = forced, GenerationStats(), [0.0] * forced.count("\n"), 0.0
    floor = math.log(min_confidence) if min_confidence > 0 else -math.inf
    lowest = min(floor, math.log(repeat[0]) if repeat[0] > 0 else -math.inf) if repeat else floor
    unsure = done = False  # unsure: an added token fell between the two floors, only a repeat can be offered now
    stream = engine.stream(request)
    try:
        async for event in stream:
            if isinstance(event, Finished):
                stats = event.stats
                break
            if isinstance(event, Delta) and not done:
                head = answer[answer.rfind("\n") + 1 :][:1]  # the current line's first character
                refused = False
                for k, piece in enumerate(event.text.split("\n")):
                    if k:
                        lows.append(low)
                        low, head = 0.0, piece[:1]
                    elif not head:
                        head = piece[:1]
                    if piece or k == 0:
                        low = min(low, event.logprob or 0.0)
                        refused = refused or (head == "+" and low < lowest)
                        unsure = unsure or (head == "+" and low < floor)
                answer += event.text
                if refused or (unsure and repeat is not None and not repeat[1](answer)) or nextedit.finished(answer):
                    done = True
                    await engine.abort(request.id)
    finally:
        await stream.aclose()
    lows.append(low)
    return answer, stats, lows
