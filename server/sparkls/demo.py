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
from pygls.lsp.client import LanguageClient

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


def _position(text: str, offset: int) -> types.Position:
    line = text.count("\n", 0, offset)
    col_text = text[text.rfind("\n", 0, offset) + 1 : offset]
    return types.Position(line=line, character=len(col_text.encode("utf-16-le")) // 2)


async def _drain(stream: asyncio.StreamReader, path: Path) -> None:
    """Copy the server's stderr to a log file (an undrained pipe would block the server)."""
    with path.open("wb") as f:
        while line := await stream.readline():
            f.write(line)
            f.flush()


async def _demo(engine: str, path: str | None, threads: int) -> int:
    uri, text, cursors = load_sample(path)
    client = LanguageClient("sparkls-demo", "0.1")
    await client.start_io(sys.executable, "-m", "sparkls", "serve")
    log_path = Path(tempfile.gettempdir()) / "sparkls-demo-server.log"
    drain = asyncio.create_task(_drain(client._server.stderr, log_path))  # type: ignore[union-attr]
    caps = types.ClientCapabilities(
        text_document=types.TextDocumentClientCapabilities(
            inline_completion=types.InlineCompletionClientCapabilities()),
        general=types.GeneralClientCapabilities(position_encodings=[types.PositionEncodingKind.Utf16]))
    await client.initialize_async(types.InitializeParams(
        capabilities=caps, initialization_options={"engine": engine, "threads": threads}))
    client.initialized(types.InitializedParams())
    print(f"sparkls demo: engine={engine}; loading the model...", flush=True)
    t = time.perf_counter()
    health = await client.protocol.send_request_async("sparkls/health", None)
    while not health.ok and health.detail == "loading":
        await asyncio.sleep(0.2)
        health = await client.protocol.send_request_async("sparkls/health", None)
    print(f"engine: {health.engine} ok={health.ok} model={health.model} {health.detail} "
          f"({time.perf_counter() - t:.1f}s)\n", flush=True)
    if not health.ok:
        print("the engine is not available; run `sparkls doctor`", file=sys.stderr)
        return 1
    lang = "python" if uri.endswith(".py") else ""
    client.text_document_did_open(types.DidOpenTextDocumentParams(
        types.TextDocumentItem(uri=uri, language_id=lang, version=1, text=text)))
    for n, cursor in enumerate(cursors, 1):
        pos = _position(text, cursor)
        t0 = time.perf_counter()
        result = await client.text_document_inline_completion_async(types.InlineCompletionParams(
            text_document=types.TextDocumentIdentifier(uri=uri), position=pos,
            context=types.InlineCompletionContext(trigger_kind=types.InlineCompletionTriggerKind.Automatic)))
        wall = (time.perf_counter() - t0) * 1000
        metrics = await client.protocol.send_request_async("sparkls/metrics", None)
        rec = metrics.suggestions[-1]
        items = result.items if result else []
        line = text[text.rfind("\n", 0, cursor) + 1 : cursor]
        print(f"── cursor {n} at {pos.line + 1}:{pos.character + 1}  {line.strip() or '(new line)'}")
        shown = items[0].insert_text if items else "(no suggestion)"
        for ln in str(shown).split("\n"):
            print(f"   │ {ln}")
        st, tm = rec.stats, rec.timings
        tps = st.decode_tokens / (st.decode_ms / 1000) if st.decode_ms else 0.0
        print(f"   TTFT {tm.ttft_ms:.0f} ms · total {wall:.0f} ms · {st.decode_tokens} tokens at {tps:.1f} tok/s "
              f"· prompt {st.prompt_tokens} tokens ({st.reused_tokens} reused from the KV cache)\n", flush=True)
    await client.shutdown_async(None)
    client.exit(None)
    await client.stop()
    drain.cancel()
    print(f"server log (per-stage timings): {log_path}")
    return 0


def run_demo(engine: str = "llamacpp", path: str | None = None, threads: int = 0) -> int:
    return asyncio.run(_demo(engine, path, threads))
