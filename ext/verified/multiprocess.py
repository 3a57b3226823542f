"""Pages that run as several cooperating processes (``execution: {processes: N}``).

Real multi-host JAX runs one Python process per host, joined by ``jax.distributed``. Such a
page runs as N workers (``worker.py``, unchanged) started together, each told its place by
environment variables, so that the page's own code calls ``jax.distributed.initialize``
with them, as a program on a cluster does:

    VERIFIED_PROCESS_ID     this process's id, 0 … N-1
    VERIFIED_NUM_PROCESSES  N
    VERIFIED_COORDINATOR    ``127.0.0.1:PORT``, a free loopback port for process 0 to serve on

Blocks run in lock-step: block k starts in every process (one ``go`` each) only when every
process has finished block k-1. Each process's result is kept (process 0's is the block's,
the others are ``BlockResult.others``). The workers share one working directory (what a
cluster's shared storage is to its hosts) and one process group, so one signal ends every
process of the page and whatever they started; the group is always ended when the page is.

Faults end the page: a block that fails in one process names that process, and its peers
(likely waiting in a collective for it) get a short grace before they are stopped; a process
that dies takes its peers with it at once; a block still running at its time limit stops
every process, and the message says which had not finished it.
"""

from __future__ import annotations

import json
import os
import selectors
import signal
import socket
import subprocess
import sys
import tempfile
import time

from .driver import (
    CLOSED_EXIT_LIMIT,
    PAGE_VARIABLE,
    SCRATCH_DELETED,
    STARTUP_LIMIT,
    WORKER,
    describe_exit,
    end_block_limits,
    fallback_environment,
    partial_outputs,
    select_within_limits,
    start_limits,
    wait_unreaped,
    worker_env,
)
from . import stop
from .reap import end_marked, end_processes
from .gate import BlockGate
from .hang import dump_stack, stuck_at
from .model import (
    EXPECTED_ERROR,
    FAILED,
    NOT_RUN,
    RAN,
    SKIPPED,
    Block,
    BlockResult,
    DocJob,
    DocResult,
    Environment,
    ProcessResult,
    block_result_from_json,
)

PROCESS_ID = "VERIFIED_PROCESS_ID"
NUM_PROCESSES = "VERIFIED_NUM_PROCESSES"
COORDINATOR = "VERIFIED_COORDINATOR"
# How long the peers of a process whose block failed may take to finish that block (they
# are usually waiting in a collective for it) before they are stopped.
PEER_GRACE = 5.0
# How long finished workers may take to exit (jax.distributed's shutdown) before the group
# is ended anyway.
EXIT_GRACE = 5.0


def free_loopback_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


class _Worker:
    """One process of the page, as the driver sees it."""

    def __init__(self, process_id: int, popen: subprocess.Popen, events, control,
                 capture_dir: str, stderr_path: str):
        self.id = process_id
        self.popen = popen
        self.events = events
        self.control = control
        self.capture_dir = capture_dir
        # Read through a handle opened now: a page can delete the folder it is in.
        self.stderr = open(stderr_path, "rb")
        self.buffer = b""
        self.ready: int | None = None  # the block it is ready to run
        self.running: int | None = None  # the block it runs
        self.results: dict[int, BlockResult] = {}
        self.environment: Environment | None = None
        self.done = False

    def send_go(self) -> None:
        try:
            self.control.write("go\n")
        except (BrokenPipeError, ValueError):  # it died; its events pipe says so
            pass

    def stderr_tail(self) -> str:
        self.stderr.seek(0)
        text = self.stderr.read().decode("utf-8", errors="replace")
        return " / ".join(text.strip().splitlines()[-5:])


def run_multiprocess_document(job: DocJob, *, default_timeout: float,
                              extra_env: dict[str, str], gate: BlockGate,
                              cores: tuple[int, ...] = (), python: str | None = None,
                              collective_flags: bool = True) -> DocResult:
    """Runs every block of ``job`` in ``job.settings.processes`` cooperating interpreters
    (all on ``cores``, if given; ``python`` and ``collective_flags`` as in ``run_document``)."""
    started = time.perf_counter()
    with tempfile.TemporaryDirectory(prefix="verified-") as scratch:
        workdir = os.path.join(scratch, "cwd")
        os.mkdir(workdir)
        combined, environment = _drive(job, scratch, workdir, default_timeout, extra_env, gate,
                                       cores, python or sys.executable, collective_flags)
    by_index = {result.index: result for result in combined}
    blocks = [by_index.get(block.index) or BlockResult(index=block.index, status=NOT_RUN)
              for block in job.blocks]
    return DocResult(docname=job.docname, key=job.key,
                     environment=environment or fallback_environment(),
                     blocks=blocks, duration=time.perf_counter() - started)


def _start(job, scratch, workdir, extra_env, count, cores, python,
           collective_flags) -> list[_Worker]:
    coordinator = f"127.0.0.1:{free_loopback_port()}"
    payload_blocks = [{"index": b.index, "source": b.source, "raises": b.raises, "skip": b.skip}
                      for b in job.blocks]
    workers: list[_Worker] = []
    group: int | None = None
    for process_id in range(count):
        base = os.path.join(scratch, f"process-{process_id}")
        capture_dir = os.path.join(base, "capture")
        os.makedirs(capture_dir)
        env = worker_env(job, extra_env, base, cores, collective_flags)
        env.update({PROCESS_ID: str(process_id), NUM_PROCESSES: str(count),
                    COORDINATOR: coordinator})
        read_fd, write_fd = os.pipe()
        control_read, control_write = os.pipe()
        stderr_path = os.path.join(capture_dir, "worker.stderr")
        with open(stderr_path, "wb") as stderr_file:
            # The first worker leads a new process group and the others join it (a group
            # can be joined only from its own session), so one killpg ends all of them
            # and anything they started.
            placement = {"process_group": 0 if group is None else group}
            popen = subprocess.Popen(
                [python, str(WORKER), str(write_fd), str(control_read)],
                stdin=subprocess.PIPE, stdout=subprocess.DEVNULL, stderr=stderr_file,
                cwd=workdir, env=env, pass_fds=(write_fd, control_read), **placement)
        if group is None:
            group = popen.pid
        os.close(write_fd)
        os.close(control_read)
        control = os.fdopen(control_write, "w", buffering=1, encoding="utf-8")
        workers.append(_Worker(process_id, popen, os.fdopen(read_fd, "rb"), control,
                               capture_dir, stderr_path))
        try:
            popen.stdin.write(json.dumps({"capture_dir": capture_dir, "keep_going": True,
                                          "blocks": payload_blocks}).encode())
            popen.stdin.close()
        except BrokenPipeError:  # died at start-up; reported by the driver
            pass
    return workers


def _drive(job: DocJob, scratch, workdir, default_timeout, extra_env, gate, cores, python,
           collective_flags):
    count = job.settings.processes
    blocks = {b.index: b for b in job.blocks}
    # Held shared while any interpreter may be busy (see gate.py): from here to their exit.
    gate.acquire(exclusive=False)
    held: bool | None = False
    try:
        stop.check()  # an interrupted build starts no page
        workers = _start(job, scratch, workdir, extra_env, count, cores, python,
                         collective_flags)
    except BaseException:
        gate.release(held)
        raise
    group = workers[0].popen.pid
    stop.started(group)
    selector = selectors.DefaultSelector()
    for worker in workers:
        selector.register(worker.events, selectors.EVENT_READ, worker)

    combined: list[BlockResult] = []
    limits = {"startup": (time.monotonic() + STARTUP_LIMIT,
                          f"the interpreters did not start within {STARTUP_LIMIT:g} s")}
    failure: str | None = None  # why the page ended early (put on the running block)
    failed_block = False  # a block failed in some process: the page stops after it
    running: int | None = None
    gone: _Worker | None = None  # the first worker whose interpreter ended unasked

    def finish_block(index: int) -> None:
        nonlocal running, held, failed_block
        result = combine(blocks[index], [w.results[index] for w in workers])
        combined.append(result)
        running = None
        end_block_limits(limits)
        limits.pop("grace", None)
        if held:
            gate.downgrade()
            held = False
        if result.failed:
            failed_block = True

    try:
        while failure is None and not failed_block and not all(w.done for w in workers):
            ready, failure = select_within_limits(selector, limits)
            if failure is not None:
                break
            for key, _ in ready:
                worker: _Worker = key.data
                chunk = os.read(worker.events.fileno(), 65536)
                if not chunk:
                    selector.unregister(worker.events)
                    if not worker.done and gone is None:
                        gone = worker
                    continue
                worker.buffer += chunk
                while b"\n" in worker.buffer:
                    line, worker.buffer = worker.buffer.split(b"\n", 1)
                    _handle(json.loads(line), worker)
            if gone is not None:
                break
            recorded = {r.index for r in combined}
            for index in sorted({i for w in workers for i in w.results} - recorded):
                if all(index in w.results for w in workers):
                    finish_block(index)
                    if failed_block:
                        break
                elif any(w.results.get(index) and w.results[index].failed for w in workers):
                    limits.setdefault("grace", (time.monotonic() + PEER_GRACE, "grace"))
            if failed_block:
                break
            if running is not None and "block" not in limits and any(
                    w.running == running or running in w.results for w in workers):
                start_limits(limits, blocks[running], job, default_timeout)
            # Every process is ready for the same block: let them all start it together.
            indexes = {w.ready for w in workers}
            if len(indexes) == 1 and None not in indexes and running is None:
                index = indexes.pop()
                limits.pop("startup", None)
                budget = limits.get("budget")
                wait = None if budget is None else max(0.0, budget[0] - time.monotonic())
                if held is not None:  # all parked before the block: take the gate as it needs
                    gate.release(held)
                    held = None
                if not gate.acquire(blocks[index].exclusive, wait):
                    running, failure = index, budget[1]
                    break
                held = blocks[index].exclusive
                running = index
                for w in workers:
                    w.ready = None
                    w.send_go()
            elif len(indexes) > 1 and None not in indexes:
                failure = ("the processes are out of step: ready for blocks "
                           + ", ".join(f"{w.id}: {w.ready}" for w in workers))
                break

    except Exception:
        _end_group(group, workers)
        for worker in workers:
            worker.stderr.close()
        if held is not None:
            gate.release(held)
        raise
    finally:
        selector.close()
        stop.ended(group)

    if all(w.done for w in workers):
        # Finished: give jax.distributed's shutdown a moment, then end the group regardless.
        _wait_all(workers, EXIT_GRACE)
    elif gone is not None:
        wait_unreaped(gone.popen, CLOSED_EXIT_LIMIT)
    elif failure is not None and failure != "grace" and running is not None:
        for worker in workers:  # a limit stopped them: where was each still in the block?
            if worker.running == running:
                dump_stack(worker.popen.pid, worker.capture_dir)
    _end_group(group, workers)
    if held is not None:
        gate.release(held)

    if not failed_block and not all(w.done for w in workers):
        index = running
        if index is None:  # between blocks (start-up, say): blame the next block
            finished = {r.index for r in combined}
            index = next((b.index for b in job.blocks if b.index not in finished), None)
        if index is not None:
            combined.append(_unfinished(blocks[index], workers, gone, failure, count,
                                        {b.index: b.source for b in job.blocks}))
    for worker in workers:
        worker.stderr.close()
    return combined, workers[0].environment


def _unfinished(block: Block, workers: list[_Worker], gone: _Worker | None,
                failure: str | None, count: int, sources: dict[int, str]) -> BlockResult:
    """The result of the block the page ended in: every process's part, and why it ended
    (with where each process its limit stopped was; ``sources``: each block's code)."""
    index = block.index
    stacks: list[str] = []
    failed = [w for w in workers if index in w.results and w.results[index].failed]
    per_process = []
    for w in workers:
        if index in w.results:
            per_process.append(w.results[index])
            continue
        if w is gone:
            why = f"died: {describe_exit(w.popen.returncode)}"
            if not os.path.isdir(w.capture_dir):
                why += SCRATCH_DELETED
            tail = w.stderr_tail()
            if tail:
                why += ": " + tail
        elif gone is not None:
            why = f"stopped when process {gone.id} died"
        elif failure == "grace" and failed:
            why = (f"still in the block {PEER_GRACE:g} s after process "
                   f"{', '.join(str(f.id) for f in failed)} failed; stopped")
        elif w.running == index:
            why = f"{failure}; it had not finished the block"
            where = stuck_at(w.capture_dir, sources)
            if where:
                stacks.append(f"process {w.id}: {where}")
        else:
            why = f"{failure}; it never started the block"
        per_process.append(BlockResult(index=index, status=FAILED, failure=why,
                                       outputs=partial_outputs(w.capture_dir, index)))
    result = combine(block, per_process)
    result.status = FAILED
    finished = [w.id for w in workers if index in w.results and not w.results[index].failed]
    if gone is None and failure != "grace" and finished and failure:
        result.failure += (f" (process {', '.join(map(str, finished))} had finished it: a "
                           f"collective waiting for a peer that never joins it hangs like this)")
    result.failure += f"; all {count} processes were stopped"
    result.failure += "".join(f"\n{stack}" for stack in stacks)
    return result


def _handle(message: dict, worker: _Worker) -> None:
    kind = message["event"]
    if kind == "ready":
        worker.ready = message["index"]
    elif kind == "start":
        worker.running = message["index"]
    elif kind == "block":
        result = block_result_from_json(message["result"])
        worker.results[result.index] = result
        worker.running = None
    elif kind == "environment":
        worker.environment = Environment(**message["environment"])
    elif kind == "done":
        worker.done = True


def _wait_all(workers: list[_Worker], grace: float) -> None:
    """Waits up to ``grace`` seconds for the workers to exit, reaping none: the group they
    lead is then ended (``_end_group``) while its id cannot be another's."""
    deadline = time.monotonic() + grace
    for worker in workers:
        wait_unreaped(worker.popen, max(0.0, deadline - time.monotonic()))


def _end_group(group: int, workers: list[_Worker]) -> None:
    """Ends every process of the page (and what they started), then reaps the workers."""
    end_processes(group=group)
    for worker in workers:
        if worker.popen.poll() is None:
            try:
                os.kill(worker.popen.pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
        worker.popen.wait()
        for stream in (worker.events, worker.control):
            try:
                stream.close()
            except (BrokenPipeError, OSError):
                pass
        # what it started in a session of its own, no longer below it if it crashed
        end_marked(PAGE_VARIABLE, os.path.dirname(worker.capture_dir))


def _raised_nothing(result: BlockResult) -> bool:
    return result.status == FAILED and result.error is None and result.failure is not None \
        and result.failure.startswith("expected ")


def combine(block: Block, per_process: list[BlockResult]) -> BlockResult:
    """One block's result from every process's: process 0's outputs are the block's own,
    the others go in ``others``; the status says whether the block did what it declared.

    With ``:raises:``, the processes that raised must have raised that type and at least one
    must have; a process that raised nothing ran normally (a fault is often in one process).
    """
    statuses = []
    for result in per_process:
        if block.raises is not None and _raised_nothing(result):
            statuses.append((RAN, None))
        else:
            statuses.append((result.status, result.failure))
    first = per_process[0]
    others = [ProcessResult(process=p, status=statuses[p][0], outputs=r.outputs,
                            warnings=r.warnings, error=r.error, failure=statuses[p][1])
              for p, r in enumerate(per_process) if p]
    failures = [f"process {p}: {failure or status}" for p, (status, failure) in enumerate(statuses)
                if status in (FAILED, NOT_RUN)]
    if all(status == SKIPPED for status, _ in statuses):
        status, failure = SKIPPED, None
    elif failures:
        status, failure = FAILED, "; ".join(failures)
    elif block.raises is not None:
        if any(status == EXPECTED_ERROR for status, _ in statuses):
            status, failure = EXPECTED_ERROR, None
        else:
            status = FAILED
            failure = (f"expected {block.raises or 'an exception'}, but no process raised it")
    else:
        status, failure = RAN, None
    return BlockResult(
        index=first.index, status=status,
        duration=max(r.duration for r in per_process),
        outputs=first.outputs, warnings=first.warnings, error=first.error, failure=failure,
        started=min((r.started for r in per_process if r.started), default=0.0),
        ended=max((r.ended for r in per_process), default=0.0),
        others=others)
