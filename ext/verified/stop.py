"""Stopping a build cleanly: Ctrl-C, a closed terminal (SIGHUP) or SIGTERM ends every page's
interpreter at once, and no new one starts.

Each page's worker leads a session of its own (so that one signal ends it and whatever it
started, and so that a Ctrl-C meant for the build does not land in a block half-way). The
terminal's signals therefore reach only the build: the drivers register each worker's
process group here, and ``stoppable`` (around the scheduler's run) kills them all when the
build is interrupted, however the interrupt arrives, with what their pages started in
sessions of their own (``reap.py``). A build that dies without this (SIGKILL) has each
worker's guard end its page (``reap.py``).
"""

from __future__ import annotations

import signal
import threading
from contextlib import contextmanager

from .reap import end_processes


class Stopped(Exception):
    """The build is stopping: no page starts."""


_LOCK = threading.Lock()
_GROUPS: set[int] = set()
_STOPPING = threading.Event()
# Besides SIGINT (KeyboardInterrupt already): a closed terminal and a polite kill.
SIGNALS = tuple(getattr(signal, name) for name in ("SIGHUP", "SIGTERM") if hasattr(signal, name))


def _kill(group: int) -> None:
    end_processes(group=group)  # and what its pages started in sessions of their own


def started(group: int) -> None:
    """A worker's process group is running; if the build is already stopping, it ends now
    (it may have started as the others were being ended)."""
    with _LOCK:
        _GROUPS.add(group)
    if _STOPPING.is_set():
        _kill(group)


def ended(group: int) -> None:
    with _LOCK:
        _GROUPS.discard(group)


def stopping() -> bool:
    """Whether the build is being stopped (a page that ends now was ended by it)."""
    return _STOPPING.is_set()


def check() -> None:
    """Raises ``Stopped`` once the build is stopping (before a page's interpreter starts)."""
    if _STOPPING.is_set():
        raise Stopped("the build was interrupted")


def stop_all() -> None:
    """Kills every running worker's process group; no page starts after this."""
    _STOPPING.set()
    with _LOCK:
        groups = list(_GROUPS)
    for group in groups:
        _kill(group)


def _interrupt(signum, frame) -> None:
    raise KeyboardInterrupt(signal.Signals(signum).name)


@contextmanager
def stoppable():
    """While pages run: SIGHUP and SIGTERM interrupt the build as Ctrl-C does (in the main
    thread, where Python delivers them), and any interruption or error ends every worker
    before it propagates, so the scheduler's threads return at once."""
    _STOPPING.clear()
    previous = {}
    if threading.current_thread() is threading.main_thread():
        for signum in SIGNALS:
            previous[signum] = signal.signal(signum, _interrupt)
    try:
        yield
    except BaseException:
        stop_all()
        raise
    finally:
        for signum, handler in previous.items():
            signal.signal(signum, handler)
