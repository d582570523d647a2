"""Stop strings across a paused stream: what is kept back, and where a stop split by the pause begins."""

from __future__ import annotations

from sparkls.engine.stops import StopSeam, stop_prefix_len, stop_start


def test_a_paused_stream_keeps_back_what_may_begin_a_stop_string():
    stops = ("\n\n", "<|endoftext|>")
    assert stop_prefix_len("x = 1\n", stops) == 1
    assert stop_prefix_len("x = 1<|end", stops) == 5
    assert stop_prefix_len("x = 1", stops) == 0
    assert stop_prefix_len("x = 1\n", ()) == 0
    # the kept-back end and the resumed text together complete the stop: cut where it begins
    assert stop_start("\n" + "\nprint(x)", stops) == 0
    assert stop_start("<|end" + "oftext|>", stops) == 0
    assert stop_start("y = 2\n\n<|endoftext|>", stops) == 5
    assert stop_start("y = 2", stops) is None


def test_a_stop_string_across_a_pause_is_found_even_when_its_parts_arrive_apart():
    seam = StopSeam(("\n\n",))
    assert seam.feed("x = 1", seam=False) == ("x = 1", False)  # one vLLM request: vLLM finds stops itself
    assert seam.feed("\ny = 2\n", seam=True) == ("\ny = 2", False)  # the pause: "\n" may begin a stop
    assert seam.feed("", seam=True) == ("", False)  # the resumed request has said nothing yet
    assert seam.feed("\nz = 3", seam=True) == ("", True)  # "\n" + "\n": stop where it began
    other = StopSeam(("\n\n",))
    other.feed("a\n", seam=True)
    assert other.feed("b", seam=True) == ("\nb", False)  # not a stop: the kept-back text goes on
    other.feed("c\n", seam=True)
    assert other.flush() == "\n" and other.flush() == ""
    assert StopSeam(()).feed("a\n", seam=True) == ("a\n", False)
