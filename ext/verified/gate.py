"""The gate every block passes before it runs: shared for ordinary blocks, exclusive for
blocks that time something.

Pages execute concurrently, one worker process each; a timing block must not share the
machine with another block, or its figures measure the neighbour, nor with an interpreter
that is starting up or shutting down. So each page's driver thread holds the gate (a
readers-writer lock) shared for as long as its worker may be busy, from before it starts the
interpreter until the interpreter has exited, and lets go only while the worker is parked
before a block, to take the gate again as that block needs it; after an exclusive block it
goes on holding the gate shared. Exclusive requests are preferred: once one waits, no new
shared holder enters, so a timing block is never starved by a stream of ordinary ones.

``Slots`` are the other half of scheduling: the execution slots (cores) pages hold.
"""

from __future__ import annotations

import threading
from collections import deque
from contextlib import contextmanager


class BlockGate:
    def __init__(self) -> None:
        self._condition = threading.Condition()
        self._running_shared = 0
        self._running_exclusive = False
        self._waiting_exclusive = 0

    def acquire(self, exclusive: bool, timeout: float | None = None) -> bool:
        """Waits until the block may run (at most ``timeout`` seconds); False on time-out."""
        with self._condition:
            if not exclusive:
                granted = self._condition.wait_for(
                    lambda: not self._running_exclusive and not self._waiting_exclusive, timeout)
                if granted:
                    self._running_shared += 1
                return granted
            self._waiting_exclusive += 1
            try:
                granted = self._condition.wait_for(
                    lambda: not self._running_exclusive and not self._running_shared, timeout)
                if granted:
                    self._running_exclusive = True
            finally:
                self._waiting_exclusive -= 1
                if not granted:
                    self._condition.notify_all()  # shared blocks held back for this one may go
            return granted

    def downgrade(self) -> None:
        """The exclusive holder goes on as a shared one: its block has ended, its interpreter
        has not, and an exclusive block waiting next must not run beside it."""
        with self._condition:
            self._running_exclusive = False
            self._running_shared += 1
            self._condition.notify_all()

    def release(self, exclusive: bool) -> None:
        with self._condition:
            if exclusive:
                self._running_exclusive = False
            else:
                self._running_shared -= 1
            self._condition.notify_all()


class Slots:
    """The scheduler's execution slots (one per core), handed out first come, first served:
    a page of N processes holds N of them (at most all), and a request waiting for several
    is not overtaken by later ones, so it cannot starve."""

    def __init__(self, total: int) -> None:
        self.total = max(1, total)
        self.free = self.total
        self._queue: deque[object] = deque()
        self._condition = threading.Condition()

    @contextmanager
    def hold(self, count: int):
        count = min(max(1, count), self.total)
        ticket = object()
        with self._condition:
            self._queue.append(ticket)
            self._condition.wait_for(lambda: self._queue[0] is ticket and self.free >= count)
            self._queue.popleft()
            self.free -= count
            self._condition.notify_all()
        try:
            yield
        finally:
            with self._condition:
                self.free += count
                self._condition.notify_all()
