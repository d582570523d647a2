"""The VS Code extension: built, type-checked, unit-tested and packaged with its own npm scripts, then
installed from its .vsix into a clean code-server (VS Code 1.100.3) and driven in headless Chromium with the
real server and the real default model, at default settings (but `metricsPort`, to read the acceptance counters).

The README's VS Code row, claim by claim (`r` is the run's result from editors/vscode.mjs):
- ghost text accepted with Tab: `r["line_after_tab"] == "    retur" + ghost` (the ghost text itself, not VS
  Code's word suggestion);
- also for a keystroke typed while the model loads: `r["status_when_typed"]` shows loading, then the ghost text;
- the accept is counted: the scrape after Tab (`r["metrics_after_tab"]`) has the ghost text shown, accepted once
  and as many accepted characters as Tab inserted, for source `model`;
- code actions from the lightbulb: `"sparkls: Implement `area`" in r["actions"]` and `implemented(...)`;
- a streaming rewrite stopped and reverted: `r["stop_during"] != r["stop_shown_before"]`,
  `r["stop_after"] == r["stop_before"]`, a "stopped" message;
- the predicted next edit applied with Tab: `r["after_tab"] == predicted` (next-edit test), and counted: shown,
  accepted once, its inserted characters (`r["metrics_after_tab"]`);
- status bar with model and tokens/s: `r["status_ready"]` names the model, `r["status_after_generation"]` tok/s.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.conftest import require
from tests.e2e.test_editors import CALC, implemented, need
from tests.e2e.test_edits_fake import SERIES
from tests.e2e.test_prometheus import samples, total

ROOT = Path(__file__).resolve().parents[2]
CLIENT = ROOT / "vscode-client"
EDITORS = Path(__file__).resolve().parent / "editors"
CACHE = Path(os.environ.get("SPARKLS_E2E_CACHE", Path.home() / ".cache" / "sparkls-e2e"))
SCREENSHOTS = os.environ.get("SPARKLS_SCREENSHOTS")  # where to copy the screenshots (the README's come from here)
USER_SETTINGS = {  # a quiet UI; the extension itself keeps its defaults
    "workbench.startupEditor": "none",
    "security.workspace.trust.enabled": False,
    "telemetry.telemetryLevel": "off",
    "extensions.autoCheckUpdates": False,
    "extensions.autoUpdate": False,
    "update.mode": "none",
    "workbench.tips.enabled": False,
    # No word list: on `retur` it opened with `return` and took the Tab, inserting `n` instead of the ghost text
    "editor.wordBasedSuggestions": "off",
}


def npm(*args: str, timeout_s: int = 600) -> str:
    proc = subprocess.run(["npm", *args], cwd=CLIENT, capture_output=True, text=True, timeout=timeout_s)
    assert proc.returncode == 0, f"npm {' '.join(args)} failed:\n{proc.stdout[-3000:]}\n{proc.stderr[-3000:]}"
    return proc.stdout


@pytest.fixture(scope="session")
def extension() -> dict[str, object]:
    """`npm ci`, then the extension's own scripts: type-check, unit tests, bundle, package."""
    need("npm")
    npm("ci", "--no-audit", "--no-fund")
    npm("run", "typecheck")
    tests = npm("test")
    npm("run", "build")
    npm("run", "package")
    vsix = CLIENT / "sparkls.vsix"
    assert vsix.is_file()
    return {"vsix": vsix, "unit_tests": tests}


def test_the_extension_type_checks_passes_its_unit_tests_and_packages(extension):
    out = str(extension["unit_tests"])
    passed, failed = (int(re.search(rf"^# {k} (\d+)$", out, re.M).group(1)) for k in ("pass", "fail"))
    assert passed >= 15 and failed == 0, out[-2000:]
    import zipfile

    names = zipfile.ZipFile(extension["vsix"]).namelist()
    assert "extension/dist/extension.js" in names and "extension/package.json" in names
    assert not [n for n in names if "node_modules" in n or n.endswith(".ts")], names  # bundled, sources left out


@pytest.fixture(scope="session")
def code_server() -> Path:
    need("chromium")
    need("rg")
    prefix = CACHE / "code-server-4.100.3"
    subprocess.run(
        [str(EDITORS / "install_code_server.sh"), str(prefix)], check=True, timeout=1500, capture_output=True
    )
    return prefix / "node_modules" / ".bin" / "code-server"


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@contextlib.contextmanager
def running_code_server(binary: Path, home: Path, data: Path, extensions: Path, folder: Path) -> Iterator[str]:
    port = free_port()
    env = {
        **os.environ,
        "HOME": str(home),
        "SHELL": "/bin/bash",
        "XDG_CONFIG_HOME": str(home / ".config"),
        "XDG_DATA_HOME": str(home / ".local/share"),
        "XDG_CACHE_HOME": str(home / ".cache"),
    }
    log = open(home / "code-server.log", "w")  # noqa: SIM115 (closed below)
    quiet = [
        "--disable-telemetry",
        "--disable-update-check",
        "--disable-workspace-trust",
        "--disable-getting-started-override",
    ]
    proc = subprocess.Popen(
        [
            str(binary),
            "--auth",
            "none",
            "--bind-addr",
            f"127.0.0.1:{port}",
            *quiet,
            "--extensions-dir",
            str(extensions),
            "--user-data-dir",
            str(data),
            str(folder),
        ],
        env=env,
        stdout=log,
        stderr=subprocess.STDOUT,
        start_new_session=True,
    )
    try:
        deadline = time.monotonic() + 60
        while True:
            with contextlib.suppress(OSError), socket.create_connection(("127.0.0.1", port), 1):
                break
            assert proc.poll() is None and time.monotonic() < deadline, (home / "code-server.log").read_text()[-3000:]
            time.sleep(0.2)
        yield f"http://127.0.0.1:{port}/?folder={folder}"
    finally:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGKILL)  # code-server, its extension host and the sparkls server
        proc.wait(10)
        log.close()


def run_vscode(
    tmp_path: Path,
    vsix: Path,
    code_server: Path,
    files: dict[str, str],
    scenario: str,
    settings: dict[str, object] | None = None,
) -> dict:
    """Install the .vsix into a clean code-server, open `files` as the workspace, run one scenario of
    `editors/vscode.mjs` in headless Chromium; its result (screenshots copied to $SPARKLS_SCREENSHOTS)."""
    sparkls = shutil.which("sparkls") or str(Path(sys.executable).parent / "sparkls")
    home, data, exts, ws, out = (tmp_path / n for n in ("home", "data", "extensions", "ws", "out"))
    for d in (home, data / "User", exts, ws, out):
        d.mkdir(parents=True)
    # A user who ran the README's install command has `sparkls` on the PATH of their login shell, which is
    # where VS Code's extension host takes its environment from.
    (home / ".profile").write_text(f'export PATH="{Path(sparkls).resolve().parent}:$PATH"\n')
    (home / ".bash_profile").write_text(". ~/.profile\n")
    (data / "User" / "settings.json").write_text(json.dumps(USER_SETTINGS | (settings or {})))
    for name, text in files.items():
        (ws / name).write_text(text)
    env = {**os.environ, "HOME": str(home)}
    subprocess.run(
        [
            str(code_server),
            "--extensions-dir",
            str(exts),
            "--user-data-dir",
            str(data),
            "--install-extension",
            str(vsix),
        ],
        env=env,
        check=True,
        capture_output=True,
        timeout=120,
    )
    port = (settings or {}).get("sparkls.metricsPort")
    with running_code_server(code_server, home, data, exts, ws) as url:
        proc = subprocess.run(
            ["node", str(EDITORS / "vscode.mjs"), url, str(ws), str(out), scenario],
            capture_output=True,
            text=True,
            timeout=900,
            env={
                **os.environ,
                "SPARKLS_VSCODE_TIMEOUT_MS": "180000",
                **({"SPARKLS_METRICS_PORT": str(port)} if port else {}),
            },
        )
    if SCREENSHOTS:
        for png in out.glob("*.png"):
            shutil.copy(png, Path(SCREENSHOTS) / png.name)
    r = json.loads((out / "result.json").read_text()) if (out / "result.json").exists() else {}
    failed = [s for s in r.get("steps", []) if not s["ok"]]
    assert r.get("done") and not failed, f"{failed}\n{proc.stderr[-3000:]}"
    return r


SHAPE_BODY = '''        self.name = name
        self.width = 1.0
        self.height = 1.0

    def perimeter(self):
        """The length around the shape."""
        return 2 * (self.width + self.height)

    def surface(self):
        """The area the shape covers."""
        return self.width * self.height

    def grow(self, factor):
        """Scale the shape by `factor`."""
        self.width *= factor
        self.height *= factor

    def describe(self):
        """A line about the shape."""
        return f"{self.name}: {self.width} x {self.height}"
'''


@pytest.mark.model
def test_vscode_ghost_text_for_a_keystroke_typed_while_the_model_loads_a_code_action_a_stopped_rewrite_tok_s(
    tmp_path, extension, code_server
):
    require("llama_cpp", "the embedded engine")
    # A class long enough that its rewrite is still streaming when the stop comes (a one-method class was
    # sometimes rewritten whole before it).
    files = {"calc.py": CALC.replace("        \n", SHAPE_BODY)}
    r = run_vscode(
        tmp_path,
        extension["vsix"],
        code_server,
        files,
        "editing",  # default settings, metrics served
        {"sparkls.metricsPort": free_port()},
    )
    assert re.search(r"qwen2\.5-coder-0\.5b", r["status_ready"]), r["status_ready"]
    # the first keystroke was typed while the model loaded (the status bar said so), and got its ghost text
    assert "loading" in r["status_when_typed"] or r["status_when_typed"].strip() == "sparkls", r["status_when_typed"]
    # ghost text from the model after typing `r` at `retu`; Tab inserted it
    ghost = r["ghost_text"].replace("\xa0", " ").split("\n")[0]
    assert ghost.strip(), "no ghost text"
    assert r["line_after_tab"] == "    retur" + ghost, (r["line_after_tab"], ghost)
    assert r["line_after_tab"].startswith("    return"), ghost  # the word is finished, not continued as `retur`
    # the accept was counted: shown, accepted once, as many characters as Tab inserted (all lines of it)
    typed = files["calc.py"].replace("    retu\n", "    retur\n", 1)
    cursor = typed.index("    retur\n") + len("    retur")
    after = r["file_after_tab"]
    assert after[:cursor] == typed[:cursor] and after.endswith(typed[cursor:]), after
    inserted = after[cursor : len(after) - len(typed) + cursor]
    found = samples(r["metrics_after_tab"])
    assert total(found, "sparkls_offers_shown_total", source="model") >= 1
    assert total(found, "sparkls_offers_accepted_total", source="model") == 1
    assert total(found, "sparkls_accepted_chars_total", source="model") == len(inserted), inserted
    assert re.search(r"\d+ tok/s", r["status_after_generation"]), r["status_after_generation"]
    # the lightbulb menu's "Implement" action replaced `pass` with a body
    assert "sparkls: Implement `area`" in r["actions"]
    assert implemented(r["code_action_after"], "area"), r["code_action_after"]
    # a streaming rewrite of the class was stopped after its first lines: the buffer went back (editCancel: revert)
    assert r["stop_during"] != r["stop_shown_before"]  # what the editor showed while it streamed
    assert r["stop_after"] == r["stop_before"]
    assert any("stopped" in m for m in r["stop_message"]), r["stop_message"]


def test_vscode_shows_the_predicted_next_edit_and_tab_applies_it(tmp_path, extension, code_server):
    predicted = SERIES.replace("compute(", "compute_v2(")
    # The scripted engine predicts the rename once the prompt's diff shows the user's edit; asked on the first line
    # (the prompt's hunk removes it), it writes that line again and the two it renames.
    script = {
        "": "",
        "+a = compute_v2(1)\n": "-b = compute(2)\n-c = compute(3)\n"
        + "".join(f"+{x}\n" for x in predicted.splitlines()),
    }
    r = run_vscode(
        tmp_path,
        extension["vsix"],
        code_server,
        {"series.py": SERIES},
        "next-edit",
        {"sparkls.engine": "fake", "sparkls.fakeResponse": json.dumps(script), "sparkls.metricsPort": free_port()},
    )
    assert r["status_ready"].strip() == "fake (scripted)"
    assert r["after_typing"] == SERIES.replace("compute(1)", "compute_v2(1)")
    assert r["after_tab"] == predicted
    # shown, then applied: the view ran the result's command (the two `_v2` it inserted)
    found = samples(r["metrics_after_tab"])
    assert total(found, "sparkls_offers_shown_total", source="nextEdit") >= 1
    assert total(found, "sparkls_offers_accepted_total", source="nextEdit") == 1
    assert total(found, "sparkls_accepted_chars_total", source="nextEdit") == len("_v2") * 2
