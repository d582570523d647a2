"""The completion pipeline with a fake engine: asking again after an immediate end, healing, warm-ups, and the
snippets of a first window."""

from sparkls.completion import pipeline, prompt
from sparkls.engine.base import Priority
from sparkls.engine.fake import FakeEngine
from sparkls.settings import Settings

from tests.completion_support import LONG_DOC
from tests.conftest import doc_at


async def test_an_immediate_end_after_a_comma_asks_again_for_the_next_line():
    doc, cursor = doc_at("d = {\n    'one': 1,\n    'two': 2,<|>\n    'four': 4,\n}\n")
    # The model ends at once after `2,`; asked again with the newline in the prompt, it writes the next item.
    engine = FakeEngine(lambda p: "    'three': 3,\n    'four'" if p.endswith("'two': 2,\n") else "")
    got = await pipeline.suggest(doc, cursor, Settings(), engine, prompt.TEMPLATES["qwen"])
    assert got.text == "\n    'three': 3,"
    assert len(engine.started) == 2


class _Recording(FakeEngine):
    """The fake engine, keeping each request it was given."""

    def __init__(self, script):
        super().__init__(script)
        self.requests = []

    def stream(self, request):
        self.requests.append(request)
        return super().stream(request)


async def test_a_cursor_inside_a_line_asks_the_engine_to_heal_and_one_at_a_line_start_does_not():
    engine = _Recording("parse(name)\n")
    doc, cursor = doc_at("def f(name):\n    style = Style.<|>\n    return style\n")
    got = await pipeline.suggest(doc, cursor, Settings(), engine, prompt.TEMPLATES["qwen"])
    assert got.text == "parse(name)"
    assert [r.heal for r in engine.requests] == [True]
    assert engine.requests[0].prompt.endswith("<|fim_middle|>def f(name):\n    style = Style.")
    engine.requests.clear()
    doc, cursor = doc_at("def f(name):\n    <|>\n    return style\n")  # the indentation is healed instead
    await pipeline.suggest(doc, cursor, Settings(), engine, prompt.TEMPLATES["qwen"])
    assert engine.requests and not any(r.heal for r in engine.requests)


async def test_a_warm_up_sends_the_prompt_the_next_keystroke_only_appends_to():
    engine = _Recording("x = 1\n")
    doc, cursor = doc_at("def f(a):\n    total = a * 2\n    <|>\n    return total\n")
    prepared = await pipeline.prepare(doc, cursor, Settings())
    stats = await pipeline.warm(prepared, engine, prompt.TEMPLATES["qwen"])
    (warm,) = engine.requests
    assert warm.warm and warm.priority == Priority.BACKGROUND and stats.finish_reason == "warm"
    typed = doc.edit(cursor, cursor, "r", doc.version + 1)  # the user types at the place it warmed
    await pipeline.suggest(typed, cursor + 1, Settings(), engine, prompt.TEMPLATES["qwen"], frame=prepared.ctx.frame)
    keystroke = engine.requests[-1]
    assert not keystroke.warm
    assert keystroke.prompt.startswith(warm.prompt)  # stands on the warm-up's frame: its KV is all reused
    assert keystroke.prompt[len(warm.prompt) :] == "    r"


async def test_no_warm_up_is_sent_for_a_line_holding_a_credential():
    engine = _Recording("")
    doc, cursor = doc_at('def f():\n    key = "AKIAIOSFODNN7EXAMPLE"<|>\n')
    prepared = await pipeline.prepare(doc, cursor, Settings())
    assert prepared.ctx is None and await pipeline.warm(prepared, engine, prompt.TEMPLATES["qwen"]) is None
    assert engine.requests == []


async def test_a_first_window_in_a_new_document_has_no_snippets_later_frames_there_have_them():
    from sparkls.completion import pipeline
    from sparkls.settings import Settings

    asked: list[int] = []

    def snippets(doc, cursor, budget_chars):
        asked.append(cursor)
        return [("lib/other.py", "def other(): ...")]

    place = pipeline.Place("test.py", snippets=snippets)
    settings = Settings(first_window_tokens=24)
    first = pipeline.first_window_of(settings)
    doc, cursor = doc_at(LONG_DOC)
    ctx = (await pipeline.prepare(doc, cursor, settings, place=place, budget=first)).ctx
    assert ctx is not None
    assert ctx.frame is not None and ctx.frame.snippets == () and asked == []  # the first answer waits for none
    full = (
        await pipeline.prepare(doc, cursor, settings, frame=ctx.frame, place=place, budget=pipeline.budget_of(settings))
    ).ctx
    assert full is not None
    assert full.frame is not None and full.frame.snippets == (("lib/other.py", "def other(): ..."),)
    up = doc.text.index("        self.column_3")
    moved = (await pipeline.prepare(doc, up, settings, frame=ctx.frame, place=place, budget=first)).ctx
    assert moved is not None
    assert moved.frame is not None and moved.frame.snippets == full.frame.snippets  # the head stays the file's
