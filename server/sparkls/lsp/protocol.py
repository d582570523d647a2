"""The protocol and server objects: pygls with exactly one response per request, and the services.

`SparkProtocol` reads the stream itself (`serve`, through `framing.Framer`): after a wrong `Content-Length`, a body
that is not JSON or stray bytes it reads on from the next header, and answers what pygls left unanswered, so every
request gets exactly one response: a body that is not JSON gets a parse error (id null), a message that is not
JSON-RPC 2.0 `InvalidRequest`, a request before `initialize` `ServerNotInitialized`, one after `shutdown` (or a
second `initialize`) `InvalidRequest`, a request for a notification's method `MethodNotFound`, and one whose params
do not match its method `InvalidParams` (pygls would drop it); notifications before `initialize` or after
`shutdown` are dropped, `exit` always ends the server. It also cancels commands and integer-id requests properly,
and keeps no copy of the documents (the session keeps the snapshots). `SparkServer` holds the session, the
completion and edit services the handlers call and the acceptance ledger, and serves stdio and TCP through
`SparkProtocol.serve`.
"""

from __future__ import annotations

import asyncio
import contextlib
import inspect
import json
import logging
import os
import sys
import threading
from collections.abc import Awaitable, Callable, Iterable, Iterator, Sequence
from http import HTTPStatus
from typing import Any, BinaryIO

from lsprotocol import types
from pygls.exceptions import (
    JsonRpcException,
    JsonRpcInvalidParams,
    JsonRpcInvalidRequest,
    JsonRpcMethodNotFound,
    JsonRpcParseError,
    JsonRpcServerNotInitialized,
)
from pygls.io_ import StdoutWriter, WebSocketWriter
from pygls.lsp.server import LanguageServer
from pygls.protocol import LanguageServerProtocol
from pygls.protocol.language_server import lsp_method

from sparkls import __version__
from sparkls.completion.service import CompletionService
from sparkls.edit.service import EditService
from sparkls.lsp.acceptance import AcceptanceLedger
from sparkls.lsp.framing import Framed, Framer, Message, Skipped, Unparsable
from sparkls.lsp.network import SUBPROTOCOL, Guard, Listen, handshake_problem, tcp_problem
from sparkls.session import Session

log = logging.getLogger("sparkls")

Forward = Iterator[tuple[Callable[..., Any], tuple[Any, ...], None]]  # pygls runs what a method yields
AUTH_WAIT_S = 10.0  # a network client's first message (with the token) must arrive within this
AUTH_MAX_BYTES = 1 << 20  # ... and within this many bytes (an unchecked client cannot fill the memory)
UNAUTHORIZED = -32001  # the JSON-RPC error code of a refused network connection
STALL_S = 0.2  # a body still short of its Content-Length this long after the last bytes is looked at as it is
READ_BYTES = 65536


def envelope_problem(value: object) -> tuple[int | str | None, str] | None:
    """(the id to answer, what is wrong) when `value` is not a JSON-RPC 2.0 request, notification or response."""
    if isinstance(value, list):
        return None, "batches are not part of LSP"
    if not isinstance(value, dict):
        return None, "a message must be a JSON object"
    raw_id = value.get("id")
    msg_id = raw_id if isinstance(raw_id, str) or (isinstance(raw_id, int) and not isinstance(raw_id, bool)) else None
    if value.get("jsonrpc") != "2.0":
        return msg_id, 'jsonrpc must be "2.0"'
    if "id" in value and msg_id is None:
        return None, f"an id must be an integer or a string, not {raw_id!r}"[:200]
    if "method" in value:
        method = value["method"]
        return None if isinstance(method, str) else (msg_id, "method must be a string")
    if "id" in value:
        return None  # a response (some clients leave out a null result)
    return msg_id, "neither a request, a notification nor a response"


class SparkProtocol(LanguageServerProtocol):
    """pygls' protocol that reads on after framing errors, answers every request once and keeps no documents."""

    def __init__(self, server: Any, converter: Any) -> None:
        super().__init__(server, converter)
        self._initialize_received = False
        self._shutdown_received = False

    async def serve(
        self, read: Callable[[], Awaitable[bytes]], stop: threading.Event, framer: Framer | None = None
    ) -> None:
        """Read and handle messages until the stream ends, `stop` is set or `exit` ends the process (`framer`:
        one that has read the stream's start)."""
        framer = framer or Framer()
        self._receive_all(framer.frames())
        pending: asyncio.Future[bytes] | None = None
        while not stop.is_set():
            if pending is None:
                pending = asyncio.ensure_future(read())
            try:
                data = await asyncio.wait_for(asyncio.shield(pending), STALL_S if framer.mid_body else None)
            except TimeoutError:
                self._receive_all(framer.stalled())
                continue
            except OSError:  # the connection broke: the same as its end
                log.warning("reading from the client failed", exc_info=True)
                break
            pending = None
            if not data:
                break
            framer.feed(data)
            self._receive_all(framer.frames())

    def _receive_all(self, frames: Iterable[Framed]) -> None:
        for frame in frames:
            if isinstance(frame, Skipped):
                log.warning("skipped %d bytes of the stream: %s", frame.size, frame.reason)
            elif isinstance(frame, Unparsable):
                log.warning("a message that is not JSON: %s", frame.reason)
                self._send_error(None, JsonRpcParseError(frame.reason[:200]))
            else:
                if frame.note:
                    log.warning("a wrong Content-Length: %s", frame.note)
                self.receive(frame.value)

    def receive(self, value: Any) -> None:
        """Handle one parsed JSON message: answer what is not JSON-RPC or not allowed now, hand the rest to pygls."""
        problem = envelope_problem(value)
        if problem is not None:
            msg_id, reason = problem
            log.warning("an invalid JSON-RPC message: %s", reason)
            if not (isinstance(value, dict) and "id" in value and "method" not in value):  # never answer a response
                self._send_error(msg_id, JsonRpcInvalidRequest(reason))
            return
        method, is_request = value.get("method"), "id" in value
        if method is None and "result" not in value and "error" not in value:
            value = {**value, "result": None}
        if method is not None:
            refused = self._refusal(method, is_request)
            if refused is not None:
                log.warning("%s %s: %s", "refused" if is_request else "dropped", method, refused.message)
                if is_request:
                    self._send_error(value["id"], refused)
                return
        try:
            message = self.structure_message(value)  # answers a request's malformed params itself
        except Exception:
            log.debug("could not read %s", method, exc_info=True)
            return
        if is_request and method is not None and not hasattr(message, "id"):
            self._send_error(value["id"], JsonRpcMethodNotFound(f"{method} is a notification, not a request"))
            return
        self._initialize_received |= method == types.INITIALIZE
        self._shutdown_received |= method == types.SHUTDOWN and is_request
        self.handle_message(message)

    def _refusal(self, method: str, is_request: bool) -> JsonRpcException | None:
        """Why a message cannot be handled now (LSP's lifecycle); `exit` always can."""
        if method == types.EXIT:
            return None
        if self._shutdown_received:
            return JsonRpcInvalidRequest(f"the server is shut down: {method} is not served")
        if not self._initialize_received:
            if method == types.INITIALIZE and is_request:
                return None
            return JsonRpcServerNotInitialized(f"{method} before initialize")
        if method == types.INITIALIZE:
            return JsonRpcInvalidRequest("initialize was already received")
        return None

    def send_parse_error(self, reason: str) -> None:
        self._send_error(None, JsonRpcParseError(reason))

    def _send_error(self, msg_id: int | str | None, error: JsonRpcException) -> None:
        self._send_data({"jsonrpc": "2.0", "id": msg_id, "error": {"code": error.code, "message": error.message}})

    def structure_message(self, data: dict[str, Any]) -> Any:
        # pygls logs a request whose params do not match the method's types and never answers it.
        # Every request gets exactly one response: answer InvalidParams, then let pygls drop it.
        if "method" in data and "params" not in data:  # JSON-RPC lets a message leave out `params`
            data = {**data, "params": None}
        try:
            return super().structure_message(data)
        except Exception as e:
            if "id" in data and "method" in data:
                log.warning("malformed %s request %r: %s", data.get("method"), data.get("id"), e)
                self._send_response(
                    data["id"],
                    error=JsonRpcInvalidParams(f"malformed params for {data.get('method')}").to_response_error(),
                )
            raise

    def _execute_handler(
        self,
        msg_id: Any,
        handler: Any,
        callback: Any,
        args: Any = None,
        kwargs: Any = None,
    ) -> None:
        # pygls files the future of every notification, and of every handler a builtin generator yields to (our
        # didOpen/didChange/didClose forwards), under a fresh id in `_request_futures` and never takes it out:
        # one future per keystroke, kept for the server's life (found by the soak test). Take it out when done.
        def done(future: Any, key: Any = msg_id) -> None:
            if self._request_futures.get(key) is future:
                del self._request_futures[key]
            callback(future)

        super()._execute_handler(msg_id, handler, done, args, kwargs)

    def _handle_cancel_notification(self, msg_id: Any) -> None:
        # lsprotocol structures CancelParams.id (int | str) as a str, so pygls misses the integer ids
        # that VS Code, Neovim and Emacs send, and the request runs on. Look the id up in both forms.
        candidates = [msg_id, str(msg_id)]
        if isinstance(msg_id, str) and msg_id.lstrip("-").isdigit():
            candidates.append(int(msg_id))
        key = next((k for k in candidates if k in self._request_futures), msg_id)
        super()._handle_cancel_notification(key)

    def _forward(self, method: str, params: Any) -> Forward:
        if (handler := self.fm.features.get(method)) is not None:
            yield handler, (params,), None

    @lsp_method(types.WORKSPACE_EXECUTE_COMMAND)
    async def lsp_workspace__execute_command(self, params: types.ExecuteCommandParams) -> Any:
        # pygls runs commands through a generator whose request future does not own the command's task,
        # so `$/cancelRequest` answered the request but never cancelled the command (a streaming edit
        # ran on). A coroutine here is the request's own task: cancelling it cancels the command.
        handler = self.fm.commands.get(params.command)
        if handler is None:
            raise JsonRpcInvalidParams(f"unknown command {params.command!r}")
        result = handler(*(params.arguments or []))
        return await result if inspect.isawaitable(result) else result

    @lsp_method(types.SHUTDOWN)
    def lsp_shutdown(self, *args: Any) -> Forward:
        # pygls cancels the other open requests while iterating `_request_futures` itself; a future whose
        # done-callback runs at once (a thread-pool one) takes itself out of the dict mid-loop, and the
        # client got "dictionary changed size during iteration" instead of its shutdown answer (seen in CI).
        if (handler := self.fm.features.get(types.SHUTDOWN)) is not None:
            yield handler, args, None
        current = self.msg_id
        for msg_id, future in list(self._request_futures.items()):
            if msg_id != current and not future.done():
                future.cancel()
        self._shutdown = True
        return None

    @lsp_method(types.TEXT_DOCUMENT_DID_OPEN)
    def lsp_text_document__did_open(self, params: types.DidOpenTextDocumentParams) -> Forward:
        yield from self._forward(types.TEXT_DOCUMENT_DID_OPEN, params)

    @lsp_method(types.TEXT_DOCUMENT_DID_CHANGE)
    def lsp_text_document__did_change(self, params: types.DidChangeTextDocumentParams) -> Forward:
        yield from self._forward(types.TEXT_DOCUMENT_DID_CHANGE, params)

    @lsp_method(types.TEXT_DOCUMENT_DID_CLOSE)
    def lsp_text_document__did_close(self, params: types.DidCloseTextDocumentParams) -> Forward:
        yield from self._forward(types.TEXT_DOCUMENT_DID_CLOSE, params)


class SparkServer(LanguageServer):
    protocol: SparkProtocol

    def __init__(self) -> None:
        super().__init__(
            "sparkls",
            __version__,
            protocol_cls=SparkProtocol,
            text_document_sync_kind=types.TextDocumentSyncKind.Incremental,
        )
        self.session = Session()
        self.guard: Guard | None = None  # over a network transport: what a client may not choose
        self.active = False  # a network client is being served (one at a time)
        self.engine_starts = 0  # engine starts shown as progress (each rebuild is one more)
        self.completions = CompletionService(self.session)
        self.edits = EditService(self.session)
        self.acceptance = AcceptanceLedger()  # what became of the offers sent (`sparkls.accepted`, `/acceptance`)

    def log_to_client(self, message: str, kind: types.MessageType = types.MessageType.Info) -> None:
        try:
            self.window_log_message(types.LogMessageParams(type=kind, message=message))
        except Exception:  # the transport may be gone during shutdown
            log.debug("could not send logMessage", exc_info=True)

    def start_io(self, stdin: BinaryIO | None = None, stdout: BinaryIO | None = None) -> None:
        """Serve over stdio until the input ends or `exit` (stdin is read on a daemon thread, so `exit` never
        waits for a read)."""
        self._stop_event = stop = threading.Event()
        self.protocol.set_writer(StdoutWriter(stdout or sys.stdout.buffer))
        source = stdin or sys.stdin.buffer

        async def main() -> None:
            chunks: asyncio.Queue[bytes] = asyncio.Queue()
            loop = asyncio.get_running_loop()
            threading.Thread(target=_pump, args=(source, loop, chunks), name="sparkls-stdin", daemon=True).start()
            await self.protocol.serve(chunks.get, stop)

        try:
            asyncio.run(main())
        except BrokenPipeError:
            log.error("the client's connection is gone; stopping")
        except (KeyboardInterrupt, SystemExit):
            pass
        finally:
            self.shutdown()

    def start_tcp(self, listen: Listen) -> None:
        """Serve one client over TCP, read as on stdio, once its first message, `initialize`, carries the token
        (`initializationOptions.token`); a connection without it is answered with an error and closed, and the
        server goes on listening. The server ends when its client goes."""
        self._stop_event = stop = threading.Event()

        async def connection(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
            peer = writer.get_extra_info("peername")
            framer = Framer()
            first = await _first_frame(reader, framer)
            msg_id = first.value.get("id") if first is not None and isinstance(first.value, dict) else None
            problem = tcp_problem(first.value if first is not None else None, listen.token)
            if problem is None and self.active:
                problem = "another client is connected"
            if problem is not None:
                log.warning("refused a TCP client from %s: %s", peer, problem)
                body = json.dumps(
                    {
                        "jsonrpc": "2.0",
                        "id": msg_id if isinstance(msg_id, int | str) else None,
                        "error": {"code": UNAUTHORIZED, "message": f"sparkls: {problem}"},
                    }
                ).encode()
                with contextlib.suppress(OSError):
                    writer.write(b"Content-Length: %d\r\n\r\n" % len(body) + body)
                    await writer.drain()
                writer.close()
                return
            assert first is not None
            self.active = True
            log.info("a TCP client from %s is served", peer)
            self.protocol.set_writer(writer)  # pyright: ignore[reportArgumentType]
            self.protocol.receive(first.value)
            await self.protocol.serve(lambda: reader.read(READ_BYTES), stop, framer)
            self.shutdown()

        self._serve_forever("TCP", lambda: asyncio.start_server(connection, listen.host, listen.port))

    def start_ws(self, listen: Listen) -> None:  # pyright: ignore[reportIncompatibleMethodOverride]
        """Serve one client over WebSocket (a JSON-RPC message per frame) once its handshake passes
        `handshake_problem`: an allowed `Origin`, a loopback `Host` on a loopback bind, the token."""
        from websockets.asyncio.server import ServerConnection, serve
        from websockets.exceptions import ConnectionClosed
        from websockets.http11 import Request, Response

        self._stop_event = stop = threading.Event()
        bound = [listen.port]

        def check(connection: ServerConnection, request: Request) -> Response | None:
            def header(name: str) -> str | None:  # a header given twice is wrong, never either value
                values = request.headers.get_all(name)
                return None if not values else values[0] if len(values) == 1 else ""

            protocols = [p.strip() for h in request.headers.get_all("Sec-WebSocket-Protocol") for p in h.split(",")]
            refused = handshake_problem(listen, bound[0], header, protocols)
            if refused is None and self.active:
                refused = (409, "another client is connected")
            if refused is None:
                return None
            log.warning("refused a WebSocket handshake from %s: %s", connection.remote_address, refused[1])
            return connection.respond(HTTPStatus(refused[0]), f"sparkls: {refused[1]}\n")

        def choose(connection: ServerConnection, offered: Sequence[str]) -> Any:
            return SUBPROTOCOL if SUBPROTOCOL in offered else None

        async def session(ws: ServerConnection) -> None:
            if self.active:
                await ws.close(1013, "another client is connected")
                return
            self.active = True
            log.info("a WebSocket client from %s is served", ws.remote_address)
            self.protocol.set_writer(WebSocketWriter(ws), include_headers=False)
            while not stop.is_set():
                try:
                    data = await ws.recv(decode=False)
                except ConnectionClosed:
                    break
                try:
                    value = json.loads(data)
                except ValueError as e:
                    log.warning("a message that is not JSON: %s", e)
                    self.protocol.send_parse_error(str(e)[:200])
                    continue
                self.protocol.receive(value)
            self.shutdown()

        async def start() -> Any:
            server = await serve(session, listen.host, listen.port, process_request=check, select_subprotocol=choose)
            bound[0] = server.sockets[0].getsockname()[1]  # the Host check needs the port a port 0 bind got
            return server

        self._serve_forever("WebSocket", start)

    def _serve_forever(self, kind: str, start: Callable[[], Awaitable[Any]]) -> None:
        """Run the listening server `start` opens until it is closed (`shutdown`)."""

        async def main() -> None:
            self._server = server = await start()
            log.info("serving %s on %s", kind, ", ".join(str(s.getsockname()) for s in server.sockets))
            async with server:
                await server.serve_forever()

        try:
            asyncio.run(main())
        except asyncio.CancelledError:
            log.debug("the %s server was cancelled", kind)


async def _first_frame(reader: asyncio.StreamReader, framer: Framer) -> Message | None:
    """The first complete message of a new connection (None: it closed, sent no JSON, sent too little within
    `AUTH_WAIT_S`, or more than `AUTH_MAX_BYTES` without completing one). Nothing is handled before it is
    checked."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + AUTH_WAIT_S
    received = 0
    while received <= AUTH_MAX_BYTES:
        for frame in framer.frames():
            return frame if isinstance(frame, Message) else None
        try:
            data = await asyncio.wait_for(reader.read(READ_BYTES), max(0.0, deadline - loop.time()))
        except (TimeoutError, OSError):
            return None
        if not data:
            return None
        received += len(data)
        framer.feed(data)
    return None


def _pump(source: BinaryIO, loop: asyncio.AbstractEventLoop, chunks: asyncio.Queue[bytes]) -> None:
    """Copy stdin into `chunks` as the bytes come (b"" at its end). It reads the file descriptor itself: a daemon
    thread blocked inside a buffered reader holds its lock, and the interpreter aborts on it at exit."""
    try:
        fd = source.fileno()
    except (OSError, ValueError, AttributeError):
        fd = None
    while True:
        try:
            data = os.read(fd, READ_BYTES) if fd is not None else source.read(READ_BYTES)
        except (OSError, ValueError):
            data = b""
        try:
            loop.call_soon_threadsafe(chunks.put_nowait, data)
        except RuntimeError:  # the loop is closed: the server has stopped
            return
        if not data:
            return
