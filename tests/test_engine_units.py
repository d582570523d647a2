"""Pure parts of the engine layer: scheduler order, metrics summary, SSE and Prometheus parsing,
vLLM engine arguments, settings of the new engines (no engine runs here)."""

from __future__ import annotations

import threading

from sparkls.engine.base import Finished, GenerationRequest, GenerationStats, Priority
from sparkls.engine.fake import FakeEngine
from sparkls.engine.kvstates import KvStates, chunk_moves
from sparkls.engine.metrics import Recorder, percentile, summarize, summary_line
from sparkls.engine.openai import OpenAIOptions, parse_prometheus, parse_sse
from sparkls.engine.scheduler import PriorityScheduler
from sparkls.engine.stops import StopSeam, stop_prefix_len, stop_start
from sparkls.engine.vllm import (
    CPU_KV_CACHE_MB,
    VllmOptions,
    cpu_has_bf16,
    engine_args,
)
from sparkls.settings import Settings, resolve


def test_the_scheduler_takes_the_most_urgent_first_and_fifo_within_a_class():
    s: PriorityScheduler[str] = PriorityScheduler()
    for name, prio in [("bg1", 2), ("ia1", 0), ("ca", 1), ("bg2", 2), ("ia2", 0)]:
        s.submit(prio, name)
    assert [s.take()[2] for _ in range(5)] == ["ia1", "ia2", "ca", "bg1", "bg2"]


def test_only_a_strictly_more_urgent_waiting_job_makes_a_running_one_yield():
    s: PriorityScheduler[str] = PriorityScheduler()
    assert not s.should_yield(2)
    s.submit(2, "bg")
    assert not s.should_yield(2)  # equal priority never preempts
    s.submit(0, "ia")
    assert s.should_yield(2) and s.should_yield(1) and not s.should_yield(0)


def test_a_paused_job_keeps_its_place_ahead_of_later_jobs_of_its_class():
    s: PriorityScheduler[str] = PriorityScheduler()
    first = s.submit(2, "bg-early")
    _, arrival, job = s.take()
    s.submit(2, "bg-late")
    s.submit(2, job, arrival)  # paused and put back
    assert arrival == first and [s.take()[2] for _ in range(2)] == ["bg-early", "bg-late"]


def test_closing_the_scheduler_releases_a_waiting_worker():
    s: PriorityScheduler[str] = PriorityScheduler()
    got = []
    t = threading.Thread(target=lambda: got.append(s.take()))
    t.start()
    s.close()
    t.join(5)
    assert got == [None]


def test_metrics_are_summarized_per_request_class():
    done = [("a", GenerationStats(prompt_tokens=100, reused_tokens=90, ttft_ms=10, decode_tokens=10, decode_ms=100)),
            ("b", GenerationStats(prompt_tokens=100, reused_tokens=70, ttft_ms=30, decode_tokens=20, decode_ms=100)),
            ("c", GenerationStats(prompt_tokens=50, finish_reason="abort", priority=Priority.BACKGROUND,
                                  preemptions=3))]
    s = summarize(done)
    assert s["interactive"]["requests"] == 2 and s["interactive"]["cache_hit_rate"] == 0.8
    assert s["interactive"]["ttft_ms_p50"] == 10 and s["interactive"]["decode_tps_p50"] == 100
    assert s["background"] == s["background"] | {"requests": 1, "aborted": 1, "preemptions": 3}
    assert "background n=1 aborted=1" in summary_line(s)
    assert percentile([], 50) == 0.0 and percentile([3, 1, 2], 90) == 3


def test_the_recorder_keeps_the_stats_of_the_latest_requests_and_hands_them_back():
    rec = Recorder(size=2)
    stats = [GenerationStats(decode_tokens=i) for i in range(3)]
    assert rec.record("a", stats[0]) is stats[0]
    rec.record("b", stats[1])
    rec.record("c", stats[2])
    assert list(rec.completed) == [("b", stats[1]), ("c", stats[2])]


async def test_an_engines_completed_requests_are_the_ones_its_recorder_kept():
    engine = FakeEngine("x = 1\n")
    events = [ev async for ev in engine.stream(GenerationRequest("p", id="r-1"))]
    assert isinstance(events[-1], Finished)
    assert engine.completed is engine.recorder.completed
    assert list(engine.completed) == [("r-1", events[-1].stats)]


def test_sse_payloads_stop_at_done():
    lines = [": keep-alive", 'data: {"choices": [{"text": "a"}]}', "", 'data: {"choices": [{"text": "b"}]}',
             "data: [DONE]", 'data: {"never": 1}']
    assert [p["choices"][0]["text"] for p in parse_sse(lines)] == ["a", "b"]


def test_prometheus_counters_are_summed_over_label_sets():
    text = ('# HELP x\nvllm:prefix_cache_hits_total{engine="0",model_name="m"} 96.0\n'
            'vllm:prefix_cache_hits_total{engine="1",model_name="m"} 4.0\nvllm:num_requests_running{e="0"} 2.0\n'
            "other 7\n")
    assert parse_prometheus(text) == {"prefix_cache_hits": 100.0, "running": 2.0}


def test_vllm_engine_args_follow_the_options():
    args = engine_args(VllmOptions(model="m", block_size=32, speculation="ngram", speculative_tokens=3,
                                   priority_scheduling=False, extra_args={"seed": 1}), on_cpu=True)
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


def test_the_api_key_is_not_shown_in_settings_or_their_error_messages():
    s, problems = resolve({"engine": "openai", "openaiApiKey": "sk-secret-1"})
    assert s.openai_api_key == "sk-secret-1" and problems == []
    assert "sk-secret-1" not in repr(s) and "sk-secret-1" not in repr(OpenAIOptions(api_key="sk-secret-1"))
    _, problems = resolve({"openaiApiKey": ["sk-secret-2"]})
    assert problems and "sk-secret-2" not in problems[0] and "(hidden)" in problems[0]
    assert Settings().priority_scheduling is True


async def test_shutting_the_session_down_twice_closes_the_engine_once():
    from sparkls.completion.service import CompletionService
    from sparkls.engine.fake import FakeEngine
    from sparkls.session import Session

    closes = []

    class Counting(FakeEngine):
        async def close(self) -> None:
            closes.append(1)

    session = Session(engine=Counting())
    completions = CompletionService(session)
    await session.shutdown()  # the client's `shutdown` request
    await session.shutdown()  # then the transport closing
    assert closes == [1]
    assert (await completions.metrics()).engine_name == "fake"


def test_longest_match_locks_onto_the_longest_earlier_occurrence():
    from sparkls.engine.lookup import longest_match

    # "2 3" occurs twice earlier; only the first is preceded by 1 like the tail "1 2 3"
    toks = [1, 2, 3, 4, 5, 9, 2, 3, 7, 1, 2, 3]
    assert longest_match(toks) == (3, 3)
    assert longest_match([7, 1, 2, 7, 1]) == (2, 2)
    assert longest_match([1, 2, 3]) == (-1, 0)  # the last token never occurred before
    assert longest_match([5]) == (-1, 0)


def test_drafter_proposes_the_continuation_and_adapts_its_length():
    from sparkls.engine.lookup import LookupDrafter

    source = list(range(100, 200))
    tokens = [*source, 100, 101]  # copying the source from its start
    d = LookupDrafter(k_max=32, k=8)
    assert d.propose(tokens, room=1000) == source[2:10]
    assert d.propose(tokens, room=3) == source[2:5]  # never past the context
    d.feedback(8, 8)
    assert d.k == 16  # all accepted: longer drafts
    d.feedback(16, 16)
    d.feedback(32, 32)
    assert d.k == 32  # capped at k_max
    d.feedback(32, 20)
    assert d.k == 32 and d.misses == 0  # most accepted: keep going
    d.feedback(32, 1)
    assert d.k == d.k_min and d.misses == 1  # mostly rejected: shortest drafts, and demand a longer match
    assert d.needed_match() == 4
    assert d.propose([*source, 7, 100, 101], room=1000) == []  # a 2-token match no longer drafts
    assert d.propose([*source, 7, 100, 101, 102, 103], room=1000) == source[4 : 4 + d.k_min]
    d.feedback(6, 2)
    assert d.k == d.k_min and d.misses == 2 and d.needed_match() == 8  # back off further
    d.feedback(6, 6)
    assert d.misses == 0 and d.needed_match() == 2

def test_a_paused_stream_keeps_back_what_may_begin_a_stop_string():
    stops = ("\n\n", "<|endoftext|>")
    assert stop_prefix_len("x = 1\n", stops) == 1
    assert stop_prefix_len("x = 1<|end", stops) == 5
    assert stop_prefix_len("x = 1", stops) == 0
    assert stop_prefix_len("x = 1\n", ()) == 0
    # the kept-back end and the resumed text together complete the stop: cut where it begins
    assert stop_start("\n" + "\nprint(x)", stops) == 0
    assert stop_start("<|end" + "oftext|>", stops) == 0
    assert stop_start("y = 2\n\n<|endoftext|>", stops) == 5
    assert stop_start("y = 2", stops) is None


def test_a_stop_string_across_a_pause_is_found_even_when_its_parts_arrive_apart():
    seam = StopSeam(("\n\n",))
    assert seam.feed("x = 1", seam=False) == ("x = 1", False)  # one vLLM request: vLLM finds stops itself
    assert seam.feed("\ny = 2\n", seam=True) == ("\ny = 2", False)  # the pause: "\n" may begin a stop
    assert seam.feed("", seam=True) == ("", False)  # the resumed request has said nothing yet
    assert seam.feed("\nz = 3", seam=True) == ("", True)  # "\n" + "\n": stop where it began
    other = StopSeam(("\n\n",))
    other.feed("a\n", seam=True)
    assert other.feed("b", seam=True) == ("\nb", False)  # not a stop: the kept-back text goes on
    other.feed("c\n", seam=True)
    assert other.flush() == "\n" and other.flush() == ""
    assert StopSeam(()).feed("a\n", seam=True) == ("a\n", False)


def test_healing_backs_off_the_last_token_and_spells_it_out_with_the_likeliest_consistent_tokens():
    import numpy as np
    from sparkls.engine.healing import Vocabulary, back_off, choose

    pieces = [b"", b" Style", b".", b".pa", b".parse", b"(", b"x", b"rse", b" "]
    vocab = Vocabulary(pieces)
    prompt, cut = back_off([1, 2], vocab)  # ` Style` `.`: the prompt ends before the dot
    assert (prompt, cut) == ([1], b".")
    logits = np.zeros(len(pieces), dtype=np.float32)
    logits[[5, 6, 4]] = [9.0, 8.0, 1.0]  # `(` and `x` are likelier, but do not start with the cut `.`
    assert choose(logits, vocab, cut) == (4, b"")  # `.parse` covers the cut text
    logits[3] = 2.0  # `.pa` is a token that starts with it too, and likelier
    assert choose(logits, vocab, cut) == (3, b"")
    # A cut longer than the chosen token: the rest must still be spelled out by the next one.
    assert choose(logits, vocab, b".parse") == (3, b"rse")
    assert choose(logits, vocab, b"rse") == (7, b"")


def test_healing_backs_off_the_rest_of_a_word_while_one_token_could_still_start_with_it():
    from sparkls.engine.healing import Vocabulary, back_off

    # `    retur` as `   ` ` ret` `ur`: ` return` starts with ` retur`, so both word pieces go (backing off `ur`
    # alone would leave the model after ` ret`); no token starts with `    retur`, so the indentation stays.
    pieces = [b"", b"   ", b" ret", b"ur", b" return", b"urn", b" Style", b"."]
    vocab = Vocabulary(pieces)
    assert back_off([1, 2, 3], vocab) == ([1], b" retur")
    assert back_off([6, 7], vocab) == ([6], b".")  # no token starts with ` Style.`: the dot alone
    assert back_off([1, 2, 3], vocab, most=1) == ([1, 2], b"ur")


def test_a_prompt_ending_in_a_control_token_or_one_token_is_not_healed():
    from sparkls.engine.healing import Vocabulary, back_off

    vocab = Vocabulary([b"", b"x", b"y"])  # id 0: a control token (a FIM marker), no text
    assert back_off([1, 0], vocab) == ([1, 0], b"")
    assert back_off([1], vocab) == ([1], b"")


def test_a_saved_kv_state_comes_back_for_a_prompt_that_shares_more_with_it_than_the_sequence_does():
    states = KvStates(budget_bytes=1000, min_gain=4)
    a = list(range(100))
    assert states.worth_saving(a, kept=10)  # 90 tokens would be lost
    states.save(a, b"A" * 100)
    assert not states.worth_saving(a, kept=10)  # already saved
    assert states.best([*a[:50], 7, 7], current=10).data == b"A" * 100  # shares 50 > 10 + 4
    assert states.best([*a[:12], 7], current=10) is None  # shares 12: not worth a load
    assert not states.worth_saving(a, kept=98)  # two tokens lost: nothing to save


def test_saved_kv_states_stay_within_their_budget_least_recently_used_first():
    states = KvStates(budget_bytes=250, min_gain=4)
    first, second, third = [1] * 20, [2] * 20, [3] * 20
    states.save(first, b"x" * 100)
    states.save(second, b"y" * 100)
    assert states.best(first, current=0) is not None  # used: now the most recent
    states.save(third, b"z" * 100)  # over the budget: the least recently used (second) goes
    assert states.best(second, current=0) is None
    assert states.best(first, current=0) is not None and states.best(third, current=0) is not None
    assert states.bytes <= 250
    states.save([*first, 5, 5], b"w" * 100)  # extends `first`: replaces it
    assert len(states) == 2
    states.save([9] * 20, b"v" * 300)  # larger than the whole budget: not kept
    assert states.best([9] * 20, current=0) is None


def test_cached_runs_that_reappear_later_in_a_prompt_are_moved_not_recomputed():
    head, window, rest = list(range(10)), list(range(100, 180)), list(range(200, 240))
    # The window's start slid: its first 30 tokens are gone, the rest moves 30 positions down.
    held = head + window + rest
    prompt = head + window[30:] + rest + [999]
    assert chunk_moves(held, prompt, 10, 16) == [(40, 10, 50 + 40)]
    # A block removed from the middle; a new token at the end is never taken (its logits are needed).
    assert chunk_moves(held, head + window + [7] + rest, 90, 16) == []  # a new token first: no run follows it
    assert chunk_moves(held, head + rest + [1], 10, 16) == [(90, 10, 40)]
    # Runs shorter than the minimum are recomputed; runs out of order after the first are not taken.
    assert chunk_moves(held, head + window[:8] + [5] + rest + [1], 10, 16) == []
    assert chunk_moves(held, head + rest + window + [1], 10, 16) == [(90, 10, 40)]
