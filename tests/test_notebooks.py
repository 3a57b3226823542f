"""Every chapter's notebook download runs top to bottom in a fresh Jupyter kernel, as a reader
runs it (nbclient's defaults: no errors allowed but the tagged ones), as the page ran: the same
cells succeed and the declared expected errors raise the same exception type; an exercise's
check, without its solution, raises the starter's NotImplementedError; and the notebook's own
check compares every cell with the CPU record and finds it the same (or varying, or raising as
recorded), then prints the totals.

Slow (it executes the whole course once more): ``pytest -m notebooks`` runs it alone.
"""

from __future__ import annotations

import json
import re
import runpy
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import nbformat
import pytest
from nbclient import NotebookClient

from conftest import reader_kernel_env
from course.downloads import NotebookCheck, make_notebook, notebook_environment
from course.notebook_check import check_data
from verified.collect import collect
from verified.record import BUILTIN_NORMALIZERS, read_record
from verified.target_record import read_target_record
from verified.targets import parse_platforms, parse_versions

ROOT = Path(__file__).resolve().parent.parent
CHAPTERS = sorted(path for path in (ROOT / "source").glob("part*/[0-9][0-9]-*.md"))
CONF = runpy.run_path(str(ROOT / "conf.py"))
CONFIGURED_ENV = CONF.get("verified_env", {})
TARGETS = (*parse_versions(CONF.get("verified_matrix", []), ROOT),
           *parse_platforms(CONF.get("verified_platforms", []), ROOT))
PLATFORMS = frozenset(target.name for target in TARGETS if target.kind == "platform")
# What a cell's check line may say on a CPU with the course's JAX: never "differs", "not in
# the record" or "not yet verified".
ON_THE_CPU = ("same output as recorded on CPU", "varies from run to run (not compared)",
              "raised ", "your exercise: not compared", "skip-execution on the page",
              "runs on ", "drawn by rich for Jupyter")

pytestmark = [pytest.mark.jax, pytest.mark.notebooks]


def _docname(path: Path) -> str:
    return path.relative_to(ROOT / "source").with_suffix("").as_posix()


def _exception_name(traceback_text: str) -> str:
    """The exception's class name from a traceback as the worker formats it."""
    for line in traceback_text.splitlines():
        match = re.match(r"([A-Za-z_][\w.]*)(?::|$)", line)
        if match and line != "Traceback (most recent call last):":
            return match.group(1).rsplit(".", 1)[-1]
    return ""


def _expected(path: Path) -> list[str | None]:
    """Per notebook cell, as the record says the page's block ran: None (succeeded) or the
    exception name. The notebook has no exercise solutions, so each check meets the
    starter's stub and raises NotImplementedError."""
    record = json.loads((ROOT / "record" / f"{_docname(path)}.json").read_text())
    blocks = collect(_docname(path), path, frozenset(BUILTIN_NORMALIZERS), platforms=PLATFORMS).job.blocks
    assert len(blocks) == len(record["blocks"]), "the record is stale: run make record"
    expected = []
    for block, recorded in zip(blocks, record["blocks"]):
        if "exercise-solution" in block.tags:
            continue
        if "exercise-check" in block.tags:
            expected.append("NotImplementedError")
            continue
        errors = [o["text"] for o in recorded["outputs"] if o["kind"] == "error"]
        expected.append(_exception_name(errors[0]) if recorded["status"] == "expected-error"
                        else None)
    return expected


def notebook_of(path: Path) -> nbformat.NotebookNode:
    """The chapter's notebook download, with its check, from the committed records."""
    docname = _docname(path)
    job = collect(docname, path, frozenset(BUILTIN_NORMALIZERS), platforms=PLATFORMS).job
    targets = [(target, read_target_record(ROOT / "record", target, docname))
               for target in TARGETS]
    data = check_data(job.blocks, read_record(ROOT / "record", docname), targets, {})
    return make_notebook(path, None, NotebookCheck(
        notebook_environment(job.settings, CONFIGURED_ENV), job.settings, data))


def _run(path: Path, workdir: Path) -> tuple[nbformat.NotebookNode, list[str | None]]:
    notebook = notebook_of(path)
    workdir.mkdir()
    client = NotebookClient(notebook, timeout=900, kernel_name="python3",
                            resources={"metadata": {"path": str(workdir)}})
    # The kernel hashes strings as the page's interpreter does (driver.py sets the seed):
    # some messages list a set's members, in the order the hash seed gives them.
    client.execute(env=reader_kernel_env(PYTHONHASHSEED="0"))
    code = [cell for cell in notebook.cells if cell.cell_type == "code"]
    assert "generated-check" in code[0].metadata.get("tags", [])
    assert "generated-setup" in code[1].metadata.get("tags", [])
    assert "generated-totals" in code[-1].metadata.get("tags", [])
    raised = []
    for cell in code[2:-1]:
        errors = [out for out in cell.get("outputs", []) if out.output_type == "error"]
        raised.append(errors[0].ename if errors else None)
    return notebook, raised


def check_lines(notebook: nbformat.NotebookNode) -> list[str]:
    return [line.removeprefix("check: ") for cell in notebook.cells if cell.cell_type == "code"
            for output in cell.get("outputs", []) if output.output_type == "stream"
            for line in output.text.splitlines() if line.startswith("check: ")]


@pytest.fixture(scope="module")
def executed(request, tmp_path_factory):
    """The selected chapters' notebooks, executed two at a time (the machine's two cores)."""
    root = tmp_path_factory.mktemp("notebooks")
    selected = [item.callspec.params["path"] for item in request.session.items
                if item.module is request.module and hasattr(item, "callspec")]
    with ThreadPoolExecutor(max_workers=2) as pool:
        runs = {path: pool.submit(_run, path, root / path.stem) for path in selected}
        return {path: future.result() for path, future in runs.items()}


@pytest.mark.parametrize("path", CHAPTERS, ids=_docname)
def test_notebook_runs_as_the_page_ran(executed, path):
    notebook, raised = executed[path]
    expected = _expected(path)
    assert len(raised) == len(expected)
    differences = [f"cell {index + 1}: page {want or 'ran'}, notebook {got or 'ran'}"
                   for index, (want, got) in enumerate(zip(expected, raised)) if want != got]
    assert differences == []
    lines = check_lines(notebook)
    assert len(lines) == len(expected)  # one line after every cell of the page
    assert [line for line in lines if not line.startswith(ON_THE_CPU)] == []
    totals = notebook.cells[-1].outputs[0].text
    assert totals.startswith(f"{len(expected)} cells, checked against the CPU record (jax ")
