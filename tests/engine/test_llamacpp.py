"""The embedded llama.cpp engine with the real default model (Qwen2.5-Coder-0.5B Q4_K_M)."""

from __future__ import annotations

import asyncio

import pytest
from sparkls.engine.base import Delta, GenerationRequest, Priority

from tests.conftest import require
from tests.engine_support import cancel_after, collect, until

pytestmark = pytest.mark.model

HEADER = "".join(f"def helper_{i}(x):\n    return x * {i} + {i * i}\n\n\n" for i in range(12))
PREFIX = "<|fim_prefix|>" + HEADER + 'def fibonacci(n):\n    """Return the n-th Fibonacci number."""\n'
PROMPT = PREFIX + "    <|fim_suffix|>\n\nprint(fibonacci(10))\n<|fim_middle|>"


@pytest.fixture(scope="module")
def engine():
    require("llama_cpp", "the embedded engine")
    from sparkls.engine.llamacpp import LlamaCppEngine, LlamaCppOptions

    eng = LlamaCppEngine(LlamaCppOptions(threads=1))
    yield eng
    asyncio.run(eng.close())


async def test_the_real_model_streams_a_sensible_middle(engine):
    await engine.ready()
    assert (await engine.health()).ok
    text, stats, _ = await collect(engine, GenerationRequest(PROMPT, max_tokens=40))
    assert stats.decode_tokens > 0 and stats.prompt_tokens > 20
    assert "fibonacci" in text or "return" in text or "if" in text, text


HEAL_PROMPT = (
    "<|fim_prefix|>class Parser:\n    @staticmethod\n    def parse(text):\n        return text.split()\n\n\n"
    "def words(text):\n<|fim_suffix|>\n\n\nprint(words('a b'))\n<|fim_middle|>    return Parser."
)


async def test_a_prompt_cut_after_a_dot_is_healed_the_member_follows_without_the_dot(engine):
    plain, plain_stats, _ = await collect(engine, GenerationRequest(HEAL_PROMPT, max_tokens=8))
    healed, stats, _ = await collect(engine, GenerationRequest(HEAL_PROMPT, max_tokens=8, heal=True))
    # Unhealed, this model writes `Parser. parse(text)`. Healed, the prompt's last token (`.`) is left out,
    # written again by the model as part of `.parse`, and not passed on.
    assert stats.prompt_tokens == plain_stats.prompt_tokens - 1
    assert healed.startswith("parse(text)"), (healed, plain)


async def test_a_prompt_cut_inside_a_word_is_healed_back_to_the_words_start(engine):
    word = (
        "<|fim_prefix|>import math\n\n\ndef circumference(r):\n<|fim_suffix|>\n\n\nprint(circumference(2))\n"
        "<|fim_middle|>    retur"
    )
    healed, _, _ = await collect(engine, GenerationRequest(word, max_tokens=8, heal=True))
    assert healed.startswith("n "), healed  # `return ...`, not `retur` continued as a word of its own


async def test_asked_for_log_probabilities_each_delta_carries_its_tokens_share(engine):
    async def deltas(request: GenerationRequest) -> list[Delta]:
        return [ev async for ev in engine.stream(request) if isinstance(ev, Delta)]

    plain = await deltas(GenerationRequest(PROMPT, max_tokens=12))
    scored = await deltas(GenerationRequest(PROMPT, max_tokens=12, logprobs=True))
    assert "".join(d.text for d in scored) == "".join(d.text for d in plain)  # the same greedy tokens
    assert all(d.logprob is None for d in plain)
    lps = [d.logprob for d in scored]
    assert all(lp is not None and lp <= 1e-6 for lp in lps), lps
    assert any(lp is not None and lp < -1e-4 for lp in lps), lps  # some token was not certain


async def test_a_repeated_prompt_prefix_reuses_the_kv_cache(engine):
    await collect(engine, GenerationRequest(PROMPT, max_tokens=4))
    # The same file, one more character typed at the cursor: only the tail is evaluated again.
    typed = PROMPT.replace("    <|fim_suffix|>", "    i<|fim_suffix|>")
    _, stats, _ = await collect(engine, GenerationRequest(typed, max_tokens=4))
    assert stats.prompt_tokens > 200
    assert stats.reused_tokens >= stats.prompt_tokens - 16, stats  # the cursor's token and the suffix


async def test_aborting_stops_the_engine_within_a_token_and_frees_it(engine):
    long_prompt = "<|fim_prefix|># a long list of numbers\nnumbers = [\n    1,\n<|fim_suffix|><|fim_middle|>"
    await cancel_after(engine, GenerationRequest(long_prompt, max_tokens=400, id="long-1"), 3)
    # The engine records the aborted request once its worker has stopped.
    for _ in range(200):
        done = [st for rid, st in engine.completed if rid == "long-1"]
        if done:
            break
        await asyncio.sleep(0.02)
    (stats,) = done
    assert stats.finish_reason == "abort"
    assert stats.decode_tokens < 20  # of 400 allowed: it stopped right after the cancel
    # The next request is served (the worker is free again).
    _, nxt, _ = await collect(engine, GenerationRequest(PROMPT, max_tokens=3))
    assert nxt.finish_reason in ("length", "stop")


async def test_a_stream_whose_event_loop_closed_is_stopped_and_the_worker_serves_on(engine):
    """An event loop closed under a suspended stream (no `aclose`, as a program that ends mid-request) leaves
    nobody to hand the tokens to: the worker stops that request, and serves the next one."""
    long_prompt = "<|fim_prefix|># a long list of numbers\nnumbers = [\n    1,\n<|fim_suffix|><|fim_middle|>"

    def first_event_then_close_the_loop() -> None:
        loop = asyncio.new_event_loop()
        stream = engine.stream(GenerationRequest(long_prompt, max_tokens=400, id="orphan-1"))
        loop.run_until_complete(anext(stream))  # the generation runs; its stream stays suspended
        loop.close()  # and its loop never runs again

    await asyncio.to_thread(first_event_then_close_the_loop)
    await until(lambda: any(rid == "orphan-1" for rid, _ in engine.completed) or not engine.alive())
    assert engine.alive()
    (stats,) = [st for rid, st in engine.completed if rid == "orphan-1"]
    assert stats.finish_reason == "abort" and stats.decode_tokens < 400
    assert "orphan-1" not in engine._cancels  # nothing of the orphaned stream is kept
    _, nxt, _ = await collect(engine, GenerationRequest(PROMPT, max_tokens=3))
    assert nxt.finish_reason in ("length", "stop")


async def test_an_interactive_request_pauses_background_work_which_then_resumes_where_it_stopped(engine):
    background = PROMPT.replace("Fibonacci number", "Fibonacci number, iteratively")
    alone, _, _ = await collect(engine, GenerationRequest(background, max_tokens=48, priority=Priority.BACKGROUND))
    await collect(engine, GenerationRequest("<|fim_prefix|>x = 1<|fim_suffix|><|fim_middle|>", max_tokens=2))
    order: list[str] = []
    got = 0
    bg_text = ""

    async def run_background():
        nonlocal got, bg_text
        async for ev in engine.stream(
            GenerationRequest(background, max_tokens=48, priority=Priority.BACKGROUND, id="bg-1")
        ):
            if isinstance(ev, Delta):
                got += 1
                bg_text += ev.text
        order.append("background")

    bg = asyncio.create_task(run_background())
    for _ in range(3000):
        if got >= 4:
            break
        await asyncio.sleep(0.01)
    _, interactive, _ = await collect(
        engine, GenerationRequest(PROMPT, max_tokens=8, priority=Priority.INTERACTIVE, id="ia-1")
    )
    order.append("interactive")
    await bg
    assert order == ["interactive", "background"]
    (bg_stats,) = [st for rid, st in engine.completed if rid == "bg-1"]
    assert bg_stats.preemptions >= 1
    assert interactive.preemptions == 0 and interactive.decode_tokens > 0
    assert bg_text == alone  # paused and resumed from its own tokens: the same text as uninterrupted
    assert (await engine.health()).stats["preemptions"] >= 1


async def test_background_and_code_action_work_keep_the_interactive_prompts_kv_cache(engine):
    await collect(engine, GenerationRequest(PROMPT, max_tokens=2, priority=Priority.INTERACTIVE))
    other = "<|im_start|>system\nYou rewrite code.<|im_end|>\n" + HEADER[:400]
    for priority in (Priority.BACKGROUND, Priority.CODE_ACTION):  # other prompts, in their own KV slots
        _, st, _ = await collect(engine, GenerationRequest(other, max_tokens=2, priority=priority))
        assert st.reused_tokens < 20, st  # nothing shared with the FIM prompt
    typed = PROMPT.replace("    <|fim_suffix|>", "    i<|fim_suffix|>")
    _, st, _ = await collect(engine, GenerationRequest(typed, max_tokens=2, priority=Priority.INTERACTIVE))
    assert st.reused_tokens >= st.prompt_tokens - 16, st  # the next keystroke is still warm
    _, st, _ = await collect(engine, GenerationRequest(other, max_tokens=2, priority=Priority.BACKGROUND))
    assert st.reused_tokens >= st.prompt_tokens - 1, st  # and so is the background slot


OTHER_FILE = (
    "<|fim_prefix|>"
    + "".join(f"class Thing{i}:\n    size = {i}\n\n\n" for i in range(20))
    + "def area(w, h):\n<|fim_suffix|>\n<|fim_middle|>"
)


async def test_a_prompt_for_another_file_saves_the_kv_state_and_going_back_loads_it_with_the_same_answer(engine):
    first, _, _ = await collect(engine, GenerationRequest(PROMPT, max_tokens=12))
    _, other, _ = await collect(engine, GenerationRequest(OTHER_FILE, max_tokens=4))
    assert other.reused_tokens < 20  # nothing shared: the sequence now holds the other file (its state was saved)
    loads = (await engine.health()).stats["kv_states_restored"]
    again, st, _ = await collect(engine, GenerationRequest(PROMPT, max_tokens=12))
    assert (await engine.health()).stats["kv_states_restored"] == loads + 1
    assert st.reused_tokens >= st.prompt_tokens - 1, st  # loaded, not prefilled
    assert again == first  # the loaded KV is the same KV


async def test_a_warm_up_fills_the_interactive_sequence_without_output_and_the_keystroke_reuses_it(engine):
    place = PROMPT.replace("fibonacci", "lucas")
    text, warm, _ = await collect(
        engine, GenerationRequest(place, max_tokens=1, priority=Priority.BACKGROUND, warm=True)
    )
    assert (text, warm.finish_reason, warm.decode_tokens) == ("", "warm", 0)
    typed = place.replace("<|fim_middle|>", "<|fim_middle|>    ")
    _, st, _ = await collect(engine, GenerationRequest(typed, max_tokens=2, priority=Priority.INTERACTIVE))
    assert st.reused_tokens >= warm.prompt_tokens - 1, (warm, st)


async def test_a_request_that_arrives_drops_a_running_warm_up(engine):
    long_place = "<|fim_prefix|>" + HEADER * 8 + "def tail(n):\n<|fim_suffix|>\n<|fim_middle|>"
    warm_task = asyncio.create_task(
        collect(
            engine, GenerationRequest(long_place, max_tokens=1, priority=Priority.BACKGROUND, warm=True, id="warm-long")
        )
    )
    for _ in range(3000):  # until the worker has taken it (about 2,000 tokens to prefill: seconds)
        if "warm-long" in engine._cancels and engine._sched.waiting() == 0:  # submitted, and taken
            break
        await asyncio.sleep(0.01)
    _, st, _ = await collect(engine, GenerationRequest(PROMPT, max_tokens=2, priority=Priority.INTERACTIVE))
    _, warm, _ = await warm_task
    assert warm.finish_reason == "abort", warm  # dropped at its next chunk, not paused to resume later
    assert st.decode_tokens > 0


async def test_prompt_lookup_speculation_gives_the_same_rewrite_as_plain_decoding():
    require("llama_cpp", "the embedded engine")
    from sparkls.edit import rewrite
    from sparkls.engine.llamacpp import LlamaCppEngine, LlamaCppOptions
    from sparkls.text.document import Document

    doc = Document.open("file:///w/h.py", "python", 1, HEADER)
    p = rewrite.render(doc, 0, len(HEADER), "Rename the parameter `x` to `value` in every function.")
    req = GenerationRequest(p.text, max_tokens=160, stop=rewrite.STOPS)
    texts, stats = [], []
    for speculation in ("off", "ngram"):
        eng = LlamaCppEngine(LlamaCppOptions(threads=1, speculation=speculation, speculative_tokens=16))
        try:
            await eng.ready()
            text, st, _ = await collect(eng, req)
        finally:
            await eng.close()
        texts.append(text)
        stats.append(st)
    assert len(set(texts)) == 1 and texts[0].strip()  # greedy either way: the same tokens
    assert stats[0].draft_tokens == 0
    assert stats[1].accepted_tokens > stats[1].decode_tokens // 2  # most tokens came from accepted drafts


async def test_with_cache_reuse_a_prompt_whose_window_slid_moves_the_cached_kv_instead_of_computing_it():
    require("llama_cpp", "the embedded engine")
    from sparkls.engine.llamacpp import LlamaCppEngine, LlamaCppOptions

    helpers = [f"def helper_{i}(x):\n    return x * {i} + {i * i}\n\n\n" for i in range(12)]
    tail = PROMPT.removeprefix("<|fim_prefix|>" + HEADER)
    eng = LlamaCppEngine(LlamaCppOptions(threads=1, cache_reuse=32))
    try:
        _, before, _ = await collect(eng, GenerationRequest("<|fim_prefix|>" + "".join(helpers) + tail, max_tokens=2))
        slid = "<|fim_prefix|>" + "".join(helpers[4:]) + tail  # the window's start moved down four definitions
        text, st, _ = await collect(eng, GenerationRequest(slid, max_tokens=12))
        assert before.reused_tokens == 0
        assert st.reused_tokens >= st.prompt_tokens - 4, st  # all but the dropped helpers: moved, not computed
        assert "fib" in text or "return" in text or "if" in text, text  # the moved KV still reads as the code
    finally:
        await eng.close()


async def test_interactive_requests_decode_on_every_core_and_the_other_classes_leave_one_free(engine):
    import os

    import llama_cpp
    from sparkls.engine.llamacpp import LlamaCppEngine, LlamaCppOptions

    cores = os.cpu_count() or 2
    default = LlamaCppEngine(LlamaCppOptions())  # threads 0: chosen per request class
    try:
        await default.ready()
        assert f"threads={cores}/{max(1, cores - 1)} " in (await default.health()).detail or cores == 1
        for priority, want in (
            (Priority.INTERACTIVE, cores),
            (Priority.BACKGROUND, max(1, cores - 1)),
            (Priority.CODE_ACTION, max(1, cores - 1)),
            (Priority.INTERACTIVE, cores),
        ):
            await collect(default, GenerationRequest(PROMPT, max_tokens=2, priority=priority))
            assert llama_cpp.llama_n_threads(default._ctx.ctx) == want, priority
            assert llama_cpp.llama_n_threads_batch(default._ctx.ctx) == cores  # prefill: every core, any class
    finally:
        await default.close()
    await collect(engine, GenerationRequest(PROMPT, max_tokens=2, priority=Priority.INTERACTIVE))
    assert llama_cpp.llama_n_threads(engine._ctx.ctx) == 1  # an explicit `threads` holds for every class
