"""The remote engine: streaming `/v1/completions` on a `vllm serve` server or any OpenAI-compatible one.

One `httpx.AsyncClient` holds a persistent connection pool for the server's lifetime: keep-alive
HTTP/1.1, or HTTP/2 where the server offers it over TLS (ALPN), so no request pays a connection
set-up. sparkls renders the FIM prompt itself (the completions endpoint has no `suffix` for vLLM)
and sends the request's `priority` (vLLM's extension; vLLM 0.32 without priority scheduling ignores
it, and a strict server that rejects it with HTTP 400 makes sparkls stop sending it, with one
warning). Cancelling closes the response stream, which vLLM treats as an abort. Connection
failures before the first token are retried with exponential backoff; after output has started a
failure ends the request with an `EngineError` (retrying would repeat text). The API key
(settings, or `SPARKLS_OPENAI_API_KEY` / `OPENAI_API_KEY`) goes only into the Authorization
header and is never logged.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import os
import time
from collections.abc import AsyncGenerator, AsyncIterator, Iterable, Mapping
from typing import Any

import httpx

from sparkls.engine.base import Delta, EngineError, Event, Finished, GenerationRequest, GenerationStats, Health
from sparkls.engine.metrics import Recorder
from sparkls.engine.options import OpenAIOptions

log = logging.getLogger(__name__)

API_KEY_ENV = ("SPARKLS_OPENAI_API_KEY", "OPENAI_API_KEY")
# Prometheus counters of a vLLM server that `health()` reports (summed over label sets).
SERVER_COUNTERS = {
    "vllm:prefix_cache_queries_total": "prefix_cache_queries",
    "vllm:prefix_cache_hits_total": "prefix_cache_hits",
    "vllm:num_preemptions_total": "preemptions",
    "vllm:num_requests_running": "running",
    "vllm:num_requests_waiting": "waiting",
}


def api_key_from(options_key: str) -> str:
    return options_key or next((os.environ[k] for k in API_KEY_ENV if os.environ.get(k)), "")


def parse_sse(lines: Iterable[str]) -> Iterable[dict[str, Any]]:
    """The JSON payloads of Server-Sent Events `data:` lines, up to `[DONE]` (pure)."""
    for line in lines:
        if not line.startswith("data:"):
            continue
        data = line[5:].strip()
        if data == "[DONE]":
            return
        if data:
            yield json.loads(data)


def parse_prometheus(text: str, wanted: Mapping[str, str] = SERVER_COUNTERS) -> dict[str, float]:
    """Sum the samples of the `wanted` metrics in a Prometheus text exposition (pure)."""
    out: dict[str, float] = {}
    for line in text.splitlines():
        if not line or line.startswith("#"):
            continue
        name = line.split("{", 1)[0].split(" ", 1)[0]
        if name in wanted:
            with contextlib.suppress(ValueError, IndexError):
                out[wanted[name]] = out.get(wanted[name], 0.0) + float(line.rsplit(" ", 1)[1])
    return out


class _Retryable(Exception):
    pass


class OpenAIEngine:
    name = "openai"

    def __init__(self, options: OpenAIOptions) -> None:
        self.options = options
        self.base_url = options.url.rstrip("/")
        self.recorder = Recorder()
        self.completed = self.recorder.completed
        self._model = options.model
        self._send_priority = options.send_priority
        self._responses: dict[str, httpx.Response] = {}
        self._client: httpx.AsyncClient | None = None
        self._ready: asyncio.Future[None] | None = None
        self._error = ""

    # -- connection pool -------------------------------------------------------------------------
    def client(self) -> httpx.AsyncClient:
        if self._client is None:
            key = api_key_from(self.options.api_key)
            headers = {"Authorization": f"Bearer {key}"} if key else {}
            try:
                import h2  # noqa: F401  (HTTP/2 needs it; ALPN picks it on https servers that offer it)

                http2 = True
            except ImportError:
                http2 = False
            self._client = httpx.AsyncClient(
                headers=headers, http2=http2,
                timeout=httpx.Timeout(self.options.timeout_s, connect=min(10.0, self.options.timeout_s)),
                limits=httpx.Limits(max_connections=self.options.max_connections,
                                    max_keepalive_connections=self.options.max_connections, keepalive_expiry=600),
            )
        return self._client

    async def _discover(self) -> None:
        if self._model:
            return
        r = await self.client().get(f"{self.base_url}/models")
        r.raise_for_status()
        models = [m["id"] for m in r.json().get("data", [])]
        if not models:
            raise EngineError(f"{self.base_url}/models lists no model")
        self._model = models[0]
        log.info("openai engine: %s serves %s", self.base_url, self._model)

    async def ready(self) -> None:
        if self._ready is None:
            self._ready = asyncio.ensure_future(self._discover())
        try:
            await asyncio.shield(self._ready)
        except Exception as e:
            self._error = str(e)
            self._ready = None  # try again on the next request: the server may come up later

    # -- requests --------------------------------------------------------------------------------
    def _body(self, req: GenerationRequest) -> dict[str, Any]:
        body: dict[str, Any] = {
            "model": self._model, "prompt": req.prompt, "max_tokens": req.max_tokens,
            "temperature": req.temperature, "stream": True, "stream_options": {"include_usage": True},
            "skip_special_tokens": False,
        }
        if req.stop:
            body["stop"] = list(req.stop)[:4]  # the OpenAI API takes at most 4
        if self._send_priority:
            body["priority"] = int(req.priority)
        return body

    async def stream(self, request: GenerationRequest) -> AsyncGenerator[Event, None]:
        t0 = time.perf_counter()
        await self.ready()
        if not self._model:
            raise EngineError(f"remote engine {self.base_url} is not reachable: {self._error}")
        attempt = 0
        while True:
            try:
                async for event in self._attempt(request, t0):
                    yield event
                return
            except _Retryable as e:
                attempt += 1
                if attempt > self.options.retries:
                    cause = e.__cause__ or e
                    raise EngineError(f"remote engine {self.base_url}: {type(cause).__name__}: {cause}") from e
                delay = self.options.backoff_s * 2 ** (attempt - 1)
                log.warning("%s: %s; retry %d/%d in %.2fs", request.id, e, attempt, self.options.retries, delay)
                await asyncio.sleep(delay)

    async def _attempt(self, req: GenerationRequest, t0: float) -> AsyncGenerator[Event, None]:
        url = f"{self.base_url}/completions"
        sent = time.perf_counter()
        n = 0
        ttft = 0.0
        t_first = sent
        usage: dict[str, Any] = {}
        reason = "length"
        try:
            async with self.client().stream("POST", url, json=self._body(req)) as resp:
                self._responses[req.id] = resp
                if resp.status_code >= 400:
                    await self._http_error(resp)
                    return  # _http_error raised or asked for a retry
                async for payload in _aparse_sse(resp.aiter_lines()):
                    if payload.get("usage"):
                        usage = payload["usage"]
                    for choice in payload.get("choices") or []:
                        text = choice.get("text") or ""
                        if text:
                            if n == 0:
                                t_first = time.perf_counter()
                                ttft = (t_first - sent) * 1000
                            n += 1
                            yield Delta(text)
                        if choice.get("finish_reason"):
                            reason = "stop" if choice["finish_reason"] == "stop" else "length"
        except (asyncio.CancelledError, GeneratorExit):
            # Closing the stream (the `async with` above) drops the connection: vLLM aborts the request.
            self.recorder.record(req.id, self._stats(req, usage, t0, sent, ttft, n, t_first, "abort"))
            raise
        except (httpx.ConnectError, httpx.ConnectTimeout, httpx.RemoteProtocolError, httpx.ReadError) as e:
            if n == 0:
                raise _Retryable(type(e).__name__) from e
            raise EngineError(f"remote engine {self.base_url} failed mid-stream: {type(e).__name__}") from e
        except httpx.TimeoutException as e:
            raise EngineError(f"remote engine {self.base_url} timed out ({type(e).__name__})") from e
        finally:
            self._responses.pop(req.id, None)
        yield Finished(self.recorder.record(req.id, self._stats(req, usage, t0, sent, ttft, n, t_first, reason)))

    async def _http_error(self, resp: httpx.Response) -> None:
        detail = (await resp.aread()).decode("utf-8", "replace")[:500]
        if resp.status_code == 400 and self._send_priority and "priority" in detail.lower():
            log.warning("the server rejects request priorities (start it with --scheduling-policy priority); "
                        "sending none from now on")
            self._send_priority = False
            raise _Retryable("priority not supported")
        if resp.status_code in (429, 502, 503, 504):
            raise _Retryable(f"HTTP {resp.status_code}")
        raise EngineError(f"remote engine answered HTTP {resp.status_code}: {detail}")

    def _stats(self, req: GenerationRequest, usage: Mapping[str, Any], t0: float, sent: float, ttft: float,
               n: int, t_first: float, reason: str) -> GenerationStats:
        details = usage.get("prompt_tokens_details") or {}
        return GenerationStats(
            prompt_tokens=int(usage.get("prompt_tokens") or 0), reused_tokens=int(details.get("cached_tokens") or 0),
            queue_ms=(sent - t0) * 1000, ttft_ms=ttft, decode_tokens=int(usage.get("completion_tokens") or n),
            decode_ms=(time.perf_counter() - t_first) * 1000 if n else 0.0, finish_reason=reason,
            priority=req.priority)

    async def abort(self, request_id: str) -> None:
        resp = self._responses.pop(request_id, None)
        if resp is not None:
            await resp.aclose()  # the server sees the disconnect and aborts

    async def health(self) -> Health:
        await self.ready()
        root = self.base_url.removesuffix("/v1")
        try:
            r = await self.client().get(f"{root}/metrics", timeout=5)
            stats = parse_prometheus(r.text) if r.status_code == 200 else {}
        except httpx.HTTPError:
            stats = {}
        if not self._model:
            return Health(False, self.name, "", f"{self.base_url} unreachable: {self._error}", stats)
        return Health(True, self.name, self._model, f"{self.base_url} priority={self._send_priority}", stats)

    def model_metadata(self) -> dict[str, str]:
        return {"general.name": self._model}

    async def close(self) -> None:
        if self._client is not None:
            await self._client.aclose()


async def _aparse_sse(lines: AsyncIterator[str]) -> AsyncIterator[dict[str, Any]]:
    """Payloads up to `[DONE]`; the body is still read to its end, so the connection can be reused
    (httpx closes a connection whose response was not read completely)."""
    done = False
    async for line in lines:
        if done:
            continue
        if line.strip() == "data: [DONE]":
            done = True
            continue
        for payload in parse_sse([line]):
            yield payload
