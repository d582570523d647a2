"""Reliability of the real server: typing storms, engine kills, and what is left behind.

Three parts, one server at a time (never concurrently), each a fresh `python -m sparkls serve` over stdio:
- storm (fake engine): `--keystrokes` keys (10,000) over 4 documents at `--rate` (50/s), the client cancelling
  each document's unanswered request before the next (as VS Code does); the fake engine streams a token every
  10 ms, so most generations are superseded mid-way. It runs no model: this measures the server;
- storm (llama.cpp): the same with the real default model (`--model-keystrokes`, 2,000), aborting real
  generations;
- kills (llama.cpp): typing at 10 keys/s while `engine/failpoints.py` kills the engine's worker or hangs it
  `--kills` times (alternately), with `engineStallSeconds` 3: how many outages were survived (a restart, then
  suggestions again), how many messages the editor got (one per outage is right), keystrokes answered.
For each storm: requests answered (every one must be), cancelled, leaked at the end (open engine requests,
running suggestion jobs, requests in flight, asyncio tasks against the start), resident memory at the start
and the end, and the time from `$/cancelRequest` to its answer (p50/p99 over all cancelled requests).
`--fuzz N` also runs tests/e2e/test_fuzz.py with N examples per property and reports the inputs it sent.

Writes JSON (machine, date, command) and prints a table. Usage:
python benchmarks/reliability.py [--keystrokes 10000] [--model-keystrokes 2000] [--kills 6] [--fuzz 100]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import random
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "benchmarks"))

from common import machine  # noqa: E402
from lsprotocol import types  # noqa: E402
from sparkls.engine.metrics import percentile  # noqa: E402
from sparkls.tools.client import Client  # noqa: E402

from tests.storm import StormResult, idle_counts, storm  # noqa: E402

FAKE = {"engine": "fake", "fakeTokenDelayMs": 10, "fakeResponse": "x = compute(items) + 1\n"}


def model_options(threads: int) -> dict[str, Any]:
    return {"engine": "llamacpp", "threads": threads, "engineStallSeconds": 3}


async def started(options: dict[str, Any], log: Path, env: dict[str, str] | None = None) -> Client:
    saved = {k: os.environ.get(k) for k in env or {}}
    os.environ.update(env or {})  # the server inherits the environment it is started with
    try:
        client = Client(log)
        await client.start(options)
    finally:
        for k, v in saved.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v
    await client.wait_ready()
    return client


def storm_row(name: str, r: StormResult) -> dict[str, Any]:
    b, a = r.before, r.after
    return {
        "name": name,
        "keystrokes": r.keystrokes,
        "seconds": round(r.seconds, 1),
        "requests": r.requests,
        "answered": r.answered,
        "unanswered": r.unanswered,
        "errors": len(r.other_errors),
        "cancelled": r.cancelled,
        "with_items": r.with_items,
        "leaked_engine_requests": a["openEngineRequests"],
        "leaked_jobs": a["suggestionJobs"],
        "leaked_requests_in_flight": max(0, a["requestsInFlight"] - 1),  # the health request itself
        "tasks_before": b["tasks"],
        "tasks_after": a["tasks"],
        "rss_mib_before": round(b["rssBytes"] / 2**20, 1),
        "rss_mib_after": round(a["rssBytes"] / 2**20, 1),
        "cancel_answer_ms_p50": round(percentile(r.cancel_answer_ms, 50), 2),
        "cancel_answer_ms_p99": round(percentile(r.cancel_answer_ms, 99), 2),
        "cancel_answer_n": len(r.cancel_answer_ms),
    }


async def run_storm(name: str, options: dict[str, Any], keystrokes: int, rate: float, tmp: Path) -> dict[str, Any]:
    client = await started(options, tmp / f"{name}.log")
    try:
        r = await storm(client, keystrokes, documents=4, rate_hz=rate)
    finally:
        await client.stop()
    row = storm_row(name, r)
    print(f"{name}: {json.dumps(row)}", flush=True)
    return row


async def run_kills(kills: int, threads: int, tmp: Path) -> dict[str, Any]:
    """Type at 10 keys/s while the worker is killed or hung `kills` times, 150 model calls apart. The typing is
    words the model cannot guess (so the typed-ahead cache seldom answers and the engine works)."""
    points = ",".join(f"llamacpp.decode={'die' if i % 2 == 0 else 'hang'}@{100 + 150 * i}" for i in range(kills))
    client = await started(model_options(threads), tmp / "kills.log", {"SPARKLS_FAILPOINTS": points})
    messages: list[str] = []
    client.lc.feature(types.WINDOW_SHOW_MESSAGE)(lambda params: messages.append(params.message))
    served_after: dict[int, int] = {}  # restarts so far -> suggestions shown since
    answered = keys = 0
    t0 = time.perf_counter()
    try:
        uri, text = "file:///kills/doc.py", "def total(values):\n    s = 0\n    for v in values:\n        "
        client.open(uri, text, "python")
        rng = random.Random(11)
        words = ["total", "weight", "scale", "offset", "(", ")", " + ", " * ", "v", "s", "values", "[i]", "len"]
        version, typed = 1, "".join(rng.choice(words) for _ in range(4000))
        deadline = time.monotonic() + 60 * kills + 60
        while time.monotonic() < deadline:
            restarts = (await idle_counts(client, timeout_s=0))["restarts"]
            if restarts >= kills and served_after.get(restarts, 0) >= 3:
                break
            ch = typed[keys % len(typed)]
            version += 1
            client.insert(uri, version, text, len(text), ch)
            text += ch
            keys += 1
            try:
                out = await asyncio.wait_for(
                    client.request(types.TEXT_DOCUMENT_INLINE_COMPLETION, client.inline_params(uri, text, len(text))),
                    60,
                )
                answered += 1
                if out is not None and out.items:
                    served_after[restarts] = served_after.get(restarts, 0) + 1
            except Exception as e:  # counted: every keystroke must be answered
                print(f"keystroke {keys}: {type(e).__name__}: {e}", flush=True)
            await asyncio.sleep(0.1)
        counts = await idle_counts(client)
    finally:
        await client.stop()
    row = {
        "name": "kills (llama.cpp)",
        "faults_injected": kills,
        "restarts": counts["restarts"],
        "outages_survived": sum(1 for r in range(1, kills + 1) if served_after.get(r, 0) > 0),
        "messages": len(messages),
        "keystrokes": keys,
        "answered": answered,
        "suggestions_shown": sum(served_after.values()),
        "seconds": round(time.perf_counter() - t0, 1),
        "leaked_engine_requests": counts["openEngineRequests"],
        "leaked_jobs": counts["suggestionJobs"],
    }
    print(f"kills: {json.dumps(row)}", flush=True)
    return row


def run_fuzz(examples: int) -> dict[str, Any]:
    """tests/e2e/test_fuzz.py's stateful fuzzing (three encodings) and garbage, `examples` examples each."""
    from tests.e2e.test_fuzz import run_fuzz as fuzz

    try:
        report, passed = fuzz(examples), True
    except Exception as e:  # a failure is a result here: report it
        print(f"fuzz failed: {type(e).__name__}: {e}", flush=True)
        report, passed = {}, False
    row = {"name": "fuzz", "passed": passed, "examples_per_property": examples, **report}
    print(f"fuzz: {json.dumps(row)}", flush=True)
    return row


def table(rows: list[dict[str, Any]]) -> str:
    storms = [r for r in rows if r["name"].startswith("storm")]
    lines = ["| | " + " | ".join(r["name"] for r in storms) + " |", "|---|" + "---:|" * len(storms)]
    for label, key in [
        ("keystrokes replayed", "keystrokes"),
        ("seconds", "seconds"),
        ("requests answered / sent", None),
        ("answered RequestCancelled", "cancelled"),
        ("answers with a suggestion", "with_items"),
        ("leaked engine requests", "leaked_engine_requests"),
        ("leaked suggestion jobs", "leaked_jobs"),
        ("leaked requests in flight", "leaked_requests_in_flight"),
        ("asyncio tasks before / after", None),
        ("RSS before / after (MiB)", None),
        ("cancel answered p50 / p99 (ms)", None),
    ]:
        cells = []
        for r in storms:
            if label.startswith("requests answered"):
                cells.append(f"{r['answered']} / {r['requests']}")
            elif label.startswith("asyncio"):
                cells.append(f"{r['tasks_before']} / {r['tasks_after']}")
            elif label.startswith("RSS"):
                cells.append(f"{r['rss_mib_before']} / {r['rss_mib_after']}")
            elif label.startswith("cancel answered"):
                cells.append(f"{r['cancel_answer_ms_p50']} / {r['cancel_answer_ms_p99']} (n={r['cancel_answer_n']})")
            else:
                cells.append(str(r[key]))
        lines.append(f"| {label} | " + " | ".join(cells) + " |")
    for r in rows:
        if r["name"].startswith("kills"):
            lines.append(
                f"\nengine kills: {r['faults_injected']} injected (die/hang alternately), {r['restarts']} "
                f"restarts, {r['outages_survived']} outages followed by suggestions again, {r['messages']} "
                f"messages shown, {r['answered']}/{r['keystrokes']} keystrokes answered, "
                f"{r['leaked_engine_requests']} leaked engine requests"
            )
        if r["name"] == "fuzz":
            lines.append(
                f"\nfuzz: passed={r['passed']}, {r.get('messages', '?')} messages sent "
                f"({r['examples_per_property']} examples per property), {r.get('seconds', '?')} s"
            )
    return "\n".join(lines)


async def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--keystrokes", type=int, default=10_000)
    ap.add_argument("--model-keystrokes", type=int, default=2_000)
    ap.add_argument("--rate", type=float, default=50.0, help="keystrokes per second")
    ap.add_argument("--kills", type=int, default=6)
    ap.add_argument("--fuzz", type=int, default=100, help="examples per fuzz property (0: skip)")
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--out", type=Path, default=ROOT / "benchmarks" / "results" / "reliability.json")
    args = ap.parse_args()
    tmp = Path(tempfile.mkdtemp(prefix="sparkls-reliability-"))
    rows = [await run_storm("storm (fake engine)", FAKE, args.keystrokes, args.rate, tmp)]
    if args.model_keystrokes:
        rows.append(
            await run_storm("storm (llama.cpp)", model_options(args.threads), args.model_keystrokes, args.rate, tmp)
        )
    if args.kills:
        rows.append(await run_kills(args.kills, args.threads, tmp))
    if args.fuzz:
        rows.append(run_fuzz(args.fuzz))
    text = table(rows)
    print(text)
    args.out.write_text(json.dumps({"machine": machine(), "results": rows}, indent=1) + "\n")
    args.out.with_suffix(".txt").write_text(text + "\n")
    print(f"wrote {args.out}")


if __name__ == "__main__":
    asyncio.run(main())
