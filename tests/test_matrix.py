"""The version matrix: matrix records, the caption verdicts, the Versions page, the matrix
doctest. The "other version" of tests/roots/test-matrix is this interpreter with
VERIFIED_TEST_OLD=1 set (no JAX, no second virtualenv)."""

from __future__ import annotations

import json
import re
from html import unescape

import pytest

from conftest import html_tables
from verified.model import FAILED, FAILED_BECAUSE, NOT_RUN, RAN, Block, BlockResult, ErrorInfo
from verified.pages import PageVerdicts, minimum_version
from verified.target_record import assigned_names, dependent_failures
from verified.targets import VERSION, Target
from verified.verdict import FAILS, SAME, Verdict


def version(name: str, python=None) -> Target:
    return Target(VERSION, name, f"jax {name}", python)

VERSION_DIR = "jax-0.0-old"


def _blocks(*sources: str) -> tuple[Block, ...]:
    return tuple(Block(index=i, line=10 * (i + 1), source=s) for i, s in enumerate(sources))


def _name_error(index: int, name: str) -> BlockResult:
    return BlockResult(index=index, status=FAILED, error=ErrorInfo(
        "NameError", f"name '{name}' is not defined", "", ["builtins.NameError"]))


def _other_error(index: int) -> BlockResult:
    return BlockResult(index=index, status=FAILED, error=ErrorInfo(
        "AttributeError", "module 'jax' has no attribute 'shard_map'", "", []))


def test_assigned_names_top_level_only():
    source = ("import numpy as np\nimport jax.numpy\nfrom a import b as c\nx, (y, *z) = 1, (2, 3)\n"
              "def f(u):\n    inner = u\nclass K:\n    attr = 1\nfor i in range(2):\n    w = i\n"
              "with open('f') as h:\n    pass\n[q := 1 for _ in ()]\nt += 1\n%timeit f(1)\n")
    assert assigned_names(source) == {"np", "jax", "c", "x", "y", "z", "f", "K", "i", "w", "h",
                                      "q", "t"}


def test_a_name_error_on_a_failed_blocks_name_depends_on_it():
    blocks = _blocks("import jax\nimport numpy as np\nx = 1", "print(x)", "y = np.ones(2)",
                     "print(y)")
    results = [_other_error(0), _name_error(1, "x"), _name_error(2, "np"), _name_error(3, "y")]
    # Block 3 depends on block 2 (which binds y and failed only because of block 0).
    assert dependent_failures(blocks, results) == {1: 0, 2: 0, 3: 2}


def test_a_name_error_of_its_own_is_a_failure():
    blocks = _blocks("x = 1\nraise AttributeError", "print(never)", "x = 2", "print(x)")
    results = [_other_error(0), _name_error(1, "never"), BlockResult(index=2, status=RAN),
               BlockResult(index=3, status=RAN)]
    assert dependent_failures(blocks, results) == {}
    # A name an earlier block that ran binds cannot be missing because of the failed one.
    results[3] = _name_error(3, "x")
    assert dependent_failures(blocks, results) == {}


def test_blocks_left_unrun_by_a_crash_depend_on_it():
    blocks = _blocks("a = 1", "crash()", "b = 2", "c = 3")
    results = [BlockResult(index=0, status=RAN),
               BlockResult(index=1, status=FAILED, failure="the interpreter crashed (SIGSEGV)"),
               BlockResult(index=2, status=NOT_RUN), BlockResult(index=3, status=NOT_RUN)]
    assert dependent_failures(blocks, results) == {2: 1, 3: 1}


def test_minimum_version_is_the_oldest_with_no_failure():
    old, middle = version("0.4.38"), version("0.6.0")
    block = _blocks("x = 1")[0]
    page = PageVerdicts("p", (block,), {"0.4.38": [(block, Verdict(FAILS, old))],
                                      "0.6.0": [(block, Verdict(SAME, middle))]})
    assert minimum_version(page, (old, middle), "0.10.2") == "0.6.0"
    page.verdicts["0.6.0"] = [(block, Verdict(FAILS, middle))]
    assert minimum_version(page, (old, middle), "0.10.2") == "0.10.2"


@pytest.fixture(scope="module")
def matrix_site(tmp_path_factory):
    """test-matrix with its main record and its matrix record made, and built as HTML."""
    from conftest import target_site

    return target_site(tmp_path_factory.mktemp("matrix") / "site", "matrix", "matrix")


def _captions(page: str) -> list[str]:
    return [unescape(re.sub(r"<[^>]+>", "", text)).strip()
            for text in re.findall(r'<p class="cell-caption cell-target cell-target-version[^"]*">(.*?)</p>', page,
                                   re.S)]


def test_matrix_record_statuses(matrix_site):
    copy, matrix, _ = matrix_site
    data = json.loads((copy.path / "record" / "matrix" / VERSION_DIR / "index.json").read_text())
    assert [b["status"] for b in data["blocks"]] == [
        "ran", "ran", "ran", "ran", "failed", FAILED_BECAUSE, "failed", "ran"]
    assert data["blocks"][4]["error"] == "AttributeError: module 'fake' has no attribute 'renamed'"
    assert data["blocks"][5]["because"] == 4
    # The run names each file it wrote.
    assert re.search(rf"^wrote \S*record/matrix/{VERSION_DIR}/index\.json \(8 blocks\)$",
                     matrix.status, re.M)
    assert data["blocks"][6]["error"] == "NameError: name 'never_defined' is not defined"
    report = json.loads((copy.path / "_build" / "matrix" / "execution-report.json").read_text())
    assert {row["target"] for row in report["blocks"]} == {"0.0-old"}
    # The main build's report names its version too (None here: the test root runs no JAX).
    main = json.loads((copy.path / "_build" / "execution-report.json").read_text())
    assert main["builder"] == "html" and all("version" in row for row in main["blocks"])
    assert matrix.app.statuscode == 0


def test_captions_give_every_verdict(matrix_site):
    _, _, html = matrix_site
    page = html.html()
    assert _captions(page) == [
        "also verified on jax 0.0-old (same output)",
        "on jax 0.0-old the output differs",
        "also verified on jax 0.0-old (same output)",  # within the block's tolerance
        "runs on jax 0.0-old (output varies, not compared)",
        "on jax 0.0-old: AttributeError: module 'fake' has no attribute 'renamed'",
        "on jax 0.0-old: NameError: name 'never_defined' is not defined",
        "also verified on jax 0.0-old (same output)",  # a block with no output has it too
    ]
    # The other version's output is one click away.
    fold = re.search(r'<details class="cell-reveal cell-matrix-output"><summary>'
                     r'Show the output on jax 0.0-old</summary>(.*?)</details>', page, re.S)
    assert fold and "old output" in fold.group(1)


def test_versions_page_counts_agree_with_the_records(matrix_site):
    copy, _, html = matrix_site
    ((caption, rows),) = html_tables(html.html("versions"))
    assert caption.startswith("On jax 0.0-old")
    header = rows.pop("Chapter")
    assert header[:6] == ["blocks", "same", "differs", "varies", "fails",
                          "fails after an earlier block"]
    assert "not yet verified" not in header  # no block awaits a run there
    matrix = json.loads((copy.path / "record" / "matrix" / VERSION_DIR / "index.json").read_text())
    statuses = [b["status"] for b in matrix["blocks"]]
    counts = dict(zip(header, rows["Matrix"]))
    assert counts["blocks"] == str(len(statuses))
    ran = sum(s in ("ran", "expected-error") for s in statuses)
    assert int(counts["same"]) + int(counts["differs"]) + int(counts["varies"]) == ran
    assert [counts[title] for title in header[1:6]] == [
        "3", "1", "1", str(statuses.count("failed")), str(statuses.count(FAILED_BECAUSE))]
    assert counts["needs jax"] == "?"  # it fails on 0.0-old, and the test root records no jax
    assert int(counts["blocks"]) == sum(int(counts[title]) for title in header[1:-1])
    text = unescape(re.sub(r"<[^>]+>", "", html.html("versions")))
    assert "Matrix: ? because the verified record names no jax version." in text
    page = html.html("versions")
    assert "fake.old -&gt; fake.renamed" in page or "fake.old -> fake.renamed" in page
    assert 'href="index.html#block-line-30"' in page


def test_edits_after_the_matrix_run(matrix_site):
    copy, _, _ = matrix_site
    # Prose: verdicts unchanged. Code: that block alone is "not yet verified".
    copy.edit("index.md", "# Matrix", "# Matrix\n\nNew prose.")
    copy.edit("index.md", 'print("old output" if OLD else "new output")',
              'print("old output!" if OLD else "new output!")')
    copy.build("record", fresh=True)  # the main record follows the edit; the matrix does not
    page = copy.build("html").html()
    # The edited block, and every block after it (it starts from another state), await the
    # next matrix run; the block before it keeps its verdict.
    assert _captions(page) == ["also verified on jax 0.0-old (same output)",
                               "not yet verified on jax 0.0-old: this block is new or edited since the "
                               "jax 0.0-old run",
                               *["not yet verified on jax 0.0-old: an earlier block changed "
                                 "since the jax 0.0-old run"] * 6]
    versions = copy.build("html").html("versions")
    ((_, rows),) = html_tables(versions)
    counts = dict(zip(rows["Chapter"], rows["Matrix"]))
    assert counts["not yet verified"] == "7" and counts["needs jax"] == "?"
    # The ? says why, and what verifies the blocks again.
    assert ("Matrix: ? because 7 blocks not yet verified on jax 0.0-old (changed since that "
            "run, or after a change); make matrix PAGES=index verifies them.") in \
        unescape(re.sub(r"<[^>]+>", "", versions))


def test_matrix_doctest_passes_then_catches_a_change(tmp_path):
    from conftest import ROOTS, Site
    import shutil

    shutil.copytree(ROOTS / "test-matrix", tmp_path / "site")
    copy = Site(tmp_path / "site")
    copy.build("matrix", fresh=True)
    checked = copy.build("matrix-doctest", fresh=True)
    assert "matrix: 8 passed, 0 failed" in checked.status
    assert checked.app.statuscode == 0
    record = copy.path / "record" / "matrix" / VERSION_DIR / "index.json"
    record.write_text(record.read_text().replace("old output", "older output"))
    checked = copy.build("matrix-doctest", fresh=True)
    assert "matrix: 7 passed, 1 failed" in checked.status
    assert "index.md:13: output on jax 0.0-old differs from its record" in checked.status
    assert checked.app.statuscode == 1


def test_record_keeps_the_matrix_records(tmp_path):
    from conftest import ROOTS, Site
    import shutil

    shutil.copytree(ROOTS / "test-matrix", tmp_path / "site")
    copy = Site(tmp_path / "site")
    copy.build("matrix", fresh=True)
    copy.build("record", fresh=True)
    assert (copy.path / "record" / "matrix" / VERSION_DIR / "index.json").exists()


def test_the_landing_statement_names_the_matrix_and_ignores_its_records(tmp_path):
    from course.landing import record_listing, verification_statement
    from verified.model import Environment
    from verified.record import Record

    env = Environment(python="3.11.7", jax="0.10.2", backend="cpu", cpu_count=2,
                      date="2026-12-03")
    text = verification_statement([Record("a", env, [])], None, ("0.4.38",))
    assert "Every snippet is also run on jax 0.4.38: its caption says whether" in text
    (tmp_path / "part1").mkdir()
    (tmp_path / "part1" / "a.json").write_text("{}")
    (tmp_path / "matrix" / "jax-0.4.38" / "part1").mkdir(parents=True)
    (tmp_path / "matrix" / "jax-0.4.38" / "part1" / "a.json").write_text("{}")
    assert record_listing(tmp_path) == ["part1/a"]


def test_matrix_records_hold_no_local_path_time_or_id(tmp_path):
    from verified.target_record import local_paths, quiet_log

    venv = tmp_path / ".venv-jax-9.9"
    clean = local_paths(version("9.9", venv / "bin" / "python"))
    assert clean(f"ImportError: cannot import name 'AxisType' from 'jax.sharding' "
                 f"({venv}/lib/python3.11/site-packages/jax/sharding.py)") == (
        "ImportError: cannot import name 'AxisType' from 'jax.sharding' (<path>)")
    assert clean(f"Command '['{venv}/bin/python', '/tmp/tmpab12/child.py']' died") == (
        "Command '['.venv-jax-9.9/bin/python', '<path>']' died")
    assert quiet_log("WARNING:2026-12-03 17:35:16,998:jax._src.pjit:1179: f id=139878503651808") \
        == "WARNING:<time>:jax._src.pjit:1179: f id=<id>"


def test_matrix_varies_names_blocks_by_page_and_source():
    from types import SimpleNamespace

    from verified.verdict import as_on_target

    config = SimpleNamespace(matrix_varies={"p": ("faster than",)})
    timed, plain = _blocks("print('faster than compiling:', a < b)", "print(1)")
    old = version("0.4.38")
    assert as_on_target(config, "p", timed, old).varies
    assert not as_on_target(config, "p", plain, old).varies
    assert not as_on_target(config, "other", timed, old).varies
