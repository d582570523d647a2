"""`sparkls demo`: start the server as a subprocess, connect as an LSP client, open a real sample
file, ask for inline completions at a few cursors and print each suggestion with its timings."""

from __future__ import annotations

import asyncio
import re
import sys
import tempfile
import time
from importlib import resources
from pathlib import Path

from lsprotocol import types

from sparkls.tools.client import Client, position

MARK = re.compile(r"⟨(\d+)⟩")


def load_sample(path: str | None) -> tuple[str, str, list[int]]:
    """(uri, text without marks, cursor offsets) of the demo file."""
    if path:
        raw = Path(path).read_text(encoding="utf-8")
        uri = Path(path).resolve().as_uri()
    else:
        raw = resources.files("sparkls.samples").joinpath("inventory.py.txt").read_text(encoding="utf-8")
        uri = "file:///sparkls-demo/inventory.py"
    text, cursors, last = "", [], 0
    for m in MARK.finditer(raw):
        text += raw[last : m.start()]
        cursors.append(len(text))
        last = m.end()
    text += raw[last:]
    if not cursors:
        cursors = [len(text)]
    return uri, text, cursors


async def _demo(engine: str, path: str | None, threads: int) -> int:
    uri, text, cursors = load_sample(path)
    log_path = Path(tempfile.gettempdir()) / "sparkls-demo-server.log"
    client = Client(log_path)
    await client.start({"engine": engine, "threads": threads})
    print(f"sparkls demo: engine={engine}; loading the model...", flush=True)
    t = time.perf_counter()
    health = await client.wait_ready()
    print(
        f"engine: {health.engine} ok={health.ok} model={health.model} {health.detail} "
        f"({time.perf_counter() - t:.1f}s)\n",
        flush=True,
    )
    if not health.ok:
        print("the engine is not available; run `sparkls doctor`", file=sys.stderr)
        await client.stop()
        return 1
    client.open(uri, text, "python" if uri.endswith(".py") else "")
    for n, cursor in enumerate(cursors, 1):
        t0 = time.perf_counter()
        result = await client.lc.text_document_inline_completion_async(client.inline_params(uri, text, cursor))
        wall = (time.perf_counter() - t0) * 1000
        rec = (await client.request("sparkls/metrics")).suggestions[-1]
        items = (result.items if isinstance(result, types.InlineCompletionList) else result) or []
        pos = position(text, cursor)
        line = text[text.rfind("\n", 0, cursor) + 1 : cursor]
        print(f"── cursor {n} at {pos.line + 1}:{pos.character + 1}  {line.strip() or '(new line)'}")
        shown = items[0].insert_text if items else "(no suggestion)"
        for ln in str(shown).split("\n"):
            print(f"   │ {ln}")
        st, tm = rec.stats, rec.timings
        tps = st.decode_tokens / (st.decode_ms / 1000) if st.decode_ms else 0.0
        print(
            f"   TTFT {tm.ttft_ms:.0f} ms · total {wall:.0f} ms · {st.decode_tokens} tokens at {tps:.1f} tok/s "
            f"· prompt {st.prompt_tokens} tokens ({st.reused_tokens} reused from the KV cache)\n",
            flush=True,
        )
    await client.stop()
    print(f"server log (per-stage timings): {log_path}")
    return 0


def run_demo(engine: str = "llamacpp", path: str | None = None, threads: int = 0) -> int:
    return asyncio.run(_demo(engine, path, threads))
