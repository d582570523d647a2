"""Next-edit predictions on commit-edits: right often enough to show, where the edit is, and how fast.

Data: `../shared/eval/commit-edits` (509 commits of go, typescript, rust and python projects). Each row is split
by a hash of its id into a `tuning` half (tune prompts and the gate on it only) and a `reported` half; `--half`
picks one, `--limit N` takes N rows spread over it (every k-th row per language).

Per row, through the real server: the commit's `before` file is opened, every history hunk but the last is sent
as a didChange, and `sparkls/inlineEdit` is asked at the target hunk's first line (`cold`: the first prompt the
engine sees for this document). Then the last history hunk is sent and the same place asked again (`warm`: the
engine holds the previous prediction's prompt, one new edit since); that answer is scored:
- exact: the predicted window equals the window with the target hunk applied; a row without a prediction (the
  server answered no edits, e.g. its gate held it back) is a miss, so exact match is over all rows;
- chrF (chrF2, whitespace ignored) of the predicted hunk against the target hunk;
- located: the prediction's changed lines overlap the target hunk's lines or the line after them (an insertion
  there) (over rows with a prediction);
- shown: the answer has edits; precision = exact among shown, coverage = shown among rows.
Time to prediction: cold and warm, p50/p90 over all rows.

Systems, one run: `sparkls` (this checkout), `baseline` (the server of `--baseline-ref`, a git worktree: today's
behaviour), and `raw`: the same model prompted directly with the prompt the server renders (sparkls.edit.nextedit
here, same history, a fresh frame per row), its answer parsed as the server parses it but with no confidence gate
and no limit on the lines it changes, scored the same way: the model's own ceiling on this prompt, so what the
pipeline loses is a number.

Usage: python benchmarks/next_eval.py [--models 0.5b,1.5b] [--systems sparkls,baseline,raw] [--baseline-ref REF]
       [--half reported|tuning] [--limit N] [--threads N] [--out FILE]
Writes JSON (commit, CPU, cores, date, command) and prints a table.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import gzip
import hashlib
import json
import re
import sys
import tempfile
import time
from collections import defaultdict
from pathlib import Path
from typing import Any

from lsprotocol import types
from sparkls.edit import diff, nextedit
from sparkls.engine.llamacpp import default_interactive_threads
from sparkls.settings import Settings
from sparkls.text.document import Document, file_name
from sparkls.text.positions import LineIndex
from sparkls.tools.client import Client, position

sys.path.insert(0, str(Path(__file__).resolve().parent))
from common import baseline_env, dist, git, machine, plain
from edit_eval import chrf, hunk_text, spread

ROOT = Path(__file__).resolve().parents[1]
DATA = ROOT.parent / "shared" / "eval" / "commit-edits" / "commit_edits.jsonl.gz"
MODELS = {"0.5b": "qwen2.5-coder-0.5b", "1.5b": "qwen2.5-coder-1.5b"}
FENCE = re.compile(r"```[^\n]*\n(.*?)(?:```|\Z)", re.S)


def half_of(row_id: str) -> str:
    """`tuning` or `reported`, fixed by the row's id (the same split on every machine and run)."""
    return "tuning" if hashlib.sha256(row_id.encode()).digest()[0] % 2 == 0 else "reported"


def load(half: str, limit: int | None) -> list[dict[str, Any]]:
    with gzip.open(DATA, "rt") as f:
        rows = [r for r in map(json.loads, f) if half == "all" or half_of(r["id"]) == half]
    by: dict[str, list[dict[str, Any]]] = defaultdict(list)
    for r in rows:
        by[r["lang"]].append(r)
    if not limit or limit >= len(rows):
        return [r for lang in sorted(by) for r in by[lang]]
    # `limit` spread over the languages in proportion to their rows.
    return [r for lang in sorted(by) for r in spread(by[lang], max(1, round(limit * len(by[lang]) / len(rows))))]


class Replay:
    """A row's text as its history hunks are applied: (start, end, new text) per hunk, in the document's order."""

    def __init__(self, row: dict[str, Any]) -> None:
        self.row = row
        self.text = row["before"]
        self.shift: list[tuple[int, int]] = []

    def next_change(self, hi: int) -> tuple[int, int, str] | None:
        h = self.row["hunks"][hi]
        idx = h["old_start"] if h["old_lines"] == 0 else h["old_start"] - 1
        idx += sum(d for at, d in self.shift if at < h["old_start"])
        lines = self.text.splitlines(keepends=True)
        start = sum(len(x) for x in lines[:idx])
        end = start + len(h["removed"])
        if self.text[start:end] != h["removed"]:
            return None
        self.shift.append((h["old_start"], h["new_lines"] - h["old_lines"]))
        return start, end, h["added"]

    def apply(self, change: tuple[int, int, str]) -> None:
        start, end, new = change
        self.text = self.text[:start] + new + self.text[end:]


def target_of(text: str, row: dict[str, Any]) -> tuple[int, int, str, int, int]:
    """(start, end, added) of the target hunk in `text`, and its lines [first, last) there."""
    t = row["target"]
    lines = text.splitlines(keepends=True)
    tidx = t["old_start_in_current"] if not t["removed"] else t["old_start_in_current"] - 1
    start = sum(len(x) for x in lines[:tidx])
    return start, start + len(t["removed"]), t["added"], tidx, tidx + max(1, t["removed"].count("\n"))


def score(
    text: str, row: dict[str, Any], ws: int, we: int, window_after: str, edits: list[diff.Edit]
) -> dict[str, Any]:
    """A prediction (the window [ws, we) of `text` rewritten as `window_after`, or minimal `edits`) against the
    row's target."""
    tstart, tend, added, first, last = target_of(text, row)
    expected = text[:tstart] + added + text[tend:]
    grow = len(added) - (tend - tstart)
    fits = ws <= tstart and tend <= we
    exact = bool(edits) and fits and window_after == expected[ws : we + grow]
    changed = {line for e in edits for line in range(text.count("\n", 0, e.start), text.count("\n", 0, e.end) + 1)}
    return {
        "exact": exact,
        "shown": bool(edits),
        "located": bool(changed & set(range(first, last + 1))),
        "fits_window": fits,
        "chrf": chrf(hunk_text(text[ws:we], window_after), hunk_text(row["target"]["removed"], added))
        if edits
        else 0.0,
        "predicted_hunk": hunk_text(text[ws:we], window_after),
        "target_hunk": hunk_text(row["target"]["removed"], added),
    }


def progress(label: str, out: list[dict[str, Any]], total: int) -> None:
    if len(out) % 10 == 0:
        done = [x for x in out if "exact" in x]
        print(f"  {label} {len(out)}/{total} exact {sum(x['exact'] for x in done)}/{len(done)}", flush=True)


async def ask(client: Client, uri: str, text: str, version: int, at: int) -> tuple[float, Any]:
    pos = position(text, at)
    t0 = time.perf_counter()
    r = await client.request(
        "sparkls/inlineEdit",
        {"textDocument": {"uri": uri, "version": version}, "position": {"line": pos.line, "character": pos.character}},
    )
    return (time.perf_counter() - t0) * 1000, r


async def run_server(
    name: str, model: str, rows: list[dict[str, Any]], args: argparse.Namespace, env: dict[str, str] | None
) -> list[dict[str, Any]]:
    client = Client(Path(tempfile.gettempdir()) / f"sparkls-next-{name}-{model}.log")
    await client.start(
        {"engine": "llamacpp", "model": MODELS[model], "threads": args.threads, "nextEditPrefetch": False}, env=env
    )
    health = await client.wait_ready()  # the model loads before the first row, not inside its cold time
    if not health.ok:
        await client.stop()
        raise SystemExit(f"{name} {model}: the engine is not available: {health.detail}")
    out = []
    try:
        for i, row in enumerate(rows):
            out.append(await server_row(client, i, row))
            progress(f"{name} {model}", out, len(rows))
    finally:
        await client.stop()
    return out


async def server_row(client: Client, i: int, row: dict[str, Any]) -> dict[str, Any]:
    uri = f"file:///commits/{i}/{row['path'].rsplit('/', 1)[-1]}"
    replay = Replay(row)
    client.open(uri, replay.text, row["lang"])
    version = 1
    try:
        changes = []
        for hi in row["history_hunks"]:
            change = replay.next_change(hi)
            if change is None:
                return {"id": row["id"], "lang": row["lang"], "skipped": "history did not apply"}
            changes.append((change, replay.text))
            replay.apply(change)
        if replay.text != row["current"]:
            return {"id": row["id"], "lang": row["lang"], "skipped": "history did not apply"}
        for k, ((start, end, new), before) in enumerate(changes):
            if k == len(changes) - 1:  # cold: asked before the last edit, where the target is then
                cold_ms, _ = await ask(client, uri, before, version, target_of_before(before, row, (start, end, new)))
            version += 1
            client.lc.text_document_did_change(
                types.DidChangeTextDocumentParams(
                    text_document=types.VersionedTextDocumentIdentifier(uri=uri, version=version),
                    content_changes=[
                        types.TextDocumentContentChangePartial(
                            range=types.Range(start=position(before, start), end=position(before, end)), text=new
                        )
                    ],
                )
            )
        text = replay.text
        warm_ms, r = await ask(client, uri, text, version, target_of(text, row)[0])
        idx = LineIndex.of(text)
        ws = idx.offset(r.range.start.line, r.range.start.character, "utf-16") if r.edits else 0
        we = idx.offset(r.range.end.line, r.range.end.character, "utf-16") if r.edits else 0
        edits = [
            diff.Edit(
                idx.offset(e.range.start.line, e.range.start.character, "utf-16"),
                idx.offset(e.range.end.line, e.range.end.character, "utf-16"),
                e.newText,
            )
            for e in r.edits
        ]
        after = diff.apply(text, edits)
        window_after = after[ws : len(after) - (len(text) - we)]
        m = plain(await client.request("sparkls/metrics"))
        rec = next((e for e in reversed(m["engine"]) if e["requestId"] == r.requestId), {}) if r.requestId else {}
        return {
            "id": row["id"],
            "lang": row["lang"],
            **score(text, row, ws, we, window_after, edits),
            "cold_ms": cold_ms,
            "warm_ms": warm_ms,
            "prompt_tokens": rec.get("prompt_tokens", 0),
            "reused_tokens": rec.get("reused_tokens", 0),
            "decode_tokens": rec.get("decode_tokens", 0),
            **{k: rec.get(k) for k in ("queue_ms", "prefill_ms", "ttft_ms", "decode_ms", "accepted_tokens")},
        }
    finally:
        client.close(uri)


def target_of_before(before: str, row: dict[str, Any], change: tuple[int, int, str]) -> int:
    """Where the target hunk starts in the text before the last history edit (the cold ask's place)."""
    start, end, new = change
    tstart = target_of(row["current"], row)[0]
    return tstart if tstart <= start else max(start, tstart - (len(new) - (end - start)))


async def run_raw(model: str, rows: list[dict[str, Any]], args: argparse.Namespace) -> list[dict[str, Any]]:
    """The model prompted directly with the server's next-edit prompt (a fresh frame per row); its answer parsed as the
    server parses it (nextedit.parse), with no gate and no limit on the lines it changes."""
    from sparkls.engine.base import Delta, GenerationRequest
    from sparkls.engine.llamacpp import LlamaCppEngine
    from sparkls.engine.model_files import resolve_model_path
    from sparkls.engine.options import LlamaCppOptions

    settings = Settings()
    engine = LlamaCppEngine(
        LlamaCppOptions(model_path=str(resolve_model_path("", MODELS[model])), threads=args.threads)
    )
    out = []
    try:
        for i, row in enumerate(rows):
            replay, history, t = Replay(row), nextedit.History(), 0.0
            ok = True
            for hi in row["history_hunks"]:
                change = replay.next_change(hi)
                if change is None:
                    ok = False
                    break
                t += 1.0
                history.record(replay.text, change[0], change[1], change[2], now=t)
                replay.apply(change)
            if not ok or replay.text != row["current"]:
                out.append({"id": row["id"], "lang": row["lang"], "skipped": "history did not apply"})
                continue
            text = replay.text
            doc = Document.open(f"file:///commits/{i}/{row['path'].rsplit('/', 1)[-1]}", row["lang"], 1, text)
            p = nextedit.render(
                doc,
                target_of(text, row)[0],
                history,
                file_name(doc.uri),
                settings.next_edit_lines_before,
                settings.next_edit_lines_after,
                max_lines=settings.next_edit_max_lines,
            )
            t0 = time.perf_counter()
            answer = p.removed
            async with contextlib.aclosing(
                engine.stream(GenerationRequest(p.text, max_tokens=160, stop=nextedit.STOPS))
            ) as stream:
                async for ev in stream:  # leaving it closes the stream, which aborts the request
                    if isinstance(ev, Delta):
                        answer += ev.text
                        if nextedit.finished(answer):
                            break
            ms = (time.perf_counter() - t0) * 1000
            ws, we, window_after = nextedit.applied(text, p, nextedit.parse(p, answer))
            edits = diff.region_edits(text, ws, we, window_after) if window_after != text[ws:we] else []
            out.append(
                {
                    "id": row["id"],
                    "lang": row["lang"],
                    **score(text, row, ws, we, window_after, edits),
                    "cold_ms": ms,
                    "warm_ms": ms,
                }
            )
            progress(f"raw {model}", out, len(rows))
    finally:
        await engine.close()
    return out


def summarize(rows: list[dict[str, Any]]) -> dict[str, Any]:
    scored = [r for r in rows if "exact" in r]
    shown = [r for r in scored if r["shown"]]
    n = max(1, len(scored))
    return {
        "rows": len(scored),
        "skipped": len(rows) - len(scored),
        "exact": sum(r["exact"] for r in scored) / n,
        "chrf": sum(r["chrf"] for r in scored) / n,
        "shown": len(shown) / n,
        "precision": sum(r["exact"] for r in shown) / len(shown) if shown else None,
        "located": sum(r["located"] for r in shown) / len(shown) if shown else None,
        "cold_ms": dist([r["cold_ms"] for r in scored]),
        "warm_ms": dist([r["warm_ms"] for r in scored]),
        "by_lang": {
            lang: {"rows": len(rs), "exact": sum(r["exact"] for r in rs) / len(rs)}
            for lang in sorted({r["lang"] for r in scored})
            for rs in [[r for r in scored if r["lang"] == lang]]
        },
    }


def table(results: list[dict[str, Any]]) -> str:
    def pctf(v: float | None) -> str:
        return "-" if v is None else f"{100 * v:.1f}"

    def ms(d: dict[str, Any]) -> str:
        return "-" if d["p50"] is None else f"{d['p50']:,.0f} / {d['p90']:,.0f}"

    rows = [
        [
            "model, system",
            "rows",
            "exact %",
            "chrF",
            "shown %",
            "precision %",
            "located %",
            "warm ms p50 / p90",
            "cold ms p50 / p90",
        ]
    ]
    for r in results:
        s = r["summary"]
        rows.append(
            [
                f"{r['model']} {r['system']}",
                str(s["rows"]),
                pctf(s["exact"]),
                f"{s['chrf']:.1f}",
                pctf(s["shown"]),
                pctf(s["precision"]),
                pctf(s["located"]),
                ms(s["warm_ms"]),
                ms(s["cold_ms"]),
            ]
        )
    widths = [max(len(x[i]) for x in rows) for i in range(len(rows[0]))]
    return "\n".join("  ".join(c.ljust(w) for c, w in zip(x, widths, strict=True)) for x in rows)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--models", default="0.5b")
    ap.add_argument("--systems", default="sparkls,raw")
    ap.add_argument("--baseline-ref", default="", help="the commit `baseline` runs (a git worktree)")
    ap.add_argument("--half", default="reported", choices=["reported", "tuning", "all"])
    ap.add_argument("--limit", type=int, default=0, help="rows of the half, spread over it (0: all)")
    ap.add_argument(
        "--threads",
        type=int,
        default=0,
        help="decoding threads for every system (0: every core, sparkls' default for next edits; an older baseline "
        "server gets the same threads, not its own default)",
    )
    ap.add_argument("--out", default="")
    args = ap.parse_args()
    args.threads = args.threads or default_interactive_threads()
    if not DATA.exists():
        raise SystemExit(f"{DATA} is missing")
    systems = args.systems.split(",")
    if "baseline" in systems and not args.baseline_ref:
        raise SystemExit("--systems baseline needs --baseline-ref")
    rows = load(args.half, args.limit or None)
    t0 = time.perf_counter()
    results = []
    with tempfile.TemporaryDirectory() as tmp:
        env = baseline_env(args.baseline_ref, Path(tmp) / "baseline") if "baseline" in systems else None
        try:
            for model in args.models.split(","):
                for system in systems:
                    print(f"-- {system} {model}: {len(rows)} rows of the {args.half} half", flush=True)
                    if system == "raw":
                        out = asyncio.run(run_raw(model, rows, args))
                    else:
                        out = asyncio.run(run_server(system, model, rows, args, env if system == "baseline" else None))
                    results.append({"model": model, "system": system, "summary": summarize(out), "rows": out})
        finally:
            if env is not None:
                git("worktree", "remove", "--force", str(Path(tmp) / "baseline"))
    text = table(results)
    print(text)
    meta = {
        "machine": {**machine(), "threads": args.threads},
        "baseline_ref": args.baseline_ref,
        "half": args.half,
        "limit": args.limit,
        "wall_s": time.perf_counter() - t0,
    }
    out_path = Path(args.out or ROOT / "benchmarks" / "results" / f"next_eval_{args.half}.json")
    out_path.write_text(json.dumps({"meta": meta, "results": results}, indent=1))
    out_path.with_suffix(".txt").write_text(text + "\n")
    print(f"wrote {out_path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
