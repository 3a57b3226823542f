"""The verified record: per document, each block's outputs and the environment that made them.

``make record`` writes it; ``make doctest`` and the drift captions of ``make html`` compare
live results with it, block by block, after the block's declared normalisers.
"""

from __future__ import annotations

import dataclasses
import difflib
import hashlib
import json
import os
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable

from .align import Alignment, cell_names
from .model import Block, BlockResult, DocResult, Environment, Output, WarningRecord
from .tolerance import compare_numbers

FLOAT = re.compile(r"(?<![\w.])-?\d+\.\d+(?:[eE][-+]?\d+)?")


def _round_floats(text: str) -> str:
    return FLOAT.sub(lambda m: f"{float(m.group()):.4g}", text)


# Gloo (JAX's CPU transport between processes) announces each connection it opens, from one
# thread per device, in pieces that may interleave: a run of nothing but those pieces goes.
_GLOO_PIECE = (r"(?:\[Gloo\] Rank | is connected to | peer ranks\. "
               r"|Expected number of connected peer ranks is : )")
GLOO = re.compile(_GLOO_PIECE + r"(?:" + _GLOO_PIECE + r"|\d+|\n)*")


# Built-in normalisers; conf.py's ``verified_normalizers`` adds regex ones by name.
BUILTIN_NORMALIZERS: dict[str, Callable[[str], str]] = {
    "addresses": lambda text: re.sub(r"0x[0-9a-fA-F]{4,}", "0x…", text),
    # The prefix of XLA's C++ log lines: severity, date, time, thread id.
    "xla-log": lambda text: re.sub(r"(?m)^[IWEF]\d{4} \d\d:\d\d:\d\d\.\d+\s+\d+ ", "<log> ", text),
    # Python object ids printed in decimal (e.g. by JAX's leak checker).
    "ids": lambda text: re.sub(r"(?<![\d.])\d{12,}(?![\d.])", "<id>", text),
    "floats": _round_floats,
    "gloo": lambda text: GLOO.sub("", text),
    "paths": lambda text: re.sub(r"(/[^\s:'\"]+)+/(site-packages|tmp[^\s/]*)/[^\s:'\"]*",
                                 "<path>", text),
}


@dataclass
class RecordedProcess:
    """What a further process of a multi-process page recorded (process 0's is the block's)."""

    process: int
    status: str
    outputs: list[Output] = field(default_factory=list)
    warnings: list[WarningRecord] = field(default_factory=list)


@dataclass
class RecordedBlock:
    line: int
    source_sha256: str
    status: str
    outputs: list[Output] = field(default_factory=list)
    warnings: list[WarningRecord] = field(default_factory=list)
    others: list[RecordedProcess] = field(default_factory=list)  # processes 1..N-1


@dataclass
class Record:
    docname: str
    environment: Environment
    blocks: list[RecordedBlock]
    duration: float | None = None  # the page's execution seconds when recorded (scheduling)
    # What ran (``collect.job_key`` over ``record_identity``): the record stands in for a run
    # of the same (replay.py). Records made before it have none and never do.
    key: str = ""

    def block_for(self, block: Block, blocks: tuple[Block, ...]) -> RecordedBlock | None:
        """The recorded block of the same source, in the order of the page's ``blocks``
        (``align.py``): a block moved down by an insertion above it still has its own, and
        every reader of the record (the page, the report, the Errors page, the notebook)
        pairs blocks the same way."""
        alignment = self.__dict__.get("_alignment")
        if alignment is None:  # not a field: records are written by fields
            alignment = self.__dict__["_alignment"] = Alignment(
                [b.source_sha256 for b in self.blocks])
        index = alignment.pairs(blocks, source_digest).get(block.index)
        return None if index is None else self.blocks[index]


def source_digest(source: str) -> str:
    return hashlib.sha256(source.encode()).hexdigest()


def _recorded_output(output: Output) -> Output:
    """Images are recorded by digest, not by content: the record stays small and diffable."""
    data = {mime: ("sha256:" + hashlib.sha256(value.encode()).hexdigest()
                   if mime.startswith("image/") else value)
            for mime, value in output.data.items()}
    return Output(kind=output.kind, text=output.text, data=data, name=output.name)


def make_record(blocks: tuple[Block, ...], result: DocResult) -> Record:
    return Record(
        docname=result.docname,
        environment=result.environment,
        duration=round(result.duration, 1),
        blocks=[
            RecordedBlock(
                line=block.line,
                source_sha256=source_digest(block.source),
                status=block_result.status,
                outputs=[_recorded_output(o) for o in block_result.outputs],
                warnings=list(block_result.warnings),
                others=[RecordedProcess(process=other.process, status=other.status,
                                        outputs=[_recorded_output(o) for o in other.outputs],
                                        warnings=list(other.warnings))
                        for other in block_result.others],
            )
            for block, block_result in zip(blocks, result.blocks)
        ],
    )


def record_path(record_dir: Path, docname: str) -> Path:
    return Path(record_dir) / f"{docname}.json"


def write_record(record_dir: Path, record: Record) -> Path:
    path = record_path(record_dir, record.docname)
    path.parent.mkdir(parents=True, exist_ok=True)
    data = dataclasses.asdict(record)
    for block in data["blocks"]:
        if not block["others"]:  # a single-process page's record keeps its old shape
            del block["others"]
    path.write_text(json.dumps(data, indent=1, ensure_ascii=False) + "\n", encoding="utf-8")
    return path


class UnreadableRecord(ValueError):
    """A record file that is no record (truncated, a merge conflict's markers in it): where
    it broke, so that one line can say which file, where, and how to mend it."""

    def __init__(self, path: Path, line: int, reason: str):
        super().__init__(f"{path}:{line}: {reason}")
        self.path, self.line, self.reason = Path(path), line, reason

    def advice(self, page: str, rewrite: str) -> str:
        """The one line: ``rewrite`` says how the record is made again."""
        return (f"the record cannot be read ({self.reason}), so {page} runs as in a fresh "
                f"clone; restore it (`git checkout -- {os.path.relpath(self.path)}`) or make "
                f"it again ({rewrite})")


def load_record_json(path: Path) -> dict:
    """A record file's data, or ``UnreadableRecord`` saying where it broke."""
    text = path.read_text(encoding="utf-8", errors="replace")
    for number, line in enumerate(text.splitlines(), 1):
        if line.startswith("<<<<<<<"):
            raise UnreadableRecord(path, number, "a merge conflict's markers")
    try:
        data = json.loads(text)
    except json.JSONDecodeError as err:
        raise UnreadableRecord(path, err.lineno, f"{err.msg}: column {err.colno}") from None
    if not isinstance(data, dict):
        raise UnreadableRecord(path, 1, "not a JSON object")
    return data


def read_record_file(path: Path, parse):
    """``parse`` of the record at ``path``; None where there is none; ``UnreadableRecord``
    where it is damaged (not JSON, or JSON that is not a record)."""
    if not path.exists():
        return None
    data = load_record_json(path)
    try:
        return parse(data)
    except (KeyError, TypeError, ValueError) as err:
        raise UnreadableRecord(path, 1, f"not a record: {err!r}") from None


def read_record(record_dir: Path, docname: str) -> Record | None:
    """The page's record; None where there is none; ``UnreadableRecord`` where it is damaged."""
    return read_record_file(record_path(record_dir, docname), _record)


def _record(data: dict) -> Record:
    return Record(
        docname=data["docname"],
        environment=Environment(**data["environment"]),
        duration=data.get("duration"),
        key=data.get("key", ""),
        blocks=[
            RecordedBlock(
                line=b["line"],
                source_sha256=b["source_sha256"],
                status=b["status"],
                outputs=[Output(**o) for o in b["outputs"]],
                warnings=[WarningRecord(**w) for w in b["warnings"]],
                others=[RecordedProcess(process=p["process"], status=p["status"],
                                        outputs=[Output(**o) for o in p["outputs"]],
                                        warnings=[WarningRecord(**w) for w in p["warnings"]])
                        for p in b.get("others", [])],
            )
            for b in data["blocks"]
        ],
    )


def recorded_duration(record_dir: Path, docname: str) -> float | None:
    """The page's execution time when it was recorded, if the record says."""
    try:
        data = json.loads(record_path(record_dir, docname).read_text(encoding="utf-8"))
        return float(data["duration"])
    except (OSError, ValueError, KeyError, TypeError):
        return None


def comparable_text(status: str, outputs: list[Output], warnings: list[WarningRecord]) -> str:
    """What is compared: every output's text (images by their size line), warnings, status."""
    parts = [f"[status] {status}"]
    for output in outputs:
        parts.append(f"[{output.kind} {output.name}]" if output.name else f"[{output.kind}]")
        parts.append(output.text.rstrip("\n"))
        if any(mime.startswith("image/") for mime in output.data):
            parts.append("(image)")
    for warning in warnings:
        parts.append(f"[warning] {warning.category}: {warning.message}")
    return "\n".join(parts) + "\n"


def comparable_processes(status: str, outputs: list[Output], warnings: list[WarningRecord],
                         others) -> str:
    """``comparable_text`` of process 0, then of each further process under its header."""
    text = comparable_text(status, outputs, warnings)
    for other in others:
        text += f"[process {other.process}]\n" + comparable_text(
            other.status, other.outputs, other.warnings)
    return text


def normalizer_names(normalizers: dict[str, tuple[tuple[str, str], ...]]) -> set[str]:
    return set(BUILTIN_NORMALIZERS) | set(normalizers)


def normalize(text: str, names: tuple[str, ...],
              normalizers: dict[str, tuple[tuple[str, str], ...]]) -> str:
    for name in names:
        if name in normalizers:
            for pattern, replacement in normalizers[name]:
                text = re.sub(pattern, replacement, text)
        else:
            text = BUILTIN_NORMALIZERS[name](text)
    return text


@dataclass
class Comparison:
    """The outcome of comparing one live block with its record."""

    verdict: str  # "match", "differs", "unrecorded", "unchecked" (varies, no normaliser)
    diff: str = ""


_SECTION = re.compile(
    r"^\[(?:status|stdout|stderr|result|display|error|warning|glue|process)\b[^\]]*\]")


def _section_of(text: str, line: int) -> str:
    """Where a line of ``comparable_text`` is: its output's header, e.g. ``[stdout] line 2``."""
    lines = text.splitlines()
    for index in range(line - 1, -1, -1):
        header = _SECTION.match(lines[index])
        if header:
            offset = line - 1 - index
            return f"{header.group()} line {offset}" if offset else header.group()
    return f"line {line}"


def compare(block: Block, live: BlockResult, recorded: RecordedBlock | None,
            normalizers: dict[str, tuple[tuple[str, str], ...]],
            recorded_version: str | None = None) -> Comparison:
    """Exact after the block's normalisers; with a declared tolerance, printed numbers may
    move within it (and the diff names each number that moved too far)."""
    if recorded is None:
        return Comparison("unrecorded")
    if block.varies and not block.normalize and recorded.status == live.status:
        return Comparison("unchecked")
    # A traceback names its block by execution count, which an insertion above it changes.
    expected = cell_names(normalize(comparable_processes(recorded.status, recorded.outputs,
                                                         recorded.warnings, recorded.others),
                                    block.normalize, normalizers))
    actual = cell_names(normalize(comparable_processes(live.status, live.outputs, live.warnings,
                                                       live.others),
                                  block.normalize, normalizers))
    if expected == actual:
        return Comparison("match")
    notes = ""
    if block.tolerance is not None:
        numeric = compare_numbers(expected, actual, block.tolerance)
        if numeric.matches:
            return Comparison("match")
        if numeric.same_text:
            notes = "".join(f"number moved beyond the tolerance: "
                            f"{_section_of(expected, moved.line)}: {moved.expected} -> "
                            f"{moved.actual} ({moved.why})\n" for moved in numeric.moved)
        else:
            notes = (f"text differs (tolerance {block.tolerance.describe()} applies to "
                     f"numbers only)\n")
    diff = "".join(difflib.unified_diff(
        expected.splitlines(keepends=True), actual.splitlines(keepends=True),
        fromfile=f"verified (jax {recorded_version or '?'})", tofile="live"))
    return Comparison("differs", notes + diff)
