"""What a starting vLLM engine is doing, read from its own log: for `$/progress` and the start-up summary.

vLLM starts in its engine-core and worker processes (spawned: a handler added in this process never sees
their records), and it applies its logging configuration in each of them. So sparkls hands vLLM a logging
configuration file: vLLM's own default (the same console handler, format and level) plus `StageHandler`,
which each process builds and which appends the records that mark a start stage to a file. The server reads
that file (`StageLog.poll`) while it waits for the engine; nothing else of vLLM's output is touched.

The same configuration carries `OrphanGuard`, the one other piece of sparkls that runs in vLLM's processes:
each of them ends itself when its parent dies, so an engine core never outlives a server that was killed.

Where the user already configures vLLM's logging (`VLLM_LOGGING_CONFIG_PATH`, or `VLLM_CONFIGURE_LOGGING=0`),
their configuration wins: only the stages this process sees are shown, and no process is guarded.
"""

from __future__ import annotations

import contextlib
import copy
import json
import logging
import os
import re
import signal
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

# (what vLLM logs, the stage it starts). First match wins; the order follows a start. CPU and GPU wording
# of vLLM 0.1x-0.3x; an unknown line is ignored (the stage shown stays the last one known).
STAGES: tuple[tuple[re.Pattern[str], str], ...] = tuple(
    (re.compile(p), s)
    for p, s in (
        (r"Initializing a V1 LLM engine", "starting the engine core"),
        (r"Starting to load model|Loading model from|Loading weights", "loading weights"),
        (r"Compiling model again due to a load failure", "compiling the model (its compile cache did not load)"),
        (
            r"Directly load (AOT compilation|the compiled graph)|load the compiled graph\(s\) .* from the cache",
            "compiled model loaded from the cache",
        ),
        (
            r"Warming up model for the compilation|Start compiling|Compiling a graph|torch\.compile",
            "compiling the model",
        ),
        (r"Memory profiling|profiling run", "measuring memory"),
        (r"KV cache size|for KV cache|KV cache memory|[Aa]llocat\w* .*KV cache", "allocating the KV cache"),
        (r"Capturing CUDA graph|Graph capturing", "capturing CUDA graphs"),
        (r"init engine .* took", "engine core ready"),
    )
)
# What became of vLLM's compile cache (`VLLM_CACHE_ROOT`), from the lines that say so.
CACHE_HIT, CACHE_MISS, CACHE_BROKEN = "loaded from cache", "compiled and saved", "cache failed to load"
CACHE: tuple[tuple[re.Pattern[str], str], ...] = tuple(
    (re.compile(p), s)
    for p, s in (
        (r"load failure", CACHE_BROKEN),
        (r"Directly load", CACHE_HIT),
        (r"saved AOT compiled function|Compiling a graph for dynamic shape takes|torch\.compile takes", CACHE_MISS),
    )
)


def stage_of(message: str) -> str | None:
    """The start stage a vLLM log message marks, if any."""
    return _first(STAGES, message)


def cache_of(message: str) -> str | None:
    """What a vLLM log message says about the compile cache, if anything."""
    return _first(CACHE, message)


def _first(table: tuple[tuple[re.Pattern[str], str], ...], message: str) -> str | None:
    return next((value for pattern, value in table if pattern.search(message)), None)


class StageHandler(logging.Handler):
    """Built by vLLM's `dictConfig` in every vLLM process: appends the records that mark a stage to `path`,
    one JSON line each (a single `write` on an append-only file, so processes do not interleave)."""

    def __init__(self, path: str, level: int | str = logging.INFO) -> None:
        super().__init__(level)
        self._fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o600)

    def emit(self, record: logging.LogRecord) -> None:
        try:
            message = record.getMessage().split("\n", 1)[0][:400]
            if stage_of(message) is None and cache_of(message) is None:
                return
            os.write(self._fd, (json.dumps({"t": time.time(), "pid": os.getpid(), "message": message}) + "\n").encode())
        except Exception:  # a log handler must never break the engine
            self.handleError(record)

    def close(self) -> None:
        with contextlib.suppress(OSError):
            os.close(self._fd)
        super().close()


def logging_config(default: dict[str, Any], stage_file: Path, level: str) -> dict[str, Any]:
    """vLLM's `default` logging config (its `DEFAULT_LOGGING_CONFIG`) with `StageHandler` and `OrphanGuard`
    (for this process's children) beside its console handler; the console keeps `level`, the stage handler
    sees INFO."""
    config = copy.deepcopy(default)
    console = config["handlers"]["vllm"]
    console["level"] = level
    console["stream"] = os.environ.get("VLLM_LOGGING_STREAM", console.get("stream", "ext://sys.stdout"))
    for formatter in config.get("formatters", {}).values():
        if "log_level" in formatter:
            formatter["log_level"] = level
    config["handlers"]["sparkls_stages"] = {"()": f"{__name__}.StageHandler", "path": str(stage_file), "level": "INFO"}
    config["handlers"]["sparkls_orphan_guard"] = {"()": f"{__name__}.OrphanGuard", "server_pid": os.getpid()}
    logger = config["loggers"]["vllm"]
    logger["handlers"] = [*logger.get("handlers", []), "sparkls_stages", "sparkls_orphan_guard"]
    logger["level"] = "DEBUG" if level == "DEBUG" else "INFO"
    return config


class OrphanGuard(logging.Handler):
    """Built by vLLM's `dictConfig` in every vLLM process, like `StageHandler`; it logs nothing. In a process
    other than the server (`server_pid`): vLLM's engine core and its workers, it watches the server and the
    process's parent. Once either is gone (the server killed, even by SIGKILL, while the engine starts or
    serves), the guard ends the process: SIGTERM (vLLM shuts down when it can; during a start it only notes the
    request), SIGKILL after `grace_s`. Without it an engine core outlived a killed server, holding its memory (a
    GPU's in production) until someone found it."""

    def __init__(self, server_pid: int, interval_s: float = 1.0, grace_s: float = 10.0) -> None:
        super().__init__(logging.CRITICAL)
        if os.getpid() != server_pid:
            threading.Thread(
                target=end_with_parent,
                args=(server_pid, os.getppid(), interval_s, grace_s),
                name="sparkls-orphan-guard",
                daemon=True,
            ).start()

    def emit(self, record: logging.LogRecord) -> None:
        pass


def end_with_parent(server: int, parent: int, interval_s: float, grace_s: float) -> None:
    """Wait until the process `server` has ended or this process's parent is no longer `parent` (the guard may
    be built after the server died: its parent is then already another), then end this process."""
    while os.getppid() == parent and _exists(server):
        time.sleep(interval_s)
    os.kill(os.getpid(), signal.SIGTERM)
    time.sleep(grace_s)
    os.kill(os.getpid(), signal.SIGKILL)


def _exists(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # another user's process has the number: the parent check still tells
        return True
    return True


@dataclass
class StageLog:
    """The stages a vLLM start went through, read from the file `StageHandler`s append to."""

    path: Path | None = None
    started: float = field(default_factory=time.time)
    stages: list[tuple[float, str]] = field(default_factory=list)  # (seconds since start, stage)
    compile_cache: str = ""  # CACHE_MISS, CACHE_HIT or CACHE_BROKEN, once known
    _offset: int = 0

    def enter(self, stage: str, at: float | None = None) -> None:
        if not self.stages or self.stages[-1][1] != stage:
            self.stages.append(((at if at is not None else time.time()) - self.started, stage))

    def poll(self) -> str:
        """Read what the vLLM processes logged since the last call; the stage now."""
        if self.path is not None:
            try:
                with self.path.open("rb") as f:
                    f.seek(self._offset)
                    chunk = f.read()
            except OSError:
                chunk = b""
            complete = chunk[: chunk.rfind(b"\n") + 1]
            self._offset += len(complete)
            for line in complete.splitlines():
                try:
                    entry = json.loads(line)
                    message = str(entry["message"])
                    stage, cache = stage_of(message), cache_of(message)
                    if stage is not None:
                        self.enter(stage, float(entry["t"]))
                    if cache is not None and self.compile_cache != CACHE_BROKEN:  # a failed load, then saved
                        self.compile_cache = cache
                except (ValueError, KeyError, TypeError):
                    continue
        return self.stages[-1][1] if self.stages else "starting"

    def summary(self) -> str:
        """Each stage with how long it lasted, e.g. `loading weights 1.2 s, compiling the model 21.0 s`."""
        self.poll()
        ends = [t for t, _ in self.stages[1:]] + [time.time() - self.started]
        return ", ".join(f"{stage} {end - t:.1f} s" for (t, stage), end in zip(self.stages, ends, strict=True))
