"""Run untrusted model output: a subprocess in a scratch directory, Python's isolated mode, a timeout,
and no network namespace where the kernel lets us make one (`unshare -rn`)."""

from __future__ import annotations

import shutil
import subprocess
import sys
import tempfile
from pathlib import Path


def _sandbox_prefix() -> list[str]:
    unshare = shutil.which("unshare")
    if unshare and subprocess.run([unshare, "-rn", "true"], capture_output=True).returncode == 0:
        return [unshare, "-rn"]
    return []


SANDBOX = _sandbox_prefix()


def run_program(program: str, timeout_s: float = 10.0) -> tuple[bool, str]:
    """(passed, stderr) of running `program`."""
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "candidate.py"
        path.write_text(program)
        try:
            r = subprocess.run(
                [*SANDBOX, sys.executable, "-I", str(path)],
                cwd=tmp,
                capture_output=True,
                timeout=timeout_s,
                env={"PATH": "/usr/bin:/bin", "HOME": tmp},
            )
        except subprocess.TimeoutExpired:
            return False, f"timed out after {timeout_s:.0f} s"
        return r.returncode == 0, r.stderr.decode("utf-8", "replace")


def passes(program: str, timeout_s: float = 10.0) -> bool:
    return run_program(program, timeout_s)[0]
