"""The benchmarks' statistics over every request: censored values make a percentile a lower bound."""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "benchmarks"))

from latency import censored_dist, spread


def test_a_request_cancelled_early_makes_the_median_a_lower_bound():
    d = censored_dist([10.0, 20.0, 30.0], [5.0])
    assert (d["p50"], d["n"], d["censored"], d["p50_at_least"]) == (20.0, 4, 1, True)
    assert spread(d) == ">= 20 / >= 30 (n=4, 1 censored)"


def test_a_request_cancelled_after_the_median_leaves_it_exact():
    d = censored_dist([10.0, 20.0, 30.0], [100.0])
    assert (d["p50"], d["p50_at_least"], d["p90"], d["p90_at_least"]) == (30.0, False, 100.0, True)
    assert spread(censored_dist([1.0, 2.0], [])) == "2 / 2 (n=2)"
