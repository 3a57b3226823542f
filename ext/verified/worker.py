"""The child side of execution: runs one document's blocks, in order, in one interpreter.

Started by ``execute.py`` as ``python worker.py EVENTS_FD CONTROL_FD``. It reads the job
(JSON) from stdin, then for each block writes JSON lines to the events descriptor: ``ready``
when it could run the block, ``start`` once the parent answered ``go`` on the control
descriptor (the parent holds blocks back while another page times something), and
``block`` with its result after. stdout and stderr of each block go,
at the file-descriptor level, to ``<capture_dir>/<index>.stdout|stderr``, so output
written just before a crash or a timeout can still be read by the parent.

Standard library and IPython only: this runs in the reader's interpreter, not in Sphinx.
"""

from __future__ import annotations

import atexit
import base64
import datetime
import faulthandler
import json
import linecache
import os
import platform
import re
import signal
import sys
import threading
import time
import traceback
import warnings
from typing import Any

if __package__:  # imported by the engine, as verified.worker
    from . import capture_rules as _rules
    from . import reap as _reap
else:  # run as a script: the files beside this one, loaded unregistered, so that a snippet's
    # imports find only what the reader's interpreter has
    import importlib.util

    def _beside(name: str):
        spec = importlib.util.spec_from_file_location(
            f"verified_{name}", os.path.join(os.path.dirname(__file__), f"{name}.py"))
        module = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(module)
        return module

    _rules, _reap = _beside("capture_rules"), _beside("reap")
without_colour, block_stderr, read_stream = (_rules.without_colour, _rules.block_stderr,
                                             _rules.read_stream)
is_block_warning, raised_as_declared, published = (_rules.is_block_warning,
                                                    _rules.raised_as_declared, _rules.published)
display_error, exception_message, exception_text, failure_sign = (
    _rules.display_error, _rules.exception_message, _rules.exception_text, _rules.failure_sign)

IMAGE_DPI = 110
# What IPython warns after a cell raised SystemExit (sys.exit(), exit()).
EXIT_ADVICE = "To exit: use 'exit', 'quit', or Ctrl-D."
# A block has ended when the work it started has: JAX dispatches asynchronously, so XLA may
# still be computing after the cell returns. The worker waits until no other thread of its
# process is running or waiting for a core and the process used less than SETTLE_BUSY of a
# SETTLE_WINDOW (seconds of CPU over seconds of wall), at most SETTLE_LIMIT seconds (a thread
# the page keeps running on purpose never settles).
SETTLE_WINDOW = 0.002
SETTLE_BUSY = 0.25
SETTLE_LIMIT = 2.0
PARENT_WATCH = 0.5  # seconds between two looks at whether the build that started us is alive


def _open_events(fd: int):
    return os.fdopen(fd, "w", buffering=1, encoding="utf-8")


class Capture:
    """Routes fd 1 and fd 2 into per-block files, so C-level writes are caught too."""

    def __init__(self, capture_dir: str):
        self.capture_dir = capture_dir
        self.saved = (os.dup(1), os.dup(2))

    def paths(self, index: int | str) -> tuple[str, str]:
        base = os.path.join(self.capture_dir, str(index))
        return base + ".stdout", base + ".stderr"

    def begin(self, index: int | str) -> None:
        sys.stdout.flush()
        sys.stderr.flush()
        for fd, path in zip((1, 2), self.paths(index)):
            target = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
            os.dup2(target, fd)
            os.close(target)

    def end(self, index: int | str) -> tuple[str, str]:
        sys.stdout.flush()
        sys.stderr.flush()
        os.dup2(self.saved[0], 1)
        os.dup2(self.saved[1], 2)
        stdout, stderr = (read_stream(path) for path in self.paths(index))
        return stdout, stderr


def _make_shell(sink: list[tuple[str, dict[str, Any]]]):
    from IPython.core.displayhook import DisplayHook
    from IPython.core.displaypub import DisplayPublisher
    from IPython.core.interactiveshell import InteractiveShell
    from traitlets.config import Config

    class SinkDisplayHook(DisplayHook):
        """Keeps the trailing expression's formatted value instead of printing ``Out[n]:``."""

        def write_output_prompt(self):
            pass

        def write_format_data(self, format_dict, md_dict=None):
            sink.append(("result", dict(format_dict)))

    class SinkDisplayPublisher(DisplayPublisher):
        def publish(self, data, metadata=None, source=None, **kwargs):
            sink.extend(published(data, metadata))  # a display, or MyST-NB's glue

        def clear_output(self, wait=False):
            pass

    class WorkerShell(InteractiveShell):
        displayhook_class = SinkDisplayHook
        display_pub_class = SinkDisplayPublisher

        # The exception of an event callback (pre_run_cell, post_run_cell, ...): IPython
        # prints it and goes on; kept here, it is the block's error. Reset for each block.
        callback_error: BaseException | None = None

        # Errors are taken from the ExecutionResult and formatted by this module. A display
        # formatter hands its exception here and goes on without the value: raised again, it
        # is the block's error, where the value was shown (the trailing value, display()).
        # An event callback's exception comes with no exc_tuple, from inside IPython's
        # handler: raised, it would leave run_cell, so it is kept (so does the cell's own
        # error, which the ExecutionResult holds and which comes first).
        def showtraceback(self, exc_tuple=None, *args, **kwargs):
            if exc_tuple is None:
                if self.callback_error is None:
                    self.callback_error = sys.exc_info()[1]
                return
            error = display_error(exc_tuple)
            if error is not None:
                raise error

        def showsyntaxerror(self, *args, **kwargs):
            pass

        def _format_exception_for_storage(self, *args, **kwargs):
            # For the error history (off here): its str() of an exception whose __str__
            # raises would put that error in the block's error's place.
            return {}

        def showindentationerror(self):
            pass

        def ask_exit(self):
            # IPython's exit() and quit(): the page's interpreter runs every block of the
            # page, so a block cannot end it; said as the block's error.
            raise SystemExit("exit() and quit() would end the interpreter that runs the rest "
                             "of the page; a block cannot call them")

    config = Config()
    config.HistoryManager.enabled = False
    config.InteractiveShell.colors = "nocolor"
    config.InteractiveShell.autocall = 0
    shell = WorkerShell.instance(config=config)
    shell.events.print_on_error = False  # its "Error in callback ..." line: the error says it
    return shell


def _flush_figures(sink: list[tuple[str, dict[str, Any]]]) -> Exception | None:
    """Turns every open matplotlib figure into a PNG display output, then closes them all;
    the exception that drawing one raised, if any, is the block's error."""
    pyplot = sys.modules.get("matplotlib.pyplot")
    if pyplot is None:
        return None
    import io

    try:
        for number in pyplot.get_fignums():
            figure = pyplot.figure(number)
            buffer = io.BytesIO()
            figure.savefig(buffer, format="png", dpi=IMAGE_DPI, bbox_inches="tight",
                           metadata={"Software": None})
            width, height = figure.get_size_inches() * IMAGE_DPI
            sink.append(("display", {
                "image/png": base64.b64encode(buffer.getvalue()).decode("ascii"),
                "text/plain": f"<Figure size {int(width)}x{int(height)}>",
            }))
    except Exception as error:  # noqa: BLE001 - whatever drawing raised is the block's
        return error
    finally:
        pyplot.close("all")
    return None


def _format_error(exc: BaseException, cell_names: dict[str, int]) -> dict[str, Any]:
    """The traceback a reader wants: only frames from the document's own cells."""
    lines = []
    for frame in traceback.extract_tb(exc.__traceback__):
        number = cell_names.get(frame.filename)
        if number is None:
            continue
        lines.append(f"  Cell [{number}], line {frame.lineno}, in {frame.name}\n")
        code = linecache.getline(frame.filename, frame.lineno).strip()
        if code:
            lines.append(f"    {code}\n")
    if isinstance(exc, SyntaxError) and exc.filename in cell_names:
        exc.filename = f"Cell [{cell_names[exc.filename]}]"
    header = ["Traceback (most recent call last):\n"] if lines else []
    message = exception_message(exc)
    return {
        "ename": type(exc).__name__,
        "evalue": message if message is not None else "",
        "traceback": "".join(header + lines + [exception_text(exc)]),
        "mro": [f"{cls.__module__}.{cls.__qualname__}" for cls in type(exc).__mro__],
    }


# XLA:CPU's instruction-set levels (the values of --xla_cpu_max_isa), lowest first, and the
# /proc/cpuinfo flag that shows a CPU has each.
ISA_LEVELS = (("SSE4_2", "sse4_2"), ("AVX", "avx"), ("AVX2", "avx2"), ("AVX512", "avx512f"))


def _cpu_model_and_flags() -> tuple[str, set[str]]:
    model, flags = platform.processor(), set()
    try:
        with open("/proc/cpuinfo", encoding="utf-8") as handle:
            for line in handle:
                key, _, value = line.partition(":")
                key = key.strip()
                if key == "model name" and value.strip():
                    model = value.strip()
                elif key == "flags":
                    flags = set(value.split())
                if key == "" and flags:  # the first processor's entry is enough
                    break
    except OSError:
        pass
    return model, flags


def _instruction_set(flags: set[str]) -> str:
    """The level XLA may use: the CPU's best, capped by ``--xla_cpu_max_isa`` if set."""
    names = [name for name, _ in ISA_LEVELS]
    best = max((i for i, (_, flag) in enumerate(ISA_LEVELS) if flag in flags), default=None)
    cap = re.search(r"--xla_cpu_max_isa=(\w+)", os.environ.get("XLA_FLAGS", ""))
    if cap and cap.group(1).upper() in names:
        limit = names.index(cap.group(1).upper())
        best = limit if best is None else min(best, limit)
    return names[best] if best is not None else ""


def _distribution_version(*names: str) -> str | None:
    from importlib import metadata

    for name in names:
        try:
            return metadata.version(name)
        except metadata.PackageNotFoundError:
            continue
    return None


def _environment() -> dict[str, Any]:
    cpu_model, flags = _cpu_model_and_flags()
    env: dict[str, Any] = {
        "python": platform.python_version(),
        "jax": None,
        "jaxlib": None,
        "backend": None,
        "device_count": None,
        "cpu_count": os.cpu_count(),
        "platform": f"{sys.platform}-{platform.machine()}",
        "date": datetime.date.today().isoformat(),
        "cpu_model": cpu_model,
        "isa": _instruction_set(flags),
        "cores": len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else None,
    }
    jax = sys.modules.get("jax")
    if jax is not None:
        try:
            import jaxlib

            env["jax"] = jax.__version__
            env["jaxlib"] = getattr(jaxlib, "__version__", None)
            env["backend"] = jax.default_backend()
            env["device_count"] = jax.device_count()
            if env["backend"] != "cpu":
                env["device_kind"] = jax.devices()[0].device_kind
                env["libtpu"] = _distribution_version("libtpu", "libtpu-nightly")
        except Exception:  # the document may have left JAX unusable; the caption says less
            pass
    return env


def _other_thread_running() -> bool:
    """Whether another thread of this interpreter is running or runnable (Linux; elsewhere
    False). XLA computes without the GIL, so its threads' state is exact even on a loaded
    machine, where the CPU they get in a short window is not."""
    try:
        tasks = os.listdir("/proc/self/task")
    except OSError:
        return False
    me = str(threading.get_native_id())
    for task in tasks:
        if task == me:
            continue
        try:
            with open(f"/proc/self/task/{task}/stat", "rb") as stat_file:
                stat = stat_file.read()
        except OSError:  # the thread ended meanwhile
            continue
        if stat[stat.rindex(b")") + 2:][:1] == b"R":
            return True
    return False


def settle() -> None:
    """Returns once no thread of this interpreter is computing (or after SETTLE_LIMIT s), so
    that the block's result, and with it the end of the block for every other page, comes
    after the work the block left running, and output that work prints is the block's."""
    deadline = time.monotonic() + SETTLE_LIMIT
    while time.monotonic() < deadline:
        cpu, wall = time.process_time(), time.monotonic()
        time.sleep(SETTLE_WINDOW)
        idle = time.process_time() - cpu < SETTLE_BUSY * (time.monotonic() - wall)
        if idle and not _other_thread_running():
            return


def run_block(shell, block: dict[str, Any], capture: Capture, sink: list) -> dict[str, Any]:
    index = block["index"]
    sink.clear()
    capture.begin(index)
    started = time.perf_counter()
    wall_started = time.time()
    with warnings.catch_warnings(record=True) as caught:
        shell.execution_count = index + 1
        shell.callback_error = None
        result = shell.run_cell(block["source"], store_history=True)
        settle()
        drawing_error = _flush_figures(sink)
    duration = time.perf_counter() - started
    wall_ended = time.time()
    stdout, stderr = capture.end(index)

    outputs: list[dict[str, Any]] = []
    stdout = without_colour(stdout)
    if stdout:
        outputs.append({"kind": "stdout", "text": stdout, "data": {}})
    stderr = block_stderr(stderr)
    if stderr:
        outputs.append({"kind": "stderr", "text": stderr, "data": {}})
    for kind, data in sink:
        name = data.pop("name", "") if kind == "glue" else ""
        text = without_colour(data.pop("text/plain", ""))
        kept = {mime: value for mime, value in data.items() if mime == "image/png"}
        outputs.append({"kind": kind, "text": text, "data": kept, "name": name})

    cell_names = {name: number for name, number in shell.compile._filename_map.items()}
    exc = (result.error_before_exec or result.error_in_exec or drawing_error
           or shell.callback_error)
    warning_records = []
    for item in caught:
        if not is_block_warning(str(item.message)):
            continue
        if isinstance(exc, SystemExit) and str(item.message).startswith(EXIT_ADVICE):
            continue  # IPython's advice for a terminal, beside the point in a page
        line = item.lineno if item.filename in cell_names else None
        warning_records.append({
            "category": item.category.__name__,
            "message": str(item.message),
            "line": line,
        })

    error = _format_error(exc, cell_names) if exc is not None else None
    raises = block.get("raises")
    status, failure = "ran", None
    if error is not None:
        error["traceback"] = without_colour(error["traceback"])
        outputs.append({"kind": "error", "text": error["traceback"], "data": {}})
        if raises is not None and raised_as_declared(raises, error["mro"]):
            status = "expected-error"
        elif raises:
            status, failure = "failed", (
                f"expected {raises}, but the block raised {error['ename']}")
        else:
            status, failure = "failed", f"the block raised {error['ename']}"
    elif raises is not None:
        expected = raises or "an exception"
        status, failure = "failed", f"expected {expected}, but the block raised nothing"

    return {
        "index": index,
        "status": status,
        "duration": duration,
        "outputs": outputs,
        "warnings": warning_records,
        "error": error,
        "failure": failure,
        "started": wall_started,
        "ended": wall_ended,
    }


def pin_to_cores() -> None:
    """Narrows this interpreter to the cores the engine gave it (``verified_worker_cores``),
    before XLA or a BLAS sizes its thread pool from the usable cores; the variable is
    removed so that the page sees the environment a reader's interpreter would."""
    cores = os.environ.pop("VERIFIED_CPU_AFFINITY", "")
    if cores:
        os.sched_setaffinity(0, {int(core) for core in cores.split(",")})


def _end_what_the_page_started(worker: int) -> None:
    if os.getpid() == worker:  # not in a child the page forked, which inherits the handler
        _reap.end_processes(below=worker)


def end_with_parent(parent: int) -> None:
    """Ends this interpreter and everything the page started when the build that started it
    ends, however it ends (killed, say), so that no page keeps a core busy for later builds:
    on Linux the guard (``reap.py``) does it; elsewhere, or where the guard cannot start, a
    thread watching the parent's pid ends the page's process group (it and what it started)
    after the parent-death signal has ended this interpreter where there is one. With the
    guard, what the page started and left running also ends when the page exits normally,
    even in a session of its own."""
    if not parent:
        return
    if _reap.guard(parent):
        # Registered first, so run last: after the page's exit handlers, and JAX's.
        atexit.register(_end_what_the_page_started, os.getpid())
        return
    if sys.platform.startswith("linux"):
        try:
            import ctypes

            ctypes.CDLL(None, use_errno=True).prctl(1, signal.SIGKILL, 0, 0, 0)  # PDEATHSIG
        except (OSError, AttributeError):
            pass

    try:
        build_group = os.getpgid(parent)
    except ProcessLookupError:
        build_group = None

    def end() -> None:
        if os.getpgrp() != build_group:  # the page's own group: it and what it started
            os.killpg(os.getpgrp(), signal.SIGKILL)
        os._exit(1)

    def watch() -> None:
        while os.getppid() == parent:
            time.sleep(PARENT_WATCH)
        end()

    if os.getppid() != parent:  # it died before the signal was set
        end()
    threading.Thread(target=watch, name="verified-parent-watch", daemon=True).start()


def main() -> None:
    pin_to_cores()
    end_with_parent(int(os.environ.pop("VERIFIED_PARENT", "0") or 0))
    events = _open_events(int(sys.argv[1]))
    control = os.fdopen(int(sys.argv[2]), "r", encoding="utf-8")
    # A process the page starts is the page's, not the worker: it must not hold the pipes to
    # the build open after the worker has gone (the build would wait for their end until the
    # block's time limit instead of seeing the exit). A program it executes (os.system,
    # subprocess) does not inherit them; a forked child (os.fork, multiprocessing) closes
    # them, once: its own children inherit the emptied list.
    pipes = [int(sys.argv[1]), int(sys.argv[2])]
    for fd in pipes:
        os.set_inheritable(fd, False)

    def close_pipes() -> None:
        while pipes:
            os.close(pipes.pop())

    os.register_at_fork(after_in_child=close_pipes)
    job = json.load(sys.stdin)
    devnull = os.open(os.devnull, os.O_RDONLY)
    os.dup2(devnull, 0)  # a snippet that reads input gets EOF, not the job
    os.close(devnull)
    sys.stdout.reconfigure(write_through=True)
    sys.stderr.reconfigure(write_through=True)
    faulthandler.enable(file=2)  # a crash leaves its Python traceback in the captured stderr
    # A block stopped by its time limit: the driver asks where it was (USR1) before the kill.
    stack = open(os.path.join(job["capture_dir"], "stack"), "w", encoding="utf-8")
    faulthandler.register(signal.SIGUSR1, file=stack, all_threads=True)

    sink: list[tuple[str, dict[str, Any]]] = []
    shell = _make_shell(sink)
    capture = Capture(job["capture_dir"])

    def emit(message: dict[str, Any]) -> None:
        events.write(json.dumps(message) + "\n")

    for block in job["blocks"]:
        if block.get("skip"):
            emit({"event": "block", "result": {"index": block["index"], "status": "skipped",
                                               "duration": 0.0, "outputs": [], "warnings": [],
                                               "error": None, "failure": None}})
            continue
        emit({"event": "ready", "index": block["index"]})
        if control.readline().strip() != "go":
            return  # the parent is gone or ends the page
        emit({"event": "start", "index": block["index"]})
        block_result = run_block(shell, block, capture, sink)
        emit({"event": "block", "result": block_result})
        # keep_going: a matrix run goes on after a failed block; so does each process of a
        # multi-process page (whether the block failed is decided across processes, and
        # its driver stops them).
        if block_result["status"] == "failed" and not job.get("keep_going"):
            break
    emit({"event": "environment", "environment": _environment()})
    quiet_daemon_threads()
    if job.get("report_exit"):  # the parent waits for the exit handlers and hears of them
        ended = run_exit_handlers(shell, capture)
        if ended is not None:
            emit({"event": "exit", **ended})
    emit({"event": "done"})
    events.close()
    # Everything is with the parent. The exit handlers run, if they have not (the pages of
    # several processes: jax.distributed's shutdown, which their driver gives a moment), then
    # the interpreter ends without tearing down its modules: that takes half a second with
    # JAX loaded, and the page's slot would wait.
    atexit._run_exitfuncs()
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(0)


def quiet_daemon_threads() -> None:
    """From here to the end, a daemon thread's exception is not printed. IPython's exit
    handler clears the page's namespace (so that objects are finalized as at a real exit),
    and a daemon thread still running then fails on a name it no longer finds; a real
    interpreter stops its daemon threads silently at its end, so the page is not blamed.
    Other threads' exceptions are printed as before."""
    printed = threading.excepthook

    def hook(args) -> None:
        if args.thread is not None and args.thread.daemon:
            return
        printed(args)

    threading.excepthook = hook


def run_exit_handlers(shell, capture: Capture) -> dict[str, Any] | None:
    """Runs the exit handlers (the page's, and JAX's, which shut jax.distributed down) as
    the interpreter's end would, with their output captured: what the page needs to know of
    them, or None. An exception one raised is the page's error (Python would only print it);
    stderr that says something failed is kept for the page to show."""
    raised: list[BaseException] = []
    hook = sys.unraisablehook
    sys.unraisablehook = lambda unraisable: raised.append(unraisable.exc_value)
    capture.begin("exit")
    try:
        atexit._run_exitfuncs()
    finally:
        _, stderr = capture.end("exit")
        sys.unraisablehook = hook
    stderr = block_stderr(stderr)
    if not raised and failure_sign(stderr) is None:
        return None
    cell_names = dict(shell.compile._filename_map)
    errors = [_format_error(exc, cell_names) for exc in raised if exc is not None]
    return {"stderr": stderr, "errors": [without_colour(e["traceback"]) for e in errors],
            "names": [e["ename"] for e in errors]}


if __name__ == "__main__":
    # Run as a script: drop this file's folder from the path, so that the snippets'
    # imports see exactly what the reader's interpreter sees.
    if sys.path and os.path.abspath(sys.path[0]) == os.path.dirname(os.path.abspath(__file__)):
        sys.path.pop(0)
    main()
