"""The parent side of execution: runs one document in a fresh subprocess.

Enforces each block's timeout and the document's budget, and turns every way a worker
can end (finished, a block failed, timed out, crashed, killed) into a ``DocResult`` whose
failing block carries a message that says what happened.
"""

from __future__ import annotations

import json
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

from .gate import BlockGate
from .model import (
    FAILED,
    NOT_RUN,
    BlockResult,
    DocJob,
    DocResult,
    DocSettings,
    Environment,
    Output,
    block_result_from_json,
)

WORKER = Path(__file__).with_name("worker.py")
AFFINITY_VARIABLE = "VERIFIED_CPU_AFFINITY"  # read (and removed) by worker.py
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


def _fallback_environment() -> Environment:
    return Environment(
        python=platform.python_version(),
        cpu_count=os.cpu_count(),
        platform=f"{sys.platform}-{platform.machine()}",
        date=date.today().isoformat(),
    )


def _partial_outputs(capture_dir: str, index: int) -> list[Output]:
    outputs = []
    for kind in ("stdout", "stderr"):
        path = Path(capture_dir, f"{index}.{kind}")
        if path.exists():
            text = path.read_text(encoding="utf-8", errors="replace")
            if text:
                outputs.append(Output(kind=kind, text=text))
    return outputs


def _describe_exit(returncode: int) -> str:
    if returncode < 0:
        try:
            name = signal.Signals(-returncode).name
        except ValueError:
            name = f"signal {-returncode}"
        return f"the interpreter crashed ({name})"
    return f"the interpreter exited with status {returncode}"


def run_document(job: DocJob, *, default_timeout: float, extra_env: dict[str, str],
                 gate: BlockGate | None = None, cores: tuple[int, ...] = (),
                 python: str | None = None, keep_going: bool = False,
                 collective_flags: bool = True) -> DocResult:
    """Runs every block of ``job`` in one fresh interpreter and returns what happened.
    ``gate`` is shared by the pages running at once: each block passes it first.
    ``cores``, if given, are the only cores the interpreter may use.
    The version matrix (matrix.py) runs another ``python``, goes on after a failed block
    (``keep_going``) and leaves out XLA flags the older XLA does not know."""
    if job.settings.processes > 1:
        from .multiprocess import run_multiprocess_document

        return run_multiprocess_document(job, default_timeout=default_timeout,
                                         extra_env=extra_env, gate=gate or BlockGate(),
                                         cores=cores, python=python,
                                         collective_flags=collective_flags)
    started = time.perf_counter()
    with tempfile.TemporaryDirectory(prefix="verified-") as scratch:
        capture_dir = os.path.join(scratch, "capture")
        workdir = os.path.join(scratch, "cwd")
        for folder in (capture_dir, workdir):
            os.mkdir(folder)
        results, environment = _drive_worker(
            job, capture_dir, workdir, scratch, default_timeout, extra_env,
            gate or BlockGate(), cores, python or sys.executable, keep_going,
            collective_flags)
    by_index = {result.index: result for result in results}
    blocks = [by_index.get(block.index) or BlockResult(index=block.index, status=NOT_RUN)
              for block in job.blocks]
    return DocResult(docname=job.docname, key=job.key, environment=environment,
                     blocks=blocks, duration=time.perf_counter() - started)


def _drive_worker(job, capture_dir, workdir, private_dir, default_timeout, extra_env, gate,
                  cores=(), python=sys.executable, keep_going=False, collective_flags=True):
    read_fd, write_fd = os.pipe()
    control_read, control_write = os.pipe()
    stderr_path = os.path.join(capture_dir, "worker.stderr")
    stderr_file = open(stderr_path, "wb")
    payload = {
        "capture_dir": capture_dir,
        "blocks": [
            {"index": b.index, "source": b.source, "raises": b.raises, "skip": b.skip}
            for b in job.blocks
        ],
        "keep_going": keep_going,
    }
    # Held shared while the interpreter may be busy (see gate.py): from here to its exit.
    gate.acquire(exclusive=False)
    held: bool | None = False
    try:
        process = subprocess.Popen(
            [python, str(WORKER), str(write_fd), str(control_read)],
            stdin=subprocess.PIPE,
            stdout=subprocess.DEVNULL,
            stderr=stderr_file,
            cwd=workdir,
            env=worker_env(job, extra_env, private_dir, cores, collective_flags),
            pass_fds=(write_fd, control_read),
            start_new_session=True,
        )
    except BaseException:
        gate.release(held)
        raise
    os.close(write_fd)
    os.close(control_read)
    control = os.fdopen(control_write, "w", buffering=1, encoding="utf-8")
    stderr_file.close()
    try:
        process.stdin.write(json.dumps(payload).encode())
        process.stdin.close()
    except BrokenPipeError:  # the worker died at start-up; reported below
        pass

    blocks_by_index = {b.index: b for b in job.blocks}
    results: list[BlockResult] = []
    environment: Environment | None = None
    running: int | None = None
    # Each limit is (deadline, what it means); the earliest one that passes ends the run.
    # The start-up limit holds until the worker is ready for its first block; the budget
    # counts from the first block's start (waiting at the gate before it is not the page's).
    limits = {"startup": (time.monotonic() + STARTUP_LIMIT,
                          f"the interpreter did not start within {STARTUP_LIMIT:g} s")}
    failure: str | None = None

    selector = selectors.DefaultSelector()
    events = os.fdopen(read_fd, "rb")
    selector.register(events, selectors.EVENT_READ)
    buffer = b""
    finished = False
    try:
        while not finished and failure is None:
            ready, failure = select_within_limits(selector, limits)
            if failure is not None:
                break
            if not ready:
                continue
            chunk = os.read(read_fd, 65536)
            if not chunk:  # the worker closed its end: it exited
                break
            buffer += chunk
            while b"\n" in buffer:
                line, buffer = buffer.split(b"\n", 1)
                message = json.loads(line)
                kind = message["event"]
                if kind == "ready":
                    limits.pop("startup", None)  # the interpreter is up
                    index = message["index"]
                    exclusive = blocks_by_index[index].exclusive
                    budget = limits.get("budget")
                    wait = None if budget is None else max(0.0, budget[0] - time.monotonic())
                    if held is not None:  # parked before the block: take the gate as it needs
                        gate.release(held)
                        held = None
                    if not gate.acquire(exclusive, wait):
                        running, failure = index, budget[1]
                        break
                    held = exclusive
                    try:
                        control.write("go\n")
                    except BrokenPipeError:  # it died; its end of the events pipe says so
                        pass
                elif kind == "start":
                    running = message["index"]
                    start_limits(limits, blocks_by_index[running], job, default_timeout)
                elif kind == "block":
                    results.append(block_result_from_json(message["result"]))
                    running = None
                    limits.pop("block", None)
                    if held:
                        gate.downgrade()
                        held = False
                elif kind == "environment":
                    environment = Environment(**message["environment"])
                elif kind == "done":
                    finished = True
    finally:
        selector.close()
        if not finished:
            _kill(process)
        process.wait()
        if held is not None:
            gate.release(held)
        events.close()
        try:
            control.close()
        except BrokenPipeError:  # the worker is gone
            pass
    stderr = Path(stderr_path).read_text(encoding="utf-8", errors="replace")

    if not finished and running is None:
        # The worker died between blocks (while starting up, say): blame the next block.
        done = {result.index for result in results}
        running = next((b.index for b in job.blocks if b.index not in done), None)
    if not finished and running is not None:
        if failure is None:
            failure = _describe_exit(process.returncode)
            tail = stderr.strip().splitlines()[-5:]
            if tail:
                failure += ": " + " / ".join(tail)
        results.append(BlockResult(index=running, status=FAILED, failure=failure,
                                   outputs=_partial_outputs(capture_dir, running)))
    return results, environment or _fallback_environment()


def _timeout_for(block, job: DocJob, default_timeout: float) -> float:
    return block.timeout or job.settings.timeout or default_timeout


def start_limits(limits: dict, block, job: DocJob, default_timeout: float) -> None:
    """A block has started: its own time limit runs from now, and so does the page's
    budget if this is the first block."""
    now = time.monotonic()
    if "budget" not in limits and job.settings.budget:
        limits["budget"] = (now + job.settings.budget,
                            f"timed out after {job.settings.budget:g} s "
                            f"(the document's time budget)")
    timeout = _timeout_for(block, job, default_timeout)
    limits["block"] = (now + timeout, f"timed out after {timeout:g} s (the block's time limit)")


def select_within_limits(selector: selectors.BaseSelector, limits: dict) -> tuple[list, str | None]:
    """Waits for events until the earliest limit in ``limits`` passes: the ready events,
    or no events and what the passed limit means."""
    deadline, meaning = min(limits.values(), default=(float("inf"), ""))
    now = time.monotonic()
    if now >= deadline:
        return [], meaning
    return selector.select(timeout=None if deadline == float("inf") else deadline - now), None


def _kill(process: subprocess.Popen) -> None:
    try:
        os.killpg(process.pid, signal.SIGKILL)
    except ProcessLookupError:
        pass
    process.wait()
