"""Replay typing on real files through the real server and measure what a user waits for.

For each chosen file of ../shared/corpus, a line inside a function body is removed (its
indentation kept), the file is opened, the cursor is placed (one cold request, reported apart),
and the line is typed back one character at a time: a didChange and an inlineCompletion request
per keystroke, with $/cancelRequest for the previous request still pending, as editors do.

Two configurations run side by side in one run, on the same engine and model:
- sparkls: stable prompt layout, KV-cache reuse, cancellation, typed-ahead cache;
- naive: a window centred on the cursor, no KV reuse, no cancellation, no typed-ahead cache.

Prints a table and writes JSON (and a PNG plot when matplotlib is installed).
Usage: python benchmarks/latency.py [--files 8] [--naive-keystrokes 6] [--threads 1]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import platform
import random
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from sparkls import context
from sparkls.document import Document
from sparkls.lsp.client import Client

ROOT = Path(__file__).resolve().parents[1]
CORPUS = ROOT.parent / "shared" / "corpus"
EXT_LANG = {".py": "python", ".ts": "typescript", ".go": "go", ".rs": "rust"}


@dataclass
class Target:
    path: Path
    language: str
    text: str  # the file with the target line's code removed
    cursor: int  # where typing starts
    typed: str  # what the user types


@dataclass
class Run:
    name: str
    latencies_ms: list[float] = field(default_factory=list)  # keystroke -> suggestion shown (completed)
    cold_ms: list[float] = field(default_factory=list)
    cancelled: int = 0
    sent: int = 0
    suggestions: list[Any] = field(default_factory=list)
    engine: list[Any] = field(default_factory=list)
    wall_s: float = 0.0


def pick_targets(n_files: int, seed: int = 0, max_chars: int = 40) -> list[Target]:
    rng = random.Random(seed)
    files = sorted(p for p in CORPUS.rglob("*") if p.suffix in EXT_LANG)
    by_lang: dict[str, list[Path]] = {}
    for p in files:
        by_lang.setdefault(EXT_LANG[p.suffix], []).append(p)
    chosen: list[Path] = []
    while len(chosen) < n_files and any(by_lang.values()):
        for lang in sorted(by_lang):
            if by_lang[lang] and len(chosen) < n_files:
                chosen.append(by_lang[lang].pop(rng.randrange(len(by_lang[lang]))))
    targets = []
    for path in chosen:
        lang = EXT_LANG[path.suffix]
        text = path.read_text(encoding="utf-8")
        doc = Document.open(path.as_uri(), lang, 1, text)
        kinds = context.DEFINITIONS[lang]
        candidates = []
        stack = [doc.tree.root_node] if doc.tree else []
        while stack:
            node = stack.pop()
            stack.extend(node.children)
            body = node.child_by_field_name("body") if node.type in kinds else None
            if body is None or body.end_point[0] - body.start_point[0] < 4:
                continue
            for row in range(body.start_point[0] + 1, body.end_point[0]):
                line = text.split("\n")[row] if row < text.count("\n") else ""
                code = line.strip()
                if len(code) >= 12 and not code.startswith(("//", "#", "/*", "*")):
                    candidates.append(row)
        if not candidates:
            continue
        row = rng.choice(sorted(set(candidates)))
        lines = text.split("\n")
        line = lines[row]
        indent = line[: len(line) - len(line.lstrip())]
        typed = line.strip()[:max_chars]
        start = sum(len(ln) + 1 for ln in lines[:row]) + len(indent)
        new_text = text[:start] + text[start + len(line.strip()) :]
        targets.append(Target(path, lang, new_text, start, typed))
    return targets


def schedule(typed: str, char_ms: float, word_pause_ms: float) -> list[float]:
    """Delay before each keystroke: steady typing with a pause after each word."""
    out = []
    for i, _ch in enumerate(typed):
        pause = word_pause_ms if i > 0 and typed[i - 1] in " .,(){}[]:;=" else 0.0
        out.append(char_ms + pause)
    return out


async def replay(name: str, options: dict[str, Any], targets: list[Target], cancel: bool,
                 keystrokes: int | None, char_ms: float, word_pause_ms: float) -> Run:
    run = Run(name)
    client = Client(Path(tempfile.gettempdir()) / f"sparkls-bench-{name}.log")
    await client.start(options)
    health = await client.wait_ready()
    if not health.ok:
        raise SystemExit(f"engine not available: {health.detail}")
    t_start = time.perf_counter()
    for k, t in enumerate(targets):
        uri = f"file:///bench/{k}/{t.path.name}"
        text, version = t.text, 1
        client.open(uri, text, t.language)
        t0 = time.perf_counter()
        await client.lc.text_document_inline_completion_async(client.inline_params(uri, text, t.cursor))
        run.cold_ms.append((time.perf_counter() - t0) * 1000)
        pending: dict[int, tuple[asyncio.Future[Any], float]] = {}
        done_lat: list[float] = []

        def track(fut: asyncio.Future[Any], sent_at: float, done: list[float] = done_lat) -> None:
            def cb(done_fut: asyncio.Future[Any]) -> None:
                if done_fut.cancelled() or done_fut.exception() is not None:
                    run.cancelled += 1
                else:
                    done.append((time.perf_counter() - sent_at) * 1000)
            fut.add_done_callback(cb)

        typed = t.typed[:keystrokes] if keystrokes else t.typed
        cursor = t.cursor
        for i, (ch, delay) in enumerate(zip(typed, schedule(typed, char_ms, word_pause_ms), strict=True)):
            await asyncio.sleep(delay / 1000)
            version += 1
            client.insert(uri, version, text, cursor, ch)
            text = text[:cursor] + ch + text[cursor:]
            cursor += 1
            if cancel:
                for mid, (fut, _) in list(pending.items()):
                    if not fut.done():
                        client.cancel(mid)
            msg_id = 1_000_000 * (k + 1) + i
            fut = asyncio.ensure_future(client.request(
                "textDocument/inlineCompletion", client.inline_params(uri, text, cursor), msg_id=msg_id))
            sent_at = time.perf_counter()
            track(fut, sent_at)
            pending[msg_id] = (fut, sent_at)
            run.sent += 1
        await asyncio.wait([f for f, _ in pending.values()], timeout=600)
        run.latencies_ms.extend(done_lat)
    run.wall_s = time.perf_counter() - t_start
    m = await client.request("sparkls/metrics")
    run.suggestions = m.suggestions
    run.engine = m.engine
    await client.stop()
    return run


def pct(values: list[float], q: float) -> float:
    if not values:
        return float("nan")
    values = sorted(values)
    return values[min(len(values) - 1, int(q * len(values)))]


def summarize(run: Run) -> dict[str, Any]:
    model = [s for s in run.suggestions if s.source == "model"]
    cold_ids = {s.requestId for s in model if s.version == 1}  # the first request on a freshly opened file
    warm = [s for s in model if s.requestId not in cold_ids]
    ttft = [s.timings.ttft_ms for s in warm]
    overhead = [s.timings.overhead_ms for s in run.suggestions]
    tps = [s.stats.decode_tokens / (s.stats.decode_ms / 1000) for s in model if s.stats.decode_ms > 0
           and s.stats.decode_tokens > 2]
    typing = [e for e in run.engine if e.requestId not in cold_ids]
    prompt = sum(e.prompt_tokens for e in typing)
    reused = sum(e.reused_tokens for e in typing)
    model_lat = [s.timings.total_ms for s in warm]
    return {
        "name": run.name,
        "requests": run.sent, "completed": len(run.latencies_ms), "cancelled": run.cancelled,
        "typeahead_served": sum(1 for s in run.suggestions if s.source == "typeahead"),
        "time_to_suggestion_ms": {"p50": pct(run.latencies_ms, 0.5), "p90": pct(run.latencies_ms, 0.9)},
        "model_served_total_ms": {"p50": pct(model_lat, 0.5), "p90": pct(model_lat, 0.9), "n": len(model_lat)},
        "cold_first_request_ms": {"p50": pct(run.cold_ms, 0.5), "max": max(run.cold_ms, default=float("nan"))},
        "warm_ttft_ms": {"p50": pct(ttft, 0.5), "p90": pct(ttft, 0.9), "n": len(ttft)},
        "decode_tok_s": {"p50": pct(tps, 0.5)},
        "server_overhead_ms": {"p50": pct(overhead, 0.5), "p90": pct(overhead, 0.9)},
        "kv_reuse_fraction_typing": reused / prompt if prompt else 0.0,
        "engine_requests_typing": len(typing),
        "prompt_tokens_typing": prompt,
        "wall_s": run.wall_s,
    }


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--files", type=int, default=8)
    ap.add_argument("--threads", type=int, default=0, help="engine threads (0: max(1, cores-1))")
    ap.add_argument("--char-ms", type=float, default=120.0, help="delay between keystrokes")
    ap.add_argument("--word-pause-ms", type=float, default=400.0, help="extra pause after a word")
    ap.add_argument("--naive-keystrokes", type=int, default=6, help="keystrokes per line for the naive run")
    ap.add_argument("--skip-naive", action="store_true")
    ap.add_argument("--out", default=str(ROOT / "benchmarks" / "results" / "latency.json"))
    args = ap.parse_args()
    if not CORPUS.is_dir():
        print(f"no corpus at {CORPUS}", file=sys.stderr)
        return 2
    targets = pick_targets(args.files)
    print(f"{len(targets)} files, {sum(len(t.typed) for t in targets)} keystrokes; "
          f"machine: {platform.machine()} {os.cpu_count()} cores; threads={args.threads or 'default'}")
    base = {"engine": "llamacpp", "threads": args.threads}
    ours = asyncio.run(replay("sparkls", base, targets, True, None, args.char_ms, args.word_pause_ms))
    results = [summarize(ours)]
    if not args.skip_naive:
        naive_opts = base | {"promptLayout": "centered", "kvCache": False, "typeahead": False, "supersede": False}
        naive = asyncio.run(replay("naive", naive_opts, targets, False, args.naive_keystrokes, args.char_ms,
                                   args.word_pause_ms))
        results.append(summarize(naive))
    rows = [
        ("time to suggestion p50 (ms)", lambda r: r["time_to_suggestion_ms"]["p50"]),
        ("time to suggestion p90 (ms)", lambda r: r["time_to_suggestion_ms"]["p90"]),
        ("model-served, server total p50 (ms)", lambda r: r["model_served_total_ms"]["p50"]),
        ("model-served, server total p90 (ms)", lambda r: r["model_served_total_ms"]["p90"]),
        ("warm TTFT p50 (ms)", lambda r: r["warm_ttft_ms"]["p50"]),
        ("warm TTFT p90 (ms)", lambda r: r["warm_ttft_ms"]["p90"]),
        ("cold first request p50 (ms)", lambda r: r["cold_first_request_ms"]["p50"]),
        ("decode tok/s p50", lambda r: r["decode_tok_s"]["p50"]),
        ("server overhead p50 (ms)", lambda r: r["server_overhead_ms"]["p50"]),
        ("server overhead p90 (ms)", lambda r: r["server_overhead_ms"]["p90"]),
        ("KV reuse while typing", lambda r: r["kv_reuse_fraction_typing"]),
        ("engine requests while typing", lambda r: r["engine_requests_typing"]),
        ("requests / completed / cancelled", lambda r: f"{r['requests']}/{r['completed']}/{r['cancelled']}"),
        ("served by typed-ahead cache", lambda r: r["typeahead_served"]),
    ]
    print(f"\n{'metric':<38}" + "".join(f"{r['name']:>16}" for r in results))
    for label, get in rows:
        cells = []
        for r in results:
            v = get(r)
            cells.append(f"{v:>16.3f}" if isinstance(v, float) and v < 1.5 else
                         f"{v:>16.1f}" if isinstance(v, float) else f"{v!s:>16}")
        print(f"{label:<38}" + "".join(cells))
    if len(results) == 2:
        ratio = results[1]["time_to_suggestion_ms"]["p50"] / results[0]["time_to_suggestion_ms"]["p50"]
        print(f"\nnaive / sparkls p50 time to suggestion: {ratio:.1f}x")
        results.append({"ratio_p50_time_to_suggestion": ratio})
    out = Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    meta = {"machine": f"{platform.machine()} {os.cpu_count()} cores", "python": platform.python_version(),
            "files": [str(t.path.name) for t in targets], "args": vars(args)}
    engine_log = {r.name: [e._asdict() for e in r.engine] for r in ([ours] if args.skip_naive else [ours, naive])}
    out.write_text(json.dumps({"meta": meta, "results": results, "engine_requests": engine_log}, indent=2,
                              default=str))
    print(f"wrote {out}")
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt

        fig, ax = plt.subplots(figsize=(6, 3))
        ax.boxplot([ours.latencies_ms] + ([naive.latencies_ms] if not args.skip_naive else []),
                   labels=["sparkls", "naive"][: 1 if args.skip_naive else 2])
        ax.set_yscale("log")
        ax.set_ylabel("keystroke -> suggestion (ms)")
        fig.tight_layout()
        fig.savefig(out.with_suffix(".png"))
    except ImportError:
        pass
    return 0


if __name__ == "__main__":
    sys.exit(main())
