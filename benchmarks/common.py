"""What every benchmark shares: where a result came from (commit, machine, command) and small statistics.

`STARTED` is taken when a benchmark imports this module, i.e. when it starts: the commit it runs and whether
`server/` or `benchmarks/` had uncommitted changes then (results files aside). `machine()` adds the CPU
(`lscpu`), cores and threads, the date, the exact command and the llama.cpp build; `save` writes a results file
with all of it.
"""

from __future__ import annotations

import importlib.metadata
import json
import os
import platform
import shlex
import subprocess
import sys
from datetime import datetime
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]


def git(*args: str, cwd: Path = ROOT) -> str:
    return subprocess.run(["git", *args], cwd=cwd, capture_output=True, text=True, check=True).stdout.strip()


EXCLUDE = ":(exclude)benchmarks/results"  # a results file written by an earlier run changes no code


def _started(root: Path = ROOT) -> dict[str, Any]:
    try:
        return {
            "commit": git("rev-parse", "HEAD", cwd=root),
            "dirty": bool(
                git("status", "--porcelain", "--untracked-files=no", "--", "server", "benchmarks", EXCLUDE, cwd=root)
            ),
        }
    except (OSError, subprocess.CalledProcessError):
        return {"commit": None, "dirty": None}


STARTED = _started()


def recorded_commit(result: dict[str, Any]) -> str | None:
    """The commit a results file says it ran: at its top, in its `meta` or in the `machine` of either."""
    for where in (result, result.get("meta") or {}):
        for place in (where, where.get("machine") or {}):
            if isinstance(place.get("commit"), str):
                return place["commit"]
    return None


def lscpu() -> dict[str, str]:
    try:
        out = subprocess.run(["lscpu"], capture_output=True, text=True, check=True).stdout
    except (OSError, subprocess.CalledProcessError):
        return {}
    return {k.strip(): v.strip() for k, _, v in (ln.partition(":") for ln in out.splitlines()) if v}


def kernels() -> str | None:
    """The CPU features the installed llama.cpp build uses (`llama_print_system_info`): builds differ."""
    try:
        import llama_cpp
    except ImportError:
        return None
    return llama_cpp.llama_print_system_info().decode().strip()


def machine() -> dict[str, Any]:
    """This machine and run: CPU, cores and threads per core, date, exact command, versions, commit at the start."""
    try:
        llama = importlib.metadata.version("llama-cpp-python")
    except importlib.metadata.PackageNotFoundError:
        llama = None
    cpu = lscpu()
    return {
        "cpu": cpu.get("Model name") or platform.processor() or "unknown",
        "cores": os.cpu_count(),
        "threads_per_core": cpu.get("Thread(s) per core"),
        "arch": platform.machine(),
        "date": datetime.now().astimezone().isoformat(timespec="seconds"),
        "command": shlex.join([Path(sys.executable).name, *sys.argv]),
        "argv": sys.argv,
        "python": platform.python_version(),
        "llama_cpp_python": llama,
        "llama_cpp_kernels": kernels(),
        **STARTED,
    }


def save(out: str, payload: dict[str, Any], table: str) -> None:
    """Write `payload` with this machine's facts as JSON to `out`, and `table` beside it as .txt."""
    path = Path(out)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps({"machine": machine(), **payload}, indent=2, default=str))
    path.with_suffix(".txt").write_text(table + "\n")
    print(f"wrote {path}")


def baseline_env(ref: str, into: Path) -> dict[str, str]:
    """A worktree of `ref` and the environment that runs its server (its `server/` first on the path)."""
    git("worktree", "add", "--detach", str(into), ref)
    return {**os.environ, "PYTHONPATH": str(into / "server")}


def pct(values: list[float], q: float) -> float | None:
    if not values:
        return None
    values = sorted(values)
    return values[min(len(values) - 1, int(q * len(values)))]


def dist(values: list[float]) -> dict[str, Any]:
    return {"p50": pct(values, 0.5), "p90": pct(values, 0.9), "n": len(values)}


def plain(x: Any) -> Any:
    """A response as plain JSON values (pygls gives objects for methods it has no type for)."""
    if hasattr(x, "_asdict"):
        x = x._asdict()
    if isinstance(x, dict):
        return {k: plain(v) for k, v in x.items()}
    if isinstance(x, list | tuple):
        return [plain(v) for v in x]
    return x
