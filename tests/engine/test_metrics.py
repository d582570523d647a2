"""Engine metrics: the summary per request class, and the recorder of the latest requests' stats."""

from __future__ import annotations

from sparkls.engine.base import GenerationStats, Priority
from sparkls.engine.metrics import Recorder, percentile, summarize, summary_line


def test_metrics_are_summarized_per_request_class():
    done = [
        ("a", GenerationStats(prompt_tokens=100, reused_tokens=90, ttft_ms=10, decode_tokens=10, decode_ms=100)),
        ("b", GenerationStats(prompt_tokens=100, reused_tokens=70, ttft_ms=30, decode_tokens=20, decode_ms=100)),
        ("c", GenerationStats(prompt_tokens=50, finish_reason="abort", priority=Priority.BACKGROUND, preemptions=3)),
    ]
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
