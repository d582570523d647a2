"""Failpoints: faults injected on purpose by the fault-injection tests and the reliability benchmark.

Inert unless the environment variable `SPARKLS_FAILPOINTS` names some, e.g.
`SPARKLS_FAILPOINTS="llamacpp.decode=die@40,llamacpp.decode=hang@400"`: the 40th time this process reaches the
point `llamacpp.decode`, the worker dies; the 400th time, it hangs. Each entry fires once per process (a
restarted engine does not meet the same fault again). The actions:

- `error`: raise `FailpointError` (a `RuntimeError`), as a decode call that returns an error does;
- `die`: raise `WorkerDied`, a `BaseException` that no request handler catches: the worker thread ends;
- `hang`: block, as a stuck kernel would, until `release()` (an engine's `close`) or 10 minutes pass.
"""

from __future__ import annotations

import collections
import logging
import os
import threading

log = logging.getLogger(__name__)

ENV = "SPARKLS_FAILPOINTS"
ACTIONS = ("error", "die", "hang")
HANG_LIMIT_S = 600.0


class FailpointError(RuntimeError):
    """An injected error (the `error` action)."""


class WorkerDied(BaseException):
    """An injected death of an engine's worker thread (the `die` action)."""


def parse(spec: str) -> dict[str, dict[int, str]]:
    """`point=action@n,...` -> {point: {n: action}} (pure); a malformed entry is a `ValueError`."""
    table: dict[str, dict[int, str]] = {}
    for entry in filter(None, (e.strip() for e in spec.split(","))):
        point, _, rest = entry.partition("=")
        action, _, n = rest.partition("@")
        if not point or action not in ACTIONS or not n.isdigit() or int(n) < 1:
            raise ValueError(f"{ENV}: {entry!r} is not point=action@n (action: {', '.join(ACTIONS)})")
        table.setdefault(point, {})[int(n)] = action
    return table


_table = parse(os.environ.get(ENV, ""))
_hits: collections.Counter[str] = collections.Counter()
_lock = threading.Lock()
_released = threading.Event()


def hit(point: str) -> None:
    """Reached `point`: do what a failpoint set for this hit says (nothing, almost always)."""
    if not _table:
        return
    with _lock:
        _hits[point] += 1
        action = _table.get(point, {}).pop(_hits[point], None)
    if action is None:
        return
    log.warning("failpoint %s: %s at hit %d", point, action, _hits[point])
    if action == "error":
        raise FailpointError(f"failpoint {point}: injected error")
    if action == "die":
        raise WorkerDied(f"failpoint {point}: injected worker death")
    _released.clear()
    _released.wait(HANG_LIMIT_S)


def release() -> None:
    """Let every hung failpoint go on (an engine closing)."""
    _released.set()
