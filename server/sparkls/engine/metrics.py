"""Engine metrics per request class, from the statistics every engine keeps.

Every engine records each request that ends, as (request id, `GenerationStats`), in a `Recorder`
whose `completed` deque of the last 256 is the engine's `completed`. `summarize` (pure) turns such a
record into, per request class (interactive, code action, background): how many requests, how many
aborted, queue time and TTFT percentiles, decode tokens/s, the share of prompt tokens served from the
KV/prefix cache, and preemptions. `sparkls/metrics`, the per-request log line and `sparkls doctor` all use it.
A recorder's `observers` hear of each record as it is made (the Prometheus exporter counts from them).
"""

from __future__ import annotations

import collections
import logging
import math
from collections.abc import Callable, Iterable, Sequence
from typing import Any

from sparkls.engine.base import GenerationStats, priority_label

log = logging.getLogger(__name__)

Observer = Callable[[str, GenerationStats], None]  # (request id, stats); called on the recording thread


class Recorder:
    """An engine's record of its recent requests: (request id, stats) of the last `size`, oldest first.

    Each `observers` callback is called with every record, on the thread that records it (an engine's worker
    thread for llama.cpp): it must be quick and thread-safe. One that raises is logged, never the engine's problem.
    """

    def __init__(self, size: int = 256) -> None:
        self.completed: collections.deque[tuple[str, GenerationStats]] = collections.deque(maxlen=size)
        self.observers: list[Observer] = []

    def record(self, request_id: str, stats: GenerationStats) -> GenerationStats:
        """Keep the statistics of a request that ended and tell the observers; returns them (for its `Finished`)."""
        self.completed.append((request_id, stats))
        for observe in self.observers:
            try:
                observe(request_id, stats)
            except Exception:
                log.exception("an observer of engine request %s failed", request_id)
        return stats


def percentile(values: Sequence[float], q: float) -> float:
    """Nearest-rank percentile (q in 0..100); 0.0 for no values."""
    if not values:
        return 0.0
    ordered = sorted(values)
    rank = max(1, min(len(ordered), math.ceil(q / 100 * len(ordered))))
    return ordered[rank - 1]


def summarize(completed: Iterable[tuple[str, GenerationStats]]) -> dict[str, dict[str, Any]]:
    groups: dict[str, list[GenerationStats]] = {}
    for _rid, st in completed:
        groups.setdefault(priority_label(st.priority), []).append(st)
    out: dict[str, dict[str, Any]] = {}
    for label, stats in sorted(groups.items()):
        served = [s for s in stats if s.decode_tokens > 0]
        prompt = sum(s.prompt_tokens for s in stats)
        known = [s for s in stats if s.reuse_known]  # the hit rate over the requests whose engine said
        known_prompt = sum(s.prompt_tokens for s in known)
        out[label] = {
            "requests": len(stats),
            "aborted": sum(s.finish_reason == "abort" for s in stats),
            "queue_ms_p50": percentile([s.queue_ms for s in stats], 50),
            "ttft_ms_p50": percentile([s.ttft_ms for s in served], 50),
            "ttft_ms_p90": percentile([s.ttft_ms for s in served], 90),
            "decode_tps_p50": percentile([s.decode_tps for s in served if s.decode_ms > 0], 50),
            "prompt_tokens": prompt,
            "cache_hit_rate": sum(s.reused_tokens for s in known) / known_prompt if known_prompt else 0.0,
            "preemptions": sum(s.preemptions for s in stats),
        }
    return out


def summary_line(summary: dict[str, dict[str, Any]]) -> str:
    """One log line: `interactive n=12 ttft_p50=180ms hit=93% tps=38 preempted=0 | background ...`."""
    parts = []
    for label, m in summary.items():
        parts.append(
            f"{label} n={m['requests']} aborted={m['aborted']} queue_p50={m['queue_ms_p50']:.0f}ms "
            f"ttft_p50={m['ttft_ms_p50']:.0f}ms hit={m['cache_hit_rate']:.0%} "
            f"tps={m['decode_tps_p50']:.0f} preempted={m['preemptions']}"
        )
    return " | ".join(parts) or "no requests yet"
