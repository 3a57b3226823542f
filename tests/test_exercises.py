"""Exercises: the starter is shown and never run, the solution runs folded, the check runs
after it and fails the build when the solution is wrong; the notebook drops the solution."""

from __future__ import annotations

import re

import nbformat

from course.downloads import make_notebook
from verified.model import BlockResult, DocResult, Output

from test_course import ENV


def test_exercise_pages(site):
    build = site("exercises").build()
    assert build.app.statuscode == 1
    assert build.warning_lines() == [
        "structure.md:3: ERROR: exercise-starter must be followed directly by an "
        "exercise-solution block [verified.exercise]",
        "structure.md:14: ERROR: exercise-solution must be followed directly by an "
        "exercise-check block [verified.exercise]",
        "structure.md:21: ERROR: a block has one exercise role, not exercise-check, "
        "exercise-solution [verified.exercise]",
        "structure.md:27: ERROR: exercise-check must follow directly an exercise-solution "
        "block (the check tests the solution) [verified.exercise]",
        "wrong.md:10: ERROR: code-cell failed: the block raised AssertionError",
    ]

    good = build.html("good")
    assert "Starter: write your code here" in good
    assert "NotImplementedError" in good  # the starter's code is shown
    solution = re.search(r'<details class="cell-reveal exercise-solution">'
                         r'<summary>Show solution</summary>(.*?)</details>', good, re.S)
    assert solution and "NotImplementedError" not in solution.group(1)
    assert "solution defined" in solution.group(1)  # its output is folded with it
    after = good[solution.end():]
    assert "all checks passed" in after and "exercise-solution" not in after

    assert "double(3) should be 6" in build.html("wrong")


def test_notebook_keeps_starter_and_check_and_drops_the_solution(tmp_path):
    page = tmp_path / "page.md"
    page.write_text((__import__("conftest").ROOTS / "test-exercises" / "good.md").read_text())
    result = DocResult("page", "k", ENV, [
        BlockResult(0, "skipped", 0.0, []),
        BlockResult(1, "ran", 0.1, [Output("stdout", "solution defined\n")]),
        BlockResult(2, "ran", 0.1, [Output("stdout", "all checks passed\n")]),
    ])
    notebook = make_notebook(page, result)
    nbformat.validate(notebook)
    starter, check = [c for c in notebook.cells if c.cell_type == "code"]
    assert "raise NotImplementedError" in starter.source and starter.outputs == []
    assert "return 2 * x" not in "".join(c.source for c in notebook.cells)
    assert check.metadata["tags"] == ["exercise-check", "raises-exception"]
    assert check.outputs == [] and check.execution_count is None

    namespace: dict = {}
    exec(starter.source, namespace)
    try:
        exec(check.source, namespace)
    except NotImplementedError:
        pass
    else:
        raise AssertionError("the check passed without a solution")
