"""Target records: what every block did on another verified target (targets.py).

``record/matrix/jax-<version>/<page>.json`` and ``record/platform/<name>/<page>.json`` share
one format: each block's status, outputs (images by digest) and the exception line, with
this checkout's paths taken out so the record reads the same from any clone. A target run
goes on past a failed block; a block that fails only because an earlier one did is recorded
as such (``dependent_failures``), and a page that does not run there at all is recorded with
the reason (``not_run_record``).
"""

from __future__ import annotations

import ast
import dataclasses
import hashlib
import json
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable

# Records made before the worker left the host advisory out still hold it: read without it.
from .capture_rules import is_block_warning
from .model import (
    FAILED,
    FAILED_BECAUSE,
    NOT_RUN,
    NOT_RUN_THERE,
    SKIPPED,
    Block,
    BlockResult,
    DocResult,
    Environment,
    Output,
    WarningRecord,
)
from .record import BUILTIN_NORMALIZERS, read_record_file, source_digest
from .targets import Target


@dataclass
class TargetBlock:
    line: int
    source_sha256: str
    status: str  # ran, expected-error, failed, failed-because, skipped
    outputs: list[Output] = field(default_factory=list)
    warnings: list[WarningRecord] = field(default_factory=list)
    error: str = ""  # the exception's line, ``AttributeError: ...``, or why the block failed
    because: int | None = None  # failed-because: the index of the block it depends on

    def as_result(self, index: int) -> BlockResult:
        return BlockResult(index=index, status=self.status, outputs=self.outputs,
                           warnings=self.warnings)


@dataclass
class TargetRecord:
    docname: str
    target: str  # the target's name: "0.4.38", "tpu-v5e"
    environment: Environment
    blocks: list[TargetBlock]
    reason: str = ""  # NOT_RUN_THERE: why the page does not run there

    def block_for(self, block: Block) -> TargetBlock | None:
        """The recorded block with the same position and source (else the record is stale
        for it: the page's code changed since that target's run)."""
        if block.index < len(self.blocks):
            recorded = self.blocks[block.index]
            if recorded.source_sha256 == source_digest(block.source):
                return recorded
        return None

    def verified_for(self, block: Block, blocks: tuple[Block, ...]) -> TargetBlock | None:
        """The recorded block, if it ran there in the state it runs in now: it and every
        block before it have the code the target ran (an edit above a block changes what
        it starts from, so the target has not verified it until it runs the page again)."""
        return self.block_for(block) if block.index < self._first_stale(blocks) else None

    def _first_stale(self, blocks: tuple[Block, ...]) -> int:
        """The index of the page's first block the record does not hold as it is now (the
        number of blocks if none), worked out once per page's blocks, not once per block."""
        cached = self.__dict__.get("_stale_at")  # not a field: records are written by fields
        if cached is None or cached[0] is not blocks:
            stale = next((b.index for b in blocks if self.block_for(b) is None), len(blocks))
            cached = self.__dict__["_stale_at"] = (blocks, stale)
        return cached[1]


def target_record_dir(record_dir: Path, target: Target) -> Path:
    return Path(record_dir) / target.dirname


def target_record_path(record_dir: Path, target: Target, docname: str) -> Path:
    return target_record_dir(record_dir, target) / f"{docname}.json"


def write_target_record(record_dir: Path, target: Target, record: TargetRecord) -> Path:
    path = target_record_path(record_dir, target, record.docname)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(dataclasses.asdict(record), indent=1, ensure_ascii=False) + "\n",
                    encoding="utf-8")
    return path


def read_target_record(record_dir: Path, target: Target, docname: str) -> TargetRecord | None:
    """None where there is none; ``UnreadableRecord`` where it is damaged."""
    return read_record_file(target_record_path(record_dir, target, docname), _target_record)


def _target_record(data: dict) -> TargetRecord:
    return TargetRecord(
        docname=data["docname"],
        target=data.get("target") or data["version"],  # matrix records made before targets
        reason=data.get("reason", ""),
        environment=Environment(**data["environment"]),
        blocks=[TargetBlock(
            line=b["line"], source_sha256=b["source_sha256"], status=b["status"],
            outputs=[Output(**o) for o in b["outputs"]],
            warnings=[WarningRecord(**w) for w in b["warnings"]
                      if is_block_warning(w["message"])],
            error=b.get("error", ""), because=b.get("because"))
            for b in data["blocks"]],
    )


def _recorded_output(output: Output) -> Output:
    data = {mime: ("sha256:" + hashlib.sha256(value.encode()).hexdigest()
                   if mime.startswith("image/") and not value.startswith("sha256:") else value)
            for mime, value in output.data.items()}
    return Output(kind=output.kind, text=output.text, data=data, name=output.name)


def error_line(result: BlockResult) -> str:
    """The real exception, as its last traceback line says it; else why the block failed."""
    if result.error is not None:
        first = result.error.evalue.splitlines()[0] if result.error.evalue else ""
        return f"{result.error.ename}: {first}" if first else result.error.ename
    return result.failure or ""


_PATH_IN_PARENS = re.compile(r"\((/[^\s()'\"]+)\)")


def local_paths(target: Target) -> Callable[[str], str]:
    """Takes this checkout's paths out of a text: a version's virtualenv becomes its name
    (``.venv-jax-0.4.38``), temporary and site-packages paths ``<path>`` (an ImportError
    names the module's file), so that the record reads the same from any clone."""
    venv = str(Path(target.python).parent.parent)
    paths = BUILTIN_NORMALIZERS["paths"]

    def clean(text: str) -> str:
        text = _PATH_IN_PARENS.sub("(<path>)", text)  # ImportError: ... (/…/module.py)
        text = paths(text)
        return text.replace(venv, f".venv-jax-{target.name}") if target.kind == "version" \
            else text

    return clean


_OBJECT_AT = re.compile(r"\bat 0x[0-9a-fA-F]+")  # a Python object's repr: ``<function f at 0x…>``
_LOG_TIME = re.compile(r"\b\d{4}-\d\d-\d\d \d\d:\d\d:\d\d[,.]\d+")


def quiet_log(text: str) -> str:
    """What changes from run to run in a log line on stderr (an older JAX logs with the time,
    object ids and addresses): replaced, so that ``make matrix-doctest`` compares the rest."""
    text = _LOG_TIME.sub("<time>", text)
    return BUILTIN_NORMALIZERS["addresses"](BUILTIN_NORMALIZERS["ids"](text))


def make_target_record(blocks: tuple[Block, ...], result: DocResult,
                       target: Target) -> TargetRecord:
    because = dependent_failures(blocks, result.blocks)
    clean = local_paths(target)
    recorded = []
    for block, block_result in zip(blocks, result.blocks):
        status = block_result.status
        if block.index in because:
            status = FAILED_BECAUSE
        # A block that runs only on this target is rendered from this record: keep its images.
        outputs = [Output(o.kind, o.text, dict(o.data), o.name)
                   if block.platform == target.name else _recorded_output(o)
                   for o in block_result.outputs]
        for output in outputs:
            output.text = _OBJECT_AT.sub("at 0x…", clean(output.text))
            if output.kind == "stderr":
                output.text = quiet_log(output.text)
        recorded.append(TargetBlock(
            line=block.line,
            source_sha256=source_digest(block.source),
            status=status,
            outputs=outputs,
            warnings=list(block_result.warnings),
            error=clean(error_line(block_result)) if status in (FAILED, FAILED_BECAUSE) else "",
            because=because.get(block.index),
        ))
    return TargetRecord(docname=result.docname, target=target.name,
                        environment=result.environment, blocks=recorded)


def not_run_record(blocks: tuple[Block, ...], docname: str, target: Target, reason: str,
                   environment: Environment) -> TargetRecord:
    """The record of a page that does not run on ``target`` at all, with the reason."""
    return TargetRecord(docname=docname, target=target.name, environment=environment,
                        reason=reason, blocks=[
                            TargetBlock(line=block.line, source_sha256=source_digest(block.source),
                                        status=SKIPPED if block.skip else NOT_RUN_THERE)
                            for block in blocks])


# -- failed because an earlier block failed ---------------------------------------------------

_UNDEFINED = re.compile(r"name '(\w+)' is not defined")


def assigned_names(source: str) -> set[str]:
    """The names a block binds at the top level of the page's namespace: assignments,
    imports, ``def``/``class``, loop and ``with`` targets, walrus, ``global`` (not names
    local to a function or class body). IPython syntax (``%timeit``) is translated first;
    an unparsable block binds nothing we can know of."""
    try:
        from IPython.core.inputtransformer2 import TransformerManager

        source = TransformerManager().transform_cell(source)
    except Exception:  # IPython absent or the cell untranslatable: parse it as it is
        pass
    try:
        tree = ast.parse(source)
    except SyntaxError:
        return set()
    names: set[str] = set()

    def visit(node: ast.AST) -> None:
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            names.add(node.name)
            for decorator in node.decorator_list:
                visit(decorator)
            return  # its body binds its own locals
        if isinstance(node, ast.Lambda):
            return
        if isinstance(node, (ast.Import, ast.ImportFrom)):
            for alias in node.names:
                if alias.name != "*":
                    names.add(alias.asname or alias.name.split(".")[0])
        elif isinstance(node, ast.Name) and isinstance(node.ctx, (ast.Store, ast.Del)):
            names.add(node.id)
        elif isinstance(node, ast.Global):
            names.update(node.names)
        elif isinstance(node, (ast.ListComp, ast.SetComp, ast.DictComp, ast.GeneratorExp)):
            for child in ast.walk(node):  # only a walrus inside leaks out of a comprehension
                if isinstance(child, ast.NamedExpr) and isinstance(child.target, ast.Name):
                    names.add(child.target.id)
            return
        for child in ast.iter_child_nodes(node):
            visit(child)

    visit(tree)
    return names


def dependent_failures(blocks: tuple[Block, ...], results: list[BlockResult]) -> dict[int, int]:
    """Blocks that failed only because an earlier block failed: ``{index: that block's index}``.

    The rule: a block that raised ``NameError`` for a name that an earlier *failed* block
    binds (``assigned_names``) and no earlier block that ran binds, depends on the latest
    such failed block; a block left unrun after the interpreter died depends on the block
    that was running when it died. Anything else a block raises is its own failure."""
    by_index = {r.index: r for r in results}
    bound_by_failed: dict[str, int] = {}  # name -> latest failed block that binds it
    bound_by_ran: set[str] = set()
    last_failed: int | None = None
    because: dict[int, int] = {}
    for block in blocks:
        result = by_index.get(block.index)
        if result is None or result.status == SKIPPED:
            continue
        if result.status == NOT_RUN:
            if last_failed is not None:
                because[block.index] = last_failed
            continue
        names = assigned_names(block.source)
        if result.status == FAILED:
            missing = None
            if result.error is not None and result.error.ename == "NameError":
                match = _UNDEFINED.search(result.error.evalue)
                missing = match.group(1) if match else None
            if missing and missing in bound_by_failed and missing not in bound_by_ran:
                because[block.index] = bound_by_failed[missing]
            last_failed = block.index
            for name in names:
                bound_by_failed[name] = block.index
        else:
            bound_by_ran.update(names)
    return because
