"""Course features: chapters as data, assigned reading and its coverage check, the API role,
the generated verification statement, the "Down the stack" aside, and notebook downloads."""

from __future__ import annotations

import json
import re

import nbformat
import pytest

from course.downloads import make_notebook
from course.landing import verification_statement
from course.readings import load_registry
from verified.model import (BlockResult, DocResult, Environment, ErrorInfo, Output,
                            WarningRecord)
from verified.record import Record


def test_registry_covers_the_official_series():
    registry = load_registry(str(__import__("course.readings").readings.DEFAULT_REGISTRY))
    required = [p for p in registry.pages.values() if p.required]
    assert {p.level for p in required} == {"101", "201", "301", "Sharp Bits"}
    assert len(required) == 33
    jit = registry.pages["201/jit"]
    assert jit.url == "https://docs.jax.dev/en/latest/201/jit.html" and jit.line > 0
    assert registry.pages["the-training-cookbook"].required is False


def test_warnings_are_located(site):
    build = site("course").build()
    lines = build.warning_lines()
    assert lines == [
        "part1/02-two.md:5: WARNING: unknown official page 'nosuch/page'; known pages are listed in readings.yaml [course.reading]",
        "part1/02-two.md:9: WARNING: assigned reading 'b/extra' says nothing about what to read it for [course.reading]",
        "readings.yaml:4: WARNING: official page 'a/two' (Page two) is not assigned in any chapter [course.coverage]",
        "part1/01-one.md:9: WARNING: 'jax.tree_map' is not an API of the installed JAX [course.api]",
    ]


def test_full_coverage_gives_no_coverage_warning(site):
    copy = site("course")
    copy.edit("part1/02-two.md", "```{reading} nosuch/page", "```{reading} a/two")
    lines = copy.build().warning_lines()
    assert not any("course.coverage" in line for line in lines)
    assert not any("nosuch" in line for line in lines)


def test_coverage_check_can_be_switched_off(site):
    build = site("course").build(confoverrides={"course_require_all_readings": False})
    assert not any("course.coverage" in line for line in build.warning_lines())


def test_assigned_reading_box_and_api_links(site):
    page = site("course").build().html("part1/01-one")
    assert re.search(r'<div class="assigned-reading admonition">\s*<p class="admonition-title">'
                     r'Assigned reading</p>\s*<p class="assigned-reading-page"><a class="reference '
                     r'external" href="https://docs.example.org/a/one.html"><strong>Page one</strong>'
                     r'</a> · JAX 101</p>\s*<p>Read it for the first idea.</p>', page)
    assert 'href="https://docs.jax.dev/en/latest/_autosummary/jax.jit.html"' in page
    assert ('href="https://docs.jax.dev/en/latest/jax.sharding.html#jax.sharding.NamedSharding"'
            in page)


def test_chapter_cards_and_reading_map(site):
    build = site("course").build()
    index = build.html()
    cards = re.findall(r'data-chapter="(part1/0\d-\w+)"><div class="sd-card-body"><p '
                       r'class="sd-card-title sd-font-weight-bold"><a class="sd-stretched-link" '
                       r'href="([^"]+)">([^<]+)</a></p><p class="sd-card-text">(.+?)</p>', index)
    assert cards == [
        ("part1/01-one", "part1/01-one.html", "ch 01 · One", "The first thesis, in one <code>sentence</code>."),
        ("part1/02-two", "part1/02-two.html", "ch 02 · Two", "The second thesis."),
    ]
    chapters = (build.outdir / "_static" / "course-chapters.js").read_text()
    data = json.loads(chapters.removeprefix("window.COURSE_CHAPTERS = ").rstrip(";\n"))
    assert [(c["docname"], c["uri"]) for c in data] == [
        ("part1/01-one", "part1/01-one.html"), ("part1/02-two", "part1/02-two.html")]
    table = build.html("map")
    assert re.search(r'Page one</a></p></td>\s*<td><p><a class="reference external" '
                     r'href="part1/01-one.html">01 One</a></p>', table)
    assert "required, not yet assigned" in table
    assert re.search(r'An extra page</a></p></td>\s*<td><p><a class="reference external" '
                     r'href="part1/02-two.html">02 Two</a>', table)


def test_chapter_page_has_progress_control_and_downloads(site):
    build = site("course").build()
    page = build.html("part1/01-one")
    assert ('<div class="course-progress-control" data-chapter="part1/01-one" hidden></div>'
            in page)
    assert 'href="../_downloads/chapters/part1/01-one.ipynb"' in page
    notebook = nbformat.read(build.outdir / "_downloads/chapters/part1/01-one.ipynb", 4)
    nbformat.validate(notebook)
    helper, setup, cell, totals = [c for c in notebook.cells if c.cell_type == "code"]
    assert [helper.metadata["tags"], setup.metadata["tags"], totals.metadata["tags"]] == [
        ["generated-check", "hide-input"], ["generated-setup"], ["generated-totals"]]
    assert cell.source == 'print("one")'
    assert cell.outputs == [nbformat.v4.new_output("stream", name="stdout", text="one\n")]
    # The prose as the page shows it: the reading box, API links, the aside.
    prose = "\n".join(c.source for c in notebook.cells if c.cell_type == "markdown")
    assert "{reading}" not in prose and "{api}" not in prose
    assert "Links: [`jax.jit`](https://docs.jax.dev/en/latest/_autosummary/jax.jit.html)" in prose
    assert "> **Assigned reading** · [**" in prose and "> Read it for the first idea." in prose
    assert "> **Down the stack**\n>\n> XLA fuses these two operations." in prose
    assert (build.outdir / "_downloads/chapters/part1/01-one.md").read_text().startswith("# 01 · One")


def test_a_chapter_without_a_thesis_is_a_warning(site):
    copy = site("course")
    copy.edit("part1/02-two.md", "> The second thesis.", "The second thesis.")
    assert ("part1/02-two.md:1: WARNING: a chapter page needs a title '# NN · Title' and its "
            "thesis as the first block quote [course.chapter]") in copy.build().warning_lines()


@pytest.mark.parametrize(("url", "expected"), [
    ("", "The kernel path, the sibling course, teaches this layer."),
    ("https://kernels.example.org/", 'href="https://kernels.example.org/fusion.html"'),
])
def test_down_the_stack_links_only_when_configured(site, url, expected):
    page = site("course").build(confoverrides={"course_kernel_path_url": url}).html("part1/01-one")
    assert "XLA fuses these two operations." in page and expected in page
    if not url:
        assert "kernel path teaches this layer with its own hands" not in page


ENV = Environment(python="3.11.7", jax="0.10.2", jaxlib="0.10.2", backend="cpu",
                  device_count=1, cpu_count=2, platform="linux-x86_64", date="2026-12-02")


def test_verification_statement_is_made_from_the_record():
    records = [Record("a", ENV, []), Record("b", Environment(**{**vars(ENV), "device_count": 8,
                                                                "date": "2026-12-03"}), [])]
    assert verification_statement(records, 8) == (
        "Every snippet ran before it was printed (jax 0.10.2 on CPU, 2 cores, 2026-12-02 to "
        "2026-12-03; eight host devices for the sharding chapter), and printed outputs are real "
        "outputs. Where the current API differs from the verified one, the caption says so.")
    assert "no page has been verified yet" in verification_statement([], None)
    machine = {"cpu_model": "AMD EPYC", "isa": "AVX2", "cores": 2}
    on_one = [Record(name, Environment(**{**vars(ENV), **machine}), []) for name in "ab"]
    assert "(jax 0.10.2 on CPU, AMD EPYC (AVX2, 2 cores), 2026-12-02)" in \
        verification_statement(on_one, None)


def test_verification_statement_follows_the_record(site):
    copy = site("course")
    before = copy.build().html()
    assert "no page has been verified yet" in before
    copy.build("record", fresh=True)
    after = copy.build().html()
    assert re.search(r"Every snippet ran before it was printed \(Python 3\.11\.\d+, "
                     r".+? \((AVX\w*|SSE4_2), \d+ cores?\), \d{4}-\d\d-\d\d\)", after)


def test_notebook_outputs_of_every_kind(tmp_path):
    page = tmp_path / "page.md"
    page.write_text("# P\n\n```{code-cell} python\nx\n```\n\n```{code-cell} python\ny\n```\n")
    result = DocResult("page", "k", ENV, [
        BlockResult(0, "ran", 0.1, [Output("stdout", "out\n"), Output("result", "42"),
                                    Output("display", "<Figure>", {"image/png": "iVBOR"})],
                    [WarningRecord("DeprecationWarning", "old")]),
        BlockResult(1, "expected-error", 0.1, [Output("error", "Traceback\nNameError: y")], [],
                    ErrorInfo("NameError", "y", "Traceback\nNameError: y")),
    ])
    notebook = make_notebook(page, result)
    nbformat.validate(notebook)
    first, second = [c for c in notebook.cells if c.cell_type == "code"]
    assert [o.output_type for o in first.outputs] == ["stream", "execute_result", "display_data",
                                                       "stream"]
    assert first.outputs[2].data["image/png"] == "iVBOR"
    assert first.outputs[3].text == "DeprecationWarning: old\n"
    assert second.outputs[0].ename == "NameError" and second.execution_count == 2


def _check_for(page, settings=None):
    from course.downloads import NotebookCheck
    from course.notebook_check import check_data
    from verified.collect import collect
    from verified.model import DocSettings

    blocks = collect("page", page, platforms=frozenset({"tpu-v5e"})).job.blocks
    return NotebookCheck({}, settings or DocSettings(), check_data(blocks, None, [], {}))


def test_notebook_run_all_goes_past_expected_errors_and_meets_platform_blocks(tmp_path):
    """nbclient and nbconvert go on past a cell tagged raises-exception (MyST-NB's tag);
    a platform-only block runs where its check finds that platform, so it is not skipped;
    without the check, nothing would know where the notebook runs: run-all skips it."""
    page = tmp_path / "page.md"
    page.write_text("# P\n\n```{code-cell} python\nx = 1\n```\n\n"
                    "```{code-cell} python\n:raises: TypeError\n\nx[0] = 2\n```\n\n"
                    "```{code-cell} python\n:platform: tpu-v5e\n\ny = 2\n```\n")
    notebook = make_notebook(page, None, _check_for(page))
    nbformat.validate(notebook)
    _, _, everywhere, raising, tpu_only, _ = [c for c in notebook.cells if c.cell_type == "code"]
    assert everywhere.metadata.get("tags", []) == []
    assert raising.metadata["tags"] == ["raises-exception"]
    assert tpu_only.metadata.get("tags", []) == []
    unchecked = [c for c in make_notebook(page, None).cells if c.cell_type == "code"]
    assert unchecked[2].metadata["tags"] == ["skip-execution"]


def test_notebook_sets_up_what_the_worker_set_up_but_the_platform(tmp_path, monkeypatch):
    """The set-up cell sets exactly the variables the engine gave the page, but the one that
    pins the course's own runs to the CPU: the reader's notebook runs where it is."""
    import ast

    from course.downloads import notebook_environment
    from verified.driver import worker_env
    from verified.model import DocJob, DocSettings

    monkeypatch.delenv("XLA_FLAGS", raising=False)
    settings = DocSettings(host_devices=8, env=(("EXTRA", "1"),))
    environment = notebook_environment(settings, {"JAX_PLATFORMS": "cpu"})
    worker = worker_env(DocJob("p", "p.md", settings, ()), {"JAX_PLATFORMS": "cpu"},
                        str(tmp_path / "private"))
    assert {name: worker[name] for name in environment} == environment
    assert "JAX_PLATFORMS" not in environment and environment["EXTRA"] == "1"
    assert environment["JAX_NUM_CPU_DEVICES"] == "8"
    assert "--xla_force_host_platform_device_count=8" in environment["XLA_FLAGS"]

    page = tmp_path / "page.md"
    page.write_text("# P\n\nText.\n\n```{code-cell} python\nimport jax\n```\n")
    check = _check_for(page, settings)
    check.environment = environment
    notebook = make_notebook(page, None, check)
    nbformat.validate(notebook)
    title, note, helper, setup, code, totals = notebook.cells
    assert title.cell_type == "markdown" and setup.metadata["tags"] == ["generated-setup"]
    assert helper.metadata["jupyter"] == {"source_hidden": True}
    assert code.source == "import jax"
    call = ast.parse(setup.source).body[-1].value
    assert ast.literal_eval(call.args[0]) == environment
    assert {k.arg: ast.unparse(k.value) for k in call.keywords} == {
        "host_devices": "8", "platform": "PLATFORM"}
    assert "builds meshes of 8 devices" in setup.source
    assert len(make_notebook(page, None).cells) == 2  # no check: no generated cell


def test_the_notebook_opens_with_a_note_and_a_small_payload(tmp_path):
    """What a viewer that ignores ``source_hidden`` shows first: a visible note on the two
    set-up cells, then a helper whose payload is compressed; run, it gives back the modules
    and the page's data as they are."""
    import base64
    import zlib

    from course.notebook_check import module_sources

    page = tmp_path / "page.md"
    page.write_text("# P\n\nText.\n\n```{code-cell} python\nx = 1\n```\n")
    check = _check_for(page)
    title, note, helper, setup = make_notebook(page, None, check).cells[:4]
    assert note.cell_type == "markdown" and "jupyter" not in note.metadata
    assert "hide" not in " ".join(note.metadata.get("tags", []))
    assert note.source.startswith("**Before you run a cell.** The next two code cells are "
                                  "this notebook's own check")
    assert "Run both first, in a fresh kernel" in note.source
    assert helper.metadata["tags"][0] == "generated-check"
    assert setup.metadata["tags"] == ["generated-setup"]
    carried = json.dumps([module_sources(), check.data], ensure_ascii=False, sort_keys=True)
    assert len(helper.source) < len(carried) / 2
    payload = re.search(r'_course_check_load\("([^"]+)"\)', helper.source).group(1)
    assert json.loads(zlib.decompress(base64.b85decode(payload))) == json.loads(carried)


@pytest.mark.parametrize("chapter", ["part1/02-tracing", "part2/11-performance",
                                     "part2/12-training-run"])
def test_a_chapter_s_helper_cell_stays_small(chapter):
    """The course's notebooks from their records: the helper under 64 KB (it was 150 KB in
    02, and a platform's figure alone would be 143 KB in 12)."""
    import runpy

    from conftest import ROOT
    from course.notebook_check import check_data, helper_cell
    from verified.collect import collect
    from verified.record import BUILTIN_NORMALIZERS, read_record
    from verified.target_record import read_target_record
    from verified.targets import parse_platforms, parse_versions

    conf = runpy.run_path(str(ROOT / "conf.py"))
    targets = (*parse_versions(conf.get("verified_matrix", []), ROOT),
               *parse_platforms(conf.get("verified_platforms", []), ROOT))
    found = collect(chapter, ROOT / "source" / f"{chapter}.md", frozenset(BUILTIN_NORMALIZERS),
                    platforms=frozenset(t.name for t in targets if t.kind == "platform"))
    data = check_data(found.job.blocks, read_record(ROOT / "record", chapter),
                      [(t, read_target_record(ROOT / "record", t, chapter)) for t in targets],
                      {})
    assert len(helper_cell(data).source) < 64_000


def test_only_cells_that_raise_in_the_course_s_own_run_are_tagged(tmp_path):
    """A cell raises on purpose (``:raises:``) or in the main record: tagged. One that raises
    only on another platform or version: not tagged (its check line says so there)."""
    from course.downloads import NotebookCheck
    from course.notebook_check import check_data, raising_blocks
    from verified.collect import collect
    from verified.model import DocSettings
    from verified.record import RecordedBlock, source_digest
    from verified.target_record import TargetBlock, TargetRecord
    from verified.targets import PLATFORM, Target

    page = tmp_path / "page.md"
    page.write_text("# P\n\n```{code-cell} python\nx = 1\n```\n\n"
                    "```{code-cell} python\n:raises: TypeError\n\nx[0] = 2\n```\n\n"
                    "```{code-cell} python\ny = x + 1\n```\n\n"
                    "```{code-cell} python\nz = y + 1\n```\n")
    blocks = collect("page", page).job.blocks

    def main(*statuses):
        return Record("page", ENV, [RecordedBlock(b.line, source_digest(b.source), status)
                                    for b, status in zip(blocks, statuses)])

    ran = main("ran", "expected-error", "ran", "ran")
    assert raising_blocks(blocks, ran) == frozenset()
    assert raising_blocks(blocks, main("ran", "expected-error", "failed", "failed-because")) \
        == {2, 3}
    assert raising_blocks(blocks, None) == frozenset()
    # Block 2 fails on a platform: the notebook compares with that record there, untagged.
    target = Target(PLATFORM, "stand-in", "Stand-in", tmp_path / "python")
    statuses = ("ran", "expected-error", "failed", "ran")
    there = TargetRecord("page", "stand-in", ENV,
                         [TargetBlock(b.line, source_digest(b.source), status)
                          for b, status in zip(blocks, statuses)])
    data = check_data(blocks, ran, [(target, there)], {})
    notebook = make_notebook(page, None, NotebookCheck({}, DocSettings(), data,
                                                       raising_blocks(blocks, ran)))
    tags = [c.metadata.get("tags", []) for c in notebook.cells if c.cell_type == "code"][2:-1]
    assert tags == [[], ["raises-exception"], [], []]
