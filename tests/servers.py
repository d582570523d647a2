"""Real servers on 127.0.0.1 for tests and benchmarks: an OpenAI-compatible vLLM server, and a TCP
proxy that counts the connections made through it (so a test can prove connection reuse)."""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import socket
import subprocess
import sys
import threading
import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

# What the vLLM tests need on this CPU machine (facts measured here, see issue 3): no worker
# processes inside the engine core, no thread pinning, one OMP thread, logs on stderr.
VLLM_TEST_ENV = {
    "VLLM_ENABLE_V1_MULTIPROCESSING": "0",
    "VLLM_CPU_OMP_THREADS_BIND": "nobind",
    "OMP_NUM_THREADS": "1",
    "VLLM_LOGGING_STREAM": "ext://sys.stderr",
    "VLLM_LOGGING_LEVEL": "WARNING",
}


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@contextlib.contextmanager
def vllm_server(
    model: Path, *args: str, api_key: str = "", timeout_s: float = 240, log: Path | None = None
) -> Iterator[str]:
    """Start `python -m vllm.entrypoints.openai.api_server` (the `vllm serve` script is broken in
    vllm-cpu 0.32.0) on a free loopback port; yield its base URL (`http://127.0.0.1:PORT/v1`)."""
    port = free_port()
    cmd = [
        sys.executable,
        "-m",
        "vllm.entrypoints.openai.api_server",
        "--model",
        str(model),
        "--host",
        "127.0.0.1",
        "--port",
        str(port),
        "--max-model-len",
        "2048",
        "--block-size",
        "32",
        "--enable-prefix-caching",
        "--enable-prompt-tokens-details",
        "--kv-cache-memory-bytes",
        str(256 * 2**20),
        *args,
    ]
    if api_key:
        cmd += ["--api-key", api_key]
    out = open(log, "wb") if log else subprocess.DEVNULL  # noqa: SIM115
    proc = subprocess.Popen(cmd, env={**os.environ, **VLLM_TEST_ENV}, stdout=out, stderr=subprocess.STDOUT)
    url = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + timeout_s
        while True:
            if proc.poll() is not None:
                raise RuntimeError(f"vLLM server exited with {proc.returncode}" + (f"; see {log}" if log else ""))
            try:
                with urllib.request.urlopen(f"{url}/health", timeout=2) as r:
                    if r.status == 200:
                        break
            except OSError:
                pass
            if time.monotonic() > deadline:
                raise TimeoutError(f"vLLM server did not come up in {timeout_s}s")
            time.sleep(0.5)
        yield f"{url}/v1"
    finally:
        proc.terminate()
        try:
            proc.wait(30)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
        if log:
            out.close()  # type: ignore[union-attr]


def server_metric(base_url: str, name: str, label: str = "") -> float:
    """Sum of a Prometheus metric's samples on the server (optionally only lines containing `label`)."""
    root = base_url.removesuffix("/v1")
    with urllib.request.urlopen(f"{root}/metrics", timeout=5) as r:
        text = r.read().decode()
    total = 0.0
    for line in text.splitlines():
        if line.startswith(name) and (not label or label in line):
            total += float(line.rsplit(" ", 1)[1])
    return total


class CountingProxy:
    """A loopback TCP proxy to `target` that counts the connections accepted."""

    def __init__(self, target_host: str, target_port: int) -> None:
        self.target = (target_host, target_port)
        self.connections = 0
        self._server: asyncio.AbstractServer | None = None
        self.port = 0

    async def __aenter__(self) -> CountingProxy:
        self._server = await asyncio.start_server(self._handle, "127.0.0.1", 0)
        self.port = self._server.sockets[0].getsockname()[1]
        return self

    async def __aexit__(self, *exc: object) -> None:
        assert self._server is not None
        self._server.close()
        with contextlib.suppress(Exception):
            await asyncio.wait_for(self._server.wait_closed(), 2)

    async def _handle(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.connections += 1
        up_reader, up_writer = await asyncio.open_connection(*self.target)

        async def pipe(src: asyncio.StreamReader, dst: asyncio.StreamWriter) -> None:
            try:
                while data := await src.read(65536):
                    dst.write(data)
                    await dst.drain()
            except (ConnectionError, asyncio.CancelledError):
                pass
            finally:
                with contextlib.suppress(Exception):
                    dst.close()

        await asyncio.gather(pipe(reader, up_writer), pipe(up_reader, writer))


class FaultyOpenAIServer:
    """A real OpenAI-compatible completions server on 127.0.0.1 (its own thread and event loop) whose
    behaviour a test switches with `mode`: "ok" streams `answer`; "500" answers HTTP 500; "garbage" streams
    a body that is not Server-Sent Events of JSON; "drop" closes the connection after the first chunk; "hang"
    sends the headers and then nothing; "slow" streams with `delay_s` between chunks. `stop()` kills it
    (connections refused); `start()` brings it back on the same port. `completions` counts requests, `bodies`
    keeps their JSON bodies (a warm-up asks for one token: `suggestions` leaves those out), `authorizations`
    their Authorization headers."""

    def __init__(self, answer: str = "return 1\n", delay_s: float = 0.3) -> None:
        self.answer, self.delay_s = answer, delay_s
        self.mode = "ok"
        self.completions = 0
        self.bodies: list[dict[str, Any]] = []  # the JSON body of each completions request
        self.authorizations: list[str] = []  # the Authorization header of each completions request
        self.port = free_port()
        self._loop: asyncio.AbstractEventLoop | None = None
        self._server: asyncio.Server | None = None
        self._thread: threading.Thread | None = None

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}/v1"

    @property
    def suggestions(self) -> int:
        """Completions requests that asked for more than the one token of a warm-up."""
        return sum(body.get("max_tokens", 0) > 1 for body in self.bodies)

    def start(self) -> FaultyOpenAIServer:
        ready = threading.Event()

        def run() -> None:
            loop = self._loop = asyncio.new_event_loop()
            self._server = loop.run_until_complete(asyncio.start_server(self._handle, "127.0.0.1", self.port))
            ready.set()
            loop.run_forever()
            self._server.close()
            for task in asyncio.all_tasks(loop):
                task.cancel()
            loop.run_until_complete(asyncio.sleep(0))
            loop.close()

        self._thread = threading.Thread(target=run, name="faulty-openai", daemon=True)
        self._thread.start()
        ready.wait(10)
        return self

    def stop(self) -> None:
        if self._loop is not None and self._thread is not None:
            self._loop.call_soon_threadsafe(self._loop.stop)
            self._thread.join(10)
            self._loop = self._thread = None

    async def _handle(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            while True:  # keep-alive: one request after another on this connection
                head = await reader.readuntil(b"\r\n\r\n")
                lines = head.decode("latin-1").split("\r\n")
                path = lines[0].split(" ")[1]
                length = next(
                    (int(h.split(":", 1)[1]) for h in lines[1:] if h.lower().startswith("content-length:")), 0
                )
                body = await reader.readexactly(length) if length else b""
                if path.endswith("/models"):
                    await self._plain(writer, 200, b'{"object": "list", "data": [{"id": "faulty", "object": "model"}]}')
                elif path.endswith("/completions"):
                    self.completions += 1
                    self.bodies.append(json.loads(body or b"{}"))
                    self.authorizations += [
                        h.split(":", 1)[1].strip() for h in lines[1:] if h.lower().startswith("authorization:")
                    ]
                    await self._complete(writer)
                else:
                    await self._plain(writer, 404, b"not found")
        except (asyncio.IncompleteReadError, ConnectionError, IndexError, ValueError):
            pass
        finally:
            writer.close()

    @staticmethod
    async def _plain(writer: asyncio.StreamWriter, status: int, body: bytes) -> None:
        writer.write(
            f"HTTP/1.1 {status} X\r\nContent-Type: application/json\r\nContent-Length: {len(body)}\r\n\r\n".encode()
            + body
        )
        await writer.drain()

    async def _complete(self, writer: asyncio.StreamWriter) -> None:
        mode = self.mode
        if mode == "500":
            await self._plain(writer, 500, b'{"error": "internal server error"}')
            return
        writer.write(b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nTransfer-Encoding: chunked\r\n\r\n")

        async def chunk(data: bytes) -> None:
            writer.write(f"{len(data):x}\r\n".encode() + data + b"\r\n")
            await writer.drain()

        if mode == "hang":
            await asyncio.sleep(3600)
        if mode == "garbage":
            await chunk(b"data: {this is not json\n\n\x00\xff garbage\n\n")
        else:
            for i, piece in enumerate(self.answer[j : j + 3] for j in range(0, len(self.answer), 3)):
                await chunk(
                    b"data: " + json.dumps({"choices": [{"text": piece, "finish_reason": None}]}).encode() + b"\n\n"
                )
                if mode == "drop" and i == 0:
                    writer.transport.abort()
                    return
                if mode == "slow":
                    await asyncio.sleep(self.delay_s)
            await chunk(b"data: " + json.dumps({"choices": [{"text": "", "finish_reason": "stop"}]}).encode() + b"\n\n")
            await chunk(b"data: [DONE]\n\n")
        await chunk(b"")
