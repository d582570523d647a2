"""Real editors against the real server: headless Neovim 0.11 (docs/editors.md's config, its own completion,
a code action applied by Neovim, an inline completion request, a cancel), with the fake engine and with
the real default model; Emacs with eglot.

The README's rows, claim by claim (`r` is the editor script's result):
- Neovim, completion through `vim.lsp.completion`, the whole suggestion inserted: `r["completion_items"]` and
  `r["after"]`'s first line; inline completion requests: `r["inline_items"]`; cancel: `r["cancel_finish_reason"]
  == "abort"` and the server serving after it; code actions applied by Neovim: `r["action_after"]`.
- Emacs + eglot, completion at point: `(r["before"], r["after"])`; code actions applied by eglot:
  `"sparkls: Implement `area`" in r["actions"]` and `r["action_after"]`.
- Helix (not installable here): tests/e2e/test_protocol_fake.py replays its recorded capabilities
  (`test_helix_capabilities_get_classic_completion_with_utf8_positions`).
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from tests.conftest import require

HERE = Path(__file__).resolve().parent / "editors"
CALC = '''import math


def area(r):
    pass


def circumference(r):
    retu


class Shape:
    def __init__(self, name):
        
'''
FAKE = {"engine": "fake", "fakeTokenDelayMs": 100, "fakeResponse": json.dumps({
    "": "rn 2 * math.pi * r",
    "This function is a stub": "def area(r):\n    return math.pi * r * r\n```\n"})}


def body_of(source: str, function: str) -> list[str]:
    """The lines of a top-level function's body (up to the next line that is not indented or blank)."""
    lines = source.split("\n")
    start = next(i for i, line in enumerate(lines) if line.startswith(f"def {function}("))
    body = []
    for line in lines[start + 1:]:
        if line and not line[0].isspace():
            break
        body.append(line)
    return body


def implemented(source: str, function: str) -> bool:
    """`pass` is gone from the function, which now returns something."""
    body = [line.strip() for line in body_of(source, function)]
    return "pass" not in body and any(line.startswith("return ") for line in body)


def need(program: str) -> str:
    """The program's path; skipped locally when it is missing, a failure in CI."""
    path = shutil.which(program)
    if path is None:
        if os.environ.get("CI", "").lower() in ("1", "true", "yes"):
            raise AssertionError(f"{program} is not installed (.ci/run installs it)")
        pytest.skip(f"{program} is not installed")
    return path


def run_neovim(tmp_path: Path, options: dict, timeout_s: int) -> dict:
    nvim = need("nvim")
    (tmp_path / "pyproject.toml").write_text("")
    (tmp_path / "calc.py").write_text(CALC)
    out = tmp_path / "out.json"
    env = {**os.environ, "SPARKLS_NVIM_OUT": str(out), "SPARKLS_NVIM_FILE": str(tmp_path / "calc.py"),
           "SPARKLS_NVIM_CMD": json.dumps([sys.executable, "-m", "sparkls", "serve"]),
           "SPARKLS_NVIM_OPTIONS": json.dumps(options), "SPARKLS_NVIM_COMPLETE_AT": "retu",
           "SPARKLS_NVIM_CANCEL_AT": "name):", "SPARKLS_NVIM_ACTION_AT": "pass", "SPARKLS_NVIM_ACTION": "Implement",
           "SPARKLS_NVIM_TIMEOUT_MS": str(timeout_s * 1000 // 2), "XDG_STATE_HOME": str(tmp_path / "state"),
           "XDG_CONFIG_HOME": str(tmp_path / "config"), "XDG_DATA_HOME": str(tmp_path / "data")}
    proc = subprocess.run([nvim, "--headless", "--clean", "-u", "NONE", "-c", f"luafile {HERE / 'neovim.lua'}"],
                          env=env, cwd=tmp_path, capture_output=True, text=True, timeout=timeout_s)
    assert out.exists(), f"Neovim wrote no result (rc {proc.returncode}): {proc.stderr[-2000:]}"
    result = json.loads(out.read_text())
    failed = [s for s in result["steps"] if not s["ok"]]
    assert not failed and result.get("done"), f"steps failed: {failed}; log: {(tmp_path / 'state').exists()}"
    return result


def test_neovim_completes_applies_an_action_and_cancels_with_the_fake_engine(tmp_path):
    r = run_neovim(tmp_path, FAKE, 120)
    assert r["health"]["engine"] == "fake" and r["encoding"] == "utf-8"  # Neovim negotiates utf-8 positions
    assert r["inline_items"] == ["rn 2 * math.pi * r"]
    # Neovim inserted the whole suggestion, not just its first word
    assert r["completion_items"] == ["return 2 * math.pi * r"]
    assert r["after"].split("\n")[0] == "    return 2 * math.pi * r"
    assert (r["cancel_finish_reason"], r["cancel_answered_with_result"], r["serving_after_cancel"]) == (
        "abort", False, True)
    assert "Implement `area`" in " ".join(r["actions"])
    assert "def area(r):\n    return math.pi * r * r\n" in r["action_after"]
    assert r["action_after"].replace("    return math.pi * r * r", "    pass") == r["action_before"]


@pytest.mark.model
def test_neovim_works_with_the_real_default_model(tmp_path):
    require("llama_cpp", "the embedded engine")
    r = run_neovim(tmp_path, {"engine": "llamacpp"}, 480)
    assert r["health"]["ok"] and r["health"]["engine"] == "llamacpp"
    assert r["inline_items"] and r["inline_items"][0].strip(), "the model suggested nothing at `retu`"
    completed = r["after"].split("\n")[0]
    assert completed.startswith("    retu") and len(completed) > len("    retu") + 2, completed
    assert completed == "    retu" + r["inline_items"][0].split("\n")[0], "Neovim inserted a different text"
    assert (r["cancel_finish_reason"], r["cancel_answered_with_result"], r["serving_after_cancel"]) == (
        "abort", False, True)
    after = r["action_after"]
    assert implemented(after, "area"), after
    compile("\n".join(["import math", "def area(r):", *body_of(after, "area")]), "area", "exec")  # valid Python


def run_emacs(tmp_path: Path, options: dict, timeout_s: int) -> dict:
    emacs = need("emacs")
    (tmp_path / "calc.py").write_text(CALC)
    out = tmp_path / "out.json"
    env = {**os.environ, "SPARKLS_EMACS_OUT": str(out), "SPARKLS_EMACS_FILE": str(tmp_path / "calc.py"),
           "SPARKLS_EMACS_CMD": json.dumps([sys.executable, "-m", "sparkls", "serve"]),
           "SPARKLS_EMACS_OPTIONS": json.dumps(options), "SPARKLS_EMACS_COMPLETE_AT": "retu",
           "SPARKLS_EMACS_ACTION_AT": "pass", "SPARKLS_EMACS_ACTION": "Implement",
           "SPARKLS_EMACS_TIMEOUT_S": str(timeout_s // 2), "HOME": str(tmp_path)}
    # -q: no user init, but the site files (Debian's elpa-eglot on Emacs 28) load as for a user
    proc = subprocess.run([emacs, "--batch", "-q", "-l", str(HERE / "emacs.el")], env=env, cwd=tmp_path,
                          capture_output=True, text=True, timeout=timeout_s)
    assert out.exists(), f"Emacs wrote no result (rc {proc.returncode}): {proc.stderr[-3000:]}"
    result = json.loads(out.read_text())
    failed = [s for s in result["steps"] if s["ok"] is not True]
    assert not failed and result.get("done"), f"steps failed: {failed}; stderr: {proc.stderr[-3000:]}"
    return result


def test_emacs_eglot_completes_at_point_and_applies_a_code_action(tmp_path):
    r = run_emacs(tmp_path, FAKE | {"fakeTokenDelayMs": 0}, 120)
    assert r["health"]["engine"] == "fake"
    assert (r["before"], r["after"]) == ("    retu", "    return 2 * math.pi * r")
    assert "sparkls: Implement `area`" in r["actions"]
    assert "def area(r):\n    return math.pi * r * r\n" in r["action_after"]
    assert r["action_after"].replace("    return math.pi * r * r", "    pass") == r["action_before"]
