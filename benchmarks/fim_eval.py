"""FIM quality through the real server, beside the raw model's ceiling on the same tasks, in one run.

What it measures: how much of the model's own fill-in-the-middle quality sparkls keeps after its context,
prompt layout, stopping and trimming, on code a user edits: masked lines and blocks in HumanEval
infilling, in HumanEvalPack solutions (python, js, java, go, cpp, rust), and in real repositories where
the line uses a name from another file (with and without sparkls' workspace context). Task sets and the
cursor placements (`col0`, `indent`, `eol`; `api` for the cross-file sets: CrossCodeEval's split, the cursor
just after `Name.` / `Name(`) are built in `fim_tasks.py`.

How, per model (`--models`), one system after the other (never two at once):
- `raw`: the same GGUF loaded with `llama_cpp.Llama` (same thread count), prompted
  `<|fim_prefix|>{prefix}<|fim_suffix|>{suffix}<|fim_middle|>` with the document before the cursor cut to
  its last 1472 tokens and after it to its first 512, greedy, 64 tokens for a line / 256 for a block,
  stopped at `<|endoftext|>`, the model's EOS and the FIM / repo / file-separator tokens, no post-processing;
- `sparkls`: the real server over stdio (`sparkls.tools.client.Client`), one `textDocument/inlineCompletion`
  per task (trigger Automatic, i.e. typing defaults, unless `--invoked`), the document opened at a path
  under the task's workspace root (sent as `rootUri` / `workspaceFolders`) for the cross-file sets;
- `sparkls-noctx` (cross-file sets only): the same with `contextTokens: 0` (no other files).
The answer is inserted at the cursor and scored:
- first-line exact match (EM), the Qwen2.5-Coder report's rule: the first non-blank line of what the
  masked line now holds (for `indent` and `api`: the line's text before the cursor + the answer; for `eol`:
  the answer after its leading newline; without one it is a miss unless the line it extends is blank),
  stripped, equals the masked line, stripped;
- block EM (blocks): all non-blank lines of the answer, stripped, equal the masked block's (`block`), or
  its first lines do, whatever follows (`block+`: the raw model rarely stops where the block ends);
- pass@1 where tests run: the completed file + the task's tests in a sandboxed subprocess (scratch dir,
  timeouts, no network namespace where `unshare -rn` works): python3 (`sandbox.py`), node, g++, javac/java,
  rustc (rand/regex/md5 `use` lines dropped when unused: no crates offline) and go (with testify, which it
  needs; offline that fails), each only where `shutil.which` finds it. A task whose canonical solution
  fails its own tests here gets null, as does every task without a toolchain;
- empty answers, and wall milliseconds per task (sparkls: request to answer at the client; raw: tokenize,
  prefill and decode).

Output: a table per model x set x language x placement (n, EM sparkls / noctx / raw, the loss in points,
block EM, empty %, pass@1, median ms), printed and written as JSON to `--out` with every task's answers,
the machine (lscpu model, cores), date, command line and settings problems the server logged.

Usage:
  python benchmarks/fim_eval.py [--sets humaneval-single,pack-line,...] [--placements col0,indent,eol]
      [--limit N [--heldout]] [--models 0.5b,1.5b] [--threads 1] [--settings JSON] [--skip-raw] [--invoked]
      [--out PATH]
--limit N takes every k-th task of each set (of each language for the pack sets); with --heldout, the N tasks
half-way between those (a development slice: choose settings there, report on the first). Sets: humaneval-single,
humaneval-multi, pack-line, pack-block, crossfile-rich, crossfile-corpus (all by default; see fim_tasks.py
for how many tasks each has).
"""

from __future__ import annotations

import argparse
import asyncio
import datetime
import gc
import hashlib
import json
import os
import re
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from collections import defaultdict
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any

import fim_tasks
from common import STARTED, machine
from fim_tasks import PLACEMENTS, SETS, Source, Task
from sandbox import SANDBOX, run_program
from sparkls.engine.model_files import ModelUnavailable, resolve_model_path
from sparkls.tools.client import Client

ROOT = Path(__file__).resolve().parents[1]
MODELS = {"0.5b": "qwen2.5-coder-0.5b", "1.5b": "qwen2.5-coder-1.5b"}
CROSSFILE = ("crossfile-rich", "crossfile-corpus")
BLOCK_SETS = ("humaneval-multi", "pack-block")
PREFIX_TOKENS, SUFFIX_TOKENS = 1472, 512
MAX_TOKENS = {"line": 64, "block": 256}
RAW_STOPS = (
    "<|endoftext|>",
    "<|fim_prefix|>",
    "<|fim_suffix|>",
    "<|fim_middle|>",
    "<|fim_pad|>",
    "<|file_sep|>",
    "<|repo_name|>",
)
COMPILE_TIMEOUT_S, RUN_TIMEOUT_S = 60.0, 10.0


# ---- running tests -----------------------------------------------------------------------------------------------


def _tool(name: str) -> str | None:
    found = shutil.which(name)
    if name == "rustc" and found:  # the rustup shim needs $HOME; the toolchain's own binary does not
        sysroot = subprocess.run([found, "--print", "sysroot"], capture_output=True, text=True).stdout.strip()
        real = Path(sysroot) / "bin" / "rustc"
        return str(real) if real.is_file() else found
    return found


TOOLS = {name: _tool(name) for name in ("node", "g++", "javac", "java", "rustc", "go")}
AVAILABLE = {
    "python": True,
    "node": bool(TOOLS["node"]),
    "cpp": bool(TOOLS["g++"]),
    "java": bool(TOOLS["javac"] and TOOLS["java"]),
    "rust": bool(TOOLS["rustc"]),
    "go": bool(TOOLS["go"]),
}
_RUST_CRATES = (
    ("use rand::Rng;\n", r"\brand::|\bRng\b|thread_rng"),
    ("use regex::Regex;\n", r"\bRegex\b"),
    ("use md5;\n", r"\bmd5::"),
)


def _run(cmd: list[str], cwd: str, timeout_s: float) -> subprocess.CompletedProcess[bytes] | None:
    """A sandboxed command; None when it timed out."""
    env = {
        "PATH": "/usr/local/bin:/usr/bin:/bin",
        "HOME": cwd,
        "TMPDIR": cwd,
        "GOCACHE": f"{cwd}/.gocache",
        "GOPATH": f"{cwd}/.gopath",
        "GOFLAGS": "-mod=mod",
        "GOPROXY": "off",
    }
    try:
        return subprocess.run([*SANDBOX, *cmd], cwd=cwd, capture_output=True, timeout=timeout_s, env=env)
    except subprocess.TimeoutExpired:
        return None


def _compiled(tmp: str, compile_cmd: list[str], run_cmd: list[str]) -> bool:
    built = _run(compile_cmd, tmp, COMPILE_TIMEOUT_S)
    if built is None or built.returncode != 0:
        return False
    ran = _run(run_cmd, tmp, RUN_TIMEOUT_S)
    return ran is not None and ran.returncode == 0


def _node(program: str, tmp: str) -> bool:
    Path(tmp, "prog.js").write_text(program)
    r = _run([str(TOOLS["node"]), "prog.js"], tmp, RUN_TIMEOUT_S)
    # HumanEvalPack's JS tests use console.assert, which prints instead of throwing.
    return r is not None and r.returncode == 0 and b"Assertion failed" not in r.stderr


def _cpp(program: str, tmp: str) -> bool:
    Path(tmp, "prog.cpp").write_text(program)
    return _compiled(tmp, [str(TOOLS["g++"]), "-std=c++17", "-O0", "-w", "-o", "prog", "prog.cpp"], ["./prog"])


def _java(program: str, tmp: str) -> bool:
    Path(tmp, "Main.java").write_text(program)
    return _compiled(
        tmp,
        [str(TOOLS["javac"]), "-nowarn", "-d", ".", "Main.java"],
        [str(TOOLS["java"]), "-Xss16m", "-cp", ".", "Main"],
    )


def _rust(program: str, tmp: str) -> bool:
    for line, used in _RUST_CRATES:
        if not re.search(used, program.replace(line, "")):
            program = program.replace(line, "")
    Path(tmp, "prog.rs").write_text(program)
    return _compiled(
        tmp, [str(TOOLS["rustc"]), "--edition", "2021", "--test", "-A", "warnings", "-o", "prog", "prog.rs"], ["./prog"]
    )


def _go(program: str, tmp: str) -> bool:
    Path(tmp, "go.mod").write_text("module fimeval\n\ngo 1.18\n")
    Path(tmp, "main_test.go").write_text(program)
    r = _run([str(TOOLS["go"]), "test", "./..."], tmp, COMPILE_TIMEOUT_S)
    return r is not None and r.returncode == 0


_RUNNERS: dict[str, Callable[[str, str], bool]] = {"node": _node, "cpp": _cpp, "java": _java, "rust": _rust, "go": _go}


def program_of(src: Source, document: str) -> str:
    if src.runner == "go":  # the test setup brings its own package clause and the testing imports
        document = document.removeprefix("package main\n")
    return src.test_prefix + document + src.test_suffix


class Tests:
    """Runs programs once each (cached by text) and nulls tasks whose canonical solution fails here."""

    def __init__(self) -> None:
        self._cache: dict[str, bool] = {}
        self.reference_failures: list[str] = []
        self._reference: dict[tuple[str, str], bool] = {}

    def _passes(self, runner: str, program: str) -> bool:
        key = hashlib.sha256(f"{runner}\0{program}".encode()).hexdigest()
        if key not in self._cache:
            if runner == "python":
                self._cache[key] = run_program(program, RUN_TIMEOUT_S)[0]
            else:
                with tempfile.TemporaryDirectory(prefix="fim-eval-") as tmp:
                    self._cache[key] = _RUNNERS[runner](program, tmp)
        return self._cache[key]

    def runnable(self, src: Source) -> bool:
        if src.runner is None or not AVAILABLE[src.runner]:
            return False
        key = (src.set, src.task_id)
        if key not in self._reference:
            self._reference[key] = self._passes(src.runner, program_of(src, src.text))
            if not self._reference[key]:
                self.reference_failures.append(f"{src.set} {src.task_id}")
        return self._reference[key]

    def result(self, src: Source, document: str) -> bool | None:
        """pass@1 of the completed document; None where it cannot be tested here."""
        if not self.runnable(src):
            return None
        assert src.runner is not None
        return self._passes(src.runner, program_of(src, document))


# ---- the raw model -----------------------------------------------------------------------------------------------


class RawModel:
    """The GGUF with nothing of sparkls around it: the ceiling a prompt and post-processing can reach."""

    def __init__(self, path: Path, threads: int) -> None:
        from llama_cpp import Llama

        self.llm = Llama(model_path=str(path), n_ctx=4096, n_threads=threads, n_threads_batch=threads, verbose=False)
        ids = [self._special(s) for s in ("<|fim_prefix|>", "<|fim_suffix|>", "<|fim_middle|>")]
        self.fim_prefix, self.fim_suffix, self.fim_middle = ids
        self.stops = {self._special(s) for s in RAW_STOPS} | {self.llm.token_eos()}

    def _special(self, text: str) -> int:
        toks = self.llm.tokenize(text.encode(), add_bos=False, special=True)
        assert len(toks) == 1, f"{text} is not one token in this model"
        return toks[0]

    def complete(self, prefix: str, suffix: str, max_tokens: int) -> str:
        before = self.llm.tokenize(prefix.encode(), add_bos=False, special=False)[-PREFIX_TOKENS:]
        after = self.llm.tokenize(suffix.encode(), add_bos=False, special=False)[:SUFFIX_TOKENS]
        prompt = [self.fim_prefix, *before, self.fim_suffix, *after, self.fim_middle]
        out: list[int] = []
        for tok in self.llm.generate(prompt, temp=0.0, top_k=1, top_p=1.0, min_p=0.0, repeat_penalty=1.0):
            if tok in self.stops:
                break
            out.append(tok)
            if len(out) >= max_tokens:
                break
        return self.llm.detokenize(out).decode("utf-8", "replace")

    def close(self) -> None:
        self.llm.close()


def run_raw(tasks: list[Task], path: Path, threads: int) -> dict[str, dict[str, Any]]:
    model = RawModel(path, threads)
    out: dict[str, dict[str, Any]] = {}
    try:
        for i, task in enumerate(tasks):
            t0 = time.perf_counter()
            text = model.complete(task.doc[: task.cursor], task.doc[task.cursor :], MAX_TOKENS[task.source.kind])
            out[task.key] = {"completion": text, "ms": (time.perf_counter() - t0) * 1000}
            progress("raw", i, tasks)
    finally:
        model.close()
        del model
        gc.collect()
    return out


# ---- the server --------------------------------------------------------------------------------------------------


def offset_of(text: str, line: int, character: int) -> int:
    """String offset of a UTF-16 LSP position."""
    start = 0
    for _ in range(line):
        nl = text.find("\n", start)
        if nl == -1:
            return len(text)
        start = nl + 1
    end = text.find("\n", start)
    row = text[start : len(text) if end == -1 else end]
    units = 0
    for i, ch in enumerate(row):
        if units >= character:
            return start + i
        units += 2 if ord(ch) > 0xFFFF else 1
    return start + len(row)


def inserted(doc: str, cursor: int, text: str, rng: tuple[int, int] | None) -> str:
    """What an item amounts to inserted at the cursor (an item may replace a range around it)."""
    if rng is None or rng == (cursor, cursor):
        return text
    new = doc[: rng[0]] + text + doc[rng[1] :]
    if len(new) >= len(doc) and new.startswith(doc[:cursor]) and new.endswith(doc[cursor:]):
        return new[cursor : len(new) - (len(doc) - cursor)]
    return text  # not an insertion at the cursor: scored as sent


def document_uri(task: Task) -> str:
    src = task.source
    if src.root is not None:
        return (Path(src.root) / src.path).as_uri()
    return f"file:///fim-eval/{src.set}/{src.path}"


async def run_server(
    tasks: list[Task],
    options: dict[str, Any],
    root: str | None,
    log_path: Path,
    invoked: bool,
    timeout_s: float,
    label: str,
) -> dict[str, dict[str, Any]]:
    client = Client(log_path)
    await client.start(options, root=Path(root) if root else None)
    out: dict[str, dict[str, Any]] = {}
    try:
        health = await client.wait_ready()
        if not health.ok:
            raise SystemExit(f"engine not available: {health.detail} (log: {log_path})")
        for i, task in enumerate(tasks):
            uri = document_uri(task)
            client.open(uri, task.doc, task.source.lsp_language)
            t0 = time.perf_counter()
            error = None
            try:
                res = await asyncio.wait_for(
                    client.lc.text_document_inline_completion_async(
                        client.inline_params(uri, task.doc, task.cursor, invoked)
                    ),
                    timeout_s,
                )
            except Exception as e:  # a failed request is an empty answer, reported
                res, error = None, f"{type(e).__name__}: {e}"
            ms = (time.perf_counter() - t0) * 1000
            client.close(uri)
            text = ""
            if res is not None and res.items:
                item = res.items[0]
                rng = None
                if item.range is not None:
                    rng = (
                        offset_of(task.doc, item.range.start.line, item.range.start.character),
                        offset_of(task.doc, item.range.end.line, item.range.end.character),
                    )
                text = inserted(task.doc, task.cursor, str(item.insert_text), rng)
            out[task.key] = {"completion": text, "ms": ms, **({"error": error} if error else {})}
            progress(label, i, tasks)
    finally:
        await client.stop()
    return out


def settings_problems(log_path: Path) -> list[str]:
    """The settings the server refused (it logs each one and falls back to its default)."""
    if not log_path.exists():
        return []
    return sorted({line.strip() for line in log_path.read_text(errors="replace").splitlines() if "settings: " in line})


# ---- scoring -----------------------------------------------------------------------------------------------------


def first_line(s: str | None) -> str | None:
    if s is None:
        return None
    return next((line.strip() for line in s.split("\n") if line.strip()), "")


def block_lines(s: str | None) -> list[str] | None:
    return None if s is None else [line.strip() for line in s.split("\n") if line.strip()]


def produced(task: Task, completion: str) -> str | None:
    """What the masked lines hold after the answer is inserted. `eol`: the answer after its leading newline;
    without one it extends the line before the masked one (None: a miss) unless that line is blank, which
    the answer may fill instead."""
    before = task.doc[task.doc.rfind("\n", 0, task.cursor) + 1 : task.cursor]
    if task.placement in ("indent", "api"):
        return before + completion
    if task.placement == "eol":
        m = re.match(r"[ \t]*\n", completion)
        return completion[m.end() :] if m else (completion if not before.strip() else None)
    return completion


def score(task: Task, answer: dict[str, Any], tests: Tests) -> dict[str, Any]:
    completion = answer["completion"]
    text = produced(task, completion)
    middle = task.source.middle
    row = {
        "completion": completion,
        "ms": round(answer["ms"], 1),
        "empty": not completion.strip(),
        "em": text is not None and first_line(text) == first_line(middle),
        "pass": tests.result(task.source, task.doc[: task.cursor] + completion + task.doc[task.cursor :]),
    }
    if task.source.kind == "block":
        got, want = block_lines(text), block_lines(middle)
        row["block_em"] = got == want
        row["block_prefix_em"] = got is not None and got[: len(want or [])] == want
    if "error" in answer:
        row["error"] = answer["error"]
    return row


# ---- summary -----------------------------------------------------------------------------------------------------


def _mean(values: Iterable[Any]) -> float | None:
    vals = [float(v) for v in values if v is not None]
    return sum(vals) / len(vals) if vals else None


def summarize(rows: list[dict[str, Any]], systems: list[str]) -> list[dict[str, Any]]:
    """One line per model x set x language x placement (plus `all` languages where a set has several)."""
    groups: dict[tuple[str, str, str, str], list[dict[str, Any]]] = defaultdict(list)
    languages: dict[str, set[str]] = defaultdict(set)
    for r in rows:
        languages[r["set"]].add(r["language"])
        groups[(r["model"], r["set"], r["language"], r["placement"])].append(r)
    for (model, name, _lang, placement), members in list(groups.items()):
        if len(languages[name]) > 1:
            groups[(model, name, "all", placement)].extend(members)
    out = []
    for (model, name, lang, placement), members in sorted(groups.items()):
        line: dict[str, Any] = {
            "model": model,
            "set": name,
            "language": lang,
            "placement": placement,
            "n": len(members),
        }
        for system in systems:
            got = [m[system] for m in members if system in m]
            if not got:
                continue
            line[system] = {
                "em": _mean(g["em"] for g in got),
                "empty": _mean(g["empty"] for g in got),
                "block_em": _mean(g.get("block_em") for g in got),
                "block_prefix_em": _mean(g.get("block_prefix_em") for g in got),
                "pass@1": _mean(g["pass"] for g in got),
                "tested": sum(g["pass"] is not None for g in got),
                "median_ms": statistics.median(g["ms"] for g in got),
            }
        if "sparkls" in line and "raw" in line:
            line["loss_points"] = 100 * (line["raw"]["em"] - line["sparkls"]["em"])
        if "sparkls-vllm" in line and "raw" in line:
            line["vllm_loss_points"] = 100 * (line["raw"]["em"] - line["sparkls-vllm"]["em"])
        if "sparkls" in line and "sparkls-noctx" in line:
            line["context_gain_points"] = 100 * (line["sparkls"]["em"] - line["sparkls-noctx"]["em"])
        out.append(line)
    return out


def _pct(v: float | None) -> str:
    return "-" if v is None else f"{100 * v:.1f}"


def table(summary: list[dict[str, Any]]) -> str:
    head = [
        "model",
        "set",
        "lang",
        "place",
        "n",
        "EM sparkls",
        "EM noctx",
        "EM raw",
        "loss pts",
        "block s/r",
        "block+ s/r",
        "empty% s/r",
        "pass@1 s/r",
        "ms s/r",
    ]
    lines = [head]
    for s in summary:
        sp, nc, raw = s.get("sparkls", {}), s.get("sparkls-noctx", {}), s.get("raw", {})

        def pair(key: str, a: dict[str, Any] = sp, b: dict[str, Any] = raw) -> str:
            return f"{_pct(a.get(key))}/{_pct(b.get(key))}"

        lines.append(
            [
                *_cell(s),
                _pct(sp.get("em")),
                _pct(nc.get("em")),
                _pct(raw.get("em")),
                "-" if "loss_points" not in s else f"{s['loss_points']:.1f}",
                *((pair("block_em"), pair("block_prefix_em")) if s["set"] in BLOCK_SETS else ("", "")),
                pair("empty"),
                pair("pass@1"),
                "/".join("-" if x.get("median_ms") is None else f"{x['median_ms']:.0f}" for x in (sp, raw)),
            ]
        )
    widths = [max(len(row[i]) for row in lines) for i in range(len(head))]
    cells = [
        [c.rjust(w) if i >= 4 else c.ljust(w) for i, (c, w) in enumerate(zip(row, widths, strict=True))]
        for row in lines
    ]
    return "\n".join("  ".join(row) for row in cells)


def engines_table(summary: list[dict[str, Any]]) -> str:
    """The server on llama.cpp (l) and on vLLM (v), same model, same run, beside the raw model (r)."""
    head = [
        "model",
        "set",
        "lang",
        "place",
        "n",
        "EM l",
        "EM v",
        "EM raw",
        "v-l pts",
        "empty% l/v",
        "pass@1 l/v/r",
        "ms l/v",
    ]
    lines = [head]
    for s in summary:
        sp, v, raw = s.get("sparkls", {}), s.get("sparkls-vllm", {}), s.get("raw", {})
        if not v:
            continue
        gap = "-" if sp.get("em") is None or v.get("em") is None else f"{100 * (v['em'] - sp['em']):.1f}"
        lines.append(
            [
                *_cell(s),
                _pct(sp.get("em")),
                _pct(v.get("em")),
                _pct(raw.get("em")),
                gap,
                f"{_pct(sp.get('empty'))}/{_pct(v.get('empty'))}",
                "/".join(_pct(x.get("pass@1")) for x in (sp, v, raw)),
                "/".join("-" if x.get("median_ms") is None else f"{x['median_ms']:.0f}" for x in (sp, v)),
            ]
        )
    widths = [max(len(row[i]) for row in lines) for i in range(len(head))]
    return "\n".join(
        "  ".join(c.rjust(w) if i >= 4 else c.ljust(w) for i, (c, w) in enumerate(zip(row, widths, strict=True)))
        for row in lines
    )


# ---- main --------------------------------------------------------------------------------------------------------


def progress(label: str, i: int, tasks: list[Task]) -> None:
    if (i + 1) % 25 == 0 or i + 1 == len(tasks):
        print(f"  {label}: {i + 1}/{len(tasks)}", flush=True)


def _cell(s: dict[str, Any]) -> list[str]:
    """A summary row's first columns: model, set, language, placement, tasks."""
    return [s["model"].removeprefix("qwen2.5-coder-"), s["set"], s["language"], s["placement"], str(s["n"])]


def parse_args() -> argparse.Namespace:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--sets", default=",".join(SETS), help="comma list of task sets")
    ap.add_argument("--placements", default=",".join(PLACEMENTS), help="comma list of cursor placements")
    ap.add_argument("--limit", type=int, default=None, help="tasks per set (per language for pack sets)")
    ap.add_argument(
        "--heldout",
        action="store_true",
        help="the --limit tasks half-way between the ones --limit "
        "picks (none the same): a development slice to choose settings on, away from the reported tasks",
    )
    ap.add_argument("--models", default="0.5b", help="comma list: 0.5b, 1.5b")
    ap.add_argument("--threads", type=int, default=1, help="CPU threads, the server's and the raw model's")
    ap.add_argument("--settings", default="{}", help="extra server settings as JSON, e.g. '{\"suffixTokens\": 256}'")
    ap.add_argument("--skip-raw", action="store_true", help="do not run the raw model")
    ap.add_argument(
        "--vllm-model",
        default="",
        help="an HF checkpoint of the same model (`sparkls convert-model "
        "DIR`): adds system `sparkls-vllm`, the server on the vLLM engine, beside llama.cpp's",
    )
    ap.add_argument(
        "--invoked",
        action="store_true",
        help="ask as an explicit invocation (triggerKind Invoked) instead of while typing",
    )
    ap.add_argument("--timeout", type=float, default=180.0, help="seconds per server request")
    ap.add_argument(
        "--set",
        choices=("single", "multi"),
        default=None,
        help="(old interface) = --sets humaneval-<set> --placements col0",
    )
    ap.add_argument("--out", default=str(ROOT / "benchmarks" / "results" / "fim_eval.json"))
    args = ap.parse_args()
    if args.set:
        args.sets, args.placements = f"humaneval-{args.set}", "col0"
    return args


def server_runs(
    tasks: list[Task],
    options: dict[str, Any],
    vllm_model: str = "",
) -> list[tuple[str, str | None, dict[str, Any], list[Task]]]:
    """(system, workspace root, settings, tasks) per server start: one per root, twice for a cross-file root,
    and once more per root on the vLLM engine when `vllm_model` names the same model converted."""
    runs: list[tuple[str, str | None, dict[str, Any], list[Task]]] = []
    for root in sorted({t.source.root or "" for t in tasks}):
        group = [t for t in tasks if (t.source.root or "") == root]
        runs.append(("sparkls", root or None, options, group))
        if root:
            runs.append(("sparkls-noctx", root, {**options, "contextTokens": 0}, group))
        if vllm_model:
            runs.append(("sparkls-vllm", root or None, {**options, "engine": "vllm", "modelPath": vllm_model}, group))
    return runs


def generate(
    model: str,
    path: Path,
    tasks: list[Task],
    args: argparse.Namespace,
    extra: dict[str, Any],
    scratch: Path,
    problems: dict[str, list[str]],
) -> dict[str, dict[str, dict[str, Any]]]:
    """Every system's answers for one model: system -> task key -> answer; the raw model first, then each server."""
    answers: dict[str, dict[str, dict[str, Any]]] = {}
    if not args.skip_raw:
        print(f"{model}: raw model", flush=True)
        answers["raw"] = run_raw(tasks, path, args.threads)
    options = {"engine": "llamacpp", "threads": args.threads, "model": model, **extra}
    for n, (system, root, opts, group) in enumerate(server_runs(tasks, options, args.vllm_model)):
        label = f"{model} {system}" + (f" @ {root}" if root else "")
        print(f"{label}: {len(group)} tasks", flush=True)
        log_path = scratch / f"server-{model}-{n}-{system}.log"
        answers.setdefault(system, {}).update(
            asyncio.run(run_server(group, opts, root, log_path, args.invoked, args.timeout, label))
        )
        problems[label] = settings_problems(log_path)
        for p in problems[label]:
            print(f"  server: {p}", flush=True)
    return answers


def main() -> int:
    args = parse_args()
    sets = [s for s in args.sets.split(",") if s]
    placements = tuple(p for p in args.placements.split(",") if p)
    models = [MODELS.get(m, m) for m in args.models.split(",") if m]
    unknown = (
        [s for s in sets if s not in SETS]
        + [p for p in placements if p not in PLACEMENTS]
        + [m for m in models if m not in MODELS.values()]
    )
    if unknown:
        print(f"unknown: {unknown}; sets {SETS}, placements {PLACEMENTS}, models {list(MODELS)}", file=sys.stderr)
        return 2
    if not fim_tasks.SHARED.is_dir():
        print(f"no data at {fim_tasks.SHARED}", file=sys.stderr)
        return 2
    extra = json.loads(args.settings)
    commit = STARTED["commit"]
    scratch = Path(tempfile.mkdtemp(prefix="sparkls-fim-eval-"))
    corpus_root = fim_tasks.layout_corpus(scratch / "corpus") if "crossfile-corpus" in sets else None
    sources = [s for name in sets for s in fim_tasks.build(name, args.limit, corpus_root, args.heldout)]
    tasks = fim_tasks.tasks(sources, placements)
    print(
        f"{len(tasks)} tasks ({', '.join(f'{n} {sum(t.source.set == n for t in tasks)}' for n in sets)}); "
        f"tests: {', '.join(k for k, v in AVAILABLE.items() if v)}; sandbox {'netns' if SANDBOX else 'no netns'}; "
        f"{machine()['cpu']}, {os.cpu_count()} cores, {args.threads} thread(s)",
        flush=True,
    )
    t_start = time.perf_counter()
    tests, rows = Tests(), []
    problems: dict[str, list[str]] = {}
    skipped: dict[str, str] = {}
    for model in models:
        try:
            path = resolve_model_path("", model)
        except ModelUnavailable as e:
            print(f"{model}: skipped: {e}", file=sys.stderr)
            skipped[model] = str(e)
            continue
        answers = generate(model, path, tasks, args, extra, scratch, problems)
        print(f"{model}: running tests", flush=True)
        for task in tasks:
            row: dict[str, Any] = {
                "model": model,
                "set": task.source.set,
                "task_id": task.source.task_id,
                "language": task.source.language,
                "placement": task.placement,
                "path": task.source.path,
                "masked": task.source.middle,
                "expected": task.expected,
            }
            rows.append(
                row | {system: score(task, got[task.key], tests) for system, got in answers.items() if task.key in got}
            )  # sparkls-noctx answers the cross-file sets only
    systems = [
        "sparkls",
        *(["sparkls-noctx"] if any(s in CROSSFILE for s in sets) else []),
        *(["sparkls-vllm"] if args.vllm_model else []),
        *([] if args.skip_raw else ["raw"]),
    ]
    summary = summarize(rows, systems)
    print(table(summary))
    if args.vllm_model:
        print("\nllama.cpp (l) vs vLLM (v), the same model through the same server:\n" + engines_table(summary))
    if tests.reference_failures:
        print(
            f"canonical solutions failing their tests here (pass@1 null): {len(tests.reference_failures)}: "
            f"{', '.join(tests.reference_failures[:12])}{' ...' if len(tests.reference_failures) > 12 else ''}"
        )
    meta = {
        "date": datetime.datetime.now(datetime.UTC).isoformat(timespec="seconds"),
        "argv": sys.argv,
        "commit": commit,
        "machine": machine(),
        "models": models,
        "skipped_models": skipped,
        "threads": args.threads,
        "settings": extra,
        "sets": sets,
        "placements": list(placements),
        "limit": args.limit,
        "heldout": args.heldout,
        "trigger": "invoked" if args.invoked else "automatic",
        "systems": systems,
        "raw_prompt": {
            "prefix_tokens": PREFIX_TOKENS,
            "suffix_tokens": SUFFIX_TOKENS,
            "max_tokens": MAX_TOKENS,
            "stops": RAW_STOPS,
        },
        "tests": dict(AVAILABLE),
        "sandbox": bool(SANDBOX),
        "reference_failures": tests.reference_failures,
        "server_settings_problems": problems,
        "wall_s": round(time.perf_counter() - t_start, 1),
    }
    out = Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps({"meta": meta, "summary": summary, "rows": rows}, indent=1, ensure_ascii=False))
    shutil.rmtree(scratch / "corpus", ignore_errors=True)
    print(f"wrote {out} (server logs in {scratch})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
