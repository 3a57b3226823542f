"""The version matrix: every block also run under the other verified JAX versions.

``make matrix`` (builder ``matrix``) runs every page under each version of ``verified_matrix``
(its own interpreter, its own virtualenv) and writes ``record/matrix/jax-<version>/<page>.json``;
``make matrix-doctest`` (builder ``matrix-doctest``) runs them again and compares with those
records. A matrix run goes on after a failed block, and a block that fails only because an
earlier one failed is recorded as such (``dependent_failures``).

``make html`` needs no other interpreter: each caption's verdict compares the committed
matrix record with the main verified record (``verdict``), and the Versions page
(``versions-matrix`` directive) counts the same verdicts.
"""

from __future__ import annotations

import ast
import dataclasses
import hashlib
import json
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable

from docutils import nodes
from sphinx.builders import Builder
from sphinx.util import logging

from .model import (
    FAILED,
    NOT_RUN,
    SKIPPED,
    Block,
    BlockResult,
    DocResult,
    Environment,
    Output,
    WarningRecord,
)
from .record import BUILTIN_NORMALIZERS, RecordedBlock, compare, source_digest

logger = logging.getLogger(__name__)

MATRIX_DIR = "matrix"  # under the record directory: record/matrix/jax-<version>/<page>.json
# A block that raised only because an earlier block of the page failed (or crashed).
FAILED_BECAUSE = "failed-because"

# Verdicts, as captions, the Versions page and the report name them.
SAME = "same"
DIFFERS = "differs"
RUNS = "runs"  # an ``:output: varies`` block: it ran, its output is not compared
FAILS = "fails"
DEPENDS = "failed-because"
UNVERIFIED = "not-verified"  # no matrix record for this block's current source
VERDICTS = (SAME, DIFFERS, RUNS, FAILS, DEPENDS, UNVERIFIED)


@dataclass(frozen=True)
class MatrixVersion:
    """One other verified version: its name and the interpreter (virtualenv) that runs it."""

    version: str
    python: Path
    env: tuple[tuple[str, str], ...] = ()

    @property
    def label(self) -> str:
        return f"jax {self.version}"

    @property
    def dirname(self) -> str:
        return f"jax-{self.version}"


def parse_versions(value: Any, confdir: Path) -> tuple[MatrixVersion, ...]:
    """``["0.4.38"]`` (interpreter ``.venv-jax-0.4.38/bin/python``) or dicts with
    ``version``, optional ``python`` (relative to conf.py) and ``env``."""
    if not isinstance(value, (list, tuple)):
        raise ValueError(f"must be a list of versions, got {value!r}")
    versions = []
    for entry in value:
        if isinstance(entry, str):
            entry = {"version": entry}
        if not isinstance(entry, dict) or not isinstance(entry.get("version"), str) \
                or not re.fullmatch(r"[\w.+-]+", entry["version"]):
            raise ValueError(f"each entry is a version string or "
                             f"{{'version': ..., 'python': ..., 'env': {{...}}}}, got {entry!r}")
        unknown = sorted(set(entry) - {"version", "python", "env"})
        if unknown:
            raise ValueError(f"unknown key(s) {', '.join(unknown)} in {entry!r}")
        python = entry.get("python") or f".venv-jax-{entry['version']}/bin/python"
        env = entry.get("env") or {}
        if not isinstance(python, str) or not isinstance(env, dict) or not all(
                isinstance(k, str) and isinstance(v, str) for k, v in env.items()):
            raise ValueError(f"python must be a path and env a mapping of strings: {entry!r}")
        versions.append(MatrixVersion(entry["version"], confdir / python,
                                      tuple(sorted(env.items()))))
    names = [v.version for v in versions]
    if len(set(names)) != len(names):
        raise ValueError(f"a version is named twice: {names!r}")
    return tuple(versions)


# -- the matrix record ------------------------------------------------------------------------

@dataclass
class MatrixBlock:
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
class MatrixRecord:
    docname: str
    version: str
    environment: Environment
    blocks: list[MatrixBlock]

    def block_for(self, block: Block) -> MatrixBlock | None:
        """The recorded block with the same position and source (else the record is stale
        for it: the page's code changed since ``make matrix``)."""
        if block.index < len(self.blocks):
            recorded = self.blocks[block.index]
            if recorded.source_sha256 == source_digest(block.source):
                return recorded
        return None


def matrix_record_dir(record_dir: Path, version: MatrixVersion) -> Path:
    return Path(record_dir) / MATRIX_DIR / version.dirname


def matrix_record_path(record_dir: Path, version: MatrixVersion, docname: str) -> Path:
    return matrix_record_dir(record_dir, version) / f"{docname}.json"


def write_matrix_record(record_dir: Path, version: MatrixVersion, record: MatrixRecord) -> Path:
    path = matrix_record_path(record_dir, version, record.docname)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(dataclasses.asdict(record), indent=1, ensure_ascii=False) + "\n",
                    encoding="utf-8")
    return path


def read_matrix_record(record_dir: Path, version: MatrixVersion,
                       docname: str) -> MatrixRecord | None:
    path = matrix_record_path(record_dir, version, docname)
    if not path.exists():
        return None
    data = json.loads(path.read_text(encoding="utf-8"))
    return MatrixRecord(
        docname=data["docname"],
        version=data["version"],
        environment=Environment(**data["environment"]),
        blocks=[MatrixBlock(
            line=b["line"], source_sha256=b["source_sha256"], status=b["status"],
            outputs=[Output(**o) for o in b["outputs"]],
            warnings=[WarningRecord(**w) for w in b["warnings"]],
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


def local_paths(version: MatrixVersion) -> Callable[[str], str]:
    """Takes this checkout's paths out of a text: the version's virtualenv becomes its name
    (``.venv-jax-0.4.38``), temporary and site-packages paths ``<path>`` (an ImportError
    names the module's file), so that the record reads the same from any clone."""
    venv = str(Path(version.python).parent.parent)
    paths = BUILTIN_NORMALIZERS["paths"]

    def clean(text: str) -> str:
        text = _PATH_IN_PARENS.sub("(<path>)", text)  # ImportError: ... (/…/module.py)
        return paths(text).replace(venv, f".venv-{version.dirname}")

    return clean


_OBJECT_AT = re.compile(r"\bat 0x[0-9a-fA-F]+")  # a Python object's repr: ``<function f at 0x…>``
_LOG_TIME = re.compile(r"\b\d{4}-\d\d-\d\d \d\d:\d\d:\d\d[,.]\d+")


def quiet_log(text: str) -> str:
    """What changes from run to run in a log line on stderr (an older JAX logs with the time,
    object ids and addresses): replaced, so that ``make matrix-doctest`` compares the rest."""
    text = _LOG_TIME.sub("<time>", text)
    return BUILTIN_NORMALIZERS["addresses"](BUILTIN_NORMALIZERS["ids"](text))


def make_matrix_record(blocks: tuple[Block, ...], result: DocResult,
                       version: MatrixVersion) -> MatrixRecord:
    because = dependent_failures(blocks, result.blocks)
    clean = local_paths(version)
    recorded = []
    for block, block_result in zip(blocks, result.blocks):
        status = block_result.status
        if block.index in because:
            status = FAILED_BECAUSE
        outputs = [_recorded_output(o) for o in block_result.outputs]
        for output in outputs:
            output.text = _OBJECT_AT.sub("at 0x…", clean(output.text))
            if output.kind == "stderr":
                output.text = quiet_log(output.text)
        recorded.append(MatrixBlock(
            line=block.line,
            source_sha256=source_digest(block.source),
            status=status,
            outputs=outputs,
            warnings=list(block_result.warnings),
            error=clean(error_line(block_result)) if status in (FAILED, FAILED_BECAUSE) else "",
            because=because.get(block.index),
        ))
    return MatrixRecord(docname=result.docname, version=version.version,
                        environment=result.environment, blocks=recorded)


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


# -- verdicts ---------------------------------------------------------------------------------

@dataclass
class Verdict:
    kind: str  # one of VERDICTS
    version: MatrixVersion
    detail: str = ""  # fails: the exception line; differs: the diff
    because: Block | None = None  # failed-because: the block it depends on
    recorded: MatrixBlock | None = None

    def text(self) -> str:
        label = self.version.label
        if self.kind == SAME:
            return f"also verified on {label} (same output)"
        if self.kind == DIFFERS:
            return f"on {label} the output differs"
        if self.kind == RUNS:
            return f"runs on {label} (output varies, not compared)"
        if self.kind == FAILS:
            return f"on {label}: {self.detail}"
        if self.kind == DEPENDS:
            if self.because is not None:
                return (f"on {label}: not run, because block {self.because.index + 1} "
                        f"(line {self.because.line}) fails there")
            return f"on {label}: not run, because an earlier block fails there"
        return f"not yet verified on {label}"


def verdict(block: Block, blocks: tuple[Block, ...], main: RecordedBlock | None,
            matrix: MatrixRecord | None, version: MatrixVersion,
            normalizers: dict[str, tuple[tuple[str, str], ...]]) -> Verdict | None:
    """How ``block`` behaves on ``version``, from the committed records alone: None for a
    block that never runs (skip-execution); not-verified when either record is stale."""
    if block.skip:
        return None
    recorded = matrix.block_for(block) if matrix else None
    if recorded is None or main is None:
        return Verdict(UNVERIFIED, version)
    if recorded.status == FAILED_BECAUSE:
        earlier = blocks[recorded.because] if recorded.because is not None \
            and recorded.because < len(blocks) else None
        return Verdict(DEPENDS, version, because=earlier, recorded=recorded)
    if recorded.status == FAILED:
        return Verdict(FAILS, version, detail=recorded.error, recorded=recorded)
    comparison = compare(block, recorded.as_result(block.index), main, normalizers)
    if comparison.verdict == "unchecked":
        return Verdict(RUNS, version, recorded=recorded)
    if comparison.verdict == "match":
        return Verdict(SAME, version, recorded=recorded)
    return Verdict(DIFFERS, version, detail=comparison.diff, recorded=recorded)


# -- what a build reads -----------------------------------------------------------------------

class MatrixRecords:
    """The committed matrix records, read once per build."""

    def __init__(self, config):
        self.config = config
        self._read: dict[tuple[str, str], MatrixRecord | None] = {}

    def get(self, version: MatrixVersion, docname: str) -> MatrixRecord | None:
        key = (version.version, docname)
        if key not in self._read:
            self._read[key] = read_matrix_record(self.config.record_dir, version, docname)
        return self._read[key]

    def stamp(self, docname: str) -> tuple:
        """The digests of a page's matrix records (a page re-renders when one changes)."""
        digests = []
        for version in self.config.matrix:
            path = matrix_record_path(self.config.record_dir, version, docname)
            digests.append(hashlib.sha256(path.read_bytes()).hexdigest() if path.exists()
                           else None)
        return tuple(digests)

    def verdicts(self, docname: str, block: Block, blocks: tuple[Block, ...],
                 main: RecordedBlock | None) -> list[Verdict]:
        found = []
        block = as_on_matrix(self.config, docname, block)
        for version in self.config.matrix:
            result = verdict(block, blocks, main, self.get(version, docname), version,
                             self.config.normalizers)
            if result is not None:
                found.append(result)
        return found


def as_on_matrix(config, docname: str, block: Block) -> Block:
    """The block as the matrix compares it: ``verified_matrix_varies`` names blocks whose
    output varies from run to run on the other versions only (what the page measures does
    not work there), by page and a piece of their source."""
    for piece in config.matrix_varies.get(docname, ()):
        if piece in block.source:
            return dataclasses.replace(block, varies=True)
    return block


def block_anchor(block: Block) -> str:
    return f"block-line-{block.line}"


def block_label(docname: str, block: Block) -> str:
    """A std-domain label for a block (the Versions page links to blocks with it)."""
    return f"verified-block:{docname}:{block.line}"


def verdict_nodes(verdicts: list[Verdict], tags: set[str]) -> list[nodes.Node]:
    """One caption line per version; a differing output is one click away."""
    from .render import _folded, _output_nodes

    rendered: list[nodes.Node] = []
    for item in verdicts:
        text = item.text()
        line = nodes.paragraph(text, "", classes=["cell-caption", "cell-matrix",
                                                  f"cell-matrix-{item.kind}"])
        line += nodes.Text(text)
        rendered.append(line)
        if item.kind in (DIFFERS, FAILS) and item.recorded is not None:
            outputs = _output_nodes(item.recorded.outputs, "remove-stderr" in tags)
            if outputs:
                rendered.append(_folded(f"Show the output on {item.version.label}",
                                        "cell-matrix-output", *outputs))
    return rendered


# -- running the matrix -----------------------------------------------------------------------

def run_matrix(builder: Builder, version: MatrixVersion) -> dict[str, tuple[Any, DocResult]]:
    """Runs every selected page under ``version``: ``{docname: (collected, result)}``."""
    from .execute import run_document
    from .schedule import _collect, run_pages, state

    build = state(builder)
    config = build.config
    found = {}
    for docname in sorted(builder.env.found_docs):
        if config.pages and docname not in config.pages:
            continue
        collected = _collect(builder, builder.env, docname)
        if collected is not None and collected.job.blocks and not collected.problems:
            found[docname] = collected
    jobs = [collected.job for collected in found.values()]
    logger.info(f"executing {len(jobs)} page(s) under {version.label} ({config.jobs} at a time)")
    extra_env = {**config.env, **dict(version.env)}

    def run(job, gate, pinned):
        result = run_document(job, default_timeout=config.timeout, extra_env=extra_env,
                              gate=gate, cores=pinned, python=str(version.python),
                              keep_going=True, collective_flags=False)
        failed = sum(1 for block in result.blocks if block.failed)
        logger.info(f"  {version.label}: {job.docname}: {len(job.blocks)} blocks, "
                    f"{result.duration:.1f} s, {failed} failed")
        return result

    results = run_pages(config, jobs, run)
    return {result.docname: (found[result.docname], result) for result in results}


def label_block(env, docname: str, block: Block, cell: nodes.Element) -> None:
    """Gives a rendered block an anchor and a std-domain label (for the Versions page)."""
    anchor = block_anchor(block)
    cell["ids"].append(anchor)
    env.get_domain("std").anonlabels[block_label(docname, block)] = (docname, anchor)


# -- the Versions page ------------------------------------------------------------------------

def version_key(version: str) -> tuple:
    return tuple(int(part) if part.isdigit() else part for part in re.split(r"[.+-]", version))


@dataclass
class PageMatrix:
    """One page's verdicts on every matrix version (what the Versions page shows)."""

    docname: str
    blocks: tuple[Block, ...]
    verdicts: dict[str, list[tuple[Block, Verdict]]]  # version -> (block, verdict)

    def counts(self, version: str) -> dict[str, int]:
        tally = {kind: 0 for kind in VERDICTS}
        for _, item in self.verdicts.get(version, []):
            tally[item.kind] += 1
        return tally


def page_matrices(build, env) -> list[PageMatrix]:
    """Every page with blocks, with each block's verdict on each version (from the records)."""
    from .schedule import _collect

    pages = []
    for docname in sorted(env.found_docs):
        found = _collect(env, env, docname)  # the env has the build's config
        if found is None or not found.job.blocks:
            continue
        record = build.record_for(docname)
        verdicts: dict[str, list[tuple[Block, Verdict]]] = {}
        for version in build.config.matrix:
            matrix = build.matrix.get(version, docname)
            rows = verdicts.setdefault(version.version, [])
            for block in found.job.blocks:
                main = record.block_for(block) if record else None
                item = verdict(as_on_matrix(build.config, docname, block), found.job.blocks,
                               main, matrix, version, build.config.normalizers)
                if item is not None:
                    rows.append((block, item))
        pages.append(PageMatrix(docname, found.job.blocks, verdicts))
    return pages


def minimum_version(page: PageMatrix, versions: tuple[MatrixVersion, ...],
                    main_version: str | None) -> str:
    """The oldest verified version from which on every block of the page runs (same, differs
    or varies) on every verified version; ``?`` when a record is missing or stale."""
    ordered = sorted(versions, key=lambda v: version_key(v.version), reverse=True)
    oldest = main_version or "?"
    for version in ordered:
        counts = page.counts(version.version)
        if counts[UNVERIFIED]:
            return "?"
        if counts[FAILS] or counts[DEPENDS]:
            break
        oldest = version.version
    return oldest


COLUMNS = ((SAME, "same"), (DIFFERS, "differs"), (RUNS, "varies"), (FAILS, "fails"),
           (DEPENDS, "fails after an earlier block"), (UNVERIFIED, "not yet verified"))


def make_directive():
    """The ``versions-matrix`` directive class."""
    from sphinx import addnodes
    from sphinx.util.docutils import SphinxDirective

    from .schedule import state

    class VersionsMatrix(SphinxDirective):
        """``{versions-matrix}``: the table chapter × version, the API differences found
        and the minimum version per chapter, from the committed records.

        Each content line ``EXCEPTION LINE => old form -> new form`` names the forms behind
        a difference (the exception line as the matrix records it, or its start)."""

        has_content = True

        def run(self) -> list[nodes.Node]:
            build = state(self.env)
            self.env.note_dependency(self.env.doc2path(self.env.docname))
            versions = build.config.matrix
            pages = page_matrices(build, self.env)
            main_version = None
            for page in pages:
                record = build.record_for(page.docname)
                if record and record.environment.jax:
                    main_version = record.environment.jax
                    break
            result: list[nodes.Node] = []
            result.append(self._table(pages, versions, main_version))
            result.extend(self._differences(pages, versions))
            return result

        def _doc_link(self, docname: str) -> nodes.Node:
            ref = addnodes.pending_xref("", refdomain="std", reftype="doc",
                                        reftarget="/" + docname, refexplicit=False,
                                        refdoc=self.env.docname)
            ref += nodes.inline(docname, docname)
            return ref

        def _block_link(self, docname: str, block: Block) -> nodes.Node:
            text = f"{docname}, line {block.line}"
            ref = addnodes.pending_xref("", refdomain="std", reftype="ref",
                                        reftarget=block_label(docname, block),
                                        refexplicit=True, refdoc=self.env.docname)
            ref += nodes.inline(text, text)
            return ref

        def _table(self, pages, versions, main_version) -> nodes.Node:
            headers = ["Chapter", "blocks"]
            for version in versions:
                headers += [f"{version.label}: {title}" for _, title in COLUMNS]
            headers.append("needs jax")
            table = nodes.table(classes=["versions-matrix"])
            group = nodes.tgroup(cols=len(headers))
            table += group
            for _ in headers:
                group += nodes.colspec(colwidth=1)
            head = nodes.thead()
            group += head
            head += self._row([nodes.Text(h) for h in headers])
            body = nodes.tbody()
            group += body
            totals = {version.version: {kind: 0 for kind in VERDICTS} for version in versions}
            total_blocks = 0
            for page in pages:
                cells: list[nodes.Node] = [self._doc_link(page.docname),
                                           nodes.Text(str(len(page.blocks)))]
                total_blocks += len(page.blocks)
                for version in versions:
                    counts = page.counts(version.version)
                    for kind, _ in COLUMNS:
                        totals[version.version][kind] += counts[kind]
                        cells.append(nodes.Text(str(counts[kind])))
                cells.append(nodes.Text(minimum_version(page, versions, main_version)))
                body += self._row(cells, page.docname)
            cells = [nodes.Text("all chapters"), nodes.Text(str(total_blocks))]
            for version in versions:
                cells += [nodes.Text(str(totals[version.version][kind])) for kind, _ in COLUMNS]
            cells.append(nodes.Text(""))
            body += self._row(cells, "total")
            return table

        @staticmethod
        def _row(cells, name: str = "") -> nodes.row:
            row = nodes.row(classes=[f"versions-row-{name.replace('/', '-')}"] if name else [])
            for content in cells:
                entry = nodes.entry()
                paragraph = nodes.paragraph()
                paragraph += content
                entry += paragraph
                row += entry
            return row

        def _forms(self) -> list[tuple[str, str]]:
            forms = []
            for number, line in enumerate(self.content, start=1):
                if not line.strip():
                    continue
                if "=>" not in line:
                    logger.warning(f"versions-matrix: expected 'EXCEPTION => old -> new', "
                                   f"got {line!r}", location=self.get_location(),
                                   type="verified", subtype="matrix")
                    continue
                match, _, forms_text = line.partition("=>")
                forms.append((match.strip(), forms_text.strip()))
            return forms

        def _differences(self, pages, versions) -> list[nodes.Node]:
            forms = self._forms()
            used = set()
            out: list[nodes.Node] = []
            for version in versions:
                found: dict[str, list[tuple[str, Block]]] = {}
                for page in pages:
                    for block, item in page.verdicts.get(version.version, []):
                        if item.kind == FAILS:
                            found.setdefault(item.detail, []).append((page.docname, block))
                section_title = f"Where {version.label} differs"
                title = nodes.rubric(section_title, section_title)
                out.append(title)
                if not found:
                    text = f"No block fails on {version.label}."
                    out.append(nodes.paragraph(text, text))
                    continue
                listing = nodes.bullet_list(classes=["versions-differences"])
                for detail in sorted(found):
                    named = next(((m, f) for m, f in forms if detail.startswith(m)), None)
                    item = nodes.list_item()
                    para = nodes.paragraph()
                    if named:
                        used.add(named[0])
                        para += nodes.strong(named[1], named[1])
                        para += nodes.Text(": ")
                    para += nodes.literal(detail, detail)
                    para += nodes.Text(" — shown by ")
                    for position, (docname, block) in enumerate(found[detail]):
                        if position:
                            para += nodes.Text(", ")
                        para += self._block_link(docname, block)
                    item += para
                    listing += item
                out.append(listing)
            builder = getattr(self.env, "_app", None) and self.env._app.builder
            if getattr(builder, "runs_pages_itself", False) or getattr(builder, "name", "") in (
                    "doctest", "record"):
                return out  # a build that writes or checks records, not the reader's page
            for match, _ in forms:
                if match not in used:
                    logger.warning(f"versions-matrix: no block fails with {match!r} "
                                   f"(the matrix no longer shows this difference)",
                                   location=self.get_location(), type="verified",
                                   subtype="matrix")
            return out

    return VersionsMatrix


def versions_outdated(app, env, added, changed, removed) -> list[str]:
    """The Versions page reads every record, so it is re-read on every build."""
    pages = []
    for docname in sorted(env.found_docs - added - changed):
        path = Path(env.doc2path(docname))
        if path.suffix == ".md" and "{versions-matrix}" in path.read_text(encoding="utf-8"):
            pages.append(docname)
    return pages
