"""The acceptance ledger: each client event counts once per offer and source, an offer ends accepted or dismissed
(never both), accepted characters add up to what was inserted, and unknown request ids change nothing."""

import pytest
from sparkls.lsp.acceptance import AcceptanceCounts, AcceptanceLedger, offer_source


def counts(ledger: AcceptanceLedger, source: str = "model") -> AcceptanceCounts:
    return ledger.counts()[source]


def test_an_offer_shown_and_accepted_counts_its_whole_length_as_accepted():
    ledger = AcceptanceLedger()
    assert ledger.offered("s1", "model", 10)
    assert ledger.reported("s1", "shown")
    assert ledger.accepted("s1")
    assert counts(ledger) == AcceptanceCounts(offered=1, shown=1, accepted=1, accepted_chars=10)
    assert counts(ledger, "typeahead") == AcceptanceCounts()


def test_a_repeated_offer_shown_or_accept_is_counted_once():
    ledger = AcceptanceLedger()
    assert ledger.offered("s1", "model", 4)
    assert not ledger.offered("s1", "model", 4)  # a shared job answered a second identical request
    assert ledger.reported("s1", "shown")
    assert not ledger.reported("s1", "shown")
    assert ledger.accepted("s1")
    assert not ledger.accepted("s1")
    assert counts(ledger) == AcceptanceCounts(offered=1, shown=1, accepted=1, accepted_chars=4)


def test_partial_accepts_add_their_new_characters_and_a_full_accept_adds_the_rest():
    ledger = AcceptanceLedger()
    ledger.offered("s1", "model", 12)
    assert ledger.reported("s1", "partial", 3)  # a word
    assert ledger.reported("s1", "partial", 7)  # the next word: 7 accepted so far
    assert not ledger.reported("s1", "partial", 7)  # nothing new
    assert ledger.accepted("s1")  # the rest
    assert counts(ledger) == AcceptanceCounts(offered=1, accepted=1, partially_accepted=1, accepted_chars=12)


def test_a_partial_accept_then_a_dismissal_keeps_the_partly_accepted_characters():
    ledger = AcceptanceLedger()
    ledger.offered("s1", "model", 12)
    ledger.reported("s1", "shown")
    ledger.reported("s1", "partial", 5)
    assert ledger.reported("s1", "dismissed")
    assert counts(ledger) == AcceptanceCounts(offered=1, shown=1, partially_accepted=1, dismissed=1, accepted_chars=5)


def test_partial_characters_are_capped_at_the_offers_length():
    ledger = AcceptanceLedger()
    ledger.offered("s1", "typeahead", 4)
    ledger.reported("s1", "partial", 40)
    assert counts(ledger, "typeahead").accepted_chars == 4


def test_an_offer_ends_accepted_or_dismissed_whichever_comes_first():
    ledger = AcceptanceLedger()
    ledger.offered("a", "model", 3)
    ledger.offered("d", "model", 3)
    assert ledger.accepted("a")
    assert not ledger.reported("a", "dismissed")
    assert ledger.reported("d", "dismissed")
    assert not ledger.accepted("d")
    assert not ledger.reported("d", "partial", 2)  # too late: it was dismissed
    assert counts(ledger) == AcceptanceCounts(offered=2, accepted=1, dismissed=1, accepted_chars=3)


def test_events_for_unknown_request_ids_change_nothing():
    ledger = AcceptanceLedger()
    assert not ledger.accepted("never-offered")
    assert not ledger.reported("never-offered", "shown")
    assert ledger.counts() == {s: AcceptanceCounts() for s in ("model", "typeahead", "nextEdit")}


def test_only_the_last_offers_are_remembered():
    ledger = AcceptanceLedger(kept=2)
    for rid in ("s1", "s2", "s3"):
        ledger.offered(rid, "nextEdit", 1)
    assert not ledger.accepted("s1")  # forgotten
    assert ledger.accepted("s2") and ledger.accepted("s3")
    assert counts(ledger, "nextEdit") == AcceptanceCounts(offered=3, accepted=2, accepted_chars=2)


def test_the_rates_divide_by_shown_and_by_offered_and_are_none_with_nothing_to_divide_by():
    ledger = AcceptanceLedger()
    assert counts(ledger).rate_of_shown is None and counts(ledger).rate_of_offered is None
    for rid in ("s1", "s2", "s3", "s4"):
        ledger.offered(rid, "model", 2)
    ledger.reported("s1", "shown")
    ledger.reported("s2", "shown")
    ledger.accepted("s1")
    c = counts(ledger)
    assert (c.rate_of_shown, c.rate_of_offered) == (0.5, 0.25)


@pytest.mark.parametrize(
    ("call", "message"),
    [
        (lambda ledger: ledger.reported("s1", "clicked"), "unknown event 'clicked'"),
        (lambda ledger: ledger.reported("s1", "partial"), "a partial event needs acceptedChars"),
        (lambda ledger: ledger.reported("s1", "partial", -1), "a partial event needs acceptedChars"),
        (lambda ledger: ledger.offered("s2", "guess", 1), "unknown offer source 'guess'"),
    ],
)
def test_an_unknown_event_or_source_or_a_partial_without_characters_is_a_clear_error(call, message):
    ledger = AcceptanceLedger()
    ledger.offered("s1", "model", 3)
    with pytest.raises(ValueError, match=message):
        call(ledger)
    assert counts(ledger) == AcceptanceCounts(offered=1)


def test_suggestion_sources_map_to_offer_sources_and_none_is_no_offer():
    assert [offer_source(s) for s in ("model", "typeahead", "nextedit")] == ["model", "typeahead", "nextEdit"]
    with pytest.raises(ValueError, match="no offer"):
        offer_source("none")
