"""Emacs' next-edit mode (editors/emacs/sparkls-nextedit.el) in real batch Emacs with eglot, against the real
server and the fake engine: a rename leads to a prediction shown as overlays, TAB applies it, C-g dismisses the
next one, a superseded or stale answer is not shown. Also: the package byte-compiles without a warning."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from tests.e2e.test_editors import need, run_driver

ROOT = Path(__file__).resolve().parents[2]
PLUGIN = ROOT / "editors" / "emacs" / "sparkls-nextedit.el"
DRIVER = Path(__file__).resolve().parent / "editors" / "emacs_nextedit.el"

SERIES = "x = old_name(1)\ny = old_name(2)\nz = old_name(3)\n"
RENAMED = "x = new_name(1)\ny = new_name(2)\nz = new_name(3)\n"
TENS = "x = new_name(10)\ny = new_name(20)\nz = new_name(30)\n"
# The fake engine predicts from the edits the prompt's diff shows (the last key found picks the answer), asked on
# the first line: it continues the hunk that removes that line with the lines below it and their new text. With
# no key found it answers nothing (no edit).
ADDED_LINES = "".join(f"+{x}\n" for x in RENAMED.splitlines()), "".join(f"+{x}\n" for x in TENS.splitlines())
SCRIPT = {
    "+x = new_name(1)\n": "-y = old_name(2)\n-z = old_name(3)\n" + ADDED_LINES[0],
    "+x = new_name(10)\n": "-y = new_name(2)\n-z = new_name(3)\n" + ADDED_LINES[1],
}
OPTIONS = {"engine": "fake", "fakeResponse": json.dumps(SCRIPT)}
REMOVED, ADDED = "sparkls-nextedit-removed", "sparkls-nextedit-added"


@pytest.fixture(scope="module")
def r(tmp_path_factory: pytest.TempPathFactory) -> dict:
    """What the driver saw, one Emacs session for the tests below."""
    emacs = need("emacs")
    tmp_path = tmp_path_factory.mktemp("emacs")
    (tmp_path / "series.py").write_text(SERIES)
    out = tmp_path / "out.json"
    env = {
        **os.environ,
        "SPARKLS_EMACS_OUT": str(out),
        "SPARKLS_EMACS_FILE": str(tmp_path / "series.py"),
        "SPARKLS_EMACS_CMD": json.dumps([sys.executable, "-m", "sparkls", "serve"]),
        "SPARKLS_EMACS_OPTIONS": json.dumps(OPTIONS),
        "SPARKLS_EMACS_PLUGIN": str(PLUGIN),
        "SPARKLS_EMACS_TIMEOUT_S": "10",
        "HOME": str(tmp_path),
    }
    return run_driver("Emacs", [emacs, "--batch", "-q", "-l", str(DRIVER)], env, tmp_path, out, 60)


def test_emacs_shows_a_prediction_tab_applies_it_and_c_g_dismisses_the_next(r):
    assert r["mode_on"] and r["start_tab"] == "indent-for-tab-command"  # TAB is TAB until a prediction shows
    # The rename of line 1 is predicted for lines 2 and 3: `old` struck through, `new` shown after it.
    assert r["shown_text"] == SERIES.replace("old", "new", 1)
    assert r["shown_overlays"] == [[2, "old", REMOVED, "new", ADDED], [3, "old", REMOVED, "new", ADDED]]
    assert r["shown_tab"] == "sparkls-nextedit-accept" and r["shown_events"] == 1
    # TAB applied exactly the prediction, took the overlays away, gave TAB back and ran the result's command.
    assert r["accept_command"] == "sparkls-nextedit-accept"
    assert (r["accepted_text"], r["accepted_overlays"], r["accepted_tab"]) == (RENAMED, [], "indent-for-tab-command")
    assert r["accepted_point_line"] == 3 and r["executed"] == ["sparkls.accepted"]
    # A second edit, a second prediction (two insertions); C-g dismissed it and left the buffer as it was.
    typed = RENAMED.replace("(1)", "(10)")
    assert r["second_text"] == typed
    assert r["second_overlays"] == [[2, "", "nil", "0", ADDED], [3, "", "nil", "0", ADDED]]
    assert r["dismiss_command"] == "sparkls-nextedit-dismiss"
    assert (r["dismissed_text"], r["dismissed_overlays"], r["dismissed_tab"]) == (typed, [], "indent-for-tab-command")
    assert r["dismissed_events"] == 1


def test_emacs_drops_superseded_and_stale_answers_and_clears_when_the_user_leaves(r):
    # Two requests at once: both answered, only the newer shown (once).
    assert [a[1:] for a in r["superseded_answers"]] == [[2, 0], [2, 2]]  # the first dropped, the second shown
    assert r["superseded_shown_events"] == 1
    assert len(r["superseded_overlays"]) == 2
    # Another buffer in the window: the prediction is dismissed after that command.
    assert r["left_overlays"] == [] and r["left_dismissed_events"] == 1
    # The buffer changed before the answer came: it had edits, for an older version, and nothing was shown.
    version, edits, overlays = r["stale_answer"]
    assert edits == 2 and overlays == 0 and version < r["stale_version"]
    assert r["stale_overlays"] == [] and r["stale_tab"] == "indent-for-tab-command"
    assert r["stale_text"].endswith("# end\n")
    assert r["serving_after"]  # the acceptance notifications it may not handle did not hurt the server


def test_the_emacs_package_byte_compiles_without_warnings(tmp_path):
    emacs = need("emacs")
    copy = tmp_path / PLUGIN.name
    shutil.copy(PLUGIN, copy)
    proc = subprocess.run(
        [
            emacs,
            "--batch",
            "-q",
            "--eval",
            "(setq byte-compile-error-on-warn t)",
            "-f",
            "batch-byte-compile",
            str(copy),
        ],
        env={**os.environ, "HOME": str(tmp_path)},
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert proc.returncode == 0 and "Warning" not in proc.stderr, proc.stderr[-3000:]
    assert copy.with_suffix(".elc").is_file()
