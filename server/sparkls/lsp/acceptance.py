# pyright: strict
"""What became of each offer the server made, counted per source (pure: no protocol types).

An offer is an answer with text sent to the client: an inline or classic completion item (source `model` or
`typeahead`, or `nextEdit` for a predicted insertion offered as the completion) or a `sparkls/inlineEdit` result
(`nextEdit`). The ledger remembers the last `OFFERS_KEPT` by request id, with their source and length in
characters. The client tells what it did with one: `accepted` (the `sparkls.accepted` command the item carries,
run on accept), and `shown`, `partial` (an accept of a word or line, with the characters accepted so far) and
`dismissed` (the `sparkls/acceptance` notification).

Each event counts once per offer; an offer ends accepted or dismissed, never both (the first to come wins); an
event for a request id never offered, or forgotten, changes nothing. Accepted characters are the characters
inserted: a partial acceptance's new characters as they come, the rest of the offer on a full accept. The
acceptance rate is given both ways: of the offers shown (for clients that report `shown`) and of those offered.
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from dataclasses import dataclass

SOURCES = ("model", "typeahead", "nextEdit")
EVENTS = ("shown", "partial", "dismissed")
OFFERS_KEPT = 512

# A suggestion's source (`completion.pipeline.Suggestion.source`) as an offer's source.
_SUGGESTION_SOURCES = {"model": "model", "typeahead": "typeahead", "nextedit": "nextEdit"}


def offer_source(suggestion_source: str) -> str:
    """The offer source of a suggestion's source; ValueError for one that offers no text (`none`)."""
    try:
        return _SUGGESTION_SOURCES[suggestion_source]
    except KeyError:
        raise ValueError(f"a {suggestion_source!r} suggestion is no offer") from None


@dataclass(frozen=True)
class AcceptanceCounts:
    """One source's counters since the server started."""

    offered: int = 0
    shown: int = 0
    accepted: int = 0
    partially_accepted: int = 0
    dismissed: int = 0
    accepted_chars: int = 0

    @property
    def rate_of_shown(self) -> float | None:
        """Accepted / shown: what users took of what they saw (None before anything was reported shown)."""
        return self.accepted / self.shown if self.shown > 0 else None

    @property
    def rate_of_offered(self) -> float | None:
        """Accepted / offered: for clients that never report `shown` (None before anything was offered)."""
        return self.accepted / self.offered if self.offered > 0 else None


@dataclass
class _Offer:
    source: str
    length: int
    shown: bool = False
    partial_chars: int = 0  # the most characters a `partial` event reported
    ended: str = ""  # "accepted" | "dismissed" once the user chose


class AcceptanceLedger:
    """The offers of one server and the counters per source. Changed on the server's event loop, read from any
    thread (the Prometheus scrape)."""

    def __init__(self, kept: int = OFFERS_KEPT) -> None:
        self.kept = kept
        self._offers: OrderedDict[str, _Offer] = OrderedDict()
        self._counts = {
            s: dict.fromkeys(("offered", "shown", "accepted", "partially_accepted", "dismissed", "accepted_chars"), 0)
            for s in SOURCES
        }
        self._lock = threading.Lock()

    def offered(self, request_id: str, source: str, length: int) -> bool:
        """Remember an answer sent with text; False (not counted again) when `request_id` was offered already
        (a shared job answers identical requests with one suggestion)."""
        if source not in SOURCES:
            raise ValueError(f"unknown offer source {source!r} (one of {', '.join(SOURCES)})")
        with self._lock:
            if request_id in self._offers:
                return False
            self._offers[request_id] = _Offer(source, max(0, length))
            while len(self._offers) > self.kept:
                self._offers.popitem(last=False)
            self._counts[source]["offered"] += 1
        return True

    def accepted(self, request_id: str) -> bool:
        """The client accepted the whole offer; False when it is unknown or already accepted or dismissed."""
        with self._lock:
            offer = self._offers.get(request_id)
            if offer is None or offer.ended:
                return False
            offer.ended = "accepted"
            c = self._counts[offer.source]
            c["accepted"] += 1
            c["accepted_chars"] += offer.length - offer.partial_chars
        return True

    def reported(self, request_id: str, event: str, accepted_chars: int | None = None) -> bool:
        """A client's `shown`, `partial` (with `accepted_chars` so far, capped at the offer's length) or
        `dismissed`; False when it changes nothing (unknown offer, repeated event, offer already ended).
        ValueError for an event that is none of these or a negative or missing `accepted_chars`."""
        if event not in EVENTS:
            raise ValueError(f"unknown event {event!r} (one of {', '.join(EVENTS)})")
        if event == "partial" and (accepted_chars is None or accepted_chars < 0):
            raise ValueError("a partial event needs acceptedChars, a count of characters >= 0")
        with self._lock:
            offer = self._offers.get(request_id)
            if offer is None:
                return False
            c = self._counts[offer.source]
            if event == "shown":
                if offer.shown:
                    return False
                offer.shown = True
                c["shown"] += 1
                return True
            if offer.ended:
                return False
            if event == "dismissed":
                offer.ended = "dismissed"
                c["dismissed"] += 1
                return True
            chars = min(accepted_chars or 0, offer.length)
            if chars <= offer.partial_chars:
                return False
            if offer.partial_chars == 0:
                c["partially_accepted"] += 1
            c["accepted_chars"] += chars - offer.partial_chars
            offer.partial_chars = chars
        return True

    def counts(self) -> dict[str, AcceptanceCounts]:
        """Each source's counters now."""
        with self._lock:
            return {s: AcceptanceCounts(**c) for s, c in self._counts.items()}
