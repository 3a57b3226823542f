"""What both page drivers share (execute.py: one interpreter; multiprocess.py: several):
the worker's path and environment, the start-up and block limits, what a killed worker left
behind, and how to stop it.
"""

from __future__ import annotations

import os
import platform
import selectors
import signal
import subprocess
import sys
import tempfile
import time
from datetime import date
from pathlib import Path

from .capture_rules import read_stream
from .hang import SlowNotice
from .model import DocJob, DocSettings, Environment, Output
from .reap import end_marked, end_processes

WORKER = Path(__file__).with_name("worker.py")
AFFINITY_VARIABLE = "VERIFIED_CPU_AFFINITY"  # read (and removed) by worker.py
PARENT_VARIABLE = "VERIFIED_PARENT"  # likewise: the build's pid; the worker ends with it
# Kept in the worker's environment, so every process the page starts inherits it: what the
# page left running is found by it after the worker is gone (``reap.end_marked``). Its value,
# the page's private folder, is this page run's alone.
PAGE_VARIABLE = "VERIFIED_PAGE"
STARTUP_LIMIT = 120.0  # seconds for the interpreter and IPython to come up
# Host devices are threads: on a busy machine one can miss XLA's 40 s collective rendezvous,
# and XLA then aborts the process. Blocks keep their own time limits, so wait longer here.
HOST_COLLECTIVE_FLAGS = ("--xla_cpu_collective_call_warn_stuck_timeout_seconds=600",
                         "--xla_cpu_collective_call_terminate_timeout_seconds=1200")


def page_environment(settings: DocSettings, extra_env: dict[str, str],
                     collective_flags: bool = True) -> dict[str, str]:
    """The variables that change a page's output, set before its interpreter starts: the
    configured ones (``verified_env``), the page's own ``env`` and its host-device count.
    The notebook download sets exactly these in its first cell."""
    env = {**extra_env, **dict(settings.env)}
    if settings.host_devices:
        count = str(settings.host_devices)
        env["JAX_NUM_CPU_DEVICES"] = count
        flags = [f"--xla_force_host_platform_device_count={count}",
                 *(HOST_COLLECTIVE_FLAGS if collective_flags else ())]
        env["XLA_FLAGS"] = " ".join(filter(None, [env.get("XLA_FLAGS", ""), *flags]))
    return env


def worker_env(job: DocJob, extra_env: dict[str, str], private_dir: str,
               cores: tuple[int, ...] = (), collective_flags: bool = True) -> dict[str, str]:
    """The worker's environment: ours, then the page's (XLA flags of ours, such as a
    portability profile's ISA cap, are kept in front of the page's). ``cores`` reach the
    worker as ``VERIFIED_CPU_AFFINITY``; it pins itself before anything sizes a thread pool.
    ``private_dir`` is removed after the run: the IPython profile and every temporary file
    the page makes (``TMPDIR``) go there, so a page's ``mkdtemp`` leaves nothing behind."""
    env = dict(os.environ)
    for name, value in page_environment(job.settings, extra_env, collective_flags).items():
        if name == "XLA_FLAGS" and os.environ.get("XLA_FLAGS"):
            value = f"{os.environ['XLA_FLAGS']} {value}"
        env[name] = value
    for name, folder in (("IPYTHONDIR", "ipython"), ("TMPDIR", "tmp")):
        env[name] = os.path.join(private_dir, folder)
        os.makedirs(env[name], exist_ok=True)
    env["MPLCONFIGDIR"] = str(matplotlib_dir())
    env["MPLBACKEND"] = "Agg"
    env["PYTHONUNBUFFERED"] = "1"
    env.setdefault("PYTHONHASHSEED", "0")
    env[PARENT_VARIABLE] = str(os.getpid())  # the worker ends when this process does
    env[PAGE_VARIABLE] = private_dir
    if cores:
        env[AFFINITY_VARIABLE] = ",".join(map(str, cores))
    return env


def matplotlib_dir() -> Path:
    """matplotlib's config and font cache for the workers: next to the matplotlib it belongs
    to (in the virtualenv), never the user's ``~/.cache/matplotlib``, whose state would leak
    into figure output."""
    prefix = Path(sys.prefix)
    base = prefix if os.access(prefix, os.W_OK) else Path(tempfile.gettempdir())
    path = base / "var" / "verified-matplotlib"
    path.mkdir(parents=True, exist_ok=True)
    return path


def fallback_environment() -> Environment:
    return Environment(
        python=platform.python_version(),
        cpu_count=os.cpu_count(),
        platform=f"{sys.platform}-{platform.machine()}",
        date=date.today().isoformat(),
    )


def partial_outputs(capture_dir: str, index: int | str) -> list[Output]:
    outputs = []
    for kind in ("stdout", "stderr"):
        path = Path(capture_dir, f"{index}.{kind}")
        if path.exists():
            text = read_stream(str(path))
            if text:
                outputs.append(Output(kind=kind, text=text))
    return outputs


# Why a worker died where its capture folder is gone (said after ``describe_exit``).
SCRATCH_DELETED = (" after the page deleted the engine's scratch folder (the parent of its "
                   "working directory), where each block's output is captured")


def describe_exit(returncode: int) -> str:
    if returncode < 0:
        try:
            name = signal.Signals(-returncode).name
        except ValueError:
            name = f"signal {-returncode}"
        return f"the interpreter crashed ({name})"
    return f"the interpreter exited with status {returncode}"


def timeout_for(block, job: DocJob, default_timeout: float) -> float:
    return block.timeout or job.settings.timeout or default_timeout


def start_limits(limits: dict, block, job: DocJob, default_timeout: float) -> None:
    """A block has started: its own time limit and its slow notice run from now, and so does
    the page's budget if this is the first block."""
    now = time.monotonic()
    if "budget" not in limits and job.settings.budget:
        limits["budget"] = (now + job.settings.budget,
                            f"timed out after {job.settings.budget:g} s "
                            f"(the document's time budget)")
    timeout = timeout_for(block, job, default_timeout)
    limits["block"] = (now + timeout, f"timed out after {timeout:g} s (the block's time limit, "
                                      f"{limit_source(block, job, default_timeout)})")
    limits["notice"] = SlowNotice.start(f"{os.path.relpath(job.path)}:{block.line}",
                                        timeout).say_at()


def end_block_limits(limits: dict) -> None:
    """A block has ended: its time limit and its slow notice with it (the budget runs on)."""
    limits.pop("block", None)
    limits.pop("notice", None)


def limit_source(block, job: DocJob, default_timeout: float) -> str:
    """Where a block's time limit comes from, by the name that sets it."""
    if block.timeout:
        return f":timeout: {block.timeout:g}"
    if job.settings.timeout:
        return f"the page's execution timeout: {job.settings.timeout:g}; a block may set :timeout:"
    return (f"verified_timeout = {default_timeout:g} in conf.py; a block may set :timeout:, "
            f"a page execution: {{timeout: ...}}")


def select_within_limits(selector: selectors.BaseSelector, limits: dict) -> tuple[list, str | None]:
    """Waits for events until the earliest limit in ``limits`` passes: the ready events,
    or no events and what the passed limit means. A block's slow notice (``limits["notice"]``)
    is no limit: when it is due it is said on the console, and the wait goes on."""
    while True:
        deadline, meaning = min(limits.values(), default=(float("inf"), ""),
                                key=lambda limit: limit[0])
        now = time.monotonic()
        if now < deadline:
            return selector.select(timeout=None if deadline == float("inf")
                                   else deadline - now), None
        if not isinstance(meaning, SlowNotice):
            return [], meaning
        limits["notice"] = meaning.say()


# Seconds a worker that said it is done may take to exit (its exit handlers: an accelerator's
# runtime shuts down in them) before its group is ended regardless.
EXIT_LIMIT = 60.0
# Seconds a worker that closed its pipe without finishing (it crashed, it died) may take to exit.
CLOSED_EXIT_LIMIT = 2.0


def wait_unreaped(process: subprocess.Popen, limit: float = EXIT_LIMIT) -> None:
    """Waits for a worker that has finished its page to exit, at most ``limit`` seconds,
    without reaping it: until it is reaped its pid, which is its process group's id, cannot
    be another's, so the group can then be ended safely."""
    deadline = time.monotonic() + limit
    while time.monotonic() < deadline:
        try:
            if os.waitid(os.P_PID, process.pid, os.WEXITED | os.WNOHANG | os.WNOWAIT):
                return
        except ChildProcessError:  # already reaped (``poll``): nothing left to wait for
            return
        time.sleep(0.005)


def kill(process: subprocess.Popen, page: str | None = None) -> None:
    """Ends the worker's process group, what its page started anywhere below it, then reaps
    it; then what carries the page's mark (``page``, the ``PAGE_VARIABLE`` it was given):
    what the page started in a session of its own and its worker, dead by a crash, no longer
    held below it."""
    end_processes(group=process.pid)
    process.wait()
    if page is not None:
        end_marked(PAGE_VARIABLE, page)
