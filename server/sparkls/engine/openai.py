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
header and is never logged. Stops that are one special token on a vLLM server (asked once through its
`/tokenize`) are sent as `stop_token_ids`, so vLLM holds no text back while it checks for stop strings.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import os
import re
import time
from collections.abc import AsyncGenerator, AsyncIterator, Iterable, Mapping
from typing import Any

import httpx

from sparkls.engine.base import Delta, EngineError, Event, Finished, GenerationRequest, GenerationStats, Health
from sparkls.engine.metrics import Recorder
from sparkls.engine.options import OpenAIOptions

log = logging.getLogger(__name__)
SPECIAL_TOKEN = re.compile(r"<[^<>\s]+>")  # what may be one special token: <|endoftext|>, <EOT>, <file_sep>

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

    def __init__(self, options: OpenAIOptions, recorder: Recorder | None = None) -> None:
        self.options = options
        self.base_url = options.url.rstrip("/")
        self.recorder = recorder if recorder is not None else Recorder()
        self.completed = self.recorder.completed
        self._model = options.model
        self._send_priority = options.send_priority
        self._responses: dict[str, httpx.Response] = {}
        self._aborted: set[str] = set()  # requests whose stream `abort` closed: their read error is the abort
        self._client: httpx.AsyncClient | None = None
        self._ready: asyncio.Future[None] | None = None
        self._error = ""
        self._stop_ids: dict[str, int | None] = {}  # a stop -> its one token id on a vLLM server (None: a string)
        self._tokenize = True  # the server answers vLLM's /tokenize (False once it did not)

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
                headers=headers,
                http2=http2,
                timeout=httpx.Timeout(self.options.timeout_s, connect=min(10.0, self.options.timeout_s)),
                limits=httpx.Limits(
                    max_connections=self.options.max_connections,
                    max_keepalive_connections=self.options.max_connections,
                    keepalive_expiry=600,
                ),
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

    # -- stops -----------------------------------------------------------------------------------
    async def _learn_stops(self, stops: tuple[str, ...]) -> None:
        """Ask a vLLM server (its `/tokenize`) which stops are one special token. vLLM holds back the last
        len(longest stop string) - 1 characters of a stream until they begin no stop, so the FIM templates'
        14-character special-token stops delayed every first text by several tokens; as `stop_token_ids` they
        hold nothing back. A server without vLLM's `/tokenize` is asked once and keeps string stops."""
        root = self.base_url.removesuffix("/v1")
        for stop in stops:
            if stop in self._stop_ids or not self._tokenize:
                continue
            self._stop_ids[stop] = None
            if not SPECIAL_TOKEN.fullmatch(stop):
                continue
            try:
                r = await self.client().post(
                    f"{root}/tokenize", json={"model": self._model, "prompt": stop, "add_special_tokens": False}
                )
            except httpx.HTTPError:  # no answer: ask again with a later request
                del self._stop_ids[stop]
                return
            try:
                answer = r.json() if r.status_code == 200 else {}
            except ValueError:
                answer = {}
            tokens = answer.get("tokens") if isinstance(answer, dict) and "max_model_len" in answer else None
            if tokens is None:
                self._tokenize = False  # not vLLM's answer: ask no more
                log.info("%s has no vLLM /tokenize: stops stay strings", self.base_url)
            elif len(tokens) == 1 and isinstance(tokens[0], int):
                self._stop_ids[stop] = tokens[0]

    def _body(self, req: GenerationRequest) -> dict[str, Any]:
        body: dict[str, Any] = {
            "model": self._model,
            "prompt": req.prompt,
            "max_tokens": req.max_tokens,
            "temperature": req.temperature,
            "stream": True,
            "stream_options": {"include_usage": True},
            "skip_special_tokens": False,
        }
        ids = [i for stop in req.stop if (i := self._stop_ids.get(stop)) is not None]
        texts = [stop for stop in req.stop if self._stop_ids.get(stop) is None]
        if texts:
            body["stop"] = texts[:4]  # the OpenAI API takes at most 4
        if ids:
            body["stop_token_ids"] = ids  # vLLM's extension; only sent to a server that answered /tokenize
        if self._send_priority:
            body["priority"] = int(req.priority)
        if req.logprobs:
            body["logprobs"] = 0  # the sampled tokens' own log-probabilities, no alternatives
        return body

    async def stream(self, request: GenerationRequest) -> AsyncGenerator[Event, None]:
        t0 = time.perf_counter()
        await self.ready()
        if not self._model:
            raise EngineError(f"remote engine {self.base_url} is not reachable: {self._error}")
        await self._learn_stops(request.stop)
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
                        lp = _logprob(choice) if req.logprobs else None
                        if text:
                            if n == 0:
                                t_first = time.perf_counter()
                                ttft = (t_first - sent) * 1000
                            n += 1
                            yield Delta(text, lp)
                        elif lp:  # tokens that wrote no text (a stop token) still carry their share
                            yield Delta("", lp)
                        if choice.get("finish_reason"):
                            reason = "stop" if choice["finish_reason"] == "stop" else "length"
        except (asyncio.CancelledError, GeneratorExit):
            # Closing the stream (the `async with` above) drops the connection: vLLM aborts the request.
            self.recorder.record(req.id, self._stats(req, usage, t0, sent, ttft, n, t_first, "abort"))
            raise
        except (httpx.TransportError, httpx.StreamError) as e:
            if req.id not in self._aborted:
                raise self._failure(e, n) from e
            reason = "abort"  # our own `abort` closed the stream: the answer ends here, no fault
        finally:
            self._responses.pop(req.id, None)
        if req.id in self._aborted:
            self._aborted.discard(req.id)
            reason = "abort"
        yield Finished(self.recorder.record(req.id, self._stats(req, usage, t0, sent, ttft, n, t_first, reason)))

    def _failure(self, e: Exception, n: int) -> Exception:
        """What a transport error means: a retry when nothing arrived yet and trying again may help, else an
        engine error that says whether the stream broke, timed out or never started."""
        if n == 0 and isinstance(
            e, (httpx.ConnectError, httpx.ConnectTimeout, httpx.RemoteProtocolError, httpx.ReadError)
        ):
            return _Retryable(type(e).__name__)
        if isinstance(e, httpx.TimeoutException):
            return EngineError(f"remote engine {self.base_url} timed out ({type(e).__name__})")
        where = "mid-stream" if n else "before its first token"
        return EngineError(f"remote engine {self.base_url} failed {where}: {type(e).__name__}")

    async def _http_error(self, resp: httpx.Response) -> None:
        detail = (await resp.aread()).decode("utf-8", "replace")[:500]
        if resp.status_code == 400 and self._send_priority and "priority" in detail.lower():
            log.warning(
                "the server rejects request priorities (start it with --scheduling-policy priority); "
                "sending none from now on"
            )
            self._send_priority = False
            raise _Retryable("priority not supported")
        if resp.status_code in (429, 502, 503, 504):
            raise _Retryable(f"HTTP {resp.status_code}")
        raise EngineError(f"remote engine answered HTTP {resp.status_code}: {detail}")

    def _stats(
        self,
        req: GenerationRequest,
        usage: Mapping[str, Any],
        t0: float,
        sent: float,
        ttft: float,
        n: int,
        t_first: float,
        reason: str,
    ) -> GenerationStats:
        details = usage.get("prompt_tokens_details") or {}
        return GenerationStats(
            prompt_tokens=int(usage.get("prompt_tokens") or 0),
            reused_tokens=int(details.get("cached_tokens") or 0),
            queue_ms=(sent - t0) * 1000,
            ttft_ms=ttft,
            decode_tokens=int(usage.get("completion_tokens") or n),
            decode_ms=(time.perf_counter() - t_first) * 1000 if n else 0.0,
            finish_reason=reason,
            priority=req.priority,
            reuse_known="prompt_tokens_details" in usage,
        )

    async def abort(self, request_id: str) -> None:
        resp = self._responses.pop(request_id, None)
        if resp is not None:
            self._aborted.add(request_id)
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


def _logprob(choice: dict[str, Any]) -> float | None:
    """The summed log-probability of a streamed completion choice's tokens (`logprobs.token_logprobs`), or None
    where the server sent none."""
    values = (choice.get("logprobs") or {}).get("token_logprobs") or []
    known = [float(v) for v in values if v is not None]
    return sum(known) if known else None
