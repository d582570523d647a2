"""What keeps the network transports (`serve --tcp`, `--ws`) to the user who started the server (pure, but for
reading and writing the token file).

Threat model: a web page the user visits can open a WebSocket to 127.0.0.1 (cross-site WebSocket hijacking) or
reach it under its own host name (DNS rebinding); another local user, or any host when bound to a public address,
can connect to the port. Whoever drives the server chooses what it reads (workspace folders), what it loads as a
model and where it sends code. So: a token on every connection, compared in constant time and never logged; a
WebSocket `Origin` must be allowed and, on a loopback bind, the `Host` must name the loopback and the bound port;
a public bind needs `--allow-remote` and a token given by the user; over the network, the settings that reach
outside the server (`GUARDED`) and folders outside the allowed roots are refused (`Guard`).
"""

from __future__ import annotations

import hmac
import ipaddress
import logging
import os
import secrets
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, cast

TOKEN_ENV = "SPARKLS_TOKEN"
API_KEY_ENV = "SPARKLS_OPENAI_API_KEY"
SUBPROTOCOL = "sparkls"
TOKEN_PROTOCOL = "sparkls.token."  # a `Sec-WebSocket-Protocol` entry carrying the token (browsers cannot set headers)
LOOPBACK_NAMES = ("localhost", "127.0.0.1", "[::1]")
# Settings a client over the network may not choose, and the server flag (or variable) that sets them instead.
GUARDED = {
    "modelPath": "sparkls serve --model-path",
    "openaiUrl": "sparkls serve --openai-url",
    "openaiApiKey": f"the {API_KEY_ENV} environment variable",
}


class NetworkRefused(Exception):
    """The server must not listen as asked (the message says why and what to do)."""


def is_loopback(host: str) -> bool:
    """Whether `host` (a bind address or name) is the loopback."""
    name = host.strip("[]")
    if name == "localhost":
        return True
    try:
        return ipaddress.ip_address(name).is_loopback
    except ValueError:
        return False


def same_token(given: object, expected: str) -> bool:
    """Constant-time comparison; anything but a non-empty string is wrong."""
    return isinstance(given, str) and bool(given) and hmac.compare_digest(given.encode(), expected.encode())


def runtime_dir() -> Path:
    """The user's runtime directory for sparkls (`$XDG_RUNTIME_DIR/sparkls`, else `~/.cache/sparkls/run`), 0700."""
    base = os.environ.get("XDG_RUNTIME_DIR")
    path = Path(base) / "sparkls" if base else Path.home() / ".cache" / "sparkls" / "run"
    path.mkdir(parents=True, exist_ok=True, mode=0o700)
    path.chmod(0o700)
    return path


def read_token(token_file: str, env: Mapping[str, str]) -> str | None:
    """The token the user gave: the first line of `token_file`, else `$SPARKLS_TOKEN`; None when neither."""
    if token_file:
        try:
            token = Path(token_file).read_text(encoding="utf-8").strip()
        except OSError as e:
            raise NetworkRefused(f"cannot read the token file {token_file}: {e.strerror}") from e
        if not token:
            raise NetworkRefused(f"the token file {token_file} is empty")
        return token
    return env.get(TOKEN_ENV) or None


def new_token_file(directory: Path) -> tuple[str, Path]:
    """A new random token written to `directory/token`, readable by the user only."""
    token = secrets.token_urlsafe(32)
    path = directory / "token"
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w", encoding="utf-8") as f:
        os.fchmod(f.fileno(), 0o600)
        f.write(token + "\n")
    return token, path


def host_header_ok(host: str | None, port: int) -> bool:
    """A loopback bind serves only requests whose `Host` names the loopback and the bound port (DNS rebinding:
    a page's own name resolved to 127.0.0.1 sends that name)."""
    name, sep, given_port = (host or "").rpartition(":")
    return bool(sep) and name.lower() in LOOPBACK_NAMES and given_port == str(port)


def origin_ok(origin: str | None, allowed: frozenset[str]) -> bool:
    """Clients that are not browsers send no `Origin`; a browser's page must be on the allow list."""
    return origin is None or origin in allowed


def websocket_token(authorization: str | None, protocols: list[str]) -> str | None:
    """The token of a WebSocket handshake: `Authorization: Bearer T`, or a `sparkls.token.T` subprotocol."""
    if authorization is not None:
        scheme, _, value = authorization.strip().partition(" ")
        if scheme.lower() == "bearer" and value.strip():
            return value.strip()
    for p in protocols:
        if p.startswith(TOKEN_PROTOCOL) and len(p) > len(TOKEN_PROTOCOL):
            return p[len(TOKEN_PROTOCOL) :]
    return None


@dataclass(frozen=True)
class Guard:
    """What a client over the network may not choose: the `GUARDED` settings (the server's own values, `fixed`,
    are used instead) and workspace folders outside `roots`."""

    roots: tuple[Path, ...]
    fixed: Mapping[str, Any] = field(default_factory=dict)  # wire name -> the server's value (its command line)
    network: bool = True  # False (stdio): the client may set them all; only the server's own values win

    def settings(self, wire: object) -> tuple[object, list[str]]:
        """The client's settings without the guarded ones, with the server's; a message per refused setting."""
        if not isinstance(wire, dict):
            return ({**self.fixed} if self.fixed else wire), []
        options = cast(dict[str, Any], wire)
        nested = isinstance(options.get("sparkls"), dict)
        inner = cast(dict[str, Any], options["sparkls"]) if nested else options
        refused = [k for k in GUARDED if inner.get(k) not in (None, "")] if self.network else []
        dropped = GUARDED if self.network else {}
        kept = {k: v for k, v in inner.items() if k not in dropped} | dict(self.fixed)
        messages = [
            f"`{k}` cannot be set by a client over the network; the server sets it ({GUARDED[k]})" for k in refused
        ]
        return ({**options, "sparkls": kept} if nested else kept), messages

    def folders(self, folders: list[Path]) -> tuple[list[Path], list[str]]:
        """The folders inside an allowed root; a message per refused one."""
        if not self.network:
            return folders, []
        kept: list[Path] = []
        messages: list[str] = []
        for folder in folders:
            resolved = folder.resolve()
            if any(resolved == r or resolved.is_relative_to(r) for r in self.roots):
                kept.append(folder)
            else:
                messages.append(
                    f"the workspace folder {folder} is outside the server's allowed roots "
                    f"({', '.join(map(str, self.roots))}; `sparkls serve --root`): not read"
                )
        return kept, messages


class TokenFilter(logging.Filter):
    """Replaces the token in every log record: it is never written to a log, whatever the level."""

    def __init__(self, token: str) -> None:
        super().__init__()
        self.token = token

    def filter(self, record: logging.LogRecord) -> bool:
        message = record.getMessage()
        if self.token in message:
            record.msg, record.args = message.replace(self.token, "<token>"), None
        return True


@dataclass(frozen=True)
class Listen:
    """How a network transport listens, after the checks of `plan`."""

    host: str
    port: int
    token: str
    token_path: Path | None  # where a generated token was written (the user reads it from there)
    allow_origins: frozenset[str]
    check_host: bool  # loopback bind: the `Host` header must name the loopback
    guard: Guard


def plan(
    host: str,
    port: int,
    token_file: str,
    allow_origins: list[str],
    allow_remote: bool,
    roots: list[str],
    fixed: Mapping[str, Any],
    env: Mapping[str, str],
) -> Listen:
    """Check a network listen request and get its token (generated into the runtime dir on a loopback bind when
    the user gave none); NetworkRefused says why not."""
    loopback = is_loopback(host)
    if not loopback and not allow_remote:
        raise NetworkRefused(
            f"{host} is not a loopback address: anyone who reaches it could drive the server "
            "(read your files, run the model). Bind 127.0.0.1, or pass --allow-remote with a token."
        )
    token = read_token(token_file, env)
    path = None
    if token is None:
        if not loopback:
            raise NetworkRefused(f"--allow-remote needs a token: --token-file PATH or ${TOKEN_ENV}")
        token, path = new_token_file(runtime_dir())
    resolved = tuple(Path(r).resolve() for r in (roots or [os.getcwd()]))
    return Listen(host, port, token, path, frozenset(allow_origins), loopback, Guard(resolved, fixed))


def tcp_problem(first: object, token: str) -> str | None:
    """Why a TCP connection whose first message is `first` (parsed JSON, None when there was none) is refused;
    None when it is `initialize` with the token in `initializationOptions.token` (taken out of the message)."""
    if not isinstance(first, dict):
        return "no JSON-RPC message arrived first"
    message = cast(dict[str, Any], first)
    params = message.get("params")
    options = params.get("initializationOptions") if isinstance(params, dict) else None
    if message.get("method") != "initialize" or "id" not in message:
        return "the first message must be `initialize`, with the token in `initializationOptions.token`"
    if not isinstance(options, dict) or "token" not in options:
        return "no token: `initialize` must carry it in `initializationOptions.token`"
    given = cast(dict[str, Any], options).pop("token")
    return None if same_token(given, token) else "wrong token"


def handshake_problem(
    listen: Listen, port: int, header: Callable[[str], str | None], protocols: list[str]
) -> tuple[int, str] | None:
    """Why a WebSocket handshake is refused, as (HTTP status, reason); None when it may proceed."""
    origin = header("Origin")
    if not origin_ok(origin, listen.allow_origins):
        return 403, f"the origin {origin} is not allowed (`sparkls serve --allow-origin ORIGIN` allows one)"
    if listen.check_host and not host_header_ok(header("Host"), port):
        return 403, f"the Host header must name this server's loopback address and port ({port})"
    given = websocket_token(header("Authorization"), protocols)
    if given is None:
        return 401, f"no token: send `Authorization: Bearer TOKEN` or offer the `{TOKEN_PROTOCOL}TOKEN` subprotocol"
    return None if same_token(given, listen.token) else (401, "wrong token")
