"""Real editors against the real server: headless Neovim 0.11 (docs/editors.md's config, its own completion,
a code action applied by Neovim, an inline completion request, a cancel), with the fake engine and with
the real default model; Emacs with eglot.

The README's rows, claim by claim (`r` is the editor script's result):
- Neovim, completion through `vim.lsp.completion`, the whole suggestion inserted: `r["completion_items"]` and
  `r["after"]`'s first line; inline completion requests: `r["inline_items"]`; cancel: `r["cancel_finish_reason"]
  == "abort"` and the server serving after it; code actions applied by Neovim: `r["action_after"]`.
- Emacs + eglot, completion at point: `(r["before"], r["after"])`; code actions applied by eglot:
  `"sparkls: Implement `area`" in r["actions"]` and `r["action_after"]`.
- Neovim, predicted next edits with editors/nvim (`sparkls.nextedit`): shown as extmarks `r["accept_marks"]`,
  applied by Tab `r["accepted"]`, dismissed by Escape `r["dismissed"]`, a stale answer never shown `r["stale_marks"]`.
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
PLUGIN = Path(__file__).resolve().parents[2] / "editors" / "nvim"
CALC = """import math


def area(r):
    pass


def circumference(r):
    retu


class Shape:
    def __init__(self, name):
        
"""
FAKE = {
    "engine": "fake",
    "fakeTokenDelayMs": 100,
    "fakeResponse": json.dumps(
        {"": "rn 2 * math.pi * r", "This function is a stub": "def area(r):\n    return math.pi * r * r\n```\n"}
    ),
}


def body_of(source: str, function: str) -> list[str]:
    """The lines of a top-level function's body (up to the next line that is not indented or blank)."""
    lines = source.split("\n")
    start = next(i for i, line in enumerate(lines) if line.startswith(f"def {function}("))
    body = []
    for line in lines[start + 1 :]:
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


def run_driver(
    editor: str, argv: list[str], env: dict, cwd: Path, out: Path, timeout_s: int, show: tuple[str, ...] = ()
) -> dict:
    """Runs an editor on a driver script in editors/; the JSON result it wrote to `out`, once every step passed
    (a failure names the failed steps, the result's `show` keys and the editor's stderr)."""
    proc = subprocess.run(argv, env=env, cwd=cwd, capture_output=True, text=True, timeout=timeout_s)
    assert out.exists(), f"{editor} wrote no result (rc {proc.returncode}): {proc.stderr[-3000:]}"
    result = json.loads(out.read_text())
    failed = [s for s in result["steps"] if s["ok"] is not True]
    shown = "".join(f"{key}: {result.get(key)}; " for key in show)
    assert not failed and result.get("done"), f"steps failed: {failed}; {shown}stderr: {proc.stderr[-3000:]}"
    return result


def run_nvim(
    script: str,
    tmp_path: Path,
    name: str,
    text: str,
    options: dict,
    timeout_s: int,
    env: dict,
    show: tuple[str, ...] = (),
) -> dict:
    """Headless Neovim on the driver `script` in editors/, editing `name` (holding `text`) in a project in
    `tmp_path`, with sparkls started with `options`; `env`: the script's own variables."""
    nvim = need("nvim")
    (tmp_path / "pyproject.toml").write_text("")
    (tmp_path / name).write_text(text)
    out = tmp_path / "out.json"
    env = {
        **os.environ,
        "SPARKLS_NVIM_OUT": str(out),
        "SPARKLS_NVIM_FILE": str(tmp_path / name),
        "SPARKLS_NVIM_CMD": json.dumps([sys.executable, "-m", "sparkls", "serve"]),
        "SPARKLS_NVIM_OPTIONS": json.dumps(options),
        "XDG_STATE_HOME": str(tmp_path / "state"),
        "XDG_CONFIG_HOME": str(tmp_path / "config"),
        "XDG_DATA_HOME": str(tmp_path / "data"),
        **env,
    }
    return run_driver(
        "Neovim",
        [nvim, "--headless", "--clean", "-u", "NONE", "-c", f"luafile {HERE / script}"],
        env,
        tmp_path,
        out,
        timeout_s,
        show,
    )


def run_neovim(tmp_path: Path, options: dict, timeout_s: int) -> dict:
    return run_nvim(
        "neovim.lua",
        tmp_path,
        "calc.py",
        CALC,
        options,
        timeout_s,
        {
            "SPARKLS_NVIM_COMPLETE_AT": "retu",
            "SPARKLS_NVIM_CANCEL_AT": "name):",
            "SPARKLS_NVIM_ACTION_AT": "pass",
            "SPARKLS_NVIM_ACTION": "Implement",
            "SPARKLS_NVIM_TIMEOUT_MS": str(timeout_s * 1000 // 2),
        },
    )


def test_neovim_completes_applies_an_action_and_cancels_with_the_fake_engine(tmp_path):
    r = run_neovim(tmp_path, FAKE, 120)
    assert r["health"]["engine"] == "fake" and r["encoding"] == "utf-8"  # Neovim negotiates utf-8 positions
    assert r["inline_items"] == ["rn 2 * math.pi * r"]
    # Neovim inserted the whole suggestion, not just its first word
    assert r["completion_items"] == ["return 2 * math.pi * r"]
    assert r["after"].split("\n")[0] == "    return 2 * math.pi * r"
    assert (r["cancel_finish_reason"], r["cancel_answered_with_result"], r["serving_after_cancel"]) == (
        "abort",
        False,
        True,
    )
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
        "abort",
        False,
        True,
    )
    after = r["action_after"]
    assert implemented(after, "area"), after
    compile("\n".join(["import math", "def area(r):", *body_of(after, "area")]), "area", "exec")  # valid Python


SERIES = "a = compute(1)\nb = compute(2)\nc = compute(3)\n\n\ndef show(x):\n    print(x)\n    print(x * 2)\n"
RENAMED = SERIES.replace("compute(", "compute_v2(")
LOGGED = RENAMED.replace("print", "log") + "    return x\n"
# The fake engine answers by the edit the next-edit prompt's diff shows last (the last key found wins), continuing
# the hunk at the cursor, whose last line removes the cursor's line: asked on the first line, it writes that line
# again and renames the other two; asked on `log(x)`'s line, it changes the next `print` and adds a line.
NEXT_EDITS = {
    "engine": "fake",
    "nextEditLinesBefore": 50,
    "nextEditLinesAfter": 50,
    "fakeResponse": json.dumps(
        {
            "": "",
            "+a = compute_v2(1)\n": "-b = compute(2)\n-c = compute(3)\n+a = compute_v2(1)\n+b = compute_v2(2)\n"
            "+c = compute_v2(3)\n",
            "+    log(x)\n": "-    print(x * 2)\n+    log(x)\n+    log(x * 2)\n+    return x\n",
            "+# end\n": "",
        }
    ),
}


def run_neovim_nextedit(tmp_path: Path, timeout_s: int) -> dict:
    return run_nvim(
        "neovim_nextedit.lua",
        tmp_path,
        "series.py",
        SERIES,
        NEXT_EDITS,
        timeout_s,
        {
            "SPARKLS_NVIM_PLUGIN": str(PLUGIN),
            "SPARKLS_NVIM_START_MS": str(timeout_s * 1000 * 2 // 3),
            "SPARKLS_NVIM_TIMEOUT_MS": "10000",
        },
        show=("events",),
    )


def test_neovim_plugin_shows_applies_and_dismisses_predicted_edits_and_drops_stale_ones(tmp_path):
    r = run_neovim_nextedit(tmp_path, 60)  # about 5 s; the server may start slowly on a busy machine
    typed = SERIES.replace("compute(1)", "compute_v2(1)", 1)
    assert r["typed"] == typed
    # shown: `_v2` as inline virtual text where the server predicts it, nothing else
    assert [(m["row"], m["col"], m["virt_text"], m["virt_text_pos"]) for m in r["accept_marks"]] == [
        (1, 11, "_v2", "inline"),
        (2, 11, "_v2", "inline"),
    ]
    ours = "sparkls: accept the predicted edit"
    assert r["tab_while_shown"] == {"n": ours, "i": ours}
    # Tab applied exactly the prediction, took the marks and its mappings away, gave the user's Tab back
    assert r["accepted"] == RENAMED and r["accept_event"] == "accepted" and not r["marks_after_accept"]
    assert r["tab_after_accept"] == {"n": None, "i": "user tab"}
    assert r["executed"] == (1 if r["accept_command"] else 0)  # the prediction's command, when it has one
    assert r["after_accept_event"] == "empty"  # asked again after the applied edit: the buffer is the prediction
    # the second prediction, in insert mode: `print` struck through with `log` after it, a line added below
    assert r["typed2"] == RENAMED.replace("print", "log", 1) and r["mode_while_shown"] == "i"
    lines = r["typed2"].split("\n")
    removed = [
        lines[m["row"]][m["col"] : m["end_col"]]
        for m in r["dismiss_marks"]
        if m["hl_group"] == "SparklsNextEditDelete" and m["end_row"] == m["row"]
    ]
    inline = [(m["row"], m["virt_text"]) for m in r["dismiss_marks"] if m["virt_text_pos"] == "inline"]
    added = [m["virt_lines"] for m in r["dismiss_marks"] if m["virt_lines"] is not None]
    assert (removed, inline, added) == (["print"], [(7, "log")], [["    return x"]]), r["dismiss_marks"]
    assert r["tab_while_shown2"] == ours
    # Escape: nothing applied, marks gone, insert mode left, the user's Tab back
    assert r["dismissed"] == r["typed2"] and r["dismiss_event"] == "dismissed"
    assert r["tab_after_dismiss"] == "user tab"
    # the server heard what was shown and what was dismissed (and a notification it may not handle harmed nothing)
    ids = [e["request_id"] for e in r["events"] if e["event"] == "shown"]
    assert len(ids) == 2 and all(ids)
    assert r["notified"] == [
        {"requestId": ids[0], "event": "shown"},
        {"requestId": ids[1], "event": "shown"},
        {"requestId": ids[1], "event": "dismissed"},
    ]
    # a newer request cancels the one in flight; the answer for the buffer before `# end` is not shown
    first, second = r["stale_requests"][0]["id"], r["stale_requests"][-1]["id"]
    assert r["sent"] == [True, True] and first != second
    assert {"id": first, "type": "cancel"} in r["stale_requests"]
    assert "stale" in r["stale_events"] and "shown" not in r["stale_events"]
    assert not r["stale_marks"] and r["stale_text"] == r["typed2"] + "# end\n"
    assert r["serving_after"]


def run_emacs(tmp_path: Path, options: dict, timeout_s: int) -> dict:
    emacs = need("emacs")
    (tmp_path / "calc.py").write_text(CALC)
    out = tmp_path / "out.json"
    env = {
        **os.environ,
        "SPARKLS_EMACS_OUT": str(out),
        "SPARKLS_EMACS_FILE": str(tmp_path / "calc.py"),
        "SPARKLS_EMACS_CMD": json.dumps([sys.executable, "-m", "sparkls", "serve"]),
        "SPARKLS_EMACS_OPTIONS": json.dumps(options),
        "SPARKLS_EMACS_COMPLETE_AT": "retu",
        "SPARKLS_EMACS_ACTION_AT": "pass",
        "SPARKLS_EMACS_ACTION": "Implement",
        "SPARKLS_EMACS_TIMEOUT_S": str(timeout_s // 2),
        "HOME": str(tmp_path),
    }
    # -q: no user init, but the site files (Debian's elpa-eglot on Emacs 28) load as for a user
    return run_driver("Emacs", [emacs, "--batch", "-q", "-l", str(HERE / "emacs.el")], env, tmp_path, out, timeout_s)


def test_emacs_eglot_completes_at_point_and_applies_a_code_action(tmp_path):
    r = run_emacs(tmp_path, FAKE | {"fakeTokenDelayMs": 0}, 120)
    assert r["health"]["engine"] == "fake"
    assert (r["before"], r["after"]) == ("    retu", "    return 2 * math.pi * r")
    assert "sparkls: Implement `area`" in r["actions"]
    assert "def area(r):\n    return math.pi * r * r\n" in r["action_after"]
    assert r["action_after"].replace("    return math.pi * r * r", "    pass") == r["action_before"]
