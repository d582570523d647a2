"""The architecture invariants of ARCHITECTURE.md, checked."""

import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PKG = ROOT / "server" / "sparkls"


def test_only_the_lsp_layer_and_the_demo_import_lsprotocol_or_pygls():
    offenders = []
    for path in PKG.rglob("*.py"):
        rel = path.relative_to(PKG).as_posix()
        if rel.startswith("lsp/") or rel == "demo.py":
            continue
        text = path.read_text()
        if "import lsprotocol" in text or "from lsprotocol" in text or "from pygls" in text or "import pygls" in text:
            offenders.append(rel)
    assert offenders == []


def test_the_engine_backends_import_their_libraries_lazily():
    code = ("import sys, sparkls.engine.llamacpp, sparkls.engine.vllm, sparkls.engine.openai, sparkls.lsp.server, "
            "sparkls.pipeline, sparkls.doctor; print([m for m in ('llama_cpp', 'vllm', 'torch') if m in sys.modules])")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]"


def test_only_their_own_backend_modules_import_vllm_or_llama_cpp():
    owners = {"vllm": "engine/vllm.py", "llama_cpp": "engine/llamacpp.py"}
    offenders = []
    for path in PKG.rglob("*.py"):
        rel = path.relative_to(PKG).as_posix()
        text = path.read_text()
        for lib, owner in owners.items():
            if (f"import {lib}" in text or f"from {lib}" in text) and rel != owner:
                offenders.append((rel, lib))
    assert offenders == []


def test_the_engine_layer_never_imports_pygls():
    offenders = [p.name for p in (PKG / "engine").rglob("*.py") if "pygls" in p.read_text() or "lsprotocol" in
                 p.read_text()]
    assert offenders == []


def test_the_code_passes_the_chosen_lint_rules():
    r = subprocess.run([sys.executable, "-m", "ruff", "check", "server", "tests", "benchmarks"], cwd=ROOT,
                       capture_output=True, text=True)
    assert r.returncode == 0, r.stdout + r.stderr


def test_modules_stay_small():
    # A guard against modules that grow without a plan, not a reason to split one (issue 12 replaces it).
    big = {p.name: n for p in PKG.rglob("*.py") if (n := len(p.read_text().splitlines())) > 450}
    assert big == {}


def test_ci_runs_the_readmes_test_command():
    readme = (ROOT / "README.md").read_text()
    ci = (ROOT / ".ci" / "run").read_text()
    blocks = readme.split("```sh\n")[1:]
    test_cmd = next(b.split("\n```")[0].strip() for b in blocks if "pytest" in b)
    assert test_cmd in ci
