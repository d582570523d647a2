"""A typing storm against the real server (fake engine, named so: it runs no model, but streams slowly enough
that most requests are superseded mid-generation): every request is answered, and once it is over nothing
is left running. The full soak (10,000 keystrokes, and the real engine) is `benchmarks/reliability.py`."""

from __future__ import annotations

from sparkls.engine.metrics import percentile
from sparkls.tools.client import Client

from tests.storm import storm

OPTIONS = {"engine": "fake", "fakeTokenDelayMs": 10, "fakeResponse": "x = compute(items) + 1\n"}


async def test_a_typing_storm_answers_every_request_and_leaks_nothing(tmp_path):
    client = Client(tmp_path / "server.log")
    await client.start(OPTIONS)
    try:
        r = await storm(client, keystrokes=1500, documents=4, rate_hz=50)
    finally:
        await client.stop()
    print(
        f"storm: {r.keystrokes} keys in {r.seconds:.1f} s, {r.cancelled} cancelled, {r.with_items} with items, "
        f"cancel answered p50/p99 {percentile(r.cancel_answer_ms, 50):.1f}/{percentile(r.cancel_answer_ms, 99):.1f}"
        f" ms, RSS {r.before['rssBytes'] >> 20} -> {r.after['rssBytes'] >> 20} MiB, tasks "
        f"{r.before['tasks']} -> {r.after['tasks']}"
    )
    assert r.unanswered == 0 and r.other_errors == [] and r.answered == r.requests == 1500
    assert r.cancelled > 500 and r.with_items > 0  # the storm did supersede generations, and some were shown
    assert r.after["openEngineRequests"] == 0 and r.after["suggestionJobs"] == 0
    assert r.after["requestsInFlight"] <= 1  # the health request itself
    assert r.after["tasks"] <= r.before["tasks"] + 2
    assert r.after["rssBytes"] - r.before["rssBytes"] < 64 << 20
