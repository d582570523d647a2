"""The region tracker of streaming edits: it follows edits above the region and stops at the user's edits inside."""

import pytest
from sparkls.edit.live import RegionTracker, UserEdited
from sparkls.text.document import Document


def test_the_tracker_shifts_the_region_for_edits_above_and_stops_for_the_users_edits_inside():
    doc = Document.open("file:///t.py", "python", 1, "head\nREGION\ntail\n")
    t = RegionTracker(doc, 5, 12)
    above = Document.open("file:///t.py", "python", 2, "new head\nREGION\ntail\n")
    assert t.locate(above, [(2, 0, 0, "new ")]) and (t.start, t.end) == (9, 16)
    t.expected = "REGION2\n"
    ours = Document.open("file:///t.py", "python", 3, "new head\nREGION2\ntail\n")
    assert t.locate(ours, [(3, 15, 15, "2")]) and t.expected is None
    theirs = Document.open("file:///t.py", "python", 4, "new head\nREGXION2\ntail\n")
    with pytest.raises(UserEdited):
        t.locate(theirs, [(4, 12, 12, "X")])
