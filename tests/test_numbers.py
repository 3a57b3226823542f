"""Machine-rounded numbers through a real build: glued values inserted into prose, blocks
compared with their declared tolerance, the report listing those blocks, and the record's
provenance in the caption. Plain Python pages (the worker imports MyST-NB's glue)."""

from __future__ import annotations

import json
import re

import pytest


def report(build) -> list[dict]:
    return json.loads((build.outdir.parent / "execution-report.json").read_text())["blocks"]


def doctest_output(build) -> str:
    return (build.outdir / "output.txt").read_text()


def test_prose_inserts_glued_values(site):
    build = site("numbers").build()
    assert build.app.statuscode == 0 and build.warning_lines() == []
    page = build.html()
    text = re.sub(r"<[^>]+>", "", page)
    assert "The loss was 0.500 after 100 steps; the last value is visible." in text
    # display=False values are not outputs of the cell; a displayed one is, once.
    assert page.count("<pre><span></span>'visible'") == 1
    assert '<span class="glued">100</span>' in page
    # The glue lines are the prose's plumbing: the code shows without them, with a mark.
    code = "".join(re.findall(r'<div class="cell-input[^"]*">(.*?)</div>\s*</div>', page, re.S))
    assert "nudge" in code and "glue" not in re.sub(r'<p class="cell-glue-mark">.*?</p>', "",
                                                    code)
    assert page.count('<p class="cell-glue-mark">+ 3 lines in the notebook that copy values '
                      'from this block into the text</p>') == 1


def test_glue_lines_leave_the_code_a_reader_reads():
    from verified.glue_lines import without_glue

    source = ("from myst_nb import glue\nx = 1\nglue('a', x, display=False)\n\n"
              "for k in range(2):\n    glue(f'k{k}', k,\n         display=False)\n"
              "for n in range(2):\n    y = n\n    glue(f'n{n}', y)\nprint(x)")
    assert without_glue(source) == ("x = 1\n\nfor n in range(2):\n    y = n\nprint(x)", 3)
    assert without_glue("%timeit glue('a', 1)") == ("%timeit glue('a', 1)", 0)


def test_report_lists_blocks_compared_with_a_tolerance(site):
    rows = report(site("numbers").build())
    assert [row["tolerance"] for row in rows] == ["rtol=1e-06", "rtol=1e-06", None]


def test_rounding_within_the_tolerance_passes_and_exact_blocks_still_fail(site):
    copy = site("numbers")
    assert copy.build("record", fresh=True).app.statuscode == 0
    nudged = copy.build("doctest", fresh=True, confoverrides={"verified_env": {"NUDGE": "1e-9"}})
    output = doctest_output(nudged)
    # The two blocks with a tolerance (stdout and glued value) pass; the exact one does not.
    assert output.splitlines()[-1] == "2 passed, 1 failed"
    assert "index.md:22: output differs from the record" in output
    assert "number moved" not in output


def test_a_real_difference_is_caught_and_located(site):
    copy = site("numbers")
    copy.build("record", fresh=True)
    moved = copy.build("doctest", fresh=True, confoverrides={"verified_env": {"NUDGE": "1e-3"}})
    assert moved.app.statuscode == 1
    output = doctest_output(moved)
    assert output.splitlines()[-1] == "0 passed, 3 failed"
    assert ("number moved beyond the tolerance: [stdout] line 1: 0.500000000 -> 0.501000000 "
            "(|difference| 0.001, relative 0.002; allowed rtol=1e-06)") in output
    assert "number moved beyond the tolerance: [glue loss] line 1: 0.5 -> 0.501" in output


def test_drift_note_uses_the_same_comparison(site):
    copy = site("numbers")
    copy.build("record", fresh=True)
    page = copy.build(confoverrides={"verified_env": {"NUDGE": "1e-9"}}).html()
    assert page.count("differs from the output verified") == 1  # only the exact block


def test_caption_names_the_machine_of_the_record(site):
    copy = site("numbers")
    copy.build("record", fresh=True)
    environment = json.loads((copy.path / "record" / "index.json").read_text())["environment"]
    assert environment["cpu_model"] and environment["cores"] >= 1
    assert environment["isa"] in ("SSE4_2", "AVX", "AVX2", "AVX512")
    page = copy.build().html()
    assert (f"verified {environment['date']} on {environment['cpu_model']} "
            f"({environment['isa']}, {environment['cores']} core") in page


@pytest.mark.parametrize("pages", [["index"], "index"])
def test_a_partial_record_keeps_the_other_pages(site, pages):
    copy = site("basic")
    copy.build("record", fresh=True)
    other = (copy.path / "record" / "other.json").read_text()
    rerecorded = copy.build("record", fresh=True, confoverrides={"verified_pages": pages})
    assert "executing 1 page(s)" in rerecorded.status
    assert (copy.path / "record" / "other.json").read_text() == other
    checked = copy.build("doctest", fresh=True, confoverrides={"verified_pages": pages})
    assert doctest_output(checked).splitlines()[-1] == \
        "9 passed, 0 failed, 1 skipped (skip-execution)"


def test_an_unknown_page_is_refused(site):
    from verified.mistakes import UserMistake

    with pytest.raises(UserMistake, match=r"^no page 'nope' \(PAGES names pages as "):
        site("basic").build("doctest", fresh=True, confoverrides={"verified_pages": ["nope"]})


def test_glue_roles_work_in_a_parallel_build(site):
    build = site("numbers").build(parallel=2)
    assert build.app.statuscode == 0 and build.warning_lines() == []
    assert '<span class="glued">0.500</span>' in build.html()


@pytest.mark.parametrize(("text", "spec", "shown"), [
    ("np.float64(0.8999980601789376)", ".2f", "0.90"),  # NumPy 2's scalar repr
    ("Array(0.5, dtype=float32)", ".1%", "50.0%"),
    ("Array(3, dtype=int32, weak_type=True)", "d", "3"),
    ("'visible'", "", "visible"),
    ("[1, 2]", "", "[1, 2]"),
    ("1234567", ",d", "1,234,567"),
])
def test_glued_text_is_read_back_as_a_value(text, spec, shown):
    from verified.glue import format_plain_text

    assert format_plain_text(text, spec) == shown
