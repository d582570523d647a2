"""Provenance of benchmark results (benchmarks/common.py): each results file names a commit of this history."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "benchmarks"))

from common import ROOT, _started, git, recorded_commit


def test_every_results_file_records_a_commit_that_is_in_this_history():
    unrecorded, foreign = set(), []
    for path in sorted((ROOT / "benchmarks" / "results").glob("*.json")):
        commit = recorded_commit(json.loads(path.read_text()))
        if commit is None:
            unrecorded.add(path.name)
            continue
        ancestor = subprocess.run(["git", "merge-base", "--is-ancestor", commit, "HEAD"], cwd=ROOT, capture_output=True)
        if ancestor.returncode != 0:
            foreign.append(f"{path.name}: {commit}")
    assert (unrecorded, foreign) == (set(), [])


def test_the_commit_is_found_wherever_a_script_writes_it():
    sha = "0" * 40
    assert recorded_commit({"commit": sha}) == sha
    assert recorded_commit({"meta": {"commit": sha}}) == sha
    assert recorded_commit({"meta": {"machine": {"commit": sha}}}) == sha
    assert recorded_commit({"machine": {"commit": sha}}) == sha
    assert recorded_commit({"machine": {"cpu": "x"}, "rows": [{"commit": sha}]}) is None


def test_a_run_is_dirty_for_changed_code_but_not_for_a_results_file_left_uncommitted(tmp_path):
    for rel in ("server/x.py", "benchmarks/results/r.json"):
        (tmp_path / rel).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / rel).write_text("1\n")
    git("init", "-q", cwd=tmp_path)
    git("add", ".", cwd=tmp_path)
    git("-c", "user.name=t", "-c", "user.email=t@t", "commit", "-qm", "x", cwd=tmp_path)
    (tmp_path / "benchmarks/results/r.json").write_text("2\n")
    assert _started(tmp_path) == {"commit": git("rev-parse", "HEAD", cwd=tmp_path), "dirty": False}
    (tmp_path / "server/x.py").write_text("2\n")
    assert _started(tmp_path)["dirty"] is True
