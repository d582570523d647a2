"""A small priority scheduler for single-sequence engines (llama.cpp): vLLM's order, on one sequence.

Jobs wait in a heap ordered by (priority, arrival); the worker thread takes the most urgent one.
A running job asks `should_yield(priority)` between tokens: when a strictly more urgent job waits,
the running job is paused (its tokens so far are kept, and it goes back into the queue at its
original place) and resumes after the urgent work, continuing from where it stopped. Equal
priorities never preempt each other (FIFO within a class). Pure threading, no engine imports.
"""

from __future__ import annotations

import heapq
import itertools
import threading
from typing import Generic, TypeVar

T = TypeVar("T")


class PriorityScheduler(Generic[T]):
    def __init__(self) -> None:
        self._heap: list[tuple[int, int, T]] = []
        self._cv = threading.Condition()
        self._arrivals = itertools.count()
        self._closed = False
        self.preemptions = 0

    def submit(self, priority: int, job: T, arrival: int | None = None) -> int:
        """Queue `job`; a resumed job passes its first `arrival` back to keep its place. Returns it."""
        with self._cv:
            if arrival is None:
                arrival = next(self._arrivals)
            heapq.heappush(self._heap, (priority, arrival, job))
            self._cv.notify()
            return arrival

    def requeue(self, priority: int, job: T, arrival: int) -> None:
        """Put a paused job back at its first place (it was preempted by a more urgent one)."""
        self.preemptions += 1
        self.submit(priority, job, arrival)

    def take(self, timeout: float | None = None) -> tuple[int, int, T] | None:
        """The most urgent (priority, arrival, job); None once closed (or on timeout)."""
        with self._cv:
            while not self._heap and not self._closed:
                if not self._cv.wait(timeout):
                    return None
            if self._closed:
                return None
            return heapq.heappop(self._heap)

    def should_yield(self, priority: int) -> bool:
        """True when a job strictly more urgent than `priority` is waiting (lock-free peek)."""
        heap = self._heap
        return bool(heap) and heap[0][0] < priority

    def waiting(self) -> int:
        return len(self._heap)

    def drain(self) -> list[T]:
        """Remove and return every waiting job (shutdown)."""
        with self._cv:
            jobs = [j for _, _, j in self._heap]
            self._heap.clear()
            return jobs

    def close(self) -> None:
        with self._cv:
            self._closed = True
            self._cv.notify_all()
