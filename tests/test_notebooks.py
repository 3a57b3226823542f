"""Every chapter's notebook download runs top to bottom in a fresh Jupyter kernel, as the page
ran: the same cells succeed and the declared expected errors raise the same exception type;
an exercise's check, without its solution, raises the starter's NotImplementedError.

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

from course.downloads import make_notebook
from verified.collect import collect
from verified.driver import page_environment
from verified.record import BUILTIN_NORMALIZERS

ROOT = Path(__file__).resolve().parent.parent
CHAPTERS = sorted(path for path in (ROOT / "source").glob("part*/[0-9][0-9]-*.md"))
CONF = runpy.run_path(str(ROOT / "conf.py"))
CONFIGURED_ENV = CONF.get("verified_env", {})
PLATFORMS = frozenset(CONF.get("verified_platforms", ()))

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


def _run(path: Path, workdir: Path) -> tuple[nbformat.NotebookNode, list[str | None]]:
    settings = collect(_docname(path), path, platforms=PLATFORMS).job.settings
    notebook = make_notebook(path, None, page_environment(settings, CONFIGURED_ENV))
    workdir.mkdir()
    client = NotebookClient(notebook, timeout=900, kernel_name="python3", allow_errors=True,
                            resources={"metadata": {"path": str(workdir)}})
    client.execute()
    code = [cell for cell in notebook.cells if cell.cell_type == "code"]
    assert "generated-setup" in code[0].metadata.get("tags", [])
    raised = []
    for cell in code[1:]:
        errors = [out for out in cell.get("outputs", []) if out.output_type == "error"]
        raised.append(errors[0].ename if errors else None)
    return notebook, raised


@pytest.fixture(scope="module")
def executed(tmp_path_factory):
    """Every chapter notebook, executed two at a time (the machine's two cores)."""
    root = tmp_path_factory.mktemp("notebooks")
    with ThreadPoolExecutor(max_workers=2) as pool:
        runs = {path: pool.submit(_run, path, root / path.stem) for path in CHAPTERS}
        return {path: future.result() for path, future in runs.items()}


@pytest.mark.parametrize("path", CHAPTERS, ids=_docname)
def test_notebook_runs_as_the_page_ran(executed, path):
    _, raised = executed[path]
    expected = _expected(path)
    assert len(raised) == len(expected)
    differences = [f"cell {index + 1}: page {want or 'ran'}, notebook {got or 'ran'}"
                   for index, (want, got) in enumerate(zip(expected, raised)) if want != got]
    assert differences == []
