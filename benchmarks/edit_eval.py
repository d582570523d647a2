"""Edits through the real server: quality of fixes, speed of rewrites.

(a) fix: HumanEvalFix-Python (`../shared/eval/humanevalpack`). Each buggy function is opened as a
    document; its tests are run (sandboxed subprocess) and the failure becomes the diagnostic of a
    `textDocument/codeAction` request at the function; the "Fix" action is resolved and its
    WorkspaceEdit applied; the tests run again: pass@1 (greedy). Edit minimality: characters the
    server's edits change (removed + inserted) vs the characters the reference fix changes.
    Beside it the model's own ceiling (`raw`, unless --skip-raw): the same GGUF loaded with
    `llama_cpp.Llama`, prompted directly in its chat template (its default system prompt) with the
    code and the same failure message, asked for the whole fixed code in one fenced block; greedy,
    until the first closed block that defines the function (at most 2048 tokens). That block's
    functions and classes replace the document's of the same name, its new imports are added, the
    rest of it (asserts, prints) is dropped; the tests run again.
(b) next edits: moved to benchmarks/next_eval.py.
(c) spec: the same fixes with prompt-lookup speculation off and on (`speculation: "ngram"`, several
    `speculativeTokens`); decode tokens/s from `sparkls/metrics`, and whether the output is identical;
    speed-ups also split by how much of the function the answer kept.
    rename: rewrites that keep most of the code by construction: "rename `p` to `p_arg`" for the first
    parameter of HumanEval's reference solutions (the "Rewrite with an instruction" action, resolved),
    off vs on; whether the answer is the exact rename.
    cost: what verification costs on this machine: llama.cpp decode time of one batch of b tokens with
    logits for every position (b = 1 ... 64) on the default model, hence the speed-up speculation could
    reach if every drafted token were accepted.

Usage: python benchmarks/edit_eval.py [--parts fix,spec,rename,cost] [--fix-limit N] [--skip-raw]
       [--spec-tasks N] [--spec-k 8,16,24] [--threads 1] [--model NAME] [--out PATH]
The output file holds what this run measured, nothing from earlier runs.
"""

from __future__ import annotations

import argparse
import ast
import asyncio
import difflib
import io
import json
import re
import statistics
import sys
import tempfile
import time
import tokenize
from collections import defaultdict
from pathlib import Path
from typing import Any

from common import machine
from lsprotocol import types
from sandbox import SANDBOX, run_program
from sparkls.edit import diff, rewrite
from sparkls.engine.model_files import DEFAULT_MODEL, resolve_model_path
from sparkls.text.positions import LineIndex
from sparkls.tools.client import Client, position

ROOT = Path(__file__).resolve().parents[1]
EVAL = ROOT.parent / "shared" / "eval"
RESULTS = ROOT / "benchmarks" / "results"
EXT = {"python": "py", "go": "go", "rust": "rs", "typescript": "ts"}


def spread(rows: list[Any], limit: int | None) -> list[Any]:
    """Every k-th row, so a sample covers the whole set."""
    if not limit or limit >= len(rows):
        return rows
    step = len(rows) / limit
    return [rows[int(i * step)] for i in range(limit)]


def apply_workspace_edit(text: str, edit: Any) -> str:
    """Apply a WorkspaceEdit (UTF-16 positions) to `text`."""
    tdes = edit.document_changes or []
    tes = [e for tde in tdes for e in tde.edits] if tdes else [e for es in (edit.changes or {}).values() for e in es]
    idx = LineIndex.of(text)
    spans = [
        diff.Edit(
            idx.offset(e.range.start.line, e.range.start.character, "utf-16"),
            idx.offset(e.range.end.line, e.range.end.character, "utf-16"),
            e.new_text,
        )
        for e in tes
    ]
    return diff.apply(text, spans)


def failure_message(stderr: str) -> str:
    """The failing test line and the exception, as a diagnostic message."""
    lines = stderr.strip().splitlines()
    if not lines:
        return "the tests fail"
    exc = lines[-1].strip()
    code = ""
    for i, ln in enumerate(lines):
        if ln.strip().startswith('File "') and "candidate.py" in ln and i + 1 < len(lines):
            code = lines[i + 1].strip()
    return f"{exc}: the test `{code}` failed" if code and not code.startswith("File") else exc


def chrf(hyp: str, ref: str, n_max: int = 6, beta: float = 2.0) -> float:
    """chrF (Popovic 2015) with whitespace removed, 0-100."""
    h, r = re.sub(r"\s+", "", hyp), re.sub(r"\s+", "", ref)
    if not h and not r:
        return 100.0
    precs, recs = [], []
    for n in range(1, n_max + 1):
        hg = defaultdict(int)
        rg = defaultdict(int)
        for i in range(len(h) - n + 1):
            hg[h[i : i + n]] += 1
        for i in range(len(r) - n + 1):
            rg[r[i : i + n]] += 1
        if not hg or not rg:
            continue
        match = sum(min(c, rg[g]) for g, c in hg.items())
        precs.append(match / sum(hg.values()))
        recs.append(match / sum(rg.values()))
    if not precs:
        return 0.0
    p, rc = sum(precs) / len(precs), sum(recs) / len(recs)
    return 0.0 if p + rc == 0 else 100 * (1 + beta**2) * p * rc / (beta**2 * p + rc)


def hunk_text(old: str, new: str) -> str:
    """The changed lines between two texts as "-old"/"+new" lines."""
    out = []
    a, b = old.splitlines(), new.splitlines()
    for tag, i1, i2, j1, j2 in difflib.SequenceMatcher(None, a, b, autojunk=False).get_opcodes():
        if tag != "equal":
            out += ["-" + x for x in a[i1:i2]] + ["+" + x for x in b[j1:j2]]
    return "\n".join(out)


async def start(options: dict[str, Any], name: str) -> Client:
    client = Client(Path(tempfile.gettempdir()) / f"sparkls-edit-eval-{name}.log")
    await client.start({"engine": "llamacpp", "editStreaming": False, **options})
    health = await client.wait_ready()
    if not health.ok:
        raise SystemExit(f"engine not available: {health.detail}")
    return client


async def last_engine_record(client: Client) -> Any:
    m = await client.request("sparkls/metrics")
    return m.engine[-1] if m.engine else None


def tps(rec: Any) -> float:
    return rec.decode_tokens / (rec.decode_ms / 1000) if rec is not None and rec.decode_ms > 0 else 0.0


def decoding(rec: Any) -> dict[str, Any]:
    """An edit's engine record as a result row's decoding fields (zeros where the engine kept none)."""
    return {
        "decode_tokens": rec.decode_tokens if rec else 0,
        "decode_tps": tps(rec),
        "draft_tokens": getattr(rec, "draft_tokens", 0) if rec else 0,
        "accepted_tokens": getattr(rec, "accepted_tokens", 0) if rec else 0,
    }


# -- (a) HumanEvalFix ----------------------------------------------------------------------------
def fix_tasks(limit: int | None) -> list[dict[str, Any]]:
    with (EVAL / "humanevalpack" / "humanevalpack_python.jsonl").open() as f:
        return spread([json.loads(line) for line in f], limit)


async def run_fix(client: Client, tasks: list[dict[str, Any]], label: str) -> list[dict[str, Any]]:
    out = []
    for i, task in enumerate(tasks):
        text = task["prompt"] + task["buggy_solution"]
        tests = "\n\n" + task["test"]
        buggy_ok, stderr = run_program(text + tests)
        message = failure_message(stderr) if not buggy_ok else "the tests fail"
        uri = f"file:///humanevalfix/{i}/{task['entry_point']}.py"
        client.open(uri, text, "python")
        cursor = len(task["prompt"])
        pos = position(text, cursor)
        rng = types.Range(start=pos, end=pos)
        t0 = time.perf_counter()
        found = await client.request(
            types.TEXT_DOCUMENT_CODE_ACTION,
            types.CodeActionParams(
                text_document=types.TextDocumentIdentifier(uri=uri),
                range=rng,
                context=types.CodeActionContext(
                    diagnostics=[types.Diagnostic(range=rng, message=message, source="tests")]
                ),
            ),
        )
        fix = next((a for a in found or [] if getattr(a, "title", "").startswith("sparkls: Fix")), None)
        new = text
        if fix is not None:
            resolved = await client.request(types.CODE_ACTION_RESOLVE, fix)
            if resolved.edit is not None:
                new = apply_workspace_edit(text, resolved.edit)
        ms = (time.perf_counter() - t0) * 1000
        rec = await last_engine_record(client)
        client.close(uri)
        ok = run_program(new + tests)[0]
        ours = diff.changed_chars(diff.diff(text, new))
        ref = diff.changed_chars(diff.diff(text, task["prompt"] + task["canonical_solution"]))
        out.append(
            {
                "task_id": task["task_id"],
                "pass": ok,
                "buggy_passed": buggy_ok,
                "diagnostic": message,
                "changed_chars": ours,
                "reference_changed_chars": ref,
                "ms": ms,
                **decoding(rec),
                "fixed": new,
            }
        )
        if (i + 1) % 10 == 0:
            print(f"  [{label}] {i + 1}/{len(tasks)} pass@1 {sum(r['pass'] for r in out) / len(out):.3f}", flush=True)
    return out


RAW_SYSTEM = "You are Qwen, created by Alibaba Cloud. You are a helpful assistant."
CLOSED_BLOCK = re.compile(r"```[^\n]*\n(.*?)```", re.S)
OPEN_BLOCK = re.compile(r"```[^\n]*\n(.*?)(?:```|\Z)", re.S)
DEFINITION = (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)


def raw_fix_prompt(text: str, message: str) -> str:
    """What a user would ask the model directly: the code, the failure, the whole fixed code back."""
    user = (
        f"This Python code fails its tests: {message}\n\n```python\n{text.rstrip()}\n```\n\n"
        "Fix the bug. Answer with the complete fixed code in one ```python block."
    )
    return rewrite.chatml(RAW_SYSTEM, user, "")


def _span(node: ast.stmt) -> tuple[int, int]:
    """0-based [first, last) lines of a top-level statement, its decorators included."""
    first = min([node.lineno, *(d.lineno for d in getattr(node, "decorator_list", []))])
    return first - 1, node.end_lineno or node.lineno


def _answer_block(answer: str, entry_point: str, closed: bool) -> tuple[ast.Module, str] | None:
    """The first fenced block (closed ones only if `closed`) that parses and defines `entry_point` at top level."""
    for block in (CLOSED_BLOCK if closed else OPEN_BLOCK).findall(answer):
        try:
            tree = ast.parse(block)
        except SyntaxError:
            continue
        if any(isinstance(n, DEFINITION) and n.name == entry_point for n in tree.body):
            return tree, block
    return None


def raw_fixed_text(text: str, answer: str, entry_point: str) -> str | None:
    """The document after the raw answer, None when no block defines the function. The block's top-level
    functions and classes replace the document's of the same name (new ones go at the end), its imports the
    document lacks go at the top; anything else it holds (asserts, prints, a main guard) is left out."""
    found = _answer_block(answer, entry_point, closed=False)
    if found is None:
        return None
    tree, block = found[0], found[1].splitlines()
    lines = text.splitlines()
    theirs = {n.name: n for n in tree.body if isinstance(n, DEFINITION)}
    ours = {n.name: _span(n) for n in ast.parse(text).body if isinstance(n, DEFINITION)}
    for name, (a, b) in sorted(((k, v) for k, v in ours.items() if k in theirs), key=lambda kv: -kv[1][0]):
        x, y = _span(theirs[name])
        lines[a:b] = block[x:y]
    for name, node in theirs.items():
        if name not in ours:
            x, y = _span(node)
            lines += ["", "", *block[x:y]]
    imports = [ln for n in tree.body if isinstance(n, ast.Import | ast.ImportFrom) for ln in block[slice(*_span(n))]]
    return "\n".join([*(ln for ln in imports if ln not in lines), *lines]) + "\n"


def _raw_answer(llm: Any, prompt: list[int], stops: set[int], entry_point: str) -> dict[str, Any]:
    """Greedy decoding until an end token, the first closed block that defines the function, or the budget."""
    budget = min(2048, 4096 - len(prompt) - 1)
    toks: list[int] = []
    t0, t_first, finish = time.perf_counter(), 0.0, "length"
    for tok in llm.generate(prompt, temp=0.0, top_k=1, top_p=1.0, min_p=0.0, repeat_penalty=1.0):
        if tok in stops:
            finish = "stop"
            break
        t_first = t_first or time.perf_counter()
        toks.append(tok)
        if b"`" in llm.detokenize([tok]):
            text = llm.detokenize(toks).decode("utf-8", "replace")
            if _answer_block(text, entry_point, closed=True) is not None:
                finish = "block"
                break
        if len(toks) >= budget:
            break
    t_end = time.perf_counter()
    return {
        "answer": llm.detokenize(toks).decode("utf-8", "replace"),
        "finish": finish,
        "ms": (t_end - t0) * 1000,
        "decode_tokens": len(toks),
        "decode_tps": (len(toks) - 1) / (t_end - t_first) if len(toks) > 1 and t_end > t_first else 0.0,
    }


def run_raw_fix(
    tasks: list[dict[str, Any]], rows: list[dict[str, Any]], model: str, threads: int
) -> list[dict[str, Any]]:
    """The raw model on the same tasks, with the failure message the server's run used (`rows`)."""
    from llama_cpp import Llama

    path = resolve_model_path("", model or DEFAULT_MODEL)
    llm = Llama(model_path=str(path), n_ctx=4096, n_threads=threads, n_threads_batch=threads, verbose=False)
    ends = ("<|im_end|>", "<|endoftext|>")
    stops = {llm.token_eos(), *(llm.tokenize(s.encode(), add_bos=False, special=True)[0] for s in ends)}
    out = []
    try:
        for i, (task, row) in enumerate(zip(tasks, rows, strict=True)):
            text = task["prompt"] + task["buggy_solution"]
            prompt = llm.tokenize(raw_fix_prompt(text, row["diagnostic"]).encode(), add_bos=False, special=True)
            got = _raw_answer(llm, prompt, stops, task["entry_point"])
            fixed = raw_fixed_text(text, got["answer"], task["entry_point"])
            new = text if fixed is None else fixed
            reference = task["prompt"] + task["canonical_solution"]
            out.append(
                {
                    "task_id": task["task_id"],
                    "pass": run_program(new + "\n\n" + task["test"])[0],
                    "extracted": fixed is not None,
                    "diagnostic": row["diagnostic"],
                    "changed_chars": diff.changed_chars(diff.diff(text, new)),
                    "reference_changed_chars": diff.changed_chars(diff.diff(text, reference)),
                    **got,
                    "fixed": new,
                }
            )
            if (i + 1) % 10 == 0:
                print(f"  [raw] {i + 1}/{len(tasks)} pass@1 {sum(r['pass'] for r in out) / len(out):.3f}", flush=True)
    finally:
        llm.close()
    return out


def fix_summary(rows: list[dict[str, Any]]) -> dict[str, Any]:
    n = len(rows)
    changed = [r for r in rows if r["changed_chars"] > 0]
    ratios = [r["changed_chars"] / max(1, r["reference_changed_chars"]) for r in changed]
    passing = [r["changed_chars"] / max(1, r["reference_changed_chars"]) for r in changed if r["pass"]]
    return {
        "tasks": n,
        "pass@1": sum(r["pass"] for r in rows) / n,
        "no_edit": n - len(changed),
        "changed_chars_median": statistics.median(r["changed_chars"] for r in rows),
        "reference_changed_chars_median": statistics.median(r["reference_changed_chars"] for r in rows),
        "minimality_ratio_median": statistics.median(ratios) if ratios else None,
        "minimality_ratio_median_passing": statistics.median(passing) if passing else None,
        "within_2x_reference": sum(x <= 2 for x in ratios) / n,
        "median_ms": statistics.median(r["ms"] for r in rows),
        "decode_tps_median": statistics.median([r["decode_tps"] for r in rows if r["decode_tps"] > 0] or [0.0]),
    }


def raw_fix_part(tasks: list[dict[str, Any]], rows: list[dict[str, Any]], args: argparse.Namespace) -> dict[str, Any]:
    """The raw ceiling's summary and rows; a failure is recorded, the server's results are kept."""
    try:
        raw = run_raw_fix(tasks, rows, args.model, args.threads)
    except Exception as e:  # the part is lost, not the run
        print(f"raw: failed: {e!r}", file=sys.stderr, flush=True)
        return {"error": repr(e)}
    summary = {**fix_summary(raw), "extracted": sum(r["extracted"] for r in raw)}
    print("raw:", json.dumps(summary, indent=2), flush=True)
    return {"summary": summary, "prompt": raw_fix_prompt("{code}", "{failure}"), "rows": raw}


# -- (c) speculation ------------------------------------------------------------------------------
def kept_share(before: str, after: str) -> float:
    """Share of the lines of `before` that `after` keeps unchanged."""
    a, b = before.splitlines(), after.splitlines()
    same = sum(m.size for m in difflib.SequenceMatcher(None, a, b, autojunk=False).get_matching_blocks())
    return same / max(1, len(a))


def speedups(off: list[dict[str, Any]], rows: list[dict[str, Any]], output: str) -> dict[str, Any]:
    pairs = [(a, b) for a, b in zip(off, rows, strict=True) if a["decode_tps"] > 0 and b["decode_tps"] > 0]
    drafted = sum(r["draft_tokens"] for r in rows)
    return {
        "tasks": len(rows),
        "decode_tps_median": statistics.median(r["decode_tps"] for r in rows),
        "speedup_median": statistics.median(b["decode_tps"] / a["decode_tps"] for a, b in pairs) if pairs else None,
        "identical_to_off": sum(a[output] == b[output] for a, b in zip(off, rows, strict=True)),
        "acceptance": sum(r["accepted_tokens"] for r in rows) / drafted if drafted else None,
        "median_ms": statistics.median(r["ms"] for r in rows),
    }


def rename_identifier(text: str, old: str, new: str) -> str:
    """`text` with every Python NAME token `old` renamed (not inside strings, docstrings or comments)."""
    lines = text.splitlines(keepends=True)
    spots = [
        t.start
        for t in tokenize.generate_tokens(io.StringIO(text).readline)
        if t.type == tokenize.NAME and t.string == old
    ]
    for row, col in reversed(spots):
        line = lines[row - 1]
        lines[row - 1] = line[:col] + new + line[col + len(old) :]
    return "".join(lines)


def rename_tasks(limit: int) -> list[dict[str, Any]]:
    """HumanEval reference solutions whose first parameter occurs at least twice in the body."""
    out = []
    for t in fix_tasks(None):
        m = re.search(rf"def {re.escape(t['entry_point'])}\((\w+)", t["prompt"])
        if m is None:
            continue
        old = m.group(1)
        if len(re.findall(rf"\b{old}\b", t["canonical_solution"])) >= 2:
            text = t["prompt"] + t["canonical_solution"]
            out.append(
                {"task_id": t["task_id"], "text": text, "cursor": len(t["prompt"]), "old": old, "new": f"{old}_arg"}
            )
    return spread(out, limit)


async def run_rename(client: Client, tasks: list[dict[str, Any]], label: str) -> list[dict[str, Any]]:
    out = []
    for i, task in enumerate(tasks):
        text, uri = task["text"], f"file:///rename/{i}/{task['task_id'].replace('/', '_')}.py"
        client.open(uri, text, "python")
        pos = position(text, task["cursor"])
        found = await client.request(
            types.TEXT_DOCUMENT_CODE_ACTION,
            types.CodeActionParams(
                text_document=types.TextDocumentIdentifier(uri=uri),
                range=types.Range(start=pos, end=pos),
                context=types.CodeActionContext(diagnostics=[]),
            ),
        )
        action = next(a for a in found or [] if getattr(a, "title", "").startswith("sparkls: Rewrite"))
        data = {
            **action.command.arguments[0],
            "instruction": f"Rename `{task['old']}` to `{task['new']}` everywhere in this function.",
        }
        t0 = time.perf_counter()
        resolved = await client.request(types.CODE_ACTION_RESOLVE, types.CodeAction(title=action.title, data=data))
        ms = (time.perf_counter() - t0) * 1000
        new = apply_workspace_edit(text, resolved.edit) if resolved.edit is not None else text
        rec = await last_engine_record(client)
        client.close(uri)
        expected = rename_identifier(text, task["old"], task["new"])
        out.append(
            {
                "task_id": task["task_id"],
                "exact": new == expected,
                "rewritten": new,
                "ms": ms,
                **decoding(rec),
            }
        )
    print(f"  [{label}] {len(out)} renames, exact {sum(r['exact'] for r in out)}", flush=True)
    return out


def verification_cost(
    threads: int, sizes: tuple[int, ...] = (1, 2, 4, 8, 16, 24, 32, 48, 64), repeats: int = 5
) -> dict[str, Any]:
    """Median decode time of one batch of b tokens (logits for every position) after a 400-token context."""
    from llama_cpp import Llama
    from sparkls.engine.model_files import DEFAULT_MODEL, resolve_model_path

    llm = Llama(
        str(resolve_model_path("", DEFAULT_MODEL)),
        n_ctx=2048,
        n_threads=threads,
        n_threads_batch=threads,
        n_batch=256,
        verbose=False,
    )
    toks = llm.tokenize((ROOT / "server" / "sparkls" / "edit" / "rewrite.py").read_bytes())[: 400 + max(sizes)]
    ctx, n_past = toks[:400], 400
    llm.eval(ctx)
    rows = []
    for b in sizes:
        times = []
        for _ in range(repeats):
            llm._ctx.kv_cache_seq_rm(-1, n_past, -1)
            llm._batch.set_batch(batch=toks[400 : 400 + b], n_past=n_past, logits_all=True)
            t0 = time.perf_counter()
            llm._ctx.decode(llm._batch)
            times.append((time.perf_counter() - t0) * 1000)
        rows.append({"batch": b, "ms": statistics.median(times)})
    one = rows[0]["ms"]
    for r in rows:
        r["ms_per_token"] = r["ms"] / r["batch"]
        r["ceiling_speedup"] = one / r["ms_per_token"]  # every drafted token accepted
    return {
        "threads": threads,
        "context": n_past,
        "rows": rows,
        "best_ceiling": max(r["ceiling_speedup"] for r in rows),
    }


def save(result: dict[str, Any], out: Path) -> None:
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(result, indent=2))


# -- main ------------------------------------------------------------------------------------------
async def main_async(args: argparse.Namespace, result: dict[str, Any]) -> dict[str, Any]:
    parts = set(args.parts.split(","))
    base: dict[str, Any] = {"threads": args.threads, **({"model": args.model} if args.model else {})}
    measured = {
        "machine": machine(),
        "threads": args.threads,
        "sandbox": "netns" if SANDBOX else "none",
        "model": base.get("model", "default"),
    }

    def done(part: str) -> None:
        """Part measured: say where and when, and write the file (a later part failing loses nothing)."""
        result[part]["measured"] = measured
        save(result, Path(args.out))

    fixes = fix_tasks(args.fix_limit)
    fix_rows: list[dict[str, Any]] = []
    if "fix" in parts:
        client = await start(base, "fix")
        try:
            fix_rows = await run_fix(client, fixes, "fix")
        finally:
            await client.stop()
        result["fix"] = {"summary": fix_summary(fix_rows), "settings": base, "rows": fix_rows}
        print(json.dumps(result["fix"]["summary"], indent=2), flush=True)
        done("fix")
        if not args.skip_raw:
            result["fix"]["raw"] = raw_fix_part(fixes, fix_rows, args)
            done("fix")
    if "spec" in parts:
        sample = fixes[: args.spec_tasks]
        off = [r for r in fix_rows if r["task_id"] in {t["task_id"] for t in sample}]
        if len(off) != len(sample):
            client = await start(base, "spec-off")
            try:
                off = await run_fix(client, sample, "spec off")
            finally:
                await client.stop()
        configs: dict[str, Any] = {"off": off}
        for k in (int(x) for x in args.spec_k.split(",")):
            client = await start({**base, "speculation": "ngram", "speculativeTokens": k}, f"spec-{k}")
            try:
                configs[f"ngram-{k}"] = await run_fix(client, sample, f"ngram {k}")
            finally:
                await client.stop()
        summary = {name: speedups(off, rows, "fixed") for name, rows in configs.items()}
        for name, rows in configs.items():  # split by how much of the function the answer kept (off's answer)
            keep = [
                kept_share(t["prompt"] + t["buggy_solution"], r["fixed"]) >= 0.9
                for t, r in zip(sample, off, strict=True)
            ]
            for label, want in (("kept>=90%", True), ("kept<90%", False)):
                a = [x for x, k in zip(off, keep, strict=True) if k == want]
                b = [x for x, k in zip(rows, keep, strict=True) if k == want]
                if a:
                    summary[name][label] = speedups(a, b, "fixed")
        result["spec"] = {
            "summary": summary,
            "rows": {
                k: [
                    {
                        x: r[x]
                        for x in ("task_id", "decode_tps", "ms", "decode_tokens", "draft_tokens", "accepted_tokens")
                    }
                    for r in v
                ]
                for k, v in configs.items()
            },
        }
        print(json.dumps(summary, indent=2), flush=True)
        done("spec")
    if "rename" in parts:
        sample_r = rename_tasks(args.rename_tasks)
        runs: dict[str, Any] = {}
        for name, opts in (
            ("off", base),
            *(
                (f"ngram-{k}", {**base, "speculation": "ngram", "speculativeTokens": k})
                for k in (int(x) for x in args.spec_k.split(","))
            ),
        ):
            client = await start(opts, f"rename-{name}")
            try:
                runs[name] = await run_rename(client, sample_r, f"rename {name}")
            finally:
                await client.stop()
        summary = {
            name: {**speedups(runs["off"], rows, "rewritten"), "exact_rename": sum(r["exact"] for r in rows)}
            for name, rows in runs.items()
        }
        result["rename"] = {"summary": summary, "rows": runs}
        print(json.dumps(summary, indent=2), flush=True)
        done("rename")
    if "cost" in parts:
        result["cost"] = verification_cost(args.threads)
        print(json.dumps(result["cost"], indent=2), flush=True)
        done("cost")
    return result


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--parts", default="fix,spec,rename,cost")
    ap.add_argument("--fix-limit", type=int, default=None)
    ap.add_argument("--skip-raw", action="store_true", help="fix part: without the raw model's ceiling")
    ap.add_argument("--spec-tasks", type=int, default=20)
    ap.add_argument("--spec-k", default="16,32")
    ap.add_argument("--rename-tasks", type=int, default=16)
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--model", default="", help="a bundled model name (qwen2.5-coder-1.5b); default: the server's")
    ap.add_argument("--out", default=str(RESULTS / "edit_eval.json"))
    args = ap.parse_args()
    if not EVAL.is_dir():
        print(f"no data at {EVAL}", file=sys.stderr)
        return 2
    t0 = time.perf_counter()
    out = Path(args.out)
    result = asyncio.run(main_async(args, {"machine": machine()}))
    result["wall_s"] = time.perf_counter() - t0
    save(result, out)
    print(f"wrote {out} in {result['wall_s']:.0f} s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
