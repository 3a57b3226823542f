"""Chapter downloads: the source (.md) and a Jupyter notebook with the executed outputs.

The notebook comes from jupytext (the chapter already is a MyST-NB text notebook); its code
cells are filled with the outputs of this build's execution, so it shows what the page shows.
"""

from __future__ import annotations

import shutil
from pathlib import Path

import jupytext
import nbformat
from sphinx.application import Sphinx
from sphinx.util import logging

from verified.model import DocResult, DocSettings
from verified.driver import page_environment
from verified.inject import result_for
from verified.state import state

from .chapters import ordered

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


SETUP_CELL = """\
# Generated: the page ran with these settings, which take effect only if they are set before
# JAX starts. Run this cell first, in a fresh kernel.
import os
import sys

if "jax" in sys.modules:
    raise RuntimeError("JAX is already imported: restart the kernel, then run this cell first")
os.environ.update({variables})"""


def setup_cell(environment: dict[str, str]) -> nbformat.NotebookNode:
    """The first code cell: the execution settings of the page (devices, env), as the
    engine sets them for its worker (``verified.execute.page_environment``)."""
    lines = "".join(f"\n    {name!r}: {value!r}," for name, value in sorted(environment.items()))
    cell = nbformat.v4.new_code_cell(SETUP_CELL.format(variables="{" + lines + "\n}"))
    cell.metadata["tags"] = ["generated-setup"]
    return cell


def make_notebook(source: Path, result: DocResult | None,
                  environment: dict[str, str] | None = None) -> nbformat.NotebookNode:
    """The page as a notebook with this build's outputs; ``environment`` (the page's
    execution variables) becomes a first cell that sets them. Exercise solutions are left
    out: the reader fills in the starter and runs the check."""
    notebook = jupytext.read(source, fmt="md:myst")
    code_cells = [cell for cell in notebook.cells if cell.cell_type == "code"]
    for cell, block_result in zip(code_cells, result.blocks if result else []):
        cell.outputs = notebook_outputs(block_result)
        if block_result.status not in ("skipped", "not-run"):
            cell.execution_count = block_result.index + 1
    notebook.cells = [cell for cell in notebook.cells if not _has_tag(cell, "exercise-solution")]
    for cell in notebook.cells:
        if cell.cell_type == "code" and cell.metadata.get("platform"):
            # A block measured on one platform only (its `:platform:` option) can take minutes,
            # or fail, elsewhere: run-all skips it; a reader on that platform runs it by hand.
            cell.metadata["tags"] = [*cell.metadata.get("tags", []), "skip-execution"]
        if _has_tag(cell, "exercise-check"):
            # Without the solution the check tests the reader's starter; run-all (nbclient,
            # nbconvert --execute) goes on past it, as the reader will.
            cell.outputs = []
            cell.execution_count = None
            cell.metadata["tags"] = [*cell.metadata["tags"], "raises-exception"]
    if environment:
        first = 1 if notebook.cells and notebook.cells[0].cell_type == "markdown" else 0
        notebook.cells.insert(first, setup_cell(environment))
    return notebook


def _has_tag(cell: nbformat.NotebookNode, tag: str) -> bool:
    return tag in cell.get("metadata", {}).get("tags", [])


def page_environment_of(app: Sphinx, docname: str) -> dict[str, str]:
    build = state(app)
    found = build.collected.get(docname)
    settings = found.job.settings if found else DocSettings()
    return page_environment(settings, build.config.env)


def on_build_finished(app: Sphinx, exception) -> None:
    if exception is not None or app.builder.format != "html":
        return
    target = Path(app.outdir, "_downloads", "chapters")
    for chapter in ordered(app.env):
        source = Path(app.env.doc2path(chapter.docname))
        try:
            notebook = make_notebook(source, result_for(app, chapter.docname),
                                     page_environment_of(app, chapter.docname))
        except Exception as err:  # jupytext refuses the page: say where, build the rest
            logger.warning(f"no notebook download: jupytext cannot read the page: {err}",
                           location=(chapter.docname, 1), type="course", subtype="download")
            continue
        destination = target / f"{chapter.docname}.ipynb"
        destination.parent.mkdir(parents=True, exist_ok=True)
        nbformat.write(notebook, destination)
        shutil.copy2(source, target / f"{chapter.docname}.md")
