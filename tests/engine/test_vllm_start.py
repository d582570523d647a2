"""vLLM's start stages as sparkls reads them (`engine/vllm_start.py`), without vLLM: the log lines below are
the ones vLLM 0.32 wrote during a CPU start of the tiny model (engine core and worker processes), and the
handler is built by `logging.config.dictConfig` from the config sparkls gives vLLM, as vLLM builds it in each
of its processes. The real start, through vLLM, is in tests/engine/test_vllm.py and tests/e2e/test_vllm_e2e.py."""

from __future__ import annotations

import contextlib
import io
import json
import logging
import logging.config
import time
from pathlib import Path
from typing import Any

from sparkls.engine.vllm_start import CACHE_BROKEN, CACHE_HIT, CACHE_MISS, StageLog, logging_config, stage_of

CPU_START = [  # (vLLM's message, the stage it starts or None)
    (
        "Initializing a V1 LLM engine (v0.32.0) with config: model='/tmp/tiny', enable_prefix_caching=True, "
        "compilation_config={'mode': 'torch.compile'}",
        "starting the engine core",
    ),
    ("OpenMP thread binding info: ", None),
    ("Starting to load model /tmp/tiny...", "loading weights"),
    ("Loading weights took 0.01 seconds", "loading weights"),
    ("Using LBHNC KV cache layout.", None),
    ("Warming up model for the compilation...", "compiling the model"),
    (
        "[backbone] Compiling model again due to a load failure from /root/.cache/vllm/torch_compile_cache/x/model, "
        "reason: 'function' object has no attribute 'finalize_loading'",
        "compiling the model (its compile cache did not load)",
    ),
    ("[backbone] saved AOT compiled function to /root/.cache/vllm/torch_compile_cache/x/model", None),
    ("Explicitly set (0.25/11.34) GiB for KV cache on node 0.", "allocating the KV cache"),
    (
        "CPU KV cache size: 524,288 tokens, Maximum concurrency for 4,096 tokens per request: 128.00x",
        "allocating the KV cache",
    ),
    ("init engine (profile, create kv cache, warmup model) took 8.07 s", "engine core ready"),
]

VLLM_LIKE_DEFAULT = {  # the shape of vllm.logger.DEFAULT_LOGGING_CONFIG (its formatter left out: vLLM's class)
    "formatters": {"vllm": {"format": "%(levelname)s %(message)s", "log_level": "INFO"}},
    "handlers": {
        "vllm": {"class": "logging.StreamHandler", "formatter": "vllm", "level": "INFO", "stream": "ext://sys.stdout"}
    },
    "loggers": {"vllm": {"handlers": ["vllm"], "level": "INFO", "propagate": False}},
    "version": 1,
    "disable_existing_loggers": False,
}


def test_each_line_of_a_cpu_start_maps_to_its_stage_in_order():
    assert [stage_of(message) for message, _ in CPU_START] == [stage for _, stage in CPU_START]


def test_the_handler_vllm_builds_records_stages_while_its_console_keeps_the_users_level(tmp_path, monkeypatch):
    stages_file = tmp_path / "stages.jsonl"
    monkeypatch.setenv("VLLM_LOGGING_STREAM", "ext://sys.stderr")
    config = logging_config(VLLM_LIKE_DEFAULT, stages_file, "WARNING")
    config["formatters"]["vllm"].pop("log_level")  # a key only vLLM's own formatter takes
    json.dumps(config)  # vLLM reads it from a JSON file
    logging.config.dictConfig(config)
    logger = logging.getLogger("vllm.v1.engine.core")
    console = io.StringIO()
    logging.getLogger("vllm").handlers[0].setStream(console)  # type: ignore[attr-defined]
    try:
        log = StageLog(stages_file)
        assert log.poll() == "starting"
        for message, _ in CPU_START[:6]:
            logger.info(message)
        assert log.poll() == "compiling the model"
        for message, _ in CPU_START[6:]:
            logger.warning(message) if "load failure" in message else logger.info(message)
        assert log.poll() == "engine core ready"
        assert [s for _, s in log.stages] == [
            "starting the engine core",
            "loading weights",
            "compiling the model",
            "compiling the model (its compile cache did not load)",
            "allocating the KV cache",
            "engine core ready",
        ]
        assert log.compile_cache == CACHE_BROKEN  # the later "saved" does not hide the failed load
        assert console.getvalue().count("\n") == 1 and "load failure" in console.getvalue()  # WARNING only
        assert len(stages_file.read_text().splitlines()) == 9  # the two lines that mark nothing are not kept
    finally:
        for handler in logging.getLogger("vllm").handlers:
            handler.close()
        logging.getLogger("vllm").handlers.clear()


def test_a_line_still_being_written_is_read_once_complete_and_the_cache_outcome_follows_the_log(tmp_path):
    path = tmp_path / "stages.jsonl"
    log = StageLog(path)
    line = json.dumps({"t": log.started + 1, "pid": 1, "message": "Starting to load model m"}) + "\n"
    path.write_text(line[:20])
    assert log.poll() == "starting"
    path.write_text(
        line
        + "not json\n"
        + json.dumps({"t": log.started + 2, "message": "Directly load AOT compilation from path /c/model"})
        + "\n"
    )
    assert log.poll() == "compiled model loaded from the cache"
    assert log.compile_cache == CACHE_HIT
    assert [round(t) for t, _ in log.stages] == [1, 2]
    miss = StageLog(None)
    miss.path = path
    path.write_text(json.dumps({"t": miss.started, "message": "[backbone] saved AOT compiled function to /c"}) + "\n")
    miss.poll()
    assert miss.compile_cache == CACHE_MISS and miss.poll() == "starting"


def test_the_summary_gives_each_stage_its_duration(tmp_path):
    log = StageLog()
    log.enter("importing vLLM", log.started)
    log.enter("loading weights", log.started + 2.0)
    log.enter("loading weights", log.started + 3.0)  # the same stage again: no new entry
    log.enter("ready", log.started + 5.5)
    assert log.summary().startswith("importing vLLM 2.0 s, loading weights 3.5 s, ready ")


# The server: writes the config sparkls hands vLLM and applies it itself (as vLLM does in the server's process),
# starts a "vLLM process" that applies it as vLLM does in its own, tells the test that process's pid and whether a
# guard runs in the server, and waits to be killed. The vLLM process applies the config once `go` exists.
SERVER = """
import json, logging.config, subprocess, sys, threading
from pathlib import Path
from sparkls.engine.vllm_start import logging_config
default, config, stages, core_code, go = json.loads(sys.argv[1]), sys.argv[2], sys.argv[3], sys.argv[4], sys.argv[5]
Path(config).write_text(json.dumps(logging_config(default, Path(stages), "INFO")))
logging.config.dictConfig(json.loads(Path(config).read_text()))
guarded = any(t.name == "sparkls-orphan-guard" for t in threading.enumerate())
core = subprocess.Popen([sys.executable, "-c", core_code, config, go], stdout=subprocess.PIPE, text=True)
print(core.pid, "server-guarded" if guarded else "server-unguarded", flush=True)
core.wait()
"""
CORE = """
import json, logging.config, os, sys, time
while not os.path.exists(sys.argv[2]):
    time.sleep(0.01)
logging.config.dictConfig(json.load(open(sys.argv[1])))
open(sys.argv[2] + ".configured", "w").close()
while True:
    time.sleep(60)
"""


def kill_server_and_watch_core(tmp_path: Path, configure_before_kill: bool) -> None:
    import subprocess
    import sys

    import psutil

    default = {**VLLM_LIKE_DEFAULT, "formatters": {"vllm": {"format": "%(message)s"}}}
    go = tmp_path / "go"
    if configure_before_kill:
        go.touch()
    args = [json.dumps(default), str(tmp_path / "logging.json"), str(tmp_path / "stages.jsonl"), CORE, str(go)]
    server = subprocess.Popen([sys.executable, "-c", SERVER, *args], stdout=subprocess.PIPE, text=True)
    core = None
    try:
        pid, guarded = server.stdout.readline().split()  # type: ignore[union-attr]
        core = psutil.Process(int(pid))
        assert guarded == "server-unguarded" and core.ppid() == server.pid  # no guard in the server itself
        if configure_before_kill:
            wait_for_file(Path(f"{go}.configured"))
        server.kill()  # SIGKILL: nothing of the server runs any more
        server.wait(30)
        go.touch()
        wait_ended([core], 60)  # the guard looks once a second; a generous bound
        assert not running(core), "the vLLM process outlived its server"
    finally:
        server.kill()
        if core is not None:
            with contextlib.suppress(psutil.Error):
                core.kill()


def test_a_vllm_process_ends_itself_when_the_server_that_started_it_is_killed(tmp_path):
    kill_server_and_watch_core(tmp_path, configure_before_kill=True)


def test_a_vllm_process_configured_after_its_server_was_killed_ends_too(tmp_path):
    """vLLM applies its logging config only once imported (10-20 s into a CPU start): the server may be gone."""
    kill_server_and_watch_core(tmp_path, configure_before_kill=False)


def wait_for_file(path: Path, timeout_s: float = 30) -> None:
    deadline = time.monotonic() + timeout_s
    while not path.exists():
        assert time.monotonic() < deadline, f"{path} did not appear"
        time.sleep(0.01)


def running(process: Any) -> bool:
    """Alive and not a zombie (an orphan's new parent may reap it late)."""
    import psutil

    try:
        return process.is_running() and process.status() != psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return False


def wait_ended(processes: list[Any], timeout_s: float) -> None:
    """Return once none of `processes` is `running`, or after `timeout_s`."""
    deadline = time.monotonic() + timeout_s
    while any(map(running, processes)) and time.monotonic() < deadline:
        time.sleep(0.1)
