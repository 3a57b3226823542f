"""The parent side of execution: runs one document in a fresh subprocess.

Enforces each block's timeout and the document's budget, and turns every way a worker
can end (finished, a block failed, timed out, crashed, killed) into a ``DocResult`` whose
failing block carries a message that says what happened.
"""

from __future__ import annotations

import json
import os
import selectors
import subprocess
import sys
import tempfile
import time

from . import stop
from .capture_rules import block_stderr
from .driver import (CLOSED_EXIT_LIMIT, EXIT_LIMIT, SCRATCH_DELETED, STARTUP_LIMIT, WORKER,
                     describe_exit, end_block_limits, fallback_environment, kill,
                     partial_outputs, select_within_limits, start_limits, wait_unreaped,
                     worker_env)
from .gate import BlockGate
from .hang import dump_stack, stuck_at
from .model import (FAILED, NOT_RUN, SKIPPED, BlockResult, DocJob, DocResult, Environment,
                    Output, block_result_from_json)
from .multiprocess import run_multiprocess_document


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
    # Read through a handle opened now: a page can delete the folder it is in.
    stderr_reader = open(stderr_path, "rb")
    payload = {
        "capture_dir": capture_dir,
        "blocks": [
            {"index": b.index, "source": b.source, "raises": b.raises, "skip": b.skip}
            for b in job.blocks
        ],
        "keep_going": keep_going,
        "report_exit": True,
    }
    stop.check()  # an interrupted build starts no page
    # Held shared while the interpreter may be busy (see gate.py): from here to its exit.
    gate.acquire(exclusive=False)
    held: bool | None = False
    try:
        stop.check()
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
        stderr_reader.close()
        raise
    stop.started(process.pid)  # its own session: the group id is its pid
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
    finished = closed = False
    try:
        while not finished and failure is None:
            ready, failure = select_within_limits(selector, limits)
            if failure is not None:
                break
            if not ready:
                continue
            chunk = os.read(read_fd, 65536)
            if not chunk:  # the worker closed its end: it exited
                closed = True
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
                    block = blocks_by_index[running]
                    start_limits(limits, block, job, default_timeout)
                elif kind == "block":
                    results.append(block_result_from_json(message["result"]))
                    running = None
                    end_block_limits(limits)
                    if held:
                        gate.downgrade()
                        held = False
                elif kind == "environment":  # the blocks are over; its exit handlers run
                    environment = Environment(**message["environment"])
                    limits["exit"] = (time.monotonic() + EXIT_LIMIT,
                                      f"the page's exit handlers (atexit) did not end within "
                                      f"{EXIT_LIMIT:g} s")
                elif kind == "exit":
                    _at_exit(results, message)
                elif kind == "done":
                    finished = True
    finally:
        selector.close()
        if failure is not None and running is not None:  # a limit stopped it: where was it?
            dump_stack(process.pid, capture_dir)
            where = stuck_at(capture_dir, {b.index: b.source for b in job.blocks})
            failure += f"\n{where}" if where else ""
        if finished or closed:  # it exits by itself: let it, so that its status is its own
            wait_unreaped(process, EXIT_LIMIT if finished else CLOSED_EXIT_LIMIT)
        stop.ended(process.pid)  # before it is reaped: its pid cannot be another's yet
        kill(process, private_dir)  # the page's whole group, and what it left running
        if held is not None:
            gate.release(held)
        events.close()
        try:
            control.close()
        except BrokenPipeError:  # the worker is gone
            pass
    with stderr_reader:
        stderr = stderr_reader.read().decode("utf-8", errors="replace")

    if not finished and environment is not None:  # its blocks were over: it ended at exit
        if failure is None:
            failure = describe_exit(process.returncode) + " while its exit handlers ran"
        # with what they wrote to stderr before they hung or crashed
        said = "".join(o.text for o in partial_outputs(capture_dir, "exit") if o.kind == "stderr")
        _at_exit(results, {"failure": failure, "stderr": block_stderr(said)})
    elif not finished and running is None:
        # The worker died between blocks (while starting up, say): blame the next block.
        done = {result.index for result in results}
        running = next((b.index for b in job.blocks if b.index not in done), None)
    if not finished and running is not None and environment is None:
        if failure is None:
            failure = describe_exit(process.returncode)
            if not os.path.isdir(capture_dir):
                failure += SCRATCH_DELETED
            tail = stderr.strip().splitlines()[-5:]
            if tail:
                failure += ": " + " / ".join(tail)
        results.append(BlockResult(index=running, status=FAILED, failure=failure,
                                   outputs=partial_outputs(capture_dir, running)))
    return results, environment or fallback_environment()


def _at_exit(results: list[BlockResult], ended: dict) -> None:
    """What the page's interpreter did at its end, said at its last block that ran (a page
    has no later place): an exception an exit handler raised, or the handlers' hang or
    crash (``failure``), fails it; stderr that says something failed is shown with it."""
    last = next((result for result in reversed(results) if result.status != SKIPPED), None)
    if last is None:
        return
    if ended.get("stderr"):
        last.outputs.append(Output("stderr", "At the interpreter's exit:\n" + ended["stderr"]))
    last.outputs.extend(Output("error", text) for text in ended.get("errors", ()))
    failure = ended.get("failure")
    if failure is None and ended.get("names"):
        failure = (f"the page's interpreter raised {', '.join(ended['names'])} at its exit "
                   f"(in an exit handler), after its last block")
    if failure is not None and not last.failed:
        last.status, last.failure = FAILED, failure
