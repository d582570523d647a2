"""The priority scheduler: the most urgent job first, first come first served within a class, a paused job
keeping its place."""

from __future__ import annotations

import threading

from sparkls.engine.scheduler import PriorityScheduler


def test_the_scheduler_takes_the_most_urgent_first_and_fifo_within_a_class():
    s: PriorityScheduler[str] = PriorityScheduler()
    for name, prio in [("bg1", 2), ("ia1", 0), ("ca", 1), ("bg2", 2), ("ia2", 0)]:
        s.submit(prio, name)
    assert [s.take()[2] for _ in range(5)] == ["ia1", "ia2", "ca", "bg1", "bg2"]


def test_only_a_strictly_more_urgent_waiting_job_makes_a_running_one_yield():
    s: PriorityScheduler[str] = PriorityScheduler()
    assert not s.should_yield(2)
    s.submit(2, "bg")
    assert not s.should_yield(2)  # equal priority never preempts
    s.submit(0, "ia")
    assert s.should_yield(2) and s.should_yield(1) and not s.should_yield(0)


def test_a_paused_job_keeps_its_place_ahead_of_later_jobs_of_its_class():
    s: PriorityScheduler[str] = PriorityScheduler()
    first = s.submit(2, "bg-early")
    _, arrival, job = s.take()
    s.submit(2, "bg-late")
    s.submit(2, job, arrival)  # paused and put back
    assert arrival == first and [s.take()[2] for _ in range(2)] == ["bg-early", "bg-late"]


def test_closing_the_scheduler_releases_a_waiting_worker():
    s: PriorityScheduler[str] = PriorityScheduler()
    got = []
    t = threading.Thread(target=lambda: got.append(s.take()))
    t.start()
    s.close()
    t.join(5)
    assert got == [None]
