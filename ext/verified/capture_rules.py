"""What of a running block's streams and warnings is the block's own output.

One set of rules for the two places a block is captured: the page's worker (``worker.py``),
which records it, and a chapter notebook's check (``selfcheck.py``), which compares a reader's
run with that record. Standard library only: both run in the reader's interpreter.
"""

from __future__ import annotations

import codecs
import os
import re

# What of a block's stdout or stderr is kept: a loop that prints without end until its time
# limit would otherwise put hundreds of megabytes into the page and the build's memory. The
# course's longest output is a few kilobytes.
STREAM_LIMIT = 1 << 20

# Terminal colour codes (JAX colours a jaxpr's repr): a page shows plain text.
ANSI_ESCAPE = re.compile(r"\x1b\[[0-9;]*[A-Za-z]")
# XLA's alarm for a compilation that outlasts its deadline: a log line from
# slow_operation_alarm.cc and the banner after it. It reports how loaded the machine was at that
# moment, not what the block did, so it is not part of the block's output.
SLOW_OPERATION_ALARM = re.compile(
    r"^[IWEF]\d{4} [\d:.]+\s+\d+ slow_operation_alarm\.cc:\d+\][^\n]*\n"
    r"(?:[ \t]*\n|\*+\n|\[Compiling module [^\n]*\n)*", re.MULTILINE)
# The TPU runtime's advice about the host VM (transparent hugepages), warned once per process
# by whichever block first opens the chip: the machine's configuration, not block output.
HOST_ADVISORY = re.compile(r"Transparent hugepages are not enabled\.")


def published(data: dict, metadata: dict | None) -> list[tuple[str, dict]]:
    """What one display publication adds to a block's outputs: a ``display``, or for
    MyST-NB's ``glue`` (metadata ``scrapbook``) a named ``glue`` value, whose MIME keys carry a
    prefix unless the value is also displayed (then a ``display`` of it comes first)."""
    glued = (metadata or {}).get("scrapbook")
    if not glued:
        return [("display", dict(data))]
    prefix = glued.get("mime_prefix", "")
    bundle = {mime[len(prefix):]: value for mime, value in data.items()
              if mime.startswith(prefix)}
    shown = [] if prefix else [("display", dict(bundle))]
    return [*shown, ("glue", {**bundle, "name": glued.get("name", "")})]


def _size(count: int) -> str:
    if count < 1 << 10:
        return f"{count} bytes"
    return f"{count / 2**10:.1f} KiB" if count < 1 << 20 else f"{count / 2**20:.1f} MiB"


def _as_read(head: bytes, size: int) -> str:
    """The first bytes of a stream of ``size`` bytes, as a text file reads them (``\r\n``
    and ``\r`` become ``\n``), and where they are not all, a line that says how much more
    there was (a character the cut split is left out)."""
    decoder = codecs.getincrementaldecoder("utf-8")(errors="replace")
    text = decoder.decode(head, final=size <= STREAM_LIMIT)
    text = text.replace("\r\n", "\n").replace("\r", "\n")
    if size > STREAM_LIMIT:
        text += (f"\n[output cut at {STREAM_LIMIT / 2**20:g} MiB: the block wrote "
                 f"{_size(size - STREAM_LIMIT)} more]\n")
    return text


def read_stream(path: str) -> str:
    """A block's captured stream (the file the worker routed its descriptor to), up to
    ``STREAM_LIMIT`` bytes."""
    with open(path, "rb") as handle:
        head = handle.read(STREAM_LIMIT)
        size = os.fstat(handle.fileno()).st_size
    return _as_read(head, size)


def stream_text(text: str) -> str:
    """What a cell wrote to a stream, kept as the worker keeps a block's (``read_stream``)."""
    data = text.encode("utf-8", errors="surrogateescape")
    return _as_read(data[:STREAM_LIMIT], len(data))


def without_colour(text: str) -> str:
    """Text as a page shows it: no terminal colour codes."""
    return ANSI_ESCAPE.sub("", text)


def block_stderr(text: str) -> str:
    """The block's stderr as a reader should see it: no colour codes, no machine-load alarms."""
    return SLOW_OPERATION_ALARM.sub("", without_colour(text))


def is_block_warning(message: str) -> bool:
    """Whether a warning is the block's, rather than advice about the machine it ran on."""
    return not HOST_ADVISORY.match(message)


def raised_as_declared(raises: str, mro: list[str]) -> bool:
    """Whether an exception is the one a block's ``:raises:`` names: an empty name accepts any
    exception; otherwise the type or a base, by its qualified or its plain name."""
    if not raises:
        return True
    return any(name == raises or name.rsplit(".", 1)[-1] == raises for name in mro)


def display_error(exc_tuple) -> BaseException | None:
    """The exception IPython's display formatter caught while it formatted a value (a
    ``__repr__``, ``_repr_html_`` or ``_repr_png_`` that raised) and handed to the shell's
    ``showtraceback`` (``exc_tuple``, as the formatter passes it): it is the block's error,
    to be raised again where the value was shown. None for any other traceback."""
    if not isinstance(exc_tuple, tuple) or len(exc_tuple) != 3:
        return None
    _, value, trace = exc_tuple
    if not isinstance(value, Exception) or trace is None:
        return None
    where = trace.tb_frame.f_code.co_filename.replace(os.sep, "/")
    return value if where.endswith("IPython/core/formatters.py") else None


def exception_message(exc: BaseException) -> str | None:
    """``str(exc)``, or None where the exception's own ``__str__`` raises."""
    try:
        return str(exc)
    except Exception:  # noqa: BLE001 - any failure of a page's __str__ is the same case
        return None


def exception_text(exc: BaseException) -> str:
    """The exception's last line, ``Type: message``, as a traceback ends: where its message
    cannot be formatted, its own type still, and a note saying so."""
    if exception_message(exc) is None:
        name = type(exc).__qualname__
        module = type(exc).__module__
        if module not in ("builtins", "__main__"):
            name = f"{module}.{name}"
        return f"{name}: <its message could not be formatted: its __str__ raised>"
    import traceback

    return "".join(traceback.format_exception_only(type(exc), exc)).rstrip("\n")


# What in a block's stderr says that something failed: a Python traceback, or a JAX or XLA log
# line saying so (``jax.pure_callback failed``, ``E1205 … ExecutePrepare… failed: …``).
FAILURE_SIGN = re.compile(
    r"^(?:Traceback \(most recent call last\):"
    r"|(?:jax|jaxlib)\.[\w.]+ failed\b.*"
    r"|[EF]\d{4} [\d:.]+\s+\d+ [\w.]+:\d+\].*\bfailed\b.*)$", re.MULTILINE)


def failure_sign(text: str) -> str | None:
    """The first line of a block's stderr that says something failed, if one does."""
    found = FAILURE_SIGN.search(text)
    return found.group(0) if found else None
