"""The embedded vLLM engine (AsyncLLM) on a tiny random Qwen2 model, with the real engine on the CPU.

Proves: deltas stream and end in one `Finished`; a repeated prefix is served from the prefix
cache; cancelling the consumer aborts the vLLM request and frees the engine; with a small KV cache
an interactive request preempts background ones under priority scheduling (and does not under
first-come-first-served). Marked `vllm`: `pytest -m "not vllm"` skips them locally; CI runs them.
The engine's arguments, from its options and the CPU's flags, are checked below without vLLM.
"""

from __future__ import annotations

import asyncio
import contextlib
import math
import os
import time
import uuid

import pytest
import pytest_asyncio
from sparkls.engine.base import Delta, Event, Finished, GenerationRequest, Priority
from sparkls.engine.vllm import CPU_KV_CACHE_MB, VllmOptions, cpu_has_bf16, engine_args, special_tokens

from tests.conftest import require
from tests.engine_support import cancel_after, collect, until, vllm_test
from tests.servers import VLLM_TEST_ENV

BODY = "".join(f"def helper_{i}(x):\n    return x * {i}\n\n" for i in range(30))


def prompt(tag: str, tail: str = "") -> str:
    return f"<|fim_prefix|># {tag}\n{BODY}def main():\n    {tail}<|fim_suffix|>\n<|fim_middle|>"


def make_engine(tiny_model, **options):
    require("vllm", "the vllm engine")
    os.environ.update(VLLM_TEST_ENV)  # read by the engine-core process vLLM spawns
    from sparkls.engine.vllm import VllmEngine, VllmOptions

    return VllmEngine(VllmOptions(model=str(tiny_model), block_size=32, kv_cache_mb=256, **options))


@pytest_asyncio.fixture(scope="module", loop_scope="module")
async def engine(tiny_model):
    eng = make_engine(tiny_model)
    await eng.ready()
    yield eng
    await eng.close()


@pytest_asyncio.fixture(scope="module", loop_scope="module")
async def cycling(tiny_cycle_model):
    """An engine on the model whose text is the ASCII cycle `!"#$%...~!"...` (tests/tiny_model.py)."""
    eng = make_engine(tiny_cycle_model)
    await eng.ready()
    yield eng
    await eng.close()


CYCLE = "".join(chr(i) for i in range(33, 127))


@vllm_test
async def test_vllm_streams_deltas_and_ends_with_one_finished(engine):
    health = await engine.health()
    assert health.ok, health.detail
    assert "policy=priority" in health.detail and "block_size=32" in health.detail
    assert engine.model_metadata()["general.architecture"] == "qwen2"
    text, stats, events = await collect(engine, GenerationRequest(prompt("stream"), max_tokens=12))
    assert stats is not None and stats.decode_tokens > 0 and stats.prompt_tokens > 300
    assert events >= 3 and text  # several deltas, then the Finished


@vllm_test
async def test_special_token_stops_hold_no_text_back_so_the_first_token_streams_at_once(engine):
    from sparkls.completion.prompt import TEMPLATES

    stops = TEMPLATES["qwen"].stops  # special tokens of up to 14 characters
    texts, token_ids = engine._stops((*stops, "\n\n"))
    assert texts == ("\n\n",) and len(token_ids) == len(stops)  # a plain string stays a string
    # As text stops, vLLM would hold back the last 13 characters of the stream: with this model's one character
    # per token, 13 tokens would pass before the first delta. As token stops, each token streams when decoded.
    deltas = []
    async for ev in engine.stream(GenerationRequest(prompt("stops"), max_tokens=20, stop=stops)):
        if isinstance(ev, Delta):
            deltas.append(ev.text)
    assert len(deltas) >= 15 and len(deltas[0]) <= 2, deltas


@vllm_test
async def test_a_healed_prompt_starts_with_the_likeliest_token_that_spells_out_its_cut_last_token(tiny_model, engine):
    from transformers import AutoTokenizer

    # This model's logits are all equal: greedy picks the lowest token id allowed (id 0 when all are).
    text = prompt("heal") + "    return helper_1("
    tok = AutoTokenizer.from_pretrained(str(tiny_model))
    ids = tok.encode(text, add_special_tokens=False)
    cut = tok.decode(ids[-1:])
    two = tok.decode(ids[-2:])  # no token starts with the last two tokens' text: only the last one is backed off
    assert not any(tok.decode([i]).startswith(two) for i in range(len(tok)))
    first = next(i for i in range(len(tok)) if (p := tok.decode([i])) and (p.startswith(cut) or cut.startswith(p)))
    assert first != 0  # so the plain answer (token 0 again and again) and the healed one differ
    plain, plain_stats, _ = await collect(engine, GenerationRequest(text, max_tokens=6))
    healed, stats, _ = await collect(engine, GenerationRequest(text, max_tokens=6, heal=True))
    assert stats.prompt_tokens == plain_stats.prompt_tokens - 1 and stats.decode_tokens == 6
    written = tok.decode([first])
    assert written.startswith(cut)  # one token spells the cut out: what follows the cut is passed on
    assert healed.startswith(written[len(cut) :]) and healed != plain, (cut, written, healed, plain)


@vllm_test
async def test_log_probabilities_come_with_the_text_when_asked(engine, cycling):
    async def deltas(eng, logprobs: bool) -> list[Delta]:
        req = GenerationRequest(prompt(f"lp {uuid.uuid4().hex}"), max_tokens=6, logprobs=logprobs)
        return [ev async for ev in eng.stream(req) if isinstance(ev, Delta)]

    # The constant model's logits are all equal: each token has probability 1 / 2,048 (its vocabulary).
    unsure = [d.logprob for d in await deltas(engine, True)]
    assert None not in unsure and sum(unsure) == pytest.approx(6 * -math.log(2048), rel=1e-3), unsure
    # The cycle model is sure of each next character.
    sure = [d.logprob for d in await deltas(cycling, True)]
    assert None not in sure and sum(sure) > -1e-3, sure
    assert {d.logprob for d in await deltas(engine, False)} == {None}


@vllm_test
async def test_a_repeated_prefix_is_served_from_the_prefix_cache(engine):
    tag = uuid.uuid4().hex  # a prefix no earlier request had
    before = dict((await engine.health()).stats)
    _, cold, _ = await collect(engine, GenerationRequest(prompt(tag, "x"), max_tokens=4))
    _, warm, _ = await collect(engine, GenerationRequest(prompt(tag, "xy"), max_tokens=4))
    assert cold.reused_tokens == 0 and cold.reuse_known and warm.reuse_known  # vLLM said, with the first output
    # Whole 32-token blocks before the first difference (the cursor) come from the cache.
    assert warm.reused_tokens >= warm.prompt_tokens - 2 * 32, warm
    assert warm.reused_tokens % 32 == 0
    after = (await engine.health()).stats
    assert after["prefix_cache_hits"] - before.get("prefix_cache_hits", 0) >= warm.reused_tokens


@vllm_test
async def test_an_over_long_prompt_keeps_its_cursor_end(engine):
    long = "<|fim_prefix|>" + BODY * 12 + "def main():\n    <|fim_suffix|>\n<|fim_middle|>"
    _, stats, _ = await collect(engine, GenerationRequest(long, max_tokens=8))
    assert stats.decode_tokens == 8 and stats.prompt_tokens == 4096 - 8 - 1


@vllm_test
async def test_cancelling_the_consumer_aborts_the_vllm_request_and_frees_the_engine(engine):
    req = GenerationRequest(prompt("long"), max_tokens=3000, id=f"long-{uuid.uuid4().hex[:6]}")
    assert await cancel_after(engine, req, 5) >= 5
    # Aborted before the cancellation propagated: nothing is left running in the engine.
    assert engine._llm.get_num_unfinished_requests() == 0
    (stats,) = [st for rid, st in engine.completed if rid == req.id]
    assert stats.finish_reason == "abort" and stats.decode_tokens < 3000 and stats.reuse_known
    _, nxt, _ = await collect(engine, GenerationRequest(prompt("next"), max_tokens=4))
    assert nxt.decode_tokens == 4 and nxt.finish_reason == "length"
    assert (await engine.health()).stats["running"] == 0


@vllm_test
async def test_the_healing_vocabulary_is_built_during_the_start_with_every_tokens_text(tiny_model):
    """Built on the first request that heals, beside the requests' own tokenizing, it took over 30 s with the
    0.5B's 152k tokens on 2 cores, and the supervisor took the waiting request for a hung engine. A fresh engine:
    no request of this module's engine has built it."""
    fresh = make_engine(tiny_model)
    try:
        await fresh.ready()
        vocab = fresh._vocab
        assert vocab is not None  # ready, and nothing has asked for it: the start built it
        tokenizer = fresh._llm.get_tokenizer()
        special = {tokenizer.convert_tokens_to_ids(t) for t in special_tokens(tokenizer)}
        assert len(vocab.pieces) == len(tokenizer) and special
        for i in range(len(tokenizer)):
            assert vocab.pieces[i] == (b"" if i in special else tokenizer.decode([i]).encode()), i
    finally:
        await fresh.close()


@vllm_test
async def test_the_watchdog_sees_vllms_engine_steps_not_only_the_events_consumers_got(engine):
    """A request whose consumer has taken one event and reads no more still makes the engine step: progress."""
    from sparkls.engine.base import Watched

    assert isinstance(engine, Watched) and engine.alive()
    req = GenerationRequest(prompt("steps"), max_tokens=3000, id=f"steps-{uuid.uuid4().hex[:6]}")
    events = engine.stream(req)
    try:
        await anext(events)
        seen = engine.progress_at()
        await until(lambda: engine.progress_at() > seen)
    finally:
        await events.aclose()
    assert engine.alive()


@vllm_test
async def test_a_request_cancelled_while_vllm_adds_it_is_aborted_not_left_running(engine):
    """vLLM's `generate()` aborts a cancelled request only once `add_request` has returned; cancelled while the
    request is on its way to the engine core, it ran to its end with nobody reading it (under a typing replay
    such requests piled up until the engine stalled). The engine aborts it by its id."""
    llm = engine._llm
    real = llm.engine_core.add_request_async
    sent, hold = asyncio.Event(), asyncio.Event()

    async def add_then_hold(request):  # the engine core has the request; `add_request` has not returned
        await real(request)
        sent.set()
        await hold.wait()

    llm.engine_core.add_request_async = add_then_hold
    req = GenerationRequest(prompt("cancelled while added"), max_tokens=3000, id=f"adding-{uuid.uuid4().hex[:6]}")
    task = asyncio.ensure_future(collect(engine, req))
    try:
        await asyncio.wait_for(sent.wait(), 30)
    finally:
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await task
        llm.engine_core.add_request_async = real
    assert llm.get_num_unfinished_requests() == 0
    _, nxt, _ = await collect(engine, GenerationRequest(prompt("after"), max_tokens=4))
    assert nxt.decode_tokens == 4
    assert (await engine.health()).stats["running"] == 0


@vllm_test
async def test_ngram_speculation_drafts_from_the_prompt_and_keeps_the_output(tiny_cycle_model, cycling):
    # The cycle model writes `!"#$%...~` over and over; a prompt that holds that text lets prompt lookup draft
    # the tokens the model will write (where the tokenizer split the prompt's text as the model writes it).
    rewrite = GenerationRequest("<|fim_prefix|>x = '" + CYCLE * 3 + "'\n<|fim_suffix|><|fim_middle|>", max_tokens=120)
    plain, _, _ = await collect(cycling, rewrite)
    assert plain == (CYCLE * 2)[:120]  # the text varies, so equal texts below mean equal tokens
    spec = make_engine(tiny_cycle_model, speculation="ngram", speculative_tokens=4)
    try:
        await spec.ready()
        assert "speculation=ngram" in (await spec.health()).detail
        text, stats, _ = await collect(spec, rewrite)
        counters = (await spec.health()).stats
        assert text == plain and stats.decode_tokens == 120
        # Log-probabilities (the next-edit gate's) come through speculation too: the model is sure of each token.
        req = GenerationRequest(rewrite.prompt, max_tokens=40, logprobs=True)
        sure = [ev.logprob async for ev in spec.stream(req) if isinstance(ev, Delta)]
        assert None not in sure and sum(sure) > -1e-3, sure
        assert counters["spec_drafts"] > 0 and counters["spec_accepted_tokens"] > 0
    finally:
        await spec.close()


async def run_under_load(engine):
    """Six long background requests, then an interactive one; returns the finish order and stats."""
    order: list[str] = []
    stats = {}

    async def one(name, priority, max_tokens, delay):
        await asyncio.sleep(delay)
        short = f"<|fim_prefix|># {name}\ndef main():\n    <|fim_suffix|>\n<|fim_middle|>"
        req = GenerationRequest(short, max_tokens=max_tokens, priority=priority, id=name)
        _, st, _ = await collect(engine, req)
        stats[name] = st
        order.append(name)

    await asyncio.gather(
        *(one(f"bg{i}", Priority.BACKGROUND, 200, 0) for i in range(6)), one("ia", Priority.INTERACTIVE, 100, 0.05)
    )
    return order, stats


@vllm_test
@pytest.mark.parametrize("priority", [True, False], ids=["priority", "fcfs"])
async def test_with_a_small_kv_cache_interactive_requests_preempt_background_ones(tiny_model, priority):
    # 16 blocks of 32 tokens: six 200-token generations cannot all fit, so vLLM must preempt.
    # vLLM's own preemption: sparkls' pausing (which would keep background work out of vLLM) is off.
    small = make_engine(
        tiny_model,
        priority_scheduling=priority,
        max_model_len=256,
        pause_lower=False,
        extra_args={"num_gpu_blocks_override": 16},
    )
    try:
        await small.ready()
        order, stats = await run_under_load(small)
        background = sum(s.preemptions for name, s in stats.items() if name != "ia")
        assert (await small.health()).stats["preemptions"] > 0
        if priority:
            assert order[0] == "ia", order  # it overtook all six
            assert stats["ia"].preemptions == 0 and background > 0
        else:
            # First come, first served preempts the newest request: the interactive one.
            assert stats["ia"].preemptions > 0 or order[0] != "ia", (order, stats["ia"])
    finally:
        await small.close()


@vllm_test
async def test_background_work_leaves_a_sequence_slot_free_for_interactive_requests(tiny_model):
    # Two slots: vLLM's priority never preempts a running request for a slot, so without sparkls holding
    # background work to all but one slot the keystroke would wait for a 200-token background request.
    two = make_engine(tiny_model, max_num_seqs=2, pause_lower=False)
    try:
        await two.ready()
        order, stats = await run_under_load(two)
        assert order[0] == "ia", order  # it ran beside one background request and overtook all six
        assert stats["ia"].preemptions == 0
        assert stats["ia"].queue_ms < min(stats[f"bg{i}"].queue_ms for i in range(1, 6))
    finally:
        await two.close()


@vllm_test
async def test_a_more_urgent_request_pauses_background_generation_which_resumes_with_the_same_text(cycling):
    # While the keystroke's request is in flight, the background generations are out of vLLM (no delta
    # arrives for them); afterwards each resumes from its tokens, with prefix-cache hits, and ends with
    # the text it gets when nothing interrupts it.
    def bg(i: int) -> GenerationRequest:  # each starts at another place of the model's cycle
        return GenerationRequest(
            prompt(f"pause {i} {uuid.uuid4().hex}") + CYCLE[20 * i],
            max_tokens=150,
            priority=Priority.BACKGROUND,
            id=f"bg-{uuid.uuid4().hex}",
        )

    requests = [bg(i) for i in range(3)]
    alone = [(await collect(cycling, GenerationRequest(r.prompt, max_tokens=150)))[0] for r in requests]
    assert alone == [(CYCLE * 3)[20 * i + 1 : 20 * i + 151] for i in range(3)]
    hits_before = cycling.counters["prefix_cache_hits"]
    pauses_before = cycling.counters["pauses"]
    arrivals: dict[str, list[float]] = {r.id: [] for r in requests}
    texts = dict.fromkeys(arrivals, "")
    finals = {}

    async def background(req: GenerationRequest) -> None:
        async for ev in cycling.stream(req):
            if isinstance(ev, Delta):
                arrivals[req.id].append(time.perf_counter())
                texts[req.id] += ev.text
            else:
                finals[req.id] = ev.stats

    tasks = [asyncio.create_task(background(r)) for r in requests]
    await until(lambda: min(len(a) for a in arrivals.values()) >= 10)
    t_start = time.perf_counter()
    _, ia, _ = await collect(cycling, GenerationRequest(prompt("keystroke"), max_tokens=40))
    t_end = time.perf_counter()
    await asyncio.gather(*tasks)

    assert ia.decode_tokens == 40 and ia.preemptions == 0
    for r, expected in zip(requests, alone, strict=True):
        assert texts[r.id] == expected  # resumed from its tokens: nothing lost, nothing repeated
        assert finals[r.id].preemptions >= 1 and finals[r.id].decode_tokens == 150
        assert finals[r.id].finish_reason == "length"
        during = [t for t in arrivals[r.id] if t_start + 0.05 < t < t_end]
        assert not during, f"{len(during)} background deltas while the keystroke ran"
    assert cycling.counters["pauses"] - pauses_before >= 3
    assert cycling.counters["prefix_cache_hits"] > hits_before  # the resumed prompts came from the cache


@vllm_test
async def test_an_engine_closed_while_starting_ends_its_start_cleanly_and_removes_its_scratch(tiny_model):
    # The supervisor closes an engine that hangs or a server that shuts down while a start runs. vLLM's engine
    # core reads the logging config from the scratch folder as it starts: removed at close, its start failed.
    from sparkls.engine.base import EngineError

    eng = make_engine(tiny_model)
    await until(lambda: eng._scratch is not None)  # the start has written vLLM's logging config
    scratch = eng._scratch
    await eng.close()
    await asyncio.wrap_future(eng._loaded)
    assert isinstance(eng._load_error, EngineError) and "closed while starting" in str(eng._load_error)
    assert not await asyncio.to_thread(os.path.exists, scratch)


@vllm_test
async def test_an_aborted_paused_request_ends_at_once(engine):
    req = GenerationRequest(
        prompt(f"abort paused {uuid.uuid4().hex}"),
        max_tokens=400,
        priority=Priority.BACKGROUND,
        id=f"bg-{uuid.uuid4().hex}",
    )
    got: list[Event] = []
    pauses = engine.counters["pauses"]

    async def background() -> None:
        async for ev in engine.stream(req):
            got.append(ev)

    task = asyncio.create_task(background())
    await until(lambda: len(got) >= 5)

    async def keystroke() -> None:
        await collect(engine, GenerationRequest(prompt("keystroke 2"), max_tokens=200))

    ks = asyncio.create_task(keystroke())
    await until(lambda: engine.counters["pauses"] > pauses and not engine._running[req.id].live)
    await engine.abort(req.id)  # it is waiting for its turn, not in vLLM
    await asyncio.wait_for(task, 5)
    assert not ks.done()  # it ended while the keystroke still ran
    assert isinstance(got[-1], Finished) and got[-1].stats.finish_reason == "abort"
    await ks


# ---- without vLLM: the engine's arguments -------------------------------------------------------------------


def test_vllm_engine_args_follow_the_options():
    args = engine_args(
        VllmOptions(
            model="m",
            block_size=32,
            speculation="ngram",
            speculative_tokens=3,
            priority_scheduling=False,
            extra_args={"seed": 1},
        ),
        on_cpu=True,
    )
    assert args["enable_prefix_caching"] and args["scheduling_policy"] == "fcfs" and args["block_size"] == 32
    assert args["kv_cache_memory_bytes"] == CPU_KV_CACHE_MB * 2**20 and args["seed"] == 1
    assert args["speculative_config"]["method"] == "ngram" and args["speculative_config"]["num_speculative_tokens"] == 3
    gpu = engine_args(VllmOptions(model="m"))
    assert "kv_cache_memory_bytes" not in gpu and "speculative_config" not in gpu
    assert "block_size" not in gpu and engine_args(VllmOptions(model="m"), on_cpu=True)["block_size"] == 32
    assert engine_args(VllmOptions(model="m", block_size=128), on_cpu=True)["block_size"] == 128
    assert gpu["scheduling_policy"] == "priority"
    assert "dtype" not in gpu and "dtype" not in args  # the checkpoint's dtype (bf16) where bf16 is native
    assert engine_args(VllmOptions(model="m"), on_cpu=True, cpu_bf16=False)["dtype"] == "float32"
    assert engine_args(VllmOptions(model="m", dtype="bfloat16"), on_cpu=True, cpu_bf16=False)["dtype"] == "bfloat16"


def test_native_bf16_is_read_from_the_cpu_flags():
    assert cpu_has_bf16("processor\t: 0\nflags\t\t: fpu sse avx2 avx512f avx512_bf16 amx_tile\n")
    assert cpu_has_bf16("flags\t\t: avx2 amx_bf16 amx_tile\n")
    assert not cpu_has_bf16("flags\t\t: fpu sse avx2 fma f16c\n")
    assert not cpu_has_bf16("")
