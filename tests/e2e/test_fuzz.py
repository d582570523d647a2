"""Protocol fuzzing of the real server over stdio (hypothesis, fake engine): every request gets exactly one
response, the server never exits or hangs, and its documents equal a reference model of the client's buffers.

The client here is raw bytes (framing written here, read on a thread with timeouts, so a hang fails a test
instead of blocking it). The stateful test opens, changes and closes documents of emoji (surrogate pairs in
UTF-16), CJK, combining marks and CRLF in each position encoding, applies every change to its own model
(`offset_at`, written from the LSP spec, not from the server's code), sends requests at valid, out-of-range and
mid-character positions, and after every step compares `sparkls/documentState` with the model. The garbage test
sends what a broken client would: bodies that are not JSON, wrong Content-Lengths, stray bytes, wrong types,
missing fields, unknown methods, and checks each answer. `run_fuzz` runs them all and says how many inputs it sent.
"""

from __future__ import annotations

import contextlib
import dataclasses
import hashlib
import itertools
import json
import os
import re
import subprocess
import sys
import threading
import time
from collections import defaultdict, deque
from collections.abc import Iterator
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, initialize, invariant, rule, run_state_machine_as_test
from sparkls.lsp.framing import Framer, Message, Skipped, Unparsable

ENCODINGS = ["utf-16", "utf-8", "utf-32"]
WAIT_S = 15.0  # longer than any answer may take: past it the server counts as hung
INPUTS = {"messages": 0, "bytes": 0}  # what the tests sent: framed messages and pieces of garbage
PARSE_ERROR, INVALID_REQUEST, METHOD_NOT_FOUND, INVALID_PARAMS = -32700, -32600, -32601, -32602
NOT_INITIALIZED, CANCELLED = -32002, -32800
FUZZ = settings(
    deadline=None,
    derandomize=True,
    database=None,
    print_blob=True,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)


def frame(message: Any, length_delta: int = 0) -> bytes:
    body = json.dumps(message).encode()
    return b"Content-Length: %d\r\n\r\n" % (len(body) + length_delta) + body


class Server:
    """The real server (`sparkls serve`) over stdio, spoken to in bytes. Answers the server's own requests
    with null, keeps every response by id, and fails (never blocks) when an answer does not come."""

    def __init__(self) -> None:
        self.answer_server_requests = True
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "sparkls", "--log-level", "INFO", "serve"],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
        )
        self.responses: dict[Any, list[dict[str, Any]]] = defaultdict(list)
        self.null_id_errors: list[dict[str, Any]] = []
        self.server_requests: list[str] = []  # the methods of the server's own requests, in order
        self.sent_ids: set[Any] = set()
        self.stderr: deque[bytes] = deque(maxlen=300)
        self.ids = itertools.count(1)
        self._write = threading.Lock()
        self._changed = threading.Condition()
        threading.Thread(target=self._read_stdout, daemon=True).start()
        threading.Thread(target=self._read_stderr, daemon=True).start()

    # -- writing -----------------------------------------------------------------------------------
    def send_bytes(self, data: bytes, *, counted: bool = True) -> None:
        if counted:
            INPUTS["messages"] += 1
            INPUTS["bytes"] += len(data)
        with self._write:
            assert self.proc.stdin is not None
            self.proc.stdin.write(data)
            self.proc.stdin.flush()

    def notify(self, method: str, params: Any) -> None:
        self.send_bytes(frame({"jsonrpc": "2.0", "method": method, "params": params}))

    def request(self, method: str, params: Any = None, length_delta: int = 0) -> int:
        msg_id = next(self.ids)
        self.sent_ids.add(msg_id)
        self.send_bytes(frame({"jsonrpc": "2.0", "id": msg_id, "method": method, "params": params}, length_delta))
        return msg_id

    def call(self, method: str, params: Any = None) -> dict[str, Any]:
        return self.wait(self.request(method, params))

    def result(self, method: str, params: Any = None) -> Any:
        response = self.call(method, params)
        assert "error" not in response, response
        return response["result"]

    # -- reading -----------------------------------------------------------------------------------
    def wait(self, msg_id: Any, timeout: float = WAIT_S) -> dict[str, Any]:
        with self._changed:
            if not self._changed.wait_for(lambda: bool(self.responses.get(msg_id)), timeout):
                raise AssertionError(
                    f"no answer to request {msg_id} within {timeout} s "
                    f"(server {'alive' if self.proc.poll() is None else 'exited'}):\n{self.log()}"
                )
            return self.responses[msg_id][0]

    def wait_server_request(self, method: str, timeout: float = WAIT_S) -> None:
        with self._changed:
            if not self._changed.wait_for(lambda: method in self.server_requests, timeout):
                raise AssertionError(f"the server did not ask {method} within {timeout} s:\n{self.log()}")

    def wait_null_id_errors(self, count: int, timeout: float = WAIT_S) -> list[dict[str, Any]]:
        with self._changed:
            if not self._changed.wait_for(lambda: len(self.null_id_errors) >= count, timeout):
                raise AssertionError(f"{len(self.null_id_errors)} of {count} id-null errors came:\n{self.log()}")
            return self.null_id_errors[:count]

    def check_answered_once(self, running: bool = True) -> None:
        """Every request sent got exactly one response, no response came for an id never sent, and the server
        still runs (unless told to exit). What was checked is forgotten, so the next example starts clean."""
        with self._changed:
            wrong = {i: len(self.responses.get(i, [])) for i in self.sent_ids if len(self.responses.get(i, [])) != 1}
            unsent = set(self.responses) - self.sent_ids
            self.sent_ids.clear()
            self.responses.clear()
            self.null_id_errors.clear()
        assert wrong == {}, f"requests not answered exactly once (id: responses): {wrong}\n{self.log()}"
        assert unsent == set(), f"responses to ids never sent: {unsent}"
        assert (self.proc.poll() is None) == running, self.log()

    def log(self) -> str:
        return b"".join(self.stderr).decode("utf-8", "replace")[-6000:]

    def _read_stdout(self) -> None:
        assert self.proc.stdout is not None
        fd, buf = self.proc.stdout.fileno(), b""
        while data := os.read(fd, 1 << 16):
            buf += data
            while (end := buf.find(b"\r\n\r\n")) >= 0:
                length = int(re.search(rb"Content-Length: (\d+)", buf[:end]).group(1))  # type: ignore[union-attr]
                if len(buf) < end + 4 + length:
                    break
                self._received(json.loads(buf[end + 4 : end + 4 + length]))
                buf = buf[end + 4 + length :]
        with self._changed:
            self._changed.notify_all()

    def _received(self, message: dict[str, Any]) -> None:
        if "method" in message:
            if "id" in message:  # the server asks (progress, applyEdit): answered with null, unless held back
                with self._changed:
                    self.server_requests.append(message["method"])
                    self._changed.notify_all()
                if self.answer_server_requests:
                    self.send_bytes(frame({"jsonrpc": "2.0", "id": message["id"], "result": None}), counted=False)
            return
        with self._changed:
            if message.get("id") is None:
                self.null_id_errors.append(message)
            else:
                self.responses[message["id"]].append(message)
            self._changed.notify_all()

    def _read_stderr(self) -> None:
        assert self.proc.stderr is not None
        for line in self.proc.stderr:
            self.stderr.append(line)

    # -- lifecycle ---------------------------------------------------------------------------------
    def initialize(self, encoding: str = "utf-16", progress: bool = False) -> dict[str, Any]:
        result = self.result(
            "initialize",
            {
                "processId": None,
                "rootUri": None,
                "initializationOptions": {"engine": "fake"},
                "capabilities": {
                    "general": {"positionEncodings": [encoding]},
                    "window": {"workDoneProgress": progress},
                    "textDocument": {"inlineCompletion": {}, "completion": {}},
                },
            },
        )
        self.notify("initialized", {})
        return result

    def exited_within(self, seconds: float) -> int | None:
        with contextlib.suppress(subprocess.TimeoutExpired):
            return self.proc.wait(seconds)
        return None

    def stop(self) -> None:
        if self.proc.poll() is None:
            with contextlib.suppress(Exception):
                self.wait(self.request("shutdown"), 10)
                self.send_bytes(frame({"jsonrpc": "2.0", "method": "exit"}), counted=False)
            if self.exited_within(10) is None:
                self.proc.kill()
        self.proc.wait(10)


@contextlib.contextmanager
def server(encoding: str | None = "utf-16") -> Iterator[Server]:
    s = Server()
    try:
        if encoding is not None:
            assert s.initialize(encoding)["capabilities"]["positionEncoding"] == encoding
        yield s
    finally:
        s.stop()


# -- the reference model: positions by the LSP spec ---------------------------------------------------------
BREAK = re.compile(r"\r\n|\r|\n")


def lines(text: str) -> list[tuple[int, int]]:
    """(start, end before its line break) of each line; one more line than there are breaks."""
    spans, start = [], 0
    for m in BREAK.finditer(text):
        spans.append((start, m.start()))
        start = m.end()
    spans.append((start, len(text)))
    return spans


def width(ch: str, encoding: str) -> int:
    if encoding == "utf-8":
        return len(ch.encode("utf-8", "surrogatepass"))
    if encoding == "utf-16":
        return 2 if ord(ch) > 0xFFFF else 1
    return 1


def line_width(text: str, span: tuple[int, int], encoding: str) -> int:
    return sum(width(c, encoding) for c in text[span[0] : span[1]])


def offset_at(text: str, line: int, character: int, encoding: str) -> int:
    """Where an LSP position points: past the last line, the end; past its line's end, the line's end; inside a
    character (a surrogate pair, a multi-byte character), that character's start."""
    spans = lines(text)
    if line >= len(spans):
        return len(text)
    start, end = spans[line]
    units = 0
    for i in range(start, end):
        units += width(text[i], encoding)
        if units > character:
            return i
    return end


def position_of(text: str, offset: int, encoding: str) -> tuple[int, int]:
    spans = lines(text)
    line = max(i for i, (start, _) in enumerate(spans) if start <= offset)
    start, end = spans[line]
    return line, line_width(text, (start, min(offset, end)), encoding)


def is_valid(text: str, line: int, character: int, encoding: str) -> bool:
    spans = lines(text)
    return line < len(spans) and character <= line_width(text, spans[line], encoding)


def state_of(text: str, version: int, uri: str) -> dict[str, Any]:
    return {
        "uri": uri,
        "version": version,
        "length": len(text),
        "sha256": hashlib.sha256(text.encode("utf-8", "surrogatepass")).hexdigest(),
    }


def pos(line: int, character: int) -> dict[str, int]:
    return {"line": line, "character": character}


# -- strategies -----------------------------------------------------------------------------------------------
PIECES = [
    "a",
    "b",
    "x",
    "def ",
    "return ",
    "(",
    ")",
    ":",
    " ",
    "    ",
    "\t",
    "\n",
    "\r\n",
    "\r",
    "é",
    "e\u0301",
    "漢",
    "字",
    "😀",
    "𝄞",
    "👍🏽",
    "\u200d",
    "ß",
    "\udc80",
]  # the last: a lone (low) surrogate; no high one,
# which JSON would join with a following low one into a single character
TEXTS = st.lists(st.sampled_from(PIECES), max_size=30).map("".join)


def positions(text: str, encoding: str) -> st.SearchStrategy[tuple[int, int]]:
    """Valid positions, positions inside a character, past a line's end and past the last line."""
    spans = lines(text)
    inside = [
        (n, line_width(text, (s, i), encoding) + k)
        for n, (s, e) in enumerate(spans)
        for i in range(s, e)
        for k in range(1, width(text[i], encoding))
    ]
    kinds = [
        st.integers(0, len(text)).map(lambda o: position_of(text, o, encoding)),
        st.tuples(st.integers(0, len(spans) - 1), st.integers(1, 4)).map(
            lambda lk: (lk[0], line_width(text, spans[lk[0]], encoding) + lk[1])
        ),
        st.tuples(st.integers(len(spans), len(spans) + 3), st.integers(0, 5)),
    ]
    if inside:
        kinds += [st.sampled_from(inside)] * 2
    return st.one_of(kinds)


# -- (a) the stateful test ------------------------------------------------------------------------------------
EXAMPLES = itertools.count()
STEPS = 30
SLOTS = st.integers(0, 2)


def buffers_machine(s: Server, encoding: str) -> type[RuleBasedStateMachine]:
    class ClientBuffers(RuleBasedStateMachine):
        """An editor's open documents; the server must hold exactly what the model holds after every step."""

        def __init__(self) -> None:
            super().__init__()
            self.example = next(EXAMPLES)
            self.docs: dict[str, tuple[str, int]] = {}

        def uri(self, slot: int) -> str:
            return f"file:///fuzz/{encoding}/{self.example}/doc{slot}.py"

        def pick(self, data: st.DataObject) -> str:
            """Mostly an open document, sometimes any (a closed one must be refused)."""
            slots = st.sampled_from(sorted(self.docs)) if self.docs else st.nothing()
            return data.draw(slots | slots | slots | SLOTS.map(self.uri), "document")

        @initialize(text=TEXTS)
        def open_the_first(self, text: str) -> None:
            self.open(0, text, 1)

        @rule(slot=SLOTS, text=TEXTS, version=st.integers(0, 5))
        def open(self, slot: int, text: str, version: int) -> None:
            uri = self.uri(slot)
            s.notify(
                "textDocument/didOpen",
                {"textDocument": {"uri": uri, "languageId": "python", "version": version, "text": text}},
            )
            self.docs[uri] = (text, version)

        @rule(data=st.data())
        def change(self, data: st.DataObject) -> None:
            uri = self.pick(data)
            text, version = self.docs.get(uri, ("", 0))
            changes = []
            for _ in range(data.draw(st.integers(1, 3), "changes")):
                new = data.draw(TEXTS, "text")
                if data.draw(st.integers(0, 5), "kind") == 0:
                    changes.append({"text": new})
                    text = new
                    continue
                (l1, c1), (l2, c2) = data.draw(positions(text, encoding)), data.draw(positions(text, encoding))
                changes.append({"range": {"start": pos(l1, c1), "end": pos(l2, c2)}, "text": new})
                start = offset_at(text, l1, c1, encoding)
                end = max(start, offset_at(text, l2, c2, encoding))
                text = text[:start] + new + text[end:]
            # the next version, the same, an older one (stale) or a jump: the text is the client's either way
            version = max(0, version + data.draw(st.sampled_from([1, 1, 1, 0, -1, -3, 7]), "version step"))
            s.notify(
                "textDocument/didChange", {"textDocument": {"uri": uri, "version": version}, "contentChanges": changes}
            )
            if uri in self.docs:  # a change to a document that is not open is ignored
                self.docs[uri] = (text, version)

        @rule(data=st.data(), new=st.sampled_from(PIECES) | st.just(""))
        def type_here(self, data: st.DataObject, new: str) -> None:
            """One keystroke (or a deletion) at a position that may be inside a character or past the end."""
            uri = self.pick(data)
            text, version = self.docs.get(uri, ("", 0))
            line, character = data.draw(positions(text, encoding))
            end = (line, character + data.draw(st.integers(0, 2), "deleted")) if not new else (line, character)
            change = {"range": {"start": pos(line, character), "end": pos(*end)}, "text": new}
            s.notify(
                "textDocument/didChange",
                {"textDocument": {"uri": uri, "version": version + 1}, "contentChanges": [change]},
            )
            if uri in self.docs:
                start = offset_at(text, line, character, encoding)
                stop = max(start, offset_at(text, *end, encoding))
                self.docs[uri] = (text[:start] + new + text[stop:], version + 1)

        @rule(slot=SLOTS)
        def close(self, slot: int) -> None:
            s.notify("textDocument/didClose", {"textDocument": {"uri": self.uri(slot)}})
            self.docs.pop(self.uri(slot), None)

        @rule(
            method=st.sampled_from(
                [
                    "textDocument/completion",
                    "textDocument/inlineCompletion",
                    "textDocument/codeAction",
                    "sparkls/inlineEdit",
                    "textDocument/hover",
                ]
            ),
            data=st.data(),
        )
        def ask(self, method: str, data: st.DataObject) -> None:
            """A request at a position (a range for code actions): a result where the position is in the
            document (inside a character counts: it means the character's start), InvalidParams where it is
            not, the document is not open or a field has the wrong type, MethodNotFound for a method the server
            does not have."""
            uri = self.pick(data)
            text, version = self.docs.get(uri, ("", 0))
            spots = [data.draw(positions(text, encoding)) for _ in range(2 if method.endswith("codeAction") else 1)]
            params: dict[str, Any] = {"textDocument": {"uri": uri}, "position": pos(*spots[0])}
            well_typed = True
            if method == "textDocument/inlineCompletion":
                params["context"] = {"triggerKind": data.draw(st.sampled_from([1, 2]), "trigger")}
            elif method == "textDocument/codeAction":
                params = {
                    "textDocument": {"uri": uri},
                    "range": {"start": pos(*spots[0]), "end": pos(*spots[1])},
                    "context": {"diagnostics": []},
                }
            elif method == "sparkls/inlineEdit":  # the version it was asked for: current, stale, none or not one
                asked = data.draw(st.sampled_from([version, version - 1, None, "abc", {"v": 1}]), "version")
                params["textDocument"]["version"] = asked
                well_typed = asked is None or isinstance(asked, int)
            response = s.call(method, params)
            if method == "textDocument/hover":
                expected = METHOD_NOT_FOUND
            elif uri in self.docs and well_typed and all(is_valid(text, *p, encoding) for p in spots):
                expected = None
            else:
                expected = INVALID_PARAMS
            assert response.get("error", {}).get("code") == expected, (params, response)

        @rule(data=st.data())
        def ask_many_at_once(self, data: st.DataObject) -> None:
            """Requests in flight together, some cancelled by the client: superseded or cancelled ones end in
            RequestCancelled (or in their result, when it came first), each exactly once."""
            uri = self.pick(data)
            text = self.docs.get(uri, ("", 0))[0]
            spots = data.draw(st.lists(positions(text, encoding), min_size=2, max_size=5))
            ids = [
                s.request(
                    "textDocument/inlineCompletion",
                    {"textDocument": {"uri": uri}, "position": pos(*p), "context": {"triggerKind": 2}},
                )
                for p in spots
            ]
            cancelled = set(data.draw(st.lists(st.sampled_from(ids), max_size=3), "cancelled"))
            for msg_id in cancelled:
                s.notify("$/cancelRequest", {"id": msg_id})
            for msg_id, (line, character) in zip(ids, spots, strict=True):
                code = s.wait(msg_id).get("error", {}).get("code")
                valid = uri in self.docs and is_valid(text, line, character, encoding)
                allowed = {None, CANCELLED} if valid else {INVALID_PARAMS}
                if msg_id in cancelled:  # a cancel may come before the request is even looked at
                    allowed.add(CANCELLED)
                assert code in allowed, (msg_id, code)

        @invariant()
        def the_server_holds_what_the_client_holds(self) -> None:
            for slot in range(3):
                uri = self.uri(slot)
                held = s.result("sparkls/documentState", {"textDocument": {"uri": uri}})
                expected = state_of(*self.docs[uri], uri) if uri in self.docs else None
                assert held == expected, (uri, self.docs.get(uri))

        def teardown(self) -> None:
            for uri in list(self.docs):
                s.notify("textDocument/didClose", {"textDocument": {"uri": uri}})
            s.result("sparkls/health")
            s.check_answered_once()

    return ClientBuffers


def fuzz_buffers(encoding: str, examples: int) -> None:
    with server(encoding) as s:
        run_state_machine_as_test(
            buffers_machine(s, encoding), settings=settings(FUZZ, max_examples=examples, stateful_step_count=STEPS)
        )
        s.check_answered_once()


@pytest.mark.parametrize("encoding", ENCODINGS)
def test_the_servers_documents_follow_random_edits_and_every_request_is_answered_once(encoding):
    fuzz_buffers(encoding, 100)


# -- (b) garbage: what a broken client sends ------------------------------------------------------------------
def completion_at(uri: str, line: Any = 0, character: Any = 0) -> dict[str, Any]:
    return {"textDocument": {"uri": uri}, "position": {"line": line, "character": character}}


URI = "file:///fuzz/garbage.py"
BAD_PARAMS = [  # (method, params) that cannot be read as the method's params
    ("textDocument/completion", completion_at(URI, "x")),
    ("textDocument/completion", completion_at(URI, -1)),
    ("textDocument/completion", {"textDocument": {"uri": URI}}),
    ("textDocument/completion", {"position": {"line": 0, "character": 0}}),
    ("textDocument/inlineCompletion", {"textDocument": "x", "position": [], "context": {}}),
    ("textDocument/codeAction", {"textDocument": {"uri": URI}, "range": None, "context": {"diagnostics": []}}),
    ("textDocument/completion", 7),
    ("textDocument/completion", "params"),
    ("sparkls/documentState", {"textDocument": 3}),
    ("sparkls/documentState", None),
    ("sparkls/inlineEdit", {"textDocument": {"uri": URI}, "position": {"line": "x", "character": 0}}),
    ("workspace/executeCommand", {"command": "sparkls.applyAction", "arguments": [{"kind": "fix"}]}),
    ("workspace/executeCommand", {"command": "sparkls.applyAction", "arguments": ["x", 5]}),
    ("workspace/executeCommand", {"command": "no.such.command"}),
    ("workspace/executeCommand", {"command": "sparkls.accepted", "arguments": [{"requestId": 5}]}),
    ("workspace/executeCommand", {"command": "sparkls.accepted"}),
    ("codeAction/resolve", {"title": "x", "data": {"kind": "fix"}}),
    ("codeAction/resolve", {"data": 1}),
]
BAD_ENVELOPES = [  # messages that are not JSON-RPC 2.0; "ID" becomes a fresh id the answer must carry
    [],
    [{"jsonrpc": "2.0", "id": "batch", "method": "sparkls/health"}],
    "just a string",
    42,
    {"jsonrpc": "1.0", "id": "ID", "method": "sparkls/health"},
    {"id": "ID", "method": "sparkls/health"},
    {"jsonrpc": "2.0", "id": {"an": "object"}, "method": "sparkls/health"},
    {"jsonrpc": "2.0", "id": 1.5, "method": "sparkls/health"},
    {"jsonrpc": "2.0", "id": None, "method": "sparkls/health"},
    {"jsonrpc": "2.0", "id": "ID", "method": 5},
]
NOT_JSON = [b"{bad}", b"{", b"", b"\xff\xfe{}", b'{"jsonrpc": "2.0", "id": 1,', b"nul\x00l", b"[1, 2", b"}{"]
STRAY = st.binary(min_size=1, max_size=64).filter(lambda b: b":" not in b)  # so never a header by chance
HEADERS = [  # headers that name the length in other ways the base protocol (HTTP's header rules) allows
    b"Content-Type: application/vscode-jsonrpc; charset=utf-8\r\nContent-Length: %d\r\n\r\n",
    b"content-length: %d\r\n\r\n",
    b"Content-Length:%d\r\n\r\n",
    b"Content-Length: %d\r\nX-Unknown: 1\r\n\r\n",
    b"Content-Length: %d\n\n",
]
STRAY_RESPONSES = [  # answers to requests the server never sent: dropped, never answered
    {"jsonrpc": "2.0", "id": 987654, "result": {"x": 1}},
    {"jsonrpc": "2.0", "id": "nobody", "error": {"code": "bad", "message": 5}},
    {"jsonrpc": "2.0", "id": 987655},  # a void result left out, as some clients do
]


@st.composite
def garbage(draw: st.DrawFn) -> tuple[str, Any]:
    kind = draw(
        st.sampled_from(
            [
                "not json",
                "short",
                "long",
                "stray bytes",
                "bad params",
                "bad envelope",
                "unknown method",
                "unknown notification",
                "bad notification",
                "notification as request",
                "nested message",
                "odd header",
                "stray response",
                "cancel nothing",
            ]
        )
    )
    if kind == "not json":
        return kind, draw(st.sampled_from(NOT_JSON))
    if kind == "short":
        return kind, -draw(st.integers(1, 40))
    if kind == "long":
        return kind, draw(st.integers(1, 400))
    if kind == "stray bytes":
        return kind, draw(STRAY)
    if kind == "bad params":
        return kind, draw(st.sampled_from(BAD_PARAMS))
    if kind == "bad envelope":
        return kind, draw(st.sampled_from(BAD_ENVELOPES))
    if kind == "odd header":
        return kind, draw(st.sampled_from(HEADERS))
    if kind == "stray response":
        return kind, draw(st.sampled_from(STRAY_RESPONSES))
    return kind, draw(st.text(max_size=12))


@dataclasses.dataclass
class Expected:
    """What one piece of garbage must bring: an answer to `msg_id` with error `code` (None: a result), and
    `null_ids` errors with id null of code `null_code`."""

    msg_id: Any = None
    code: int | None = None
    null_ids: int = 0
    null_code: int = PARSE_ERROR


def send_garbage(s: Server, kind: str, value: Any) -> Expected:
    state = {"textDocument": {"uri": URI}}
    if kind == "not json":
        s.send_bytes(b"Content-Length: %d\r\n\r\n" % len(value) + value)
        return Expected(null_ids=1)
    if kind == "short":  # cut short: a parse error (id null), what is left of the body is skipped, no answer by id
        s.sent_ids.discard(s.request("sparkls/documentState", state, length_delta=value))
        return Expected(null_ids=1)
    if kind == "long":  # read on from where the JSON ends
        return Expected(s.request("sparkls/documentState", state, length_delta=value))
    if kind == "stray bytes":
        s.send_bytes(value)
        return Expected()
    if kind == "bad params":
        return Expected(s.request(*value), INVALID_PARAMS)
    if kind == "bad envelope":
        if isinstance(value, dict) and value.get("id") == "ID":
            msg_id = f"envelope-{next(s.ids)}"
            s.sent_ids.add(msg_id)
            s.send_bytes(frame({**value, "id": msg_id}))
            return Expected(msg_id, INVALID_REQUEST)
        s.send_bytes(frame(value))
        return Expected(null_ids=1, null_code=INVALID_REQUEST)
    if kind == "odd header":
        msg_id = next(s.ids)
        s.sent_ids.add(msg_id)
        body = json.dumps({"jsonrpc": "2.0", "id": msg_id, "method": "sparkls/documentState", "params": state})
        s.send_bytes(value % len(body) + body.encode())
        return Expected(msg_id)
    if kind == "stray response":
        s.send_bytes(frame(value))
        return Expected()
    if kind == "cancel nothing":
        s.notify("$/cancelRequest", {"id": f"nothing-{value}"})
        return Expected()
    if kind == "unknown method":
        return Expected(s.request(f"fuzz/{value}", {"x": value}), METHOD_NOT_FOUND)
    if kind == "unknown notification":
        s.notify(f"$/fuzz/{value}", {"x": value})
        return Expected()
    if kind == "bad notification":  # a didOpen without its text: dropped, the document stays closed
        s.notify("textDocument/didOpen", {"textDocument": {"uri": URI, "languageId": "python", "version": 1}})
        return Expected()
    if kind == "notification as request":
        return Expected(s.request("textDocument/didClose", state), METHOD_NOT_FOUND)
    # a JSON-RPC message inside params is data, never a message of its own (its id is never answered)
    inner = {"jsonrpc": "2.0", "id": f"inner-{value}", "method": "textDocument/completion", "params": {}}
    return Expected(s.request("fuzz/nested", {"data": inner}), METHOD_NOT_FOUND)


def fuzz_garbage(examples: int) -> None:
    with server() as s:

        @settings(FUZZ, max_examples=examples)
        @given(st.lists(garbage(), min_size=1, max_size=6))
        def read_on_after(pieces: list[tuple[str, Any]]) -> None:
            for kind, value in pieces:
                before = len(s.null_id_errors)
                expected = send_garbage(s, kind, value)
                # the server reads on: the next request is answered (and the bad didOpen opened nothing)
                assert s.result("sparkls/documentState", {"textDocument": {"uri": URI}}) is None, (kind, value)
                if expected.msg_id is not None:
                    answer = s.wait(expected.msg_id)
                    assert answer.get("error", {}).get("code") == expected.code, (kind, value, answer)
                errors = s.wait_null_id_errors(before + expected.null_ids)[before:]
                assert [e["error"]["code"] for e in errors] == [expected.null_code] * expected.null_ids, (kind, value)
                assert len(s.null_id_errors) == before + expected.null_ids, (kind, value, s.null_id_errors[before:])
            s.check_answered_once()

        read_on_after()


def test_the_server_answers_and_reads_on_after_any_garbage_a_broken_client_sends():
    fuzz_garbage(150)


def test_a_long_content_length_at_the_end_of_the_stream_is_answered_without_waiting_for_more():
    with server() as s:
        started = time.monotonic()
        msg_id = s.request("sparkls/health", None, length_delta=10_000)
        assert "result" in s.wait(msg_id, 5)
        assert time.monotonic() - started < 5
        assert "result" in s.call("sparkls/health")
        s.check_answered_once()


# -- lifecycle ------------------------------------------------------------------------------------------------
def test_requests_before_initialize_are_refused_and_notifications_dropped():
    with server(None) as s:
        for method, params in [
            ("sparkls/health", None),
            ("textDocument/completion", completion_at(URI)),
            ("shutdown", None),
            ("fuzz/unknown", {}),
        ]:
            assert s.call(method, params)["error"]["code"] == NOT_INITIALIZED
        s.notify(
            "textDocument/didOpen",
            {"textDocument": {"uri": URI, "languageId": "python", "version": 1, "text": "x = 1\n"}},
        )
        s.initialize("utf-8")
        assert s.result("sparkls/documentState", {"textDocument": {"uri": URI}}) is None
        assert s.result("sparkls/health")["engine"] == "fake"  # no engine was started before the settings came
        s.check_answered_once()


def test_a_second_initialize_is_refused_and_keeps_the_negotiated_encoding():
    with server("utf-8") as s:
        s.notify(
            "textDocument/didOpen", {"textDocument": {"uri": URI, "languageId": "python", "version": 1, "text": "😀\n"}}
        )
        again = s.call(
            "initialize",
            {
                "capabilities": {"general": {"positionEncodings": ["utf-16"]}},
                "initializationOptions": {"engine": "fake"},
            },
        )
        assert again["error"]["code"] == INVALID_REQUEST
        # character 4 is the end of the line in UTF-8 bytes only (UTF-16 has 2 units there)
        assert "result" in s.call("textDocument/completion", completion_at(URI, 0, 4))
        s.check_answered_once()


def test_after_shutdown_requests_are_refused_and_exit_ends_the_server():
    with server() as s:
        answer = s.call("shutdown")
        assert answer.get("result", answer) is None
        for method, params in [
            ("sparkls/health", None),
            ("textDocument/completion", completion_at(URI)),
            ("shutdown", None),
            ("initialize", {"capabilities": {}}),
        ]:
            assert s.call(method, params)["error"]["code"] == INVALID_REQUEST
        s.notify("exit", None)
        assert s.exited_within(10) == 0, s.log()
        s.check_answered_once(running=False)


def test_shutdown_while_initialized_still_runs_is_answered_with_null():
    # `initialized` waits for the client to create the engine's progress; this client holds that answer back,
    # so the notification's handler is still pending when `shutdown` cancels everything else (the race CI hit)
    with server(None) as s:
        s.answer_server_requests = False
        s.initialize("utf-16", progress=True)
        s.wait_server_request("window/workDoneProgress/create")  # `initialized` now waits for its answer
        answer = s.call("shutdown")
        assert answer.get("result", answer) is None
        s.notify("exit", None)
        assert s.exited_within(10) == 0, s.log()
        s.check_answered_once(running=False)


def test_exit_before_initialize_ends_the_server_with_code_1():
    with server(None) as s:
        s.notify("exit", None)
        assert s.exited_within(10) == 1, s.log()  # LSP: `exit` without `shutdown` ends with 1


def test_exit_without_shutdown_after_initialize_ends_the_server_with_code_1():
    with server() as s:
        s.notify("exit", None)
        assert s.exited_within(10) == 1, s.log()


# -- huge and binary documents --------------------------------------------------------------------------------
@pytest.mark.parametrize("encoding", ENCODINGS)
def test_huge_and_binary_documents_are_held_exactly_and_answered(encoding):
    line = "def f(x):  # 漢字 😀 e\u0301\r\n"
    huge = line * (5_000_000 // len(line.encode()))
    binary = "a\x00b\udc80c\ud800\x00😀\x01\n\x00"
    with server(encoding) as s:
        for uri, text in [("file:///fuzz/huge.py", huge), ("file:///fuzz/binary.py", binary)]:
            s.notify(
                "textDocument/didOpen",
                {"textDocument": {"uri": uri, "languageId": "python", "version": 1, "text": text}},
            )
            spans = lines(text)
            last = (len(spans) - 2, line_width(text, spans[-2], encoding))
            for method in ("textDocument/completion", "textDocument/inlineCompletion"):
                params = {**completion_at(uri, *last), "context": {"triggerKind": 1}}
                assert "result" in s.call(method, params)
            end = pos(*position_of(text, len(text), encoding))
            s.notify(
                "textDocument/didChange",
                {
                    "textDocument": {"uri": uri, "version": 2},
                    "contentChanges": [{"range": {"start": pos(*last), "end": end}, "text": "\x00tail 😀"}],
                },
            )
            text = text[: offset_at(text, *last, encoding)] + "\x00tail 😀"
            assert s.result("sparkls/documentState", {"textDocument": {"uri": uri}}) == state_of(text, 2, uri)
        s.check_answered_once()


# -- the framing, without a server ----------------------------------------------------------------------------
@settings(FUZZ, max_examples=500)
@given(
    bodies=st.lists(st.dictionaries(st.text(max_size=5), st.text(max_size=20) | st.integers(), max_size=3), max_size=5),
    stray=st.lists(STRAY, max_size=5),
    cuts=st.lists(st.integers(0, 4000), max_size=8),
)
def test_the_framer_finds_every_message_between_stray_bytes_however_the_stream_is_cut(bodies, stray, cuts):
    stream = b"".join(
        itertools.chain.from_iterable(
            (stray[i] if i < len(stray) else b"", frame(bodies[i]) if i < len(bodies) else b"")
            for i in range(max(len(stray), len(bodies)))
        )
    )
    framer, found = Framer(), []
    for start, end in itertools.pairwise([0, *sorted(c % (len(stream) + 1) for c in cuts), len(stream)]):
        framer.feed(stream[start:end])
        found += list(framer.frames())
    assert [f.value for f in found if isinstance(f, Message)] == bodies
    assert not [f for f in found if isinstance(f, Unparsable)]
    assert all(isinstance(f, Skipped) for f in found if not isinstance(f, Message))


def test_the_framer_reads_on_after_a_short_a_long_and_a_broken_length():
    one, two = {"id": 1}, {"id": 2, "text": "漢字"}
    framer = Framer()
    framer.feed(frame(one, -3) + frame(two) + frame(one, +25) + frame(two) + b"Content-Length: x\r\n\r\n" + frame(one))
    found = list(framer.frames())
    assert [type(f).__name__ for f in found] == [
        "Unparsable",
        "Skipped",
        "Message",
        "Message",
        "Message",
        "Skipped",
        "Message",
    ]
    assert [f.value for f in found if isinstance(f, Message)] == [two, one, two, one]


# -- the count a benchmark reports ----------------------------------------------------------------------------
def run_fuzz(examples: int = 100) -> dict[str, float]:
    """The stateful fuzzing in every encoding and the garbage, `examples` examples each (raises on a failure):
    how many messages and bytes were sent, and how long it took."""
    before, started = dict(INPUTS), time.monotonic()
    for encoding in ENCODINGS:
        fuzz_buffers(encoding, examples)
    fuzz_garbage(examples)
    return {
        "messages": INPUTS["messages"] - before["messages"],
        "bytes": INPUTS["bytes"] - before["bytes"],
        "seconds": round(time.monotonic() - started, 1),
    }


@pytest.fixture(scope="module", autouse=True)
def _report_inputs() -> Iterator[None]:
    yield
    print(f"\nfuzzed inputs: {INPUTS['messages']} messages, {INPUTS['bytes']} bytes")
