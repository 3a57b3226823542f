"""Typed values handed between the phases: collect → execute → cache/record → render.

Everything here is plain data that round-trips through JSON, so the same value
is what the worker emits, what the cache stores and what the renderer reads.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from typing import Any

from .capture_rules import failure_sign
from .tolerance import Tolerance

# Block statuses, as they appear in the execution report.
RAN = "ran"
CACHED = "cached"
FROM_RECORD = "from-record"  # shown from the verified record, which stood in for a run
EXPECTED_ERROR = "expected-error"
FAILED = "failed"
SKIPPED = "skipped"
NOT_RUN = "not-run"
# Statuses of a target's record (another JAX, a platform): a block that raised only because an
# earlier block of the page failed (or crashed), and one of a page that does not run there.
FAILED_BECAUSE = "failed-because"
NOT_RUN_THERE = "not-run-there"


@dataclass(frozen=True)
class Block:
    """One executable code cell, as collected from the source."""

    index: int
    line: int  # 1-based line of the opening fence in the document
    source: str
    raises: str | None = None  # exception type name that must be raised; "" means any
    timeout: float | None = None  # seconds; None means the document's default
    skip: bool = False  # skip-execution: shown, never run
    # Display-only options: they do not change what runs, so they stay out of the cache key.
    tags: tuple[str, ...] = ()
    varies: bool = False
    predict: str | None = None
    normalize: tuple[str, ...] = ()
    tolerance: Tolerance | None = None  # how printed numbers are compared with the record
    exclusive: bool = False  # runs with no other block of any page running (it times something)
    # ``:stderr: failure``: its stderr says something failed on purpose (display-only: the
    # build does not warn of it).
    stderr_failure: bool = False
    # A verified platform (targets.py) that alone runs this block: the main run does not.
    platform: str | None = None

    def execution_identity(self) -> dict[str, Any]:
        """What about this block changes its output (the part that is hashed)."""
        identity = {
            "source": self.source,
            "raises": self.raises,
            "timeout": self.timeout,
            "skip": self.skip,
        }
        if self.platform:  # absent otherwise, so other blocks' keys stay as they were
            identity["platform"] = self.platform
        return identity


@dataclass(frozen=True)
class DocSettings:
    """Per-document execution settings, from the ``execution:`` front-matter key."""

    host_devices: int | None = None
    env: tuple[tuple[str, str], ...] = ()
    timeout: float | None = None  # default per-block timeout for this document
    budget: float | None = None  # wall-time limit for the whole document
    exclusive: bool = False  # run alone, with no other document executing
    exclusive_varies: bool = False  # its ``:output: varies`` blocks run alone (timings)
    tolerance: Tolerance | None = None  # default for blocks that declare none (comparison only)
    # Cooperating JAX processes the page runs as (``multiprocess.py``); 1 is an ordinary page.
    processes: int = 1

    def as_dict(self) -> dict[str, Any]:
        """The settings that change what runs (the tolerance only changes comparison)."""
        settings = {
            "host_devices": self.host_devices,
            "env": [list(pair) for pair in self.env],
            "timeout": self.timeout,
            "budget": self.budget,
            "exclusive": self.exclusive,
        }
        if self.processes > 1:  # absent otherwise, so single-process keys stay as they were
            settings["processes"] = self.processes
        return settings


@dataclass(frozen=True)
class DocJob:
    """Everything needed to execute one document, and the key its result is cached under."""

    docname: str
    path: str
    settings: DocSettings
    blocks: tuple[Block, ...]
    key: str = ""

    def for_platform(self, platform: str | None) -> DocJob:
        """The page as ``platform`` runs it (None: the main run): a block marked to run only
        on another platform (``:platform:``) is not executed."""
        if not any(block.platform and block.platform != platform for block in self.blocks):
            return self
        blocks = tuple(dataclasses.replace(block, skip=True)
                       if block.platform and block.platform != platform else block
                       for block in self.blocks)
        return dataclasses.replace(self, blocks=blocks)


@dataclass
class Output:
    """One captured output of a block.

    kind is ``stdout``, ``stderr``, ``result`` (the trailing expression's repr),
    ``display`` (rich display data, e.g. a figure), ``glue`` (a value named with MyST-NB's
    ``glue``, for prose to insert) or ``error`` (the exception).
    ``text`` holds the plain text; ``data`` holds other MIME types (base64 for images).
    """

    kind: str
    text: str = ""
    data: dict[str, str] = field(default_factory=dict)
    name: str = ""  # a glued value's name (kind ``glue``), for prose to insert


@dataclass
class WarningRecord:
    category: str
    message: str
    line: int | None = None  # line within the block, when the warning points into it


@dataclass
class ErrorInfo:
    ename: str
    evalue: str
    traceback: str  # trimmed to the snippet's own frames
    mro: list[str] = field(default_factory=list)


@dataclass
class ProcessResult:
    """What one further process of a multi-process page did in a block (process 0's part is
    the ``BlockResult`` itself)."""

    process: int
    status: str
    outputs: list[Output] = field(default_factory=list)
    warnings: list[WarningRecord] = field(default_factory=list)
    error: ErrorInfo | None = None
    failure: str | None = None


@dataclass
class BlockResult:
    index: int
    status: str
    duration: float = 0.0
    outputs: list[Output] = field(default_factory=list)
    warnings: list[WarningRecord] = field(default_factory=list)
    error: ErrorInfo | None = None
    failure: str | None = None  # why the block failed, for the located build error
    # Wall-clock (epoch) seconds when the block started and ended in its worker.
    started: float = 0.0
    ended: float = 0.0
    # Processes 1..N-1 of a multi-process page; empty for an ordinary page.
    others: list[ProcessResult] = field(default_factory=list)

    @property
    def failed(self) -> bool:
        return self.status == FAILED

    def failure_in_stderr(self) -> str | None:
        """The first line of the block's stderr (any process's) that says something failed."""
        outputs = [*self.outputs, *(o for other in self.others for o in other.outputs)]
        return next((sign for output in outputs if output.kind == "stderr"
                     and (sign := failure_sign(output.text))), None)


@dataclass
class Environment:
    """What produced an output: shown in captions, stored with records."""

    python: str = ""
    jax: str | None = None
    jaxlib: str | None = None
    backend: str | None = None
    device_count: int | None = None
    cpu_count: int | None = None
    platform: str = ""
    date: str = ""  # ISO date of execution
    # What XLA:CPU's rounding depends on: the processor, the instruction set XLA was allowed
    # to use (the CPU's best, capped by --xla_cpu_max_isa) and the cores the process may use.
    cpu_model: str = ""
    isa: str = ""
    cores: int | None = None
    # An accelerator: its device kind (``TPU v5 lite``) and the libtpu that drives it.
    device_kind: str = ""
    libtpu: str | None = None

    def machine(self) -> str:
        """``AMD EPYC (AVX2, 2 cores)``; empty when unknown (records made before this)."""
        if not self.cpu_model:
            return ""
        details = [part for part in (
            self.isa, f"{self.cores} core{'s' if self.cores != 1 else ''}" if self.cores else "")
            if part]
        return f"{self.cpu_model} ({', '.join(details)})" if details else self.cpu_model


@dataclass
class DocResult:
    docname: str
    key: str
    environment: Environment
    blocks: list[BlockResult]
    duration: float = 0.0

    @property
    def failed(self) -> bool:
        return any(block.failed for block in self.blocks)

    def to_json(self) -> dict[str, Any]:
        return dataclasses.asdict(self)

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> DocResult:
        return cls(
            docname=data["docname"],
            key=data["key"],
            environment=Environment(**data["environment"]),
            blocks=[block_result_from_json(b) for b in data["blocks"]],
            duration=data.get("duration", 0.0),
        )


def block_result_from_json(data: dict[str, Any]) -> BlockResult:
    error = data.get("error")
    return BlockResult(
        index=data["index"],
        status=data["status"],
        duration=data.get("duration", 0.0),
        outputs=[Output(**o) for o in data.get("outputs", [])],
        warnings=[WarningRecord(**w) for w in data.get("warnings", [])],
        error=ErrorInfo(**error) if error else None,
        failure=data.get("failure"),
        started=data.get("started", 0.0),
        ended=data.get("ended", 0.0),
        others=[process_result_from_json(p) for p in data.get("others", [])],
    )


def process_result_from_json(data: dict[str, Any]) -> ProcessResult:
    error = data.get("error")
    return ProcessResult(
        process=data["process"],
        status=data["status"],
        outputs=[Output(**o) for o in data.get("outputs", [])],
        warnings=[WarningRecord(**w) for w in data.get("warnings", [])],
        error=ErrorInfo(**error) if error else None,
        failure=data.get("failure"),
    )
