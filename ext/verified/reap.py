"""Ending a page's processes, all of them: those in its process group, those it started in
sessions of their own (``setsid``, ``start_new_session=True``), and those whose parent has
already exited.

A page's worker is a child subreaper (``PR_SET_CHILD_SUBREAPER``): what a page starts stays
below it even when the process in between exits, so walking ``/proc`` down from the worker
finds everything. ``end_processes`` keeps the worker alive (stopped) until everything below
it is dead, so that nothing is handed to init half-way.

A build killed outright (SIGKILL) cannot end its pages: each worker forks a guard at start,
a process that does nothing but wait for the build's death (a pidfd, else a look at the
worker's parent every ``PARENT_WATCH`` seconds) and then ends the page's processes. The guard
dies with its worker (the parent-death signal), so a page that ends normally takes it along.

A worker that crashes (``os._exit``, a segfault) takes its subreaping along: what its page
started in a session of its own goes to init. Every process a page starts inherits the
page's mark in its environment (``driver.PAGE_VARIABLE``), and ``end_marked`` ends those
after the worker has gone.

Standard library only: the worker loads this file by its path, as it does
``capture_rules.py``.
"""

from __future__ import annotations

import os
import select
import signal
import sys
import time

GUARD_NAME = b"verified-guard"  # the guard's name in /proc (guards spare each other)
PARENT_WATCH = 0.5  # seconds between two looks at the worker's parent, without a pidfd
END_LIMIT = 2.0  # at most this long for what is below a page's workers to die
_PR_SET_PDEATHSIG, _PR_SET_NAME, _PR_SET_CHILD_SUBREAPER = 1, 15, 36


def _prctl(option: int, value) -> bool:
    try:
        import ctypes

        return ctypes.CDLL(None, use_errno=True).prctl(option, value, 0, 0, 0) == 0
    except (OSError, AttributeError):
        return False


def _processes() -> dict[int, tuple[int, int, str, str]]:
    """Every process: pid → (parent pid, process group, state, name)."""
    table = {}
    try:
        entries = os.listdir("/proc")
    except OSError:
        return table
    for entry in entries:
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat", "rb") as stat:
                text = stat.read().decode("utf-8", "replace")
        except OSError:  # it exited meanwhile
            continue
        name = text[text.index("(") + 1:text.rindex(")")]
        state, ppid, pgid = text[text.rindex(")") + 2:].split()[:3]
        table[int(entry)] = (int(ppid), int(pgid), state, name)
    return table


def _signal(pid: int, signum: int) -> None:
    try:
        os.kill(pid, signum)
    except (ProcessLookupError, PermissionError):
        pass


def end_processes(*, group: int | None = None, below: int | None = None) -> None:
    """Kills every process of process group ``group`` and everything below them, or (with
    ``below``) everything below that pid, which is left alone. The group's top processes
    (those whose parent is outside: its workers) are stopped first and killed last, so that
    their subreaping holds everything below them until it is dead. Guards are left to the
    group's final kill. Without ``/proc`` (not Linux), the group's kill alone."""
    deadline = time.monotonic() + END_LIMIT
    tops: set[int] = set()
    while sys.platform.startswith("linux"):
        table = _processes()
        children: dict[int, list[int]] = {}
        for pid, (ppid, *_rest) in table.items():
            children.setdefault(ppid, []).append(pid)
        start = [below] if below is not None else [pid for pid, row in table.items()
                                                   if row[1] == group]
        tree, stack = set(start), list(start)
        while stack:
            for child in children.get(stack.pop(), ()):
                if child not in tree:
                    tree.add(child)
                    stack.append(child)
        live = {pid for pid in tree if pid in table and pid != below
                and table[pid][2] not in "ZX" and table[pid][3] != GUARD_NAME.decode()}
        for pid in {pid for pid in live if table[pid][0] not in tree} - tops:
            tops.add(pid)
            _signal(pid, signal.SIGSTOP)  # a stopped worker starts nothing new
        rest = live - tops
        if not rest or time.monotonic() > deadline:
            break
        for pid in rest:
            _signal(pid, signal.SIGKILL)
        time.sleep(0.002)  # for them to exit (a process being killed is still listed)
    for pid in tops:
        _signal(pid, signal.SIGKILL)
    if group is not None:
        try:
            os.killpg(group, signal.SIGKILL)
        except (ProcessLookupError, PermissionError):
            pass


def end_marked(variable: str, value: str) -> None:
    """Kills every process whose environment holds ``variable=value`` (as it was when it
    started: a process inherits its parent's), until none is left or END_LIMIT has passed:
    what a page started where no subreaper holds it (its worker crashed). Linux only."""
    if not sys.platform.startswith("linux"):
        return
    mark = b"\0" + f"{variable}={value}".encode() + b"\0"
    me = os.getpid()
    deadline = time.monotonic() + END_LIMIT
    while True:
        marked = []
        for entry in os.listdir("/proc"):
            if not entry.isdigit() or int(entry) == me:
                continue
            try:
                with open(f"/proc/{entry}/environ", "rb") as environ:
                    if mark in b"\0" + environ.read():
                        marked.append(int(entry))
            except OSError:  # another user's, or it exited meanwhile
                continue
        if not marked or time.monotonic() > deadline:
            return
        for pid in marked:
            _signal(pid, signal.SIGKILL)
        time.sleep(0.002)  # for them to exit (a zombie's environment reads empty)


def guard(parent: int) -> bool:
    """Makes this worker a subreaper and forks its guard, which ends the page's processes
    when ``parent`` (the build) dies. False where it could not (the caller then ends at least
    itself with its parent)."""
    if not sys.platform.startswith("linux") or not _prctl(_PR_SET_CHILD_SUBREAPER, 1):
        return False
    worker = os.getpid()
    try:
        watch = os.pidfd_open(parent)
    except (AttributeError, OSError):  # an older kernel or Python; or the build is gone
        watch = None
    try:
        build_group = os.getpgid(parent)
    except ProcessLookupError:
        build_group = None
    try:
        pid = os.fork()
    except OSError:
        return False
    if pid:
        if watch is not None:
            os.close(watch)
        return True
    try:  # the guard, which never returns
        _prctl(_PR_SET_PDEATHSIG, signal.SIGKILL)  # it ends with its worker
        if os.getppid() != worker:
            os._exit(0)
        _prctl(_PR_SET_NAME, GUARD_NAME)
        # The build's pipes stay the worker's alone: their end is how the build sees it exit.
        os.closerange(3, watch if watch is not None else 1 << 16)
        if watch is not None:
            os.closerange(watch + 1, 1 << 16)
        signal.signal(signal.SIGUSR1, signal.SIG_IGN)  # a stack request sent to the group
        if watch is not None:
            select.select([watch], [], [])  # readable once the build has exited
        else:
            while _parent_of(worker) == parent:
                time.sleep(PARENT_WATCH)
        group = os.getpgid(worker)
        if group != build_group:  # the page's own group (always, as the drivers start it)
            end_processes(group=group)
        else:
            end_processes(below=worker)
            _signal(worker, signal.SIGKILL)
    finally:
        os._exit(0)


def _parent_of(pid: int) -> int | None:
    try:
        with open(f"/proc/{pid}/stat", "rb") as stat:
            text = stat.read().decode("utf-8", "replace")
    except OSError:
        return None
    return int(text[text.rindex(")") + 2:].split()[1])
