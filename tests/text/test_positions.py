"""LSP positions <-> string offsets in the three encodings, with emoji, CJK and CRLF."""

from hypothesis import given
from hypothesis import strategies as st
from sparkls.text.positions import ENCODINGS, LineIndex, units_in

TEXT = "a😀b\r\n漢字x\rlast\n"


def test_utf16_counts_an_emoji_as_two_units():
    idx = LineIndex.of(TEXT)
    assert idx.offset(0, 3, "utf-16") == 2  # after "a😀"
    assert idx.position(2, "utf-16") == (0, 3)


def test_utf8_counts_bytes_and_utf32_counts_code_points():
    idx = LineIndex.of(TEXT)
    assert idx.offset(0, 5, "utf-8") == 2
    assert idx.offset(0, 2, "utf-32") == 2
    assert idx.offset(1, 6, "utf-8") == TEXT.index("x")  # two CJK characters are 3 bytes each
    assert idx.position(TEXT.index("x"), "utf-16") == (1, 2)


def test_crlf_and_lone_cr_both_end_lines():
    idx = LineIndex.of(TEXT)
    assert idx.starts == [0, TEXT.index("漢"), TEXT.index("last"), len(TEXT)]
    assert idx.offset(0, 99, "utf-16") == TEXT.index("\r\n")  # past the end of a line: its end, before CRLF


def test_positions_past_the_end_clamp_and_are_reported_invalid():
    idx = LineIndex.of(TEXT)
    assert idx.offset(99, 0, "utf-16") == len(TEXT)
    assert not idx.is_valid(99, 0, "utf-16")
    assert not idx.is_valid(0, 5, "utf-16")
    assert idx.is_valid(0, 4, "utf-16")
    assert idx.is_valid(3, 0, "utf-16")  # the empty last line


def test_a_position_inside_a_surrogate_pair_snaps_to_the_character_start():
    idx = LineIndex.of("😀z")
    assert idx.offset(0, 1, "utf-16") == 0


alphabet = st.sampled_from([*"ab \t", "😀", "漢", "é", "\n", "\r\n", "\r"])


@given(st.lists(alphabet, max_size=40).map("".join), st.data())
def test_offset_and_position_round_trip_in_every_encoding(text, data):
    idx = LineIndex.of(text)
    # Offsets between "\r" and "\n" are not positions; skip them.
    offsets = [i for i in range(len(text) + 1) if not (0 < i < len(text) and text[i - 1 : i + 1] == "\r\n")]
    off = data.draw(st.sampled_from(offsets))
    for enc in ENCODINGS:
        line, ch = idx.position(off, enc)
        assert idx.offset(line, ch, enc) == off
        assert ch == units_in(text[idx.starts[line] : off], enc)
