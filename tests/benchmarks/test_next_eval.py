"""The next-edit benchmark's split and scoring: a fixed tuning/reported split, and what counts as exact, shown and
located."""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "benchmarks"))

from next_eval import DATA, half_of, load, score, summarize
from sparkls.edit import diff

TEXT = "def f(a):\n    x = a + 1\n    y = a + 2\n    return x + y\n"
ROW = {"target": {"old_start_in_current": 3, "removed": "    y = a + 2\n", "added": "    y = x + 2\n"}}


def test_the_split_depends_on_the_row_id_only_and_halves_the_set():
    assert half_of("python/Textualize/rich/ffc639a3738e") == half_of("python/Textualize/rich/ffc639a3738e")
    if DATA.exists():  # the shared data set (../shared): both halves near 50 %
        tuning, reported = load("tuning", None), load("reported", None)
        assert not {r["id"] for r in tuning} & {r["id"] for r in reported}
        assert 0.4 < len(tuning) / (len(tuning) + len(reported)) < 0.6


def test_the_target_edit_is_exact_shown_and_located():
    start = TEXT.index("y = a") + 4
    s = score(TEXT, ROW, 0, len(TEXT), TEXT.replace("y = a", "y = x"), [diff.Edit(start, start + 1, "x")])
    assert (s["exact"], s["shown"], s["located"]) == (True, True, True)


def test_an_edit_elsewhere_is_shown_but_neither_exact_nor_located_and_no_edit_is_a_miss():
    start = TEXT.index("a):")
    s = score(TEXT, ROW, 0, len(TEXT), TEXT.replace("a):", "b):"), [diff.Edit(start, start + 1, "b")])
    assert (s["exact"], s["shown"], s["located"]) == (False, True, False)
    none = score(TEXT, ROW, 0, 0, "", [])
    summary = summarize(
        [
            {"lang": "python", "cold_ms": 1.0, "warm_ms": 1.0, **s},
            {"lang": "python", "cold_ms": 1.0, "warm_ms": 1.0, **none},
        ]
    )
    assert (summary["exact"], summary["shown"], summary["precision"], summary["located"]) == (0.0, 0.5, 0.0, 0.0)
