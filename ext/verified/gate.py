"""The gate every block passes before it runs: shared for ordinary blocks, exclusive for
blocks that time something.

Pages execute concurrently, one worker process each; a timing block must not share the
machine with another block, or its figures measure the neighbour. Each page's driver thread
takes the gate (a readers-writer lock) before it lets its worker start a block and releases
it when the block's result arrives. Exclusive requests are preferred: once one waits, no new
shared block starts, so a timing block is never starved by a stream of ordinary ones.
"""

from __future__ import annotations

import threading


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

    def release(self, exclusive: bool) -> None:
        with self._condition:
            if exclusive:
                self._running_exclusive = False
            else:
                self._running_shared -= 1
            self._condition.notify_all()
