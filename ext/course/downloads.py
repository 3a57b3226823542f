"""Chapter downloads: the source (.md) and a Jupyter notebook with the executed outputs.

The notebook comes from jupytext (the chapter already is a MyST-NB text notebook); its code
cells are filled with the outputs of this build's execution, so it shows what the page shows,
its prose shows glued values and the course's roles as the page does, and generated cells
make it check itself where the reader runs it (``notebook_check.py``).
"""

from __future__ import annotations

import dataclasses
import re
import shutil
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import jupytext
import nbformat
import yaml
from sphinx.application import Sphinx
from sphinx.util import logging

from verified.driver import page_environment
from verified.glue import glued_values
from verified.inject import result_for
from verified.model import DocResult, DocSettings
from verified.outcome import page_outcome
from verified.pages import Cause, parse_causes
from verified.state import state

from .chapters import ordered
from .notebook_check import (check_data, explained_blocks, helper_cell, note_cell,
                             raising_blocks, setup_cell, totals_cell)
from .notebook_text import Reading, TextContext, render_markdown
from .readings import registry

logger = logging.getLogger(__name__)


def notebook_outputs(block_result) -> list:
    outputs = []
    for output in block_result.outputs:
        if output.kind in ("stdout", "stderr"):
            outputs.append(nbformat.v4.new_output("stream", name=output.kind, text=output.text))
        elif output.kind == "result":
            outputs.append(nbformat.v4.new_output(
                "execute_result", data={"text/plain": output.text},
                execution_count=block_result.index + 1))
        elif output.kind == "display":
            outputs.append(nbformat.v4.new_output(
                "display_data", data={"text/plain": output.text, **output.data}))
        elif output.kind == "error":
            ename = block_result.error.ename if block_result.error else "Error"
            evalue = block_result.error.evalue if block_result.error else ""
            outputs.append(nbformat.v4.new_output("error", ename=ename, evalue=evalue,
                                                  traceback=output.text.splitlines()))
    for warning in block_result.warnings:
        outputs.append(nbformat.v4.new_output(
            "stream", name="stderr", text=f"{warning.category}: {warning.message}\n"))
    return outputs


@dataclass
class NotebookCheck:
    """What makes a notebook check itself: the page's execution variables (set before JAX
    starts) and settings, and the data of ``notebook_check.check_data``."""

    environment: dict[str, str]
    settings: DocSettings
    data: dict[str, Any]
    raising: frozenset[int] = frozenset()  # ``notebook_check.raising_blocks``


def make_notebook(source: Path, result: DocResult | None, check: NotebookCheck | None = None,
                  text: TextContext | None = None) -> nbformat.NotebookNode:
    """The page as a notebook with this build's outputs. With ``check``, generated cells
    make it check itself where it runs (a visible note, a hidden helper and the set-up cell
    first, the totals last); with ``text``, the prose shows glued values and the course's
    roles as the page does. Exercise solutions are left out: the reader fills in the starter
    and runs the check."""
    notebook = jupytext.read(source, fmt="md:myst")
    code_cells = [cell for cell in notebook.cells if cell.cell_type == "code"]
    for cell, block_result in zip(code_cells, result.blocks if result else []):
        cell.outputs = notebook_outputs(block_result)
        if block_result.status not in ("skipped", "not-run"):
            cell.execution_count = block_result.index + 1
    for index, cell in enumerate(code_cells):
        if check is not None and index in check.raising:
            # It raises in the course's own run, unasked: run-all goes on there too, and
            # the check line says whether that is what the record holds.
            _tag(cell, "raises-exception")
    notebook.cells = [cell for cell in notebook.cells if not _has_tag(cell, "exercise-solution")]
    for cell in notebook.cells:
        if text is not None and cell.cell_type == "markdown":
            cell.source = render_markdown(cell.source, text)
        if cell.cell_type == "code" and cell.metadata.get("raises") is not None:
            # MyST-NB's and Jupyter Book's tag: run-all (nbclient, jupyter execute) goes
            # on past the expected error.
            _tag(cell, "raises-exception")
        if cell.cell_type == "code" and cell.metadata.get("platform") and check is None:
            # Without the check, nothing in the notebook knows where it runs: run-all skips a
            # block measured on one platform only.
            _tag(cell, "skip-execution")
        if _has_tag(cell, "exercise-check"):
            # Without the solution the check tests the reader's starter; run-all goes on
            # past it, as the reader will.
            cell.outputs = []
            cell.execution_count = None
            _tag(cell, "raises-exception")
    if check is not None:
        first = 1 if notebook.cells and notebook.cells[0].cell_type == "markdown" else 0
        notebook.cells[first:first] = [note_cell(), helper_cell(check.data),
                                       setup_cell(check.environment, check.settings)]
        notebook.cells.append(totals_cell())
    return notebook


def _tag(cell: nbformat.NotebookNode, tag: str) -> None:
    tags = cell.metadata.setdefault("tags", [])
    if tag not in tags:
        tags.append(tag)


def _has_tag(cell: nbformat.NotebookNode, tag: str) -> bool:
    return tag in cell.get("metadata", {}).get("tags", [])


def notebook_environment(settings: DocSettings, configured: dict[str, str]) -> dict[str, str]:
    """``page_environment`` without the platform (``JAX_PLATFORMS``): the course pins its own
    runs to the CPU; a reader's notebook runs where it is."""
    return page_environment(settings, {name: value for name, value in configured.items()
                                       if name != "JAX_PLATFORMS"})


def notebook_check_of(app: Sphinx, docname: str, causes: tuple[list[Cause], str]
                      ) -> NotebookCheck | None:
    """The page's blocks and every record of it, from this build's state; ``causes``: the
    Platforms page's (``platform_causes``, read once per build)."""
    build = state(app)
    outcome = page_outcome(build, app.env, docname)
    if outcome is None:
        return None
    data = check_data(outcome.blocks, outcome.record, list(outcome.targets),
                      build.config.normalizers, block_causes(app, docname, causes))
    return NotebookCheck(notebook_environment(outcome.settings, build.config.env),
                         outcome.settings, data, raising_blocks(outcome.blocks, outcome.record))


def block_causes(app: Sphinx, docname: str, causes_and_where: tuple[list[Cause], str]
                 ) -> dict[int, str]:
    """Each block of the page that a cause of the Platforms page explains (its verdicts on
    the verified platforms, from the page's outcome, as that page finds them)."""
    build = state(app)
    causes, where = causes_and_where
    outcome = page_outcome(build, app.env, docname)
    if outcome is None:
        return {}
    verdicts = [pair for platform in outcome.on(build.config.platforms).values()
                for pair in platform]
    return explained_blocks(docname, verdicts, causes, where)


def platform_causes(app: Sphinx) -> tuple[list[Cause], str]:
    """The causes the Platforms page names (its ``{platforms-matrix}`` YAML), and its
    address under ``html_baseurl`` ("" where the site names none)."""
    for docname in sorted(app.env.found_docs):
        path = Path(app.env.doc2path(docname))
        text = path.read_text(encoding="utf-8") if path.suffix == ".md" else ""
        match = _MATRIX.search(text)
        if match:
            try:
                causes = parse_causes(match.group("body"))
            except (ValueError, yaml.YAMLError):
                return [], ""  # the page itself reports it, located
            base = app.config.html_baseurl
            where = f"{base.rstrip('/')}/{docname}.html" if base else ""
            return causes, where
    return [], ""


_MATRIX = re.compile(r"^(?P<fence>`{3,})\{platforms-matrix\}[^\n]*\n(?P<body>.*?)^(?P=fence)",
                     re.M | re.S)


def text_context_of(app: Sphinx, docname: str, result: DocResult | None) -> TextContext:
    env = app.env
    labels = {name: title for name, (_, _, title) in env.get_domain("std").labels.items()
              if title}
    outcome = page_outcome(state(app), env, docname)
    return TextContext(
        docname=docname,
        glued=outcome.glued if outcome else glued_values(result) if result else {},
        marks=dict(outcome.stale) if outcome else {},
        readings={key: Reading(page.title, page.level, page.url)
                  for key, page in registry(app).pages.items()},
        titles={name: title.astext() for name, title in env.titles.items()},
        labels=labels)


def with_platform_outputs(app: Sphinx, docname: str, result: DocResult | None
                          ) -> DocResult | None:
    """The page's result with each platform-only block's output taken from that platform's
    record, as the page shows it (the main run does not run such a block). Where the page
    shows a platform's earlier run, marked as not re-verified, the notebook's cell could not
    say so: it keeps the main run's (no output), and its prose the marked values."""
    outcome = page_outcome(state(app), app.env, docname)
    if result is None or outcome is None:
        return result
    return dataclasses.replace(outcome.result, blocks=[
        result.blocks[index] if index in outcome.stale_blocks else shown
        for index, shown in enumerate(outcome.result.blocks)])


def on_build_finished(app: Sphinx, exception) -> None:
    if exception is not None or app.builder.format != "html":
        return
    target = Path(app.outdir, "_downloads", "chapters")
    causes = platform_causes(app)
    for chapter in ordered(app.env):
        source = Path(app.env.doc2path(chapter.docname))
        result = with_platform_outputs(app, chapter.docname,
                                       result_for(app, chapter.docname))
        try:
            check = notebook_check_of(app, chapter.docname, causes)
            notebook = make_notebook(source, result, check,
                                     text_context_of(app, chapter.docname, result))
        except Exception as err:  # jupytext refuses the page: say where, build the rest
            logger.warning(f"no notebook download: jupytext cannot read the page: {err}",
                           location=(chapter.docname, 1), type="course", subtype="download")
            continue
        destination = target / f"{chapter.docname}.ipynb"
        destination.parent.mkdir(parents=True, exist_ok=True)
        nbformat.write(notebook, destination)
        shutil.copy2(source, target / f"{chapter.docname}.md")
