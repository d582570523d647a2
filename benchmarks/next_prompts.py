"""Next-edit prompt variants compared on the tuning half of commit-edits, the model prompted directly.

Each variant is a way to ask the model for the next edit at the cursor (the target hunk's first line), given
the row's history hunks; the answer is turned into a rewritten window and scored as `next_eval.py` scores it
(exact, chrF, located, shown), with the decoded tokens and the time per prediction. Rows are only ever taken
from the tuning half: prompts are chosen here, `next_eval.py --half reported` is where they are reported. Each
row's prompts are cold (a new frame), so times here are cold times; `next_eval.py` measures warm ones.

Variants:
- `diff`: the server's prompt (`sparkls.edit.nextedit`): the file before the recent edits, the edits as a
  unified diff oldest first, a hunk header at the cursor with `nextedit.CONTEXT_LINES` context lines (0) and the
  cursor's line as removed; the model writes only the changed lines; parsed by `nextedit.parse`. Per changed line
  the lowest token probability is kept, for the confidence gate's precision/coverage curve.
- `diff-ctx2`, `diff-ctx1`: the same with two or one context lines above the cursor's line (two until decision
  0013: `results/next_prompts_tuning_all_diff_0.5b.json` ran that as `diff`; `_ctx0_0.5b.json` ran today's).
- `diff-unforced`: the same without the cursor's line removed in the prompt (the model may go on with context).
- `diff-chat`: the chat template, the recent edits as unified diffs oldest first, the window with the cursor
  marked, the whole window rewritten (3 lines above the cursor, 8 below).
The prompt of the server before this change (the whole window rewritten, the recent edits described in words)
is measured as `baseline` in `next_eval.py`.

The gated variants' (`diff`, `diff-ctx2`, ...) ungated answers also give the gate's table: per
(nextEditMinConfidence, nextEditRepeatMinConfidence), what the server would show (`generate.choose`: the whole
change or its longest sure beginning; a change made of the recent edits' changes passes the lower gate).
`--rescore FILE` prints that table again from a stored run, no model: for the 96-row sample the rule was chosen on,
and for the rest of the tuning half.

Usage: python benchmarks/next_prompts.py [--variants diff,diff-ctx2,diff-ctx1,diff-unforced,diff-chat]
       [--models 0.5b] [--limit N] [--out FILE] [--rescore FILE]
"""

from __future__ import annotations

import argparse
import asyncio
import functools
import json
import sys
import time
from pathlib import Path
from typing import Any

from sparkls.edit import diff, nextedit, rewrite
from sparkls.edit.generate import TOKENS_PER_LINE, continue_diff
from sparkls.settings import Settings
from sparkls.text.document import Document

sys.path.insert(0, str(Path(__file__).resolve().parent))
from common import dist, machine
from next_eval import FENCE, MODELS, ROOT, Replay, load, score, summarize, target_of


def history_of(row: dict[str, Any]) -> tuple[nextedit.History, str] | None:
    replay, history, t = Replay(row), nextedit.History(), 0.0
    for hi in row["history_hunks"]:
        change = replay.next_change(hi)
        if change is None:
            return None
        t += 1.0
        history.record(replay.text, change[0], change[1], change[2], now=t)
        replay.apply(change)
    return (history, replay.text) if replay.text == row["current"] else None


def run_answer(text: str, start: int, end: int, answer: str) -> tuple[str, list[diff.Edit]]:
    m = FENCE.search(answer)
    after = m.group(1) if m else answer
    after = rewrite.finish_like(after, text[start:end])
    return after, diff.region_edits(text, start, end, after) if after != text[start:end] else []


async def generate(engine: Any, prompt: str, max_tokens: int, stop: tuple[str, ...]) -> tuple[str, Any]:
    from sparkls.engine.base import Delta, Finished, GenerationRequest

    out, stats = "", None
    async for ev in engine.stream(GenerationRequest(prompt, max_tokens=max_tokens, stop=stop)):
        if isinstance(ev, Delta):
            out += ev.text
        elif isinstance(ev, Finished):
            stats = ev.stats
    return out, stats


async def variant_diff_chat(engine: Any, row: dict[str, Any], history: nextedit.History, text: str) -> dict[str, Any]:
    s = Settings()
    path = row["path"]
    at = target_of(text, row)[0]
    lines = text.splitlines(keepends=True)
    cl = text.count("\n", 0, at)
    ws = sum(len(x) for x in lines[: max(0, cl - 3)])
    we = sum(len(x) for x in lines[: cl + 9])
    lang = rewrite.fence_lang(row["lang"])
    above = "".join(lines[max(0, cl - 40) : text.count("\n", 0, ws)])
    below = "".join(lines[text.count("\n", 0, we) : cl + 30])
    region = text[ws:at] + "<|user_cursor|>" + text[at:we]
    user = (
        f"File: {path}\n\nCode above:\n```{lang}\n{above}```\n\nCode below:\n```{lang}\n{below}```\n\n"
        f"Recent edits, oldest first:\n```diff\n{nextedit.unified(path, list(history.hunks)[-3:])}```\n\n"
        f"The editable region (<|user_cursor|> is the cursor):\n```{lang}\n{region}```\n\n"
        "Rewrite the editable region with the developer's next edit applied, which continues the recent "
        "edits. Keep every other line exactly as it is. Reply with the region only, without the cursor mark."
    )
    prompt = rewrite.chatml(rewrite.SYSTEM, user, f"```{lang}\n")
    need = int((we - ws) / 4 * 1.5) + 96
    answer, stats = await generate(engine, prompt, min(s.max_tokens_rewrite, need), rewrite.STOPS)
    answer = answer.replace("<|user_cursor|>", "")
    after, edits = run_answer(text, ws, we, answer)
    return {**score(text, row, ws, we, after, edits), "answer": answer, "stats": stats}


def prompt_of(
    row: dict[str, Any], history: nextedit.History, text: str, context_lines: int = nextedit.CONTEXT_LINES
) -> nextedit.DiffPrompt:
    """The server's next-edit prompt at the row's target (a fresh frame), `context_lines` above the cursor."""
    s = Settings()
    doc = Document.open("file:///x/" + row["path"].rsplit("/", 1)[-1], row["lang"], 1, text)
    return nextedit.render(
        doc,
        target_of(text, row)[0],
        history,
        row["path"],
        s.next_edit_lines_before,
        s.next_edit_lines_after,
        max_lines=s.next_edit_max_lines,
        context_lines=context_lines,
    )


def scored(text: str, row: dict[str, Any], p: nextedit.DiffPrompt, got: nextedit.Answer | None) -> dict[str, Any]:
    """`next_eval.score` of a prediction (None: no edit) made on the server's prompt `p`."""
    ws, we, after = nextedit.applied(text, p, got)
    return score(text, row, ws, we, after, diff.region_edits(text, ws, we, after) if after != text[ws:we] else [])


async def variant_diff(
    engine: Any,
    row: dict[str, Any],
    history: nextedit.History,
    text: str,
    force: bool = True,
    context_lines: int = nextedit.CONTEXT_LINES,
) -> dict[str, Any]:
    p = prompt_of(row, history, text, context_lines)
    forced = p.removed if force else ""
    prompt = p.text if force else p.text[: len(p.text) - len(p.removed)]
    from sparkls.engine.base import GenerationRequest

    # The server's own loop (stops where the server stops; per line the lowest token log-probability), ungated.
    limit = TOKENS_PER_LINE * (Settings().next_edit_max_lines + 1)  # the server's
    answer, stats, lps = await continue_diff(
        engine, GenerationRequest(prompt, max_tokens=limit, stop=nextedit.STOPS, logprobs=True), forced
    )
    if not force:  # the model's own context lines before its change: skip them, then the change is at its line
        skip = 0
        for x in answer.split("\n"):
            if (
                not x.startswith(" ")
                or skip >= len(p.lines) - (p.line - p.context)
                or x[1:] != p.lines[p.line - p.context + skip]
            ):
                break
            skip += 1
        if skip:
            answer = "\n".join(answer.split("\n")[skip:])
            lps = lps[skip:]
            p = nextedit.DiffPrompt(p.text, p.line + skip, p.context, p.frame, p.lines, p.secrets, p.removed)
    got = nextedit.parse(p, answer, lps)
    return {
        **scored(text, row, p, got),
        "answer": answer,
        "stats": stats,
        "line_lps": lps,
        "confidence": got.confidence if got else None,
        "changed_lines": (got.last - got.first + len(got.added)) if got else 0,
    }


# The variants whose answers the server's gate reads (`gate_grid`), each with its context lines above the cursor.
GATED = {"diff": nextedit.CONTEXT_LINES, "diff-ctx2": 2, "diff-ctx1": 1}  # `diff` is the no-context prompt
VARIANTS = {
    **{name: functools.partial(variant_diff, context_lines=n) for name, n in GATED.items()},
    "diff-unforced": functools.partial(variant_diff, force=False),
    "diff-chat": variant_diff_chat,
}


async def run(
    model: str, variants: list[str], rows: list[dict[str, Any]], args: argparse.Namespace
) -> dict[str, list[dict[str, Any]]]:
    from sparkls.engine.llamacpp import LlamaCppEngine
    from sparkls.engine.model_files import resolve_model_path
    from sparkls.engine.options import LlamaCppOptions

    engine = LlamaCppEngine(
        LlamaCppOptions(model_path=str(resolve_model_path("", MODELS[model])), threads=args.threads)
    )
    out: dict[str, list[dict[str, Any]]] = {v: [] for v in variants}
    try:
        for i, row in enumerate(rows):
            got = history_of(row)
            for v in variants:
                if got is None:
                    out[v].append({"id": row["id"], "lang": row["lang"], "skipped": "history did not apply"})
                    continue
                t0 = time.perf_counter()
                r = await VARIANTS[v](engine, row, got[0], got[1])
                ms = (time.perf_counter() - t0) * 1000
                st = r.pop("stats")
                out[v].append(
                    {
                        "id": row["id"],
                        "lang": row["lang"],
                        **r,
                        "cold_ms": ms,
                        "warm_ms": ms,
                        "finish_reason": st.finish_reason if st else "",
                        "decode_tokens": st.decode_tokens if st else 0,
                        "prompt_tokens": st.prompt_tokens if st else 0,
                    }
                )
            print(
                f"  {model} {i + 1}/{len(rows)} "
                + " ".join(f"{v} {sum(x.get('exact', 0) for x in out[v])}" for v in variants),
                flush=True,
            )
    finally:
        await engine.close()
    return out


def gate_curve(rows: list[dict[str, Any]]) -> list[dict[str, float]]:
    """Per threshold on the whole change's confidence (the gate before cuts and repeats): the share of rows shown,
    precision, exact over all rows (%)."""
    scored = [r for r in rows if "exact" in r]
    out = []
    for t in [x / 10 for x in range(10)]:
        shown = [r for r in scored if r["shown"] and (r["confidence"] or 0.0) >= t]
        hits = sum(r["exact"] for r in shown)
        out.append({"threshold": t, **rates(len(scored), len(shown), hits)})
    return out


def rates(n: int, shown: int, hits: int) -> dict[str, float]:
    return {"shown": 100 * shown / max(1, n), "precision": 100 * hits / max(1, shown), "exact": 100 * hits / max(1, n)}


GATE_MIN = (0.5, 0.6, 0.7, 0.8)
GATE_REPEAT = (0.2, 0.3, 0.4, 0.5, 1.0)  # 1.0: a repeat of the recent edits passes the same gate as any change


def gate_grid(
    rows: list[dict[str, Any]], data: dict[str, dict[str, Any]], context_lines: int = nextedit.CONTEXT_LINES
) -> list[dict[str, float]]:
    """Per (nextEditMinConfidence, nextEditRepeatMinConfidence): shown, precision and exact (%) when the server's
    own choice (`generate.choose`: the whole change or its longest sure beginning) is made over each row's stored
    ungated answer."""
    from sparkls.edit.generate import choose, complete
    from sparkls.engine.base import GenerationStats

    cases = []
    for r in rows:
        got = history_of(data[r["id"]]) if "answer" in r else None
        if got is not None:
            lps = [x[0] if isinstance(x, list) else x for x in r["line_lps"]]  # older files: [lowest, sum]
            # Older files ran to 160 tokens and did not record why an answer ended.
            why = r.get("finish_reason") or ("length" if r["decode_tokens"] >= 160 else "stop")
            answer = complete(r["answer"], GenerationStats(finish_reason=why))
            recent = nextedit.recent_words(got[0])
            p = prompt_of(data[r["id"]], got[0], got[1], context_lines)
            cases.append((data[r["id"]], recent, got[1], p, answer, lps))
    out = []
    for lo in GATE_MIN:
        for rep in GATE_REPEAT:
            s = Settings(next_edit_min_confidence=lo, next_edit_repeat_min_confidence=min(rep, lo) if rep < 1 else 1.0)
            shown = hits = 0
            for row, recent, text, p, answer, lps in cases:
                sc = scored(text, row, p, choose(text, p, answer, lps, recent, s)[0])
                shown, hits = shown + sc["shown"], hits + sc["exact"]
            out.append({"min": lo, "repeat": rep, **rates(len(cases), shown, hits)})
    return out


def print_grid(label: str, grid: list[dict[str, float]]) -> None:
    print(f"{label}: shown % / precision % / exact % per nextEditMinConfidence (rows), RepeatMin (columns)")
    print("  min  " + "".join(f"{'repeat ' + str(r) if r < 1 else 'no repeat gate':>21}" for r in GATE_REPEAT))
    for lo in GATE_MIN:
        cells = [g for g in grid if g["min"] == lo]
        print(
            f"  {lo:.1f}  " + "".join(f"{g['shown']:>8.0f} /{g['precision']:>4.0f} /{g['exact']:>5.1f}" for g in cells)
        )


def rescore(path: Path) -> int:
    """The gate grid over a stored run's gated variants' answers (`diff`, `diff-ctx1`, ...), split into the 96-row
    sample the gate's rule was chosen on and the rest of the tuning half, which checks it."""
    d = json.loads(path.read_text())
    data = {r["id"]: r for r in load("tuning", None)}
    sample = {r["id"] for r in load("tuning", 96)}
    for r in d["results"]:
        if "context_lines" not in r and r["variant"] != "diff":  # a gated variant's answers, any file's name
            continue
        parts = {
            "96-row sample": [x for x in r["rows"] if x["id"] in sample],
            "rest of the tuning half": [x for x in r["rows"] if x["id"] not in sample],
            "whole tuning half": r["rows"],
        }
        for label, rows in parts.items():
            if rows and (label != "whole tuning half" or len(rows) > len(parts["96-row sample"])):
                grid = gate_grid(rows, data, r.get("context_lines", 2))  # files before the field: 2
                print_grid(f"{r['model']} {r['variant']}, {label}, {len(rows)} rows", grid)
    return 0


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--variants", default=",".join(VARIANTS))
    ap.add_argument("--models", default="0.5b")
    ap.add_argument("--limit", type=int, default=24)
    ap.add_argument("--threads", type=int, default=0, help="decoding threads (0: the engine's default)")
    ap.add_argument("--out", default="")
    ap.add_argument("--rescore", default="", help="a results file: its gate grid again, no model run")
    args = ap.parse_args()
    if args.rescore:
        return rescore(Path(args.rescore))
    rows = load("tuning", args.limit or None)
    variants = args.variants.split(",")
    results = []
    for model in args.models.split(","):
        got = asyncio.run(run(model, variants, rows, args))
        for v in variants:
            s = summarize(got[v])
            dec = [r["decode_tokens"] for r in got[v] if "exact" in r]
            summary = {**s, "decode_tokens": dist(dec)}
            results.append({"model": model, "variant": v, "summary": summary, "rows": got[v]})
            if v in GATED:
                results[-1]["context_lines"] = GATED[v]
    data = {r["id"]: r for r in rows}
    for r in results:
        if r["variant"] in GATED:
            r["gate"] = gate_curve(r["rows"])
            print(f"{r['model']} {r['variant']}, whole-change gate (threshold: shown %, precision %, exact %):")
            print(
                "  "
                + "  ".join(
                    f"{g['threshold']:.1f}: {g['shown']:.0f} / {g['precision']:.0f} / {g['exact']:.1f}"
                    for g in r["gate"]
                )
            )
            r["gate_grid"] = gate_grid(r["rows"], data, r["context_lines"])
            print_grid(f"{r['model']} {r['variant']}, the server's gate", r["gate_grid"])
    print(f"{'model variant':22} rows exact% chrF  shown% prec% located% decode-tok p50  ms p50")
    for r in results:
        s = r["summary"]
        print(
            f"{r['model'] + ' ' + r['variant']:22} {s['rows']:4} {100 * s['exact']:5.1f} {s['chrf']:5.1f} "
            f"{100 * s['shown']:6.1f} {100 * (s['precision'] or 0):5.1f} {100 * (s['located'] or 0):8.1f} "
            f"{s['decode_tokens']['p50'] or 0:14.0f} {s['warm_ms']['p50'] or 0:7.0f}"
        )
    meta = {"machine": {**machine(), "threads": args.threads}, "half": "tuning", "limit": args.limit}
    out_path = Path(args.out or ROOT / "benchmarks" / "results" / "next_prompts.json")
    out_path.write_text(json.dumps({"meta": meta, "results": results}, indent=1))
    print(f"wrote {out_path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
