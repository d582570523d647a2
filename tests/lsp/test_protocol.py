"""The server's protocol (lsp/protocol.py): a TCP client's first message is read within a limit before it is
checked."""

from __future__ import annotations


async def test_a_tcp_client_is_not_read_past_a_megabyte_before_its_first_message_is_checked():
    import asyncio

    from sparkls.lsp.framing import Framer
    from sparkls.lsp.protocol import AUTH_MAX_BYTES, _first_frame

    reader = asyncio.StreamReader()
    reader.feed_data(b"Content-Length: 100000000\r\n\r\n" + b"x" * (AUTH_MAX_BYTES + 65536))  # no end: more may come
    assert await asyncio.wait_for(_first_frame(reader, Framer()), 5) is None  # refused at the limit, not waiting
