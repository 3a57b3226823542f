"""A block that runs long: a line on the console while it runs, and where it was stuck when its
limit stops it.

A hung block would otherwise cost its whole limit in silence. Every ``SLOW_NOTICE`` seconds
a running block says so (page, line, seconds, its limit). When a limit ends it, the driver
asks the worker for its stack first (``STACK_SIGNAL``, which ``worker.py`` has
``faulthandler`` answer from C, so even a block stuck outside Python answers) and puts the
frames of the page's own blocks, with their code, into the failure.
"""

from __future__ import annotations

import os
import re
import signal
import time
from dataclasses import dataclass

from sphinx.util import logging

logger = logging.getLogger(__name__)

SLOW_NOTICE = 60.0  # seconds a block runs before the console hears of it, and again after
STACK_SIGNAL = signal.SIGUSR1  # worker.py dumps every thread's stack on it
STACK_FILE = "stack"  # in the page's capture folder
STACK_WAIT = 1.0  # at most this long for the dump before the worker is killed
_FRAME = re.compile(r'^\s*File "(?P<file>[^"]+)", line (?P<line>\d+) in (?P<name>.*)$')
_CELL = re.compile(r"^<ipython-input-(?P<count>\d+)-[0-9a-f]+>$")
MAX_FRAMES = 12


@dataclass
class SlowNotice:
    """The console line for a block still running; ``due`` is when it is next said."""

    where: str  # ``source/part1/02-tracing.md:120``
    limit: float
    started: float
    due: float

    @classmethod
    def start(cls, where: str, limit: float) -> SlowNotice:
        now = time.monotonic()
        return cls(where, limit, now, now + SLOW_NOTICE)

    def say_at(self) -> tuple[float, SlowNotice]:
        """Its entry in a driver's limits: when it is due, and itself."""
        return self.due, self

    def say(self) -> tuple[float, SlowNotice]:
        """Logs the line; returns the next deadline and itself (a driver's limits entry)."""
        seconds = time.monotonic() - self.started
        logger.info(f"{self.where}: a block still running after {seconds:.0f} s "
                    f"(its limit: {self.limit:g} s)")
        self.due = time.monotonic() + SLOW_NOTICE
        return self.due, self


def dump_stack(pid: int, capture_dir: str) -> None:
    """Asks the worker for its stack and waits until the dump has stopped growing."""
    path = os.path.join(capture_dir, STACK_FILE)
    try:
        os.kill(pid, STACK_SIGNAL)
    except ProcessLookupError:
        return
    deadline = time.monotonic() + STACK_WAIT
    size = -1
    while time.monotonic() < deadline:
        time.sleep(0.05)
        now = os.path.getsize(path) if os.path.exists(path) else 0
        if now and now == size:
            return
        size = now


def stuck_at(capture_dir: str, sources: dict[int, str]) -> str:
    """Where the worker was, most recent call first: the thread running a block, from its
    innermost frame to the outermost frame of a block (the engine's own frames left out),
    each block's frame as ``Cell [n], line k`` with its code. ``sources``: block index to
    source. Empty when there is no dump."""
    try:
        with open(os.path.join(capture_dir, STACK_FILE), encoding="utf-8",
                  errors="replace") as handle:
            text = handle.read()
    except OSError:
        return ""
    for thread in re.split(r"\n(?=(?:Current thread|Thread) 0x)", text):
        frames = [match.groupdict() for match in map(_FRAME.match, thread.splitlines())
                  if match]
        cells = [i for i, frame in enumerate(frames) if _CELL.match(frame["file"])]
        if not cells:
            continue
        lines = []
        for frame in frames[:cells[-1] + 1][-MAX_FRAMES:]:
            cell = _CELL.match(frame["file"])
            if not cell:
                lines.append(f'  File "{frame["file"]}", line {frame["line"]}, in {frame["name"]}')
                continue
            count, number = int(cell["count"]), int(frame["line"])
            lines.append(f"  Cell [{count}], line {number}, in {frame['name']}")
            code = sources.get(count - 1, "").splitlines()
            if 0 < number <= len(code) and code[number - 1].strip():
                lines.append(f"    {code[number - 1].strip()}")
        return "where it was (most recent call first):\n" + "\n".join(lines)
    return ""
