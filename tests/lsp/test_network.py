"""The network transports' checks (lsp/network.py): loopback, Host and Origin, tokens, guarded settings, roots."""

from __future__ import annotations

import logging
from pathlib import Path

import pytest
from sparkls.lsp.network import (
    Guard,
    NetworkRefused,
    TokenFilter,
    handshake_problem,
    host_header_ok,
    is_loopback,
    plan,
    tcp_problem,
    websocket_token,
)


def test_loopback_binds_and_host_headers():
    assert all(map(is_loopback, ["127.0.0.1", "127.1.2.3", "::1", "[::1]", "localhost"]))
    assert not any(map(is_loopback, ["0.0.0.0", "::", "192.168.1.4", "example.com", "localhost.evil.example"]))
    assert host_header_ok("127.0.0.1:8765", 8765) and host_header_ok("LOCALHOST:8765", 8765)
    assert host_header_ok("[::1]:8765", 8765)
    for bad in (
        "evil.example:8765",
        "127.0.0.1:80",
        "127.0.0.1",
        "localhost.evil.example:8765",
        "",
        None,
        "127.0.0.1:8765@evil",
    ):
        assert not host_header_ok(bad, 8765), bad


def test_tokens_come_from_a_bearer_header_or_a_subprotocol_entry():
    assert websocket_token("Bearer abc", []) == "abc" and websocket_token("bearer  abc ", []) == "abc"
    assert websocket_token(None, ["sparkls", "sparkls.token.xyz"]) == "xyz"
    assert websocket_token("Basic abc", ["sparkls", "sparkls.token."]) is None


def test_a_tcp_client_must_open_with_initialize_carrying_the_token_which_is_taken_out():
    first = {"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {"initializationOptions": {"token": "t"}}}
    assert tcp_problem(first, "t") is None and first["params"]["initializationOptions"] == {}
    assert tcp_problem({**first, "params": {"initializationOptions": {"token": "u"}}}, "t") == "wrong token"
    assert "no token" in str(tcp_problem({**first, "params": {}}, "t"))
    assert "must be `initialize`" in str(tcp_problem({"jsonrpc": "2.0", "method": "initialize"}, "t"))  # no id
    assert tcp_problem(None, "t") is not None and tcp_problem([first], "t") is not None
    assert tcp_problem({**first, "params": {"initializationOptions": {"token": 1}}}, "t") == "wrong token"


def test_a_websocket_handshake_needs_an_allowed_origin_a_loopback_host_and_the_token(tmp_path):
    listen = plan("127.0.0.1", 9, "", ["http://editor.example"], False, [str(tmp_path)], {}, {"SPARKLS_TOKEN": "t"})
    ok = {"Host": "127.0.0.1:9", "Authorization": "Bearer t"}
    assert handshake_problem(listen, 9, ok.get, []) is None
    assert handshake_problem(listen, 9, {**ok, "Origin": "http://editor.example"}.get, []) is None
    assert handshake_problem(listen, 9, {**ok, "Origin": "http://evil.example"}.get, [])[0] == 403  # type: ignore[index]
    assert handshake_problem(listen, 9, {**ok, "Host": "evil.example:9"}.get, [])[0] == 403  # type: ignore[index]
    assert handshake_problem(listen, 9, {"Host": "127.0.0.1:9"}.get, [])[0] == 401  # type: ignore[index]
    assert handshake_problem(listen, 9, {"Host": "127.0.0.1:9"}.get, ["sparkls.token.t"]) is None


def test_a_public_bind_needs_allow_remote_and_a_token_the_user_gave(tmp_path, monkeypatch):
    with pytest.raises(NetworkRefused, match="not a loopback"):
        plan("0.0.0.0", 9, "", [], False, [], {}, {"SPARKLS_TOKEN": "t"})
    with pytest.raises(NetworkRefused, match="needs a token"):
        plan("0.0.0.0", 9, "", [], True, [], {}, {})
    listen = plan("0.0.0.0", 9, "", [], True, [], {}, {"SPARKLS_TOKEN": "t"})
    assert not listen.check_host and listen.token == "t" and listen.token_path is None
    (tmp_path / "empty").write_text("\n")
    with pytest.raises(NetworkRefused, match="is empty"):
        plan("127.0.0.1", 9, str(tmp_path / "empty"), [], False, [], {}, {})
    monkeypatch.setenv("XDG_RUNTIME_DIR", str(tmp_path))
    generated = plan("127.0.0.1", 9, "", [], False, [], {}, {})
    assert generated.token_path == tmp_path / "sparkls" / "token"
    assert generated.token_path.read_text().strip() == generated.token


def test_the_guard_refuses_settings_that_reach_outside_and_puts_the_servers_own_in(tmp_path):
    guard = Guard((tmp_path.resolve(),), {"openaiUrl": "http://127.0.0.1:1/v1"})
    wire, refused = guard.settings({"sparkls": {"modelPath": "/etc/passwd", "openaiApiKey": "k", "threads": 2}})
    assert wire == {"sparkls": {"threads": 2, "openaiUrl": "http://127.0.0.1:1/v1"}}
    assert [m.split("`")[1] for m in refused] == ["modelPath", "openaiApiKey"]
    assert guard.settings({"modelPath": ""}) == ({"openaiUrl": "http://127.0.0.1:1/v1"}, [])  # empty: nothing asked
    over_stdio = Guard((), {"openaiUrl": "http://127.0.0.1:1/v1"}, network=False)
    assert over_stdio.settings({"modelPath": "/m.gguf", "openaiUrl": "x"}) == (
        {"modelPath": "/m.gguf", "openaiUrl": "http://127.0.0.1:1/v1"},
        [],
    )


def test_the_guard_keeps_folders_inside_its_roots_even_through_a_link(tmp_path):
    root = tmp_path / "root"
    (root / "project").mkdir(parents=True)
    (root / "escape").symlink_to("/etc")
    guard = Guard((root.resolve(),))
    kept, refused = guard.folders([root / "project", root, Path("/etc"), root / "escape", root / ".." / "root2"])
    assert kept == [root / "project", root]
    assert len(refused) == 3 and all("outside the server's allowed roots" in m for m in refused)


def test_the_token_is_replaced_in_every_log_record():
    record = logging.LogRecord("sparkls", logging.DEBUG, __file__, 1, "got %s", ("Bearer s3cr3t",), None)
    TokenFilter("s3cr3t").filter(record)
    assert record.getMessage() == "got Bearer <token>"
