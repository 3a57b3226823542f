"""A chapter notebook checks itself where the reader runs it.

The notebook download carries this module, the engine's own comparison (``record.py`` with
``model.py`` and ``tolerance.py``) and capture rules (``capture_rules.py``: what of a cell's
streams is its output), the same source, not a copy, and the page's records. Its
set-up cell sets what the page needs before JAX starts, says which platform it found and which
record it compares with; after every cell one line says how the cell's output compares with
that record, under the block's own tolerance and ``:output:`` declarations; a last cell prints
the totals. It runs in the reader's kernel (Jupyter or IPython): standard library and IPython
only, nothing downloaded, nothing read from the repository.
"""

from __future__ import annotations

import dataclasses
import os
import re
import sys
import threading
import warnings
from dataclasses import dataclass, field
from typing import Any

from .capture_rules import (block_stderr, display_error, exception_text, is_block_warning,
                            published, raised_as_declared, stream_text, without_colour)
from .model import (EXPECTED_ERROR, FAILED, FAILED_BECAUSE, RAN, Block, BlockResult, Output,
                    WarningRecord)
from .record import RecordedBlock, compare, source_digest
from .tolerance import Tolerance

MARK = "# course-check"  # the first line of every generated cell: no verdict line for those
PREFIX = "check:"

# Verdicts of one cell, and how the totals name them (the words of the site's captions).
SAME, DIFFERS, VARIES, RAISED = "same", "differs", "varies", "raised"
UNRECORDED, UNVERIFIED, ELSEWHERE, UNCOMPARED = ("unrecorded", "not-verified", "elsewhere",
                                                 "uncompared")
AFTER_EDIT = "after-edit"  # differs, but a cell before it is not the page's: the reader's doing
TOTAL_WORDS = ((SAME, "same"), (DIFFERS, "differ"),
               (AFTER_EDIT, "differ after an earlier cell was edited (not counted as differing)"),
               (VARIES, "vary (not compared)"),
               (RAISED, "raised as recorded"), (UNRECORDED, "not in the record (edited or added)"),
               (UNVERIFIED, "not yet verified there"), (ELSEWHERE, "run on another platform only"),
               (UNCOMPARED, "not compared (exercises, skip-execution, colour drawings)"))
_RICH = '<pre style="white-space:pre;overflow-x:auto;line-height:normal'  # rich's HTML
_FIGURE = "<Figure>"  # a figure's text names its size in the renderer's pixels: not compared
# Where a cell's code lives, as JAX's messages name it: IPython's ``<ipython-input-13-…>``
# (the page's worker, a terminal) or ipykernel's ``/tmp/ipykernel_PID/….py`` (Jupyter).
_CELL_FILE = re.compile(r"<ipython-input-\d+-[0-9a-f]+>|/[^\s:'\"]*/ipykernel_\d+/\d+\.py")
# XLA's HLO numbers the Python stack frames of an operation's origin, which include the
# kernel's own frames (a Jupyter kernel has more than the page's worker).
_STACK_FRAME = re.compile(r"\bstack_frame_id=\d+")
# JAX names the dtypes of a failed promotion in the order of a set, which follows the
# interpreter's string hashes: the page's worker fixes the seed (PYTHONHASHSEED=0), a reader's
# kernel draws its own. Compared as a set.
_DTYPE_SET = re.compile(r"(?<=Input dtypes \()([^()]*)(?=\))")


def _dtypes_sorted(match: re.Match) -> str:
    return ", ".join(sorted(match.group(1).split(", ")))


@dataclass(frozen=True)
class Expected:
    """One block of the page, as the notebook check needs it."""

    block: Block
    digest: str
    exercise: bool = False
    cause: str = ""  # the Platforms page's cause that explains a difference of this block


@dataclass
class Reference:
    """One record the notebook can compare with: the CPU's, an older JAX's, a platform's."""

    name: str
    label: str
    backend: str
    device_kind: str
    jax: str
    date: str
    blocks: dict[int, RecordedBlock] = field(default_factory=dict)
    # A platform's settings (conf.py) other than the backend: where they hold, it is here.
    settings: dict[str, str] = field(default_factory=dict)

    def describe(self) -> str:
        return f"the {self.label} record (jax {self.jax or '?'}, {self.date or 'undated'})"


def _tolerance(data: dict | None) -> Tolerance | None:
    return Tolerance(data["rtol"], data["atol"], data["integers"]) if data else None


def _outputs(items: list[dict]) -> list[Output]:
    return [Output(item["kind"], item.get("text", ""), dict(item.get("data", {})),
                   item.get("name", "")) for item in items]


def load(data: dict[str, Any]) -> tuple[list[Expected], list[Reference]]:
    """The embedded page (its blocks and records), as the engine's own types."""
    expected = [Expected(Block(index=b["index"], line=b["line"], source="", raises=b["raises"],
                               skip=b["skip"], tags=tuple(b["tags"]), varies=b["varies"],
                               normalize=tuple(b["normalize"]),
                               tolerance=_tolerance(b["tolerance"]), platform=b["platform"]),
                         b["digest"], b["exercise"], b.get("cause", ""))
                for b in data["blocks"]]
    references = [Reference(r["name"], r["label"], r["backend"], r["device_kind"], r["jax"],
                            r["date"], {int(index): RecordedBlock(
                                line=0, source_sha256="", status=b["status"],
                                outputs=_outputs(b["outputs"]),
                                warnings=[WarningRecord(w["category"], w["message"])
                                          for w in b["warnings"]])
                                for index, b in r["blocks"].items()}, r.get("settings", {}))
                  for r in data["records"]]
    return expected, references


def is_here(reference: Reference, backend: str, kind: str) -> bool:
    """Whether a record was made on this platform: the same backend, a device kind that
    starts with the record's, and its settings in force."""
    return (reference.backend == backend
            and (not reference.device_kind or kind.startswith(reference.device_kind))
            and all(os.environ.get(name) == value for name, value in reference.settings.items()))


def choose(references: list[Reference], backend: str, kind: str, jax_version: str
           ) -> tuple[Reference, str]:
    """The record to compare with, and a plain statement of how near it is: the record of
    this platform and JAX version (a platform's before the main record, which names no
    device); else this platform's under another version; else the nearest (the same
    backend, else the first, the course's main record)."""
    here = sorted((r for r in references if is_here(r, backend, kind)),
                  key=lambda r: not (r.device_kind or r.settings))
    exact = [r for r in here if r.jax == jax_version]
    if exact:
        return exact[0], f"compares with {exact[0].describe()}: this platform, this JAX"
    if here:
        return here[0], (f"compares with {here[0].describe()}: this platform, but jax "
                         f"{jax_version} here, so differences are expected")
    nearest = next((r for r in references if r.backend == backend), references[0])
    return nearest, (f"no record was made on {backend} ({kind}): compares with the nearest, "
                     f"{nearest.describe()}; differences are expected")


def too_few_devices(needed: int, count: int, backend: str, kind: str) -> str:
    """What the set-up cell says where the page asks for more devices than JAX sees."""
    if backend == "cpu":
        return (f"This page needs {needed} devices and JAX here started with {count} CPU "
                f"device{'s' if count != 1 else ''}: the host device count is set only before "
                f"JAX starts. Restart the kernel and run the notebook from the top.")
    return (f"This page needs {needed} devices and JAX here sees {count} ({kind}). To run it "
            f"anyway on {needed} host CPU devices beside the accelerator, set "
            f"PLATFORM = \"cpu\" at the top of this cell, restart the kernel and run it again.")


# -- one cell's output, captured as the engine's worker captures a block's ------------------

class Capture:
    """stdout, stderr (the streams' own ``write``, so output written at the file-descriptor
    level that Jupyter forwards is caught too), displays, the trailing value, glued values
    and warnings of one cell; everything still reaches the reader."""

    def __init__(self, shell):
        self.shell = shell
        self.texts: dict[str, list[str]] = {"stdout": [], "stderr": []}
        self.sink: list[tuple[str, dict]] = []
        self.warnings: list[WarningRecord] = []
        self.rich = False  # rich drew for Jupyter
        self._undo: list = []
        self._fences: list[_Fence] = []
        self._descriptor: _Descriptor | None = None

    def start(self) -> None:
        self.muted = 0  # the thread whose writes are the shell's own, 0 when none
        for name in ("stdout", "stderr"):
            self._tee(name)
        self._patch(self.shell.display_pub, "publish", self._publish)
        self._patch(self.shell.displayhook, "write_format_data", self._result)
        # A terminal's IPython prints the trailing value (``Out[3]: …``) and tracebacks on
        # stdout: they are the value and the error, not what the block printed.
        self._patch(self.shell.displayhook, "start_displayhook", self._mute)
        self._patch(self.shell.displayhook, "finish_displayhook", self._unmute, after=True)
        self._patch(self.shell, "showtraceback", self._traceback, self._unmute)
        self._patch(self.shell, "showsyntaxerror", self._mute, self._unmute)
        caught = warnings.catch_warnings()
        caught.__enter__()
        self._undo.append(lambda: caught.__exit__(None, None, None))
        warnings.showwarning = self._warning

    def drain(self) -> None:
        """Wait until what the cell wrote on the descriptors Jupyter watches has come through
        its watcher thread (a C++ log line, as XLA's, arrives there after the cell ends)."""
        for fence in self._fences:
            fence.wait()
        if self._descriptor is not None:
            self.texts["stderr"].append(self._descriptor.restore())

    def stop(self) -> None:
        while self._undo:
            self._undo.pop()()

    def _patch(self, owner, name: str, replacement, then=None, after: bool = False) -> None:
        original = getattr(owner, name)

        def call(*args, **kwargs):
            if not after:
                replacement(*args, **kwargs)
            try:
                return original(*args, **kwargs)
            finally:
                if after:
                    replacement(*args, **kwargs)
                if then is not None:
                    then()

        setattr(owner, name, call)
        self._undo.append(lambda: owner.__dict__.pop(name, None))

    def _tee(self, name: str) -> None:
        stream, parts = getattr(sys, name), self.texts[name]
        original = stream.write
        fence = _Fence(stream)
        if fence.fd is not None:
            self._fences.append(fence)
        elif name == "stderr":
            self._descriptor = _Descriptor.route(2)
            if self._descriptor is not None:
                self._undo.append(self._descriptor.restore)
                original = self._descriptor.write
        if name == "stderr":
            self._stderr = original  # warnings reach the reader through it, uncaptured

        def write(text):
            text = fence.strip(text)
            # Muted: the shell's own printing, on the thread that runs the cell. Jupyter's
            # descriptor watcher writes from another thread, the cell's output even then.
            if not self.muted or threading.get_ident() != self.muted:
                parts.append(text)
            return original(text) if text else 0

        try:
            stream.write = write  # Jupyter's stream: its descriptor watcher calls this too
            self._undo.append(lambda: stream.__dict__.pop("write", None))
        except (AttributeError, TypeError):  # a plain file: stand in for it
            setattr(sys, name, _Stream(stream, write))
            self._undo.append(lambda: setattr(sys, name, stream))

    def _publish(self, data, metadata=None, *args, **kwargs) -> None:
        if str(data.get("text/html", "")).startswith(_RICH):
            # rich (JAX's visualize_array_sharding) prints a text table where the page ran,
            # but draws in colour for Jupyter: another picture, not comparable with the text.
            self.rich = True
            return
        self.sink.extend(published(data, metadata))  # the worker's rule

    def _mute(self, *args, **kwargs) -> None:
        self.muted = threading.get_ident()

    def _traceback(self, exc_tuple=None, *args, **kwargs) -> None:
        """A display formatter's exception is the cell's error, as it is the block's in the
        page's worker: raised again where the value was shown."""
        error = display_error(exc_tuple)
        if error is not None:
            raise error
        self._mute()

    def _unmute(self, *args, **kwargs) -> None:
        self.muted = 0

    def _result(self, format_dict, *args, **kwargs) -> None:
        self.sink.append(("result", dict(format_dict)))

    def _warning(self, message, category, filename, lineno, file=None, line=None) -> None:
        if is_block_warning(str(message)):
            self.warnings.append(WarningRecord(category.__name__, str(message)))
        self._stderr(warnings.formatwarning(message, category, filename, lineno, line))

    def outputs(self) -> list[Output]:
        streams = (("stdout", without_colour(stream_text("".join(self.texts["stdout"])))),
                   ("stderr", block_stderr(stream_text("".join(self.texts["stderr"])))))
        found = [Output(name, text) for name, text in streams if text]
        for kind, data in self.sink:
            image = {mime: value for mime, value in data.items() if mime == "image/png"}
            found.append(Output(kind, without_colour(data.get("text/plain", "")), image,
                                data.get("name", "")))
        return found


class _Fence:
    """A marker written on a watched stream's file descriptor: when the watcher thread passes
    it on, everything written before it has arrived. The marker itself reaches no one."""

    def __init__(self, stream):
        watched = getattr(stream, "_should_watch", False) and getattr(stream, "_fid", None)
        self.fd = getattr(stream, "_original_stdstream_fd", None) if watched else None
        # Control characters a terminal ignores (NUL, then this fence's number in base 4 as
        # SOH to EOT): the watcher echoes the marker to the kernel's own terminal too.
        number, digits = id(self), []
        while number:
            number, digit = divmod(number, 4)
            digits.append(chr(1 + digit))
        self.marker = "\x00" + "".join(digits) + "\x00"
        self.held = ""  # the start of a marker split across two reads of the pipe
        self.passed = threading.Event()

    def strip(self, text: str) -> str:
        if self.fd is None or self.passed.is_set() or not self.marker[0] in self.held + text:
            return text
        text, self.held = self.held + text, ""
        if self.marker in text:
            self.passed.set()
            return text.replace(self.marker, "")
        for cut in range(min(len(self.marker) - 1, len(text)), 0, -1):
            if self.marker.startswith(text[-cut:]):
                self.held = text[-cut:]
                return text[:-cut]
        return text

    def wait(self, seconds: float = 5.0) -> None:
        if self.fd is None:
            return
        try:
            os.write(self.fd, self.marker.encode())
        except OSError:
            return
        self.passed.wait(seconds)


class _Descriptor:
    """Where no Jupyter watches the descriptors (a terminal's IPython), file descriptor 2 is
    routed into a file for the cell, as the page's worker routes it, so that a C++ library's
    log line (XLA's) is the cell's output here too; the reader sees it when the cell ends.
    What Python writes goes straight to the terminal (the tee keeps it)."""

    def __init__(self, fd: int, saved: int, file):
        self.fd, self.saved, self.file = fd, saved, file

    @classmethod
    def route(cls, fd: int) -> "_Descriptor | None":
        import tempfile

        try:
            saved = os.dup(fd)
        except OSError:
            return None
        file = tempfile.TemporaryFile()
        sys.stderr.flush()  # what Python holds goes out before the descriptor moves
        os.dup2(file.fileno(), fd)
        return cls(fd, saved, file)

    def write(self, text: str) -> int:
        os.write(self.saved, text.encode("utf-8", errors="surrogateescape"))
        return len(text)

    def restore(self) -> str:
        """Descriptor 2 back as it was; what was written on it, shown and returned."""
        if self.file is None:
            return ""
        os.dup2(self.saved, self.fd)
        self.file.seek(0)
        data = self.file.read()
        self.file.close()
        self.file = None
        if data:
            os.write(self.saved, data)
        os.close(self.saved)
        return data.decode("utf-8", errors="surrogateescape")


class _Stream:
    """A stream whose writes are also kept (where the stream's ``write`` cannot be replaced)."""

    def __init__(self, stream, write):
        self._stream, self.write = stream, write

    def __getattr__(self, name):
        return getattr(self._stream, name)


def exception_only(text: str) -> str:
    """The exception of a recorded traceback, without its frames (a kernel numbers its cells
    otherwise than the page's worker)."""
    lines = text.split("\n")
    at = 1 if lines and lines[0].startswith("Traceback (most recent call last)") else 0
    while at < len(lines) and lines[at].startswith("  Cell ["):
        at += 2 if at + 1 < len(lines) and lines[at + 1].startswith("    ") else 1
    return "\n".join(lines[at:])


def _comparable(outputs: list[Output]) -> list[Output]:
    """Outputs as the notebook compares them: an exception without its frames, a figure by
    being one (its text gives the size in the renderer's pixels), a cell's file and HLO's
    stack frame numbers by being one (each kernel has its own), a failed promotion's dtypes
    as a set."""
    shown = []
    for output in outputs:
        text = _STACK_FRAME.sub("stack_frame_id=<n>", _CELL_FILE.sub("<cell>", output.text))
        text = _DTYPE_SET.sub(_dtypes_sorted, text)
        output = dataclasses.replace(output, text=text)
        if output.kind == "error":
            output = dataclasses.replace(output, text=exception_only(output.text))
        elif any(mime.startswith("image/") for mime in output.data):
            output = dataclasses.replace(output, text=_FIGURE)
        shown.append(output)
    return shown


def live_result(block: Block, capture: Capture, error: BaseException | None) -> BlockResult:
    """What the cell did, as a ``BlockResult`` with the worker's statuses."""
    outputs = capture.outputs()
    status = RAN
    if error is not None:
        outputs.append(Output("error", without_colour(exception_text(error))))
        mro = [f"{cls.__module__}.{cls.__qualname__}" for cls in type(error).__mro__]
        declared = block.raises is not None and raised_as_declared(block.raises, mro)
        status = EXPECTED_ERROR if declared else FAILED
    elif block.raises is not None:
        status = FAILED
    return BlockResult(index=block.index, status=status, outputs=outputs,
                       warnings=capture.warnings)


def first_difference(diff: str) -> str:
    """The first differing line of a comparison, with the recorded one."""
    lines = diff.splitlines()
    moved = next((line for line in lines if line.startswith("number moved")), "")
    if moved:
        return moved.replace("number moved beyond the tolerance: ", "a number moved: ")
    recorded = next((line[1:] for line in lines if line[:1] == "-" and line[:3] != "---"), "")
    here = next((line[1:] for line in lines if line[:1] == "+" and line[:3] != "+++"), "")
    return f"here {here!r}, recorded {recorded!r}"


# -- the check itself ---------------------------------------------------------------------

class Check:
    """Matches each executed cell with the page's block (by its source's digest), captures
    its output and prints its verdict against the chosen record."""

    def __init__(self, expected: list[Expected], reference: Reference, here: str,
                 normalizers: dict, platforms: dict[str, str], shell):
        self.expected, self.reference, self.here = expected, reference, here
        self.normalizers = {name: tuple(map(tuple, rules)) for name, rules in normalizers.items()}
        self.platforms = platforms
        self.shell = shell
        self.by_digest: dict[str, list[Expected]] = {}
        for item in expected:
            self.by_digest.setdefault(item.digest, []).append(item)
        self.last = -1
        self.edited = False  # a cell that is not the page's ran: later outputs may follow it
        self.current: tuple[Expected | None, Capture, str] | None = None
        self.tally: dict[str, int] = {kind: 0 for kind, _ in TOTAL_WORDS}

    def _match(self, source: str) -> Expected | None:
        found = self.by_digest.get(source_digest(source), [])
        item = next((e for e in found if e.block.index > self.last), found[0] if found else None)
        if item is not None:
            self.last = item.block.index
        return item

    def elsewhere(self, item: Expected | None) -> bool:
        """A block that runs on one platform alone, and this is not that platform."""
        return bool(item and item.block.platform and item.block.platform != self.here)

    def transform(self, lines: list[str]) -> list[str]:
        """IPython input transformer: a platform-only block, elsewhere, shows its record.
        (IPython ends the cell's text with a newline before transforming it.)"""
        text = "".join(lines)
        found = self.by_digest.get(source_digest(text), []) or self.by_digest.get(
            source_digest(text[:-1]) if text.endswith("\n") else "", [])
        if found and self.elsewhere(found[0]):
            return [f"__import__('course_check.selfcheck').selfcheck.show_recorded("
                    f"{found[0].block.index})\n"]
        return lines

    def pre(self, info) -> None:
        source = getattr(info, "raw_cell", "") or ""
        if source.startswith(MARK):
            self.current = None
            return
        capture = Capture(self.shell)
        self.current = (self._match(source), capture, source)
        capture.start()

    def post(self, result) -> None:
        if self.current is None:
            return
        item, capture, source = self.current
        self.current = None
        _wait_for_jax()
        capture.drain()
        capture.stop()
        error = result.error_before_exec or result.error_in_exec
        kind, line = self.judge(item, capture, error)
        self.tally[kind] += 1
        print(f"{PREFIX} {line}")
        if kind == UNRECORDED and source_has_code(source):
            self.edited = True

    def judge(self, item: Expected | None, capture: Capture, error) -> tuple[str, str]:
        label = self.reference.label
        if item is None:
            return UNRECORDED, ("not in the record: this cell's code is not the page's (edited "
                                "or added); the cells after it run from its state")
        block = item.block
        if self.elsewhere(item):
            there = self.platforms.get(block.platform, block.platform)
            return ELSEWHERE, (f"runs on {there} only: not run here; the output shown is "
                               f"{there}'s record")
        if item.exercise or block.skip:
            why = "your exercise" if item.exercise else "skip-execution on the page"
            return UNCOMPARED, f"{why}: not compared"
        recorded = self.reference.blocks.get(block.index)
        if recorded is None:
            return UNVERIFIED, f"not yet verified on {label}"
        if recorded.status == FAILED_BECAUSE:  # what it raises there is not its own doing
            if error is not None:
                return RAISED, (f"raised {type(error).__name__}, as on {label}, where an "
                                f"earlier block fails")
            return DIFFERS, f"ran; on {label} it fails, because an earlier block fails there"
        if capture.rich:
            return UNCOMPARED, ("drawn by rich for Jupyter, in colour, where the page printed "
                                "a text table: not compared")
        live = live_result(block, capture, error)
        recorded = dataclasses.replace(recorded, outputs=_comparable(recorded.outputs))
        live.outputs = _comparable(live.outputs)
        comparison = compare(block, live, recorded, self.normalizers, self.reference.jax)
        if comparison.verdict == "unchecked":
            return VARIES, "varies from run to run (not compared)"
        if comparison.verdict == "match" and recorded.status in (EXPECTED_ERROR, FAILED):
            return RAISED, f"raised {type(error).__name__}, as recorded on {label}"
        if comparison.verdict == "match":
            return SAME, f"same output as recorded on {label}"
        if self.edited:
            # The site's caption says "an earlier block changed" in the same case: what the
            # reader changed above, not the platform, may be why.
            return AFTER_EDIT, (f"the output differs from {label}'s, after an earlier cell was "
                                f"edited (not counted as differing): "
                                f"{first_difference(comparison.diff)}")
        text = f"the output differs from {label}'s: {first_difference(comparison.diff)}"
        if item.cause:
            text += f"; a known difference: {item.cause}"
        return DIFFERS, text

    def totals(self) -> str:
        counted = sum(self.tally.values())
        parts = [f"{self.tally[kind]} {words}" for kind, words in TOTAL_WORDS
                 if self.tally[kind] or kind in (SAME, DIFFERS)]
        return (f"{counted} cells, checked against {self.reference.describe()}: "
                + ", ".join(parts))


def source_has_code(source: str) -> bool:
    """Whether a cell does anything (an empty or comment-only cell changes no state)."""
    return any(line.strip() and not line.strip().startswith("#")
               for line in (source or "").splitlines())


_ACTIVE: dict[str, Any] = {}


def _wait_for_jax() -> None:
    """A cell ends when the work it left running has (JAX dispatches asynchronously)."""
    jax = sys.modules.get("jax")
    if jax is not None:
        try:
            jax.effects_barrier()
        except Exception:  # a page may leave JAX unusable; the output is what it is
            pass


def install(data: dict[str, Any]) -> None:
    """Called by the helper cell: the page's blocks and records, for the set-up cell."""
    _ACTIVE["data"] = data
    import importlib.util

    if importlib.util.find_spec("myst_nb") is None:  # else MyST-NB's own glue
        sys.modules["myst_nb"] = _glue_module()


def _glue_module():
    """MyST-NB's ``glue`` for a kernel without MyST-NB: a named value, displayed with the
    metadata MyST-NB gives it."""
    import types

    from IPython.core.formatters import format_display_data
    from IPython.display import display

    def glue(name: str, variable, display_it: bool = True, **kwargs) -> None:
        shown = kwargs.get("display", display_it)
        bundle, metadata = format_display_data(variable)
        prefix = "" if shown else "application/papermill.record/"
        metadata["scrapbook"] = {"name": name, "mime_prefix": prefix}
        display({prefix + mime: value for mime, value in bundle.items()}, raw=True,
                metadata=metadata)

    module = types.ModuleType("myst_nb")
    module.glue = glue
    return module


def setup(environment: dict[str, str], host_devices: int | None = None,
          platform: str | None = None) -> None:
    """The set-up cell: the page's settings before JAX starts (or, run again, a check that
    they hold), the platform found, the record chosen, and the per-cell check installed."""
    wanted = dict(environment)
    if platform:
        wanted["JAX_PLATFORMS"] = platform
    if "jax" in sys.modules:
        import jax

        devices = jax.devices()
        if host_devices and len(devices) < host_devices:
            raise RuntimeError(too_few_devices(host_devices, len(devices),
                                               jax.default_backend(), devices[0].device_kind))
        other = sorted(name for name, value in wanted.items() if not _holds(name, value))
        if other:
            raise RuntimeError(f"JAX is already imported, without this page's settings "
                               f"({', '.join(other)}): restart the kernel, then run the "
                               f"notebook from the top")
    else:
        for name, value in wanted.items():
            if name == "XLA_FLAGS" and os.environ.get(name) and not _holds(name, value):
                value = f"{os.environ[name]} {value}"  # the reader's flags, then the page's
            os.environ[name] = value
    import jax
    from IPython import get_ipython

    devices = jax.devices()
    backend, kind = jax.default_backend(), devices[0].device_kind
    print(f"JAX {jax.__version__} here: {len(devices)} × {kind} ({backend})")
    if host_devices and len(devices) < host_devices:
        raise RuntimeError(too_few_devices(host_devices, len(devices), backend, kind))
    shell = get_ipython()
    if shell is None:
        raise RuntimeError("the check runs in Jupyter or IPython")
    data = _ACTIVE["data"]
    expected, references = load(data)
    _uninstall(shell)
    if not references:
        print("This page has no record yet: nothing to compare with.")
        return
    reference, statement = choose(references, backend, kind, jax.__version__)
    here = next((r.name for r in references if r.name in data["platforms"]
                 and is_here(r, backend, kind)), "")
    print(f"This notebook {statement}.")
    check = Check(expected, reference, here, data["normalizers"], data["platforms"], shell)
    shell.events.register("pre_run_cell", check.pre)
    shell.events.register("post_run_cell", check.post)
    shell.input_transformers_cleanup.insert(0, check.transform)
    _ACTIVE["check"] = check


def _holds(name: str, value: str) -> bool:
    """Whether a setting is in force: the variable has the value (XLA's flags: contains
    each of them)."""
    current = os.environ.get(name)
    if name == "XLA_FLAGS" and current is not None:
        return set(value.split()) <= set(current.split())
    return current == value


def uninstall() -> None:
    """Takes the check out of the kernel (the helper cell, run again, replaces this module)."""
    from IPython import get_ipython

    shell = get_ipython()
    if shell is not None:
        _uninstall(shell)


def _uninstall(shell) -> None:
    """A set-up cell run again replaces the check it installed before."""
    old = _ACTIVE.pop("check", None)
    if old is None:
        return
    shell.events.unregister("pre_run_cell", old.pre)
    shell.events.unregister("post_run_cell", old.post)
    if old.transform in shell.input_transformers_cleanup:
        shell.input_transformers_cleanup.remove(old.transform)


def show_recorded(index: int) -> None:
    """A platform-only block where its platform is not: its output from that record."""
    from IPython.display import display

    data = _ACTIVE["data"]
    block = next(b for b in data["blocks"] if b["index"] == index)
    outputs = data["elsewhere"].get(str(index))
    if outputs is None:
        print(f"(runs on {data['platforms'].get(block['platform'], block['platform'])} only, "
              f"and is not yet verified there)")
        return
    there = data["platforms"].get(block["platform"], block["platform"])
    for output in outputs:
        if output["kind"] in ("stdout", "stderr"):
            getattr(sys, output["kind"]).write(output["text"])
        elif output["kind"] in ("display", "result") and output.get("data"):
            # The notebook carries no figure's pixels: the page shows it.
            print(f"[{output['text'] or 'a figure'}, drawn on {there}: the chapter's page "
                  f"shows it]")
        elif output["kind"] in ("display", "result"):
            display({"text/plain": output["text"]}, raw=True)


def totals() -> None:
    """The last cell: every verdict counted."""
    check = _ACTIVE.get("check")
    print(check.totals() if check else "The set-up cell has not run: nothing was checked.")

