"""Verified platforms: every page also run on another platform, its record, each verdict in
the captions, blocks that run only there, the Platforms page, and the refusal where the
platform is absent. The "platform" of tests/roots/test-platform is this interpreter on the
CPU with VERIFIED_TEST_PLATFORM=1 set (no accelerator)."""

from __future__ import annotations

import ast
import dataclasses
import json
import re
from html import unescape
from pathlib import Path

import pytest
from verified.mistakes import UserMistake

from conftest import html_tables
from verified.model import Block, DocSettings, Environment, Output
from verified.record import RecordedBlock, source_digest
from verified.target_record import TargetBlock, TargetRecord
from verified.targets import PLATFORM, Target
from verified.verdict import NEEDS_DEVICES, verdict

pytestmark = pytest.mark.jax  # a platform is checked by asking its JAX which devices it sees

PLATFORM_DIR = Path("record") / "platform" / "stand-in"


@pytest.fixture(scope="module")
def platform_site(tmp_path_factory):
    """test-platform with its main record and its platform record made, built as HTML."""
    from conftest import target_site

    return target_site(tmp_path_factory.mktemp("platform") / "site", "platform", "platform")


def _record(copy, page: str) -> dict:
    return json.loads((copy.path / PLATFORM_DIR / f"{page}.json").read_text())


def _captions(page: str) -> list[str]:
    return [unescape(re.sub(r"<[^>]+>", "", text)).strip() for text in re.findall(
        r'<p class="cell-caption cell-target cell-target-platform[^"]*">(.*?)</p>', page, re.S)]


def test_platform_record(platform_site):
    copy, run, _ = platform_site
    assert run.app.statuscode == 0
    index = _record(copy, "index")
    assert index["target"] == "stand-in"
    assert [b["status"] for b in index["blocks"]] == [
        "ran", "ran", "ran", "failed", "failed-because", "ran", "ran"]
    assert index["blocks"][3]["error"] == "RuntimeError: UNIMPLEMENTED: the stand-in lacks this op"
    assert index["blocks"][5]["outputs"][0]["text"] == "ran where the platform is\n"
    multi = _record(copy, "multi")
    assert multi["reason"] == "the stand-in runs no page of several processes"
    assert [b["status"] for b in multi["blocks"]] == ["not-run-there"]
    # The main record holds the platform-only block as not run here.
    main = json.loads((copy.path / "record" / "index.json").read_text())
    assert main["blocks"][5]["status"] == "skipped"


def test_captions_give_every_platform_verdict(platform_site):
    copy, _, html = platform_site
    page = html.html()
    assert _captions(page) == [
        "also verified on Stand-in (same output)",
        "on Stand-in the output differs",
        "also verified on Stand-in (same output)",  # within the block's tolerance
        "on Stand-in: RuntimeError: UNIMPLEMENTED: the stand-in lacks this op",
        "runs on Stand-in (output varies, not compared)",
    ]
    # The block that did not run because the one before it fails there: said once, at the
    # top of the page, with a link to the failing block (no line number of the source).
    note = re.search(r'<p class="cell-caption chapter-target-note cell-target-platform">'
                     r'(.*?)</p>', page, re.S)
    assert note and page.index(note.group(0)) < page.index('class="cell ')
    assert unescape(re.sub(r"<[^>]+>", "", note.group(1))) == (
        "On Stand-in, 1 block of this page did not run, because a block before it fails "
        "there: in “Platform”.")
    assert 'href="#block-line-25"' in note.group(1) and 'id="block-line-25"' in page
    assert page.count("chapter-target-note") == 1
    fold = re.search(r'<details class="cell-reveal cell-matrix-output"><summary>'
                     r'Show the output on Stand-in</summary>(.*?)</details>', page, re.S)
    assert fold and "platform output" in fold.group(1)
    assert _captions(html.html("multi")) == [
        "not run on Stand-in: the stand-in runs no page of several processes"]


def test_a_platform_only_block_is_rendered_from_its_record(platform_site):
    copy, _, html = platform_site
    page = html.html()
    date = _record(copy, "index")["environment"]["date"]
    assert "ran where the platform is" in page
    # Its caption says where and when it ran (the test root's blocks import no JAX).
    assert f'<p class="cell-caption">ran on Stand-in on {date}; this machine did not run ' \
           f'it</p>' in page
    assert "The stand-in measured 42.5." in unescape(re.sub(r"<[^>]+>", "", page))
    report = json.loads((copy.path / "_build" / "execution-report.json").read_text())
    assert [row["status"] for row in report["blocks"] if row["docname"] == "index"][5] == \
        "platform-only"


def test_the_notebook_shows_and_explains_what_the_page_does(platform_site):
    """A chapter's notebook download takes a platform-only block's output from that
    platform's record, as the page does, and names the Platforms page's cause of each block
    that differs or fails there."""
    from course.downloads import block_causes, platform_causes, with_platform_outputs
    from verified.inject import result_for

    _, _, html = platform_site
    app = html.app
    shown = with_platform_outputs(app, "index", result_for(app, "index"))
    assert [o.text for o in shown.blocks[5].outputs if o.kind == "stdout"] == [
        "ran where the platform is\n"]
    assert result_for(app, "index").blocks[5].status == "skipped"  # the main run's own
    assert block_causes(app, "index", platform_causes(app)) == {
        1: "The stand-in prints its own name (the Platforms page)",
        3: "An operation the stand-in lacks (the Platforms page)"}


def test_doctest_counts_platform_only_blocks_apart(platform_site):
    copy, _, _ = platform_site
    checked = copy.build("doctest", fresh=True)
    assert "index: 6 passed, 0 failed, 1 on Stand-in only" in checked.status
    assert "\n7 passed, 0 failed, 1 on Stand-in only\n" in checked.status
    assert checked.app.statuscode == 0
    # The Platforms page publishes nothing in this build, yet its causes' labels resolve.
    assert checked.warnings == ""


def test_platforms_page_counts_agree_with_the_records(platform_site):
    copy, _, html = platform_site
    page = html.html("platforms")
    ((caption, rows),) = html_tables(page)
    assert caption == "On Stand-in"  # no block is skipped there: no such column
    # A column per verdict some block has there (none needs more devices or awaits a run).
    assert rows.pop("Chapter") == ["blocks", "same", "differs", "varies", "fails",
                                   "fails after an earlier block", "not run there",
                                   "runs there only"]
    statuses = [b["status"] for b in _record(copy, "index")["blocks"]]
    # same, differs, varies come from comparing the "ran" blocks with the main record.
    assert rows["Platform"] == ["7", "2", "1", "1", str(statuses.count("failed")),
                                str(statuses.count("failed-because")), "0", "1"]
    assert rows["Several processes"] == ["1", "0", "0", "0", "0", "0", str(
        [b["status"] for b in _record(copy, "multi")["blocks"]].count("not-run-there")), "0"]
    for cells in rows.values():  # every block has one verdict there
        assert int(cells[0]) == sum(int(cell) for cell in cells[1:])
    text = unescape(re.sub(r"<[^>]+>", "", page))
    assert "The stand-in prints its own name (1 block; taught in Platform)" in text
    assert "An operation the stand-in lacks (1 block; taught in Platform)" in text
    assert "Pages of several processes (1 block; taught in Several processes)" in text
    assert "Not yet explained" not in text
    assert 'href="index.html#block-line-15"' in page
    # The same counts as a picture, drawn at build time, and in words for its alt text.
    chart = re.search(r'<img alt="([^"]*)" class="platforms-chart" src="data:image/png;base64,'
                      r'iVBOR', page)
    assert chart and unescape(chart.group(1)) == (
        "Verdicts per chapter on Stand-in. index: 2 same, 1 differs, 1 varies, 1 fails, "
        "1 fails after an earlier block, 1 runs there only; multi: 1 not run there")


def test_a_chapter_links_a_cause_by_its_label(platform_site):
    _, _, html = platform_site
    links = [(href, unescape(re.sub(r"<[^>]+>", "", text))) for href, text in re.findall(
        r'<a class="reference internal" href="([^"]+)">(.*?)</a>', html.html(), re.S)]
    assert ("platforms.html#cause-own-output", "The stand-in prints its own name") in links


def test_edits_after_the_platform_run(platform_site):
    """An edited block is not yet verified there, and neither is any block after it (it
    starts from another state); blocks before it keep their verdicts."""
    copy, _, _ = platform_site
    copy.edit("index.md", "print(1.0001 if THERE else 1.0)", "print(1.0002 if THERE else 1.0)")
    copy.edit("multi.md", 'print("one of two")', 'print("one of the two")')
    copy.build("record", fresh=True)
    page = copy.build("html").html()
    assert _captions(page) == ["also verified on Stand-in (same output)",
                               "on Stand-in the output differs",
                               "not yet verified on Stand-in: this block is new or edited since the "
                               "Stand-in run",
                               *["not yet verified on Stand-in: an earlier block changed since "
                                 "the Stand-in run"] * 3]
    # The platform-only block has not run after the edit above it: what it printed in the
    # platform's last run is shown, and the value it glued, each marked alike as from that
    # run and not yet re-verified.
    date = _record(copy, "index")["environment"]["date"]
    mark = f"from the Stand-in run of {date}, not yet re-verified there after an edit"
    assert f'<p class="cell-caption">runs on Stand-in only: output {mark}</p>' \
        in page
    assert "ran where the platform is" in page
    assert f"The stand-in measured 42.5 ({mark})." in unescape(re.sub(r"<[^>]+>", "", page))
    # The notebook's cell cannot carry the mark: it shows no output from that run.
    from course.downloads import with_platform_outputs
    from verified.inject import result_for

    shown = copy.build("html")
    assert with_platform_outputs(shown.app, "index", result_for(shown.app, "index")
                                 ).blocks[5].outputs == []
    # A page that does not run there is known not to from what it is, edited or not.
    assert _captions(copy.build("html").html("multi")) == [
        "not run on Stand-in: the stand-in runs no page of several processes"]
    platforms = copy.build("html")
    ((_, rows),) = html_tables(platforms.html("platforms"))
    assert dict(zip(rows["Chapter"], rows["Platform"]))["not yet verified"] == "5"
    # The operation the stand-in lacks is in a block that now awaits a run there: its cause
    # says so, and is no warning.
    text = unescape(re.sub(r"<[^>]+>", "", platforms.html("platforms")))
    assert ("An operation the stand-in lacks (no block verified on Stand-in shows it now: it "
            "has not run the current code of Platform)") in text
    # A contributor without the platform builds clean under -W.
    assert platforms.warning_lines() == []
    # The platform-only block itself edited: nothing it printed is known, and the value it
    # glues waits for a run there: an error on every build until then, which says so.
    copy.edit("index.md", 'print("ran where the platform is")',
              'print("ran where the platform is", 1)')
    edited = copy.build("html")
    assert "runs on Stand-in only, and is not yet verified there" in edited.html()
    assert edited.warning_lines() == [
        "index.md:43: ERROR: glue 'platform_speed': no value yet: the block that glues it "
        "(line 35) runs on Stand-in only and is not yet verified there (it or a block above it "
        "changed since that run) [verified.glue]"]


def test_platform_doctest_passes_then_catches_a_change(site):
    copy = site("platform")
    copy.build("platform", fresh=True)
    checked = copy.build("platform-doctest", fresh=True)
    assert "platform: 7 passed, 0 failed, 1 not run there" in checked.status
    assert checked.app.statuscode == 0
    record = copy.path / PLATFORM_DIR / "index.json"
    record.write_text(record.read_text().replace("ran where the platform is",
                                                 "ran somewhere else"))
    checked = copy.build("platform-doctest", fresh=True)
    assert "platform: 6 passed, 1 failed, 1 not run there" in checked.status
    assert "index.md:35: output on Stand-in differs from its record" in checked.status
    assert checked.app.statuscode == 1


def test_a_platform_run_stops_at_once_where_the_platform_is_absent(site):
    copy = site("platform")
    with pytest.raises(UserMistake, match=r"^no TPU v5e here: JAX here sees no TPU "
                                          r"\(RuntimeError: Unable to initialize backend 'tpu'") as raised:
        copy.build("platform", fresh=True, confoverrides={"verified_platforms": ["tpu-v5e"]})
    message = str(raised.value)
    assert "\n" not in message and "JAX_PLATFORMS=''" not in message
    assert message.endswith("; run it on a TPU v5e machine with SYSTEM=1")
    assert not (copy.path / "record" / "platform").exists()
    assert not (copy.path / "_build" / ".execution-cache").exists()  # no page ran


def test_an_unknown_platform_option_is_a_located_error(site):
    copy = site("platform")
    copy.edit("index.md", ":platform: stand-in", ":platform: tpu-v9")
    copy.build("platform", fresh=True)
    build = copy.build("html", fresh=True)
    assert build.warning_lines() == [
        "index.md:35: ERROR: unknown platform 'tpu-v9' (verified_platforms names: stand-in) "
        "[verified.option]"]


def test_a_cause_no_block_shows_is_a_warning(site):
    copy = site("platform")
    copy.build("record", fresh=True)
    copy.build("platform", fresh=True)
    copy.edit("platforms.md", "processes:\n", "gone:\n  title: A cause the platform no longer "
              "shows\n  model: Nothing.\n  chapter: index\n  errors: [\"OSError: gone\"]\n"
              "processes:\n")
    build = copy.build("html")
    assert build.warning_lines() == [
        "platforms.md:3: WARNING: platforms-matrix: cause 'gone' explains no block (the "
        "platform no longer shows it) [verified.platforms]"]


def _target(devices_there: int) -> tuple[Target, TargetRecord, Block]:
    block = Block(index=0, line=5, source="mesh = jax.make_mesh((8,), ('x',))")
    recorded = TargetBlock(line=5, source_sha256=source_digest(block.source), status="failed",
                           error="ValueError: Number of devices 1 must be >= the product of "
                                 "mesh_shape (8,)")
    record = TargetRecord("p", "tpu-v5e", Environment(device_count=devices_there), [recorded])
    return Target(PLATFORM, "tpu-v5e", "TPU v5e", Path("python")), record, block


def test_a_page_that_asks_for_more_devices_needs_them():
    target, record, block = _target(1)
    main = RecordedBlock(line=5, source_sha256=source_digest(block.source), status="ran")
    item = verdict(block, (block,), main, record, target, {}, DocSettings(host_devices=8))
    assert item.kind == NEEDS_DEVICES
    assert item.text() == "needs 8 devices (TPU v5e here has 1)"
    # With enough devices there, the same failure is the block's own.
    target, record, block = _target(8)
    assert verdict(block, (block,), main, record, target, {},
                   DocSettings(host_devices=8)).kind == "fails"


def test_the_engine_has_no_import_circles():
    package = Path(__file__).resolve().parent.parent / "ext" / "verified"
    graph = {}
    for path in package.glob("*.py"):
        imported = set()
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.ImportFrom) and node.level == 1:
                imported |= ({node.module.split(".")[0]} if node.module
                             else {alias.name for alias in node.names})
        graph[path.stem] = imported

    def reach(start: str, seen: set[str]) -> set[str]:
        for name in graph.get(start, ()):
            if name not in seen:
                seen.add(name)
                reach(name, seen)
        return seen

    circles = sorted(name for name in graph if name in reach(name, set()))
    assert circles == []
    assert not {"targets", "target_record", "verdict", "render"} & graph["schedule"]


def test_a_source_path_reads_the_same_on_another_machine():
    """A TPU VM's JAX lies outside any site-packages: the path in a traceback differs, the
    output does not."""
    block = Block(index=0, line=5, source="from jax.experimental import enable_x64")
    text = "ImportError: cannot import name 'enable_x64' from 'jax.experimental' ({})"
    main = RecordedBlock(line=5, source_sha256=source_digest(block.source), status="ran",
                         outputs=[Output("error", text.format("<path>").rstrip(")"))])
    there = TargetBlock(line=5, source_sha256=main.source_sha256, status="ran",
                        outputs=[Output("error", text.format("/opt/jax/jax/experimental/x.py"))])
    target, _, _ = _target(1)
    record = TargetRecord("p", "tpu-v5e", Environment(device_count=1), [there])
    assert verdict(block, (block,), main, record, target, {}).kind == "same"
    there.outputs = [Output("error", text.format("/opt/jax/jax/other.py") + " and more")]
    assert verdict(block, (block,), main, record, target, {}).kind == "differs"


def test_a_platform_caps_a_page_s_time_and_leaves_out_other_platforms_blocks():
    from verified.model import DocJob
    from verified.targets import job_for

    blocks = (Block(index=0, line=1, source="a = 1"),
              Block(index=1, line=5, source="b = 2", platform="tpu-v5e"),
              Block(index=2, line=9, source="c = 3", platform="other"))
    job = DocJob("p", "p.md", DocSettings(budget=900.0), blocks)
    tpu = Target(PLATFORM, "tpu-v5e", "TPU v5e", Path("python"), page_limit=300.0)
    there = job_for(job, tpu)
    assert there.settings.budget == 300.0  # a page that hangs there is stopped
    assert [block.skip for block in there.blocks] == [False, False, True]
    assert [block.skip for block in job.for_platform(None).blocks] == [False, True, True]
    shorter = dataclasses.replace(job, settings=DocSettings(budget=60.0))
    assert job_for(shorter, tpu).settings.budget == 60.0  # the page's own, when shorter


def test_the_errors_page_lists_every_exception_of_every_record(tmp_path):
    """By type, with the first message line, where it was raised, a link to the block and
    its section, and an index entry by type and by message."""
    from conftest import target_site

    _, _, html = target_site(tmp_path / "site", "errors", "platform")
    assert html.warning_lines() == []
    page = html.html("errors")
    text = unescape(re.sub(r"<[^>]+>", "", page))
    assert "2 exceptions of 2 types: RuntimeError, ZeroDivisionError" in text
    assert ("UNIMPLEMENTED: the stand-in lacks this op — index, line 17 (§ Where it runs); "
            "on Stand-in") in text
    assert ("division by zero — index, line 9 (§ Dividing); on CPU, Stand-in") in text
    assert 'href="index.html#block-line-9"' in page and 'href="index.html#block-line-17"' in page
    index = unescape(re.sub(r"<[^>]+>", "", html.html("genindex")))
    assert "ZeroDivisionError" in index and "division by zero" in index


def test_a_second_platform_joins_with_configuration_only(site):
    """A platform named in conf.py (label, backend, settings) is run by `make platform
    PLATFORM=name` on its machine, and the captions, the Platforms page and the notebook's
    check pick its record up with no other change."""
    import runpy

    from conftest import ROOTS
    from course.notebook_check import check_data
    from verified.collect import collect
    from verified.record import read_record
    from verified.target_record import read_target_record
    from verified.targets import parse_platforms

    first = runpy.run_path(str(ROOTS / "test-platform" / "conf.py"))["verified_platforms"]
    both = {"verified_platforms": [*first, {
        "name": "stand-in-2", "label": "Stand-in 2", "backend": "cpu",
        "env": {"VERIFIED_TEST_PLATFORM": "2"}, "no_multiprocess": "no sockets there"}]}
    copy = site("platform")
    copy.build("record", fresh=True, confoverrides=both)
    second = copy.path / "record" / "platform" / "stand-in-2"
    for name in ("stand-in", "stand-in-2"):  # each on its own machine
        run = copy.build("platform", fresh=True,
                         confoverrides={**both, "verified_platform_run": name})
        assert run.app.statuscode == 0
        assert (copy.path / "record" / "platform" / name / "index.json").exists()
        assert second.exists() == (name == "stand-in-2")
    html = copy.build("html", fresh=True, confoverrides=both)
    assert html.warning_lines() == []
    captions = _captions(html.html())
    assert [c for c in captions if "Stand-in 2" in c] == [
        *["also verified on Stand-in 2 (same output)"] * 5,
        "runs on Stand-in 2 (output varies, not compared)"]
    assert [c for c in captions if "Stand-in 2" not in c][:2] == [
        "also verified on Stand-in (same output)", "on Stand-in the output differs"]
    (first, _), (caption, rows) = html_tables(html.html("platforms"))
    assert first == "On Stand-in"
    # The first platform's own block never runs on the second: skipped there, and counted.
    assert caption == ("On Stand-in 2 (skipped: blocks that never run there: skip-execution, "
                       "or run on another platform alone)")
    assert rows["Chapter"] == ["blocks", "same", "varies", "not run there", "skipped"]
    assert rows["Platform"] == ["7", "5", "1", "0", "1"]
    assert rows["Several processes"] == ["1", "0", "0", "1", "0"]
    # The notebook carries its record, and knows it by its settings.
    platforms = parse_platforms(both["verified_platforms"], copy.path)
    blocks = collect("index", copy.path / "index.md", platforms=frozenset(
        t.name for t in platforms)).job.blocks
    data = check_data(blocks, read_record(copy.path / "record", "index"),
                      [(t, read_target_record(copy.path / "record", t, "index"))
                       for t in platforms], {})
    second = data["records"][-1]
    assert (second["name"], second["label"], second["settings"]) == (
        "stand-in-2", "Stand-in 2", {"VERIFIED_TEST_PLATFORM": "2"})
    assert [second["blocks"][str(i)]["status"] for i in range(7)] == [
        "ran", "ran", "ran", "ran", "ran", "skipped", "ran"]  # the first's own block: skipped


def test_a_block_that_fails_elsewhere_is_captioned_in_a_reader_s_words():
    """The worker's "expected X, but the block raised nothing" stays in the record and the
    build's messages; the caption says what a reader sees."""
    from pathlib import Path as P

    from verified.render import glue_mark
    from verified.targets import PLATFORM, Target
    from verified.verdict import DEPENDS, FAILS, Verdict

    tpu = Target(PLATFORM, "tpu-v5e", "TPU v5e", P("python"))
    assert Verdict(FAILS, tpu, detail="expected jax.errors.JaxRuntimeError, but the block "
                                      "raised nothing").text() == (
        "on TPU v5e: it runs without the error shown here (JaxRuntimeError)")
    assert Verdict(FAILS, tpu, detail="expected KeyError, but the block raised "
                                      "IndexError").text() == (
        "on TPU v5e: it raises IndexError, not the KeyError shown here")
    assert Verdict(FAILS, tpu, detail="TypeError: no").text() == "on TPU v5e: TypeError: no"
    assert "line" not in Verdict(DEPENDS, tpu).text()
    assert glue_mark(1) == "+ 1 line in the notebook that copies values from this block into " \
        "the text"


def test_blocks_that_did_not_run_after_a_failing_one_are_one_line_per_target():
    from pathlib import Path as P

    from verified.model import Block
    from verified.targets import PLATFORM, VERSION, Target
    from verified.verdict import DEPENDS, NEEDS_DEVICES, Verdict, chapter_notes

    tpu = Target(PLATFORM, "tpu-v5e", "TPU v5e", P("python"))
    old = Target(VERSION, "0.4.38", "jax 0.4.38", P("python"))
    first, again, second = Block(1, 20, "a = f()"), Block(2, 30, "c = h()"), Block(4, 50, "b")
    depending = [Verdict(DEPENDS, tpu, because=second), Verdict(DEPENDS, tpu, because=again),
                 *(Verdict(DEPENDS, tpu, because=first) for _ in range(3)),
                 Verdict(DEPENDS, old)]
    notes = chapter_notes(depending, {1: "Meshes", 2: "Meshes", 4: "Collectives"})
    # Each section named once, in page order, linked to its first failing block.
    assert [note.astext() for note in notes] == [
        "On TPU v5e, 5 blocks of this page did not run, because blocks before them fail there: "
        "in “Meshes” and “Collectives”.",
        "On jax 0.4.38, 1 block of this page did not run, because a block before it fails "
        "there."]
    assert [ref["refid"] for ref in notes[0].findall(lambda n: "refid" in n)] == [
        "block-line-20", "block-line-50"]
    one = chapter_notes([Verdict(DEPENDS, tpu, because=first)], {1: "Meshes"})
    assert one[0].astext() == ("On TPU v5e, 1 block of this page did not run, because a block "
                               "before it fails there: in “Meshes”.")
    # The blocks that fail for want of devices are counted, with what was asked and had.
    short = [Verdict(NEEDS_DEVICES, tpu, devices=(8, 1)) for _ in range(2)]
    assert chapter_notes(depending, {1: "Meshes"}, short)[0].astext() == (
        "On TPU v5e, 5 blocks of this page did not run, because blocks before them fail there: "
        "in “Meshes”. 2 blocks fail there for want of devices: the page asks for 8, and TPU v5e "
        "here has 1.")
    assert chapter_notes([Verdict(DEPENDS, tpu, because=first)], {1: "Meshes"},
                         [Verdict(NEEDS_DEVICES, tpu, devices=(4, 2))])[0].astext().endswith(
        "in “Meshes”. 1 block fails there for want of devices: the page asks for 4, and TPU v5e "
        "here has 2.")


def test_each_page_s_outcome_is_worked_out_once_per_build(platform_site, monkeypatch):
    """The page's injection, the Platforms page and the Errors page read one outcome per
    page: it is worked out once per page per build, not once per reader."""
    import verified.outcome

    copy, _, _ = platform_site
    counted: dict[str, int] = {}
    compute = verified.outcome.compute_outcome

    def counting(build, docname, *args):
        counted[docname] = counted.get(docname, 0) + 1
        return compute(build, docname, *args)

    monkeypatch.setattr(verified.outcome, "compute_outcome", counting)
    build = copy.build("html", fresh=True)
    assert build.app.statuscode == 0
    assert counted == {"index": 1, "multi": 1}


def test_a_block_inserted_above_an_erroring_block_leaves_its_error_with_it(tmp_path):
    """The Errors page and the notebook's check pair a block with its record by source, as
    the page does: a block inserted above the one that raises moves it down, and both still
    name and compare that block (by position, the record's error would be the new block's)."""
    from conftest import target_site
    from course.notebook_check import check_data
    from verified.collect import collect
    from verified.record import read_record

    copy, _, _ = target_site(tmp_path / "site", "errors", "platform")
    copy.edit("index.md", "## Dividing\n", "## Dividing\n\n```{code-cell} python\n"
              "print('inserted')\n```\n")
    html = copy.build("html")
    assert html.warning_lines() == []
    page = html.html("errors")
    text = unescape(re.sub(r"<[^>]+>", "", page))
    # The platform has not run the page since: only the CPU's record verifies the block.
    assert "1 exceptions of 1 types: ZeroDivisionError" in text
    assert "division by zero — index, line 13 (§ Dividing); on CPU" in text
    assert 'href="index.html#block-line-13"' in page
    blocks = collect("index", copy.path / "index.md").job.blocks
    cpu = check_data(blocks, read_record(copy.path / "record", "index"), [], {})["records"][0]
    assert blocks[1].line == 13 and cpu["blocks"]["1"]["status"] == "expected-error"
    assert "0" not in cpu["blocks"]  # the inserted block has no record


def _read(build) -> list[str]:
    """The pages a build read."""
    return re.findall(r"reading sources\.\.\. \[ *\d+%\] (\S+)", build.status)


def test_the_generated_pages_are_read_again_only_when_what_they_show_changed(site):
    """The Platforms page reads every page's records: a build with nothing changed does not
    read it (nor draw its picture) again; a changed record does; and a warning it gives is
    given by every build until it is mended."""
    copy = site("platform")
    copy.build("record", fresh=True)
    copy.build("platform", fresh=True)
    first = copy.build("html")
    assert first.warning_lines() == [] and "platforms" in _read(first)
    assert _read(copy.build("html")) == []
    record = copy.path / PLATFORM_DIR / "index.json"
    record.write_text(record.read_text().replace('"platform output', '"platform output!'))
    assert _read(copy.build("html")) == ["index", "platforms"]
    copy.edit("platforms.md", "processes:\n", "gone:\n  title: A cause the platform no longer "
              "shows\n  model: Nothing.\n  chapter: index\n  errors: [\"OSError: gone\"]\n"
              "processes:\n")
    warning = ["platforms.md:3: WARNING: platforms-matrix: cause 'gone' explains no block (the "
               "platform no longer shows it) [verified.platforms]"]
    assert copy.build("html").warning_lines() == warning
    assert copy.build("html").warning_lines() == warning


def test_a_platform_with_no_record_yet_takes_no_other_platform_s_text(site):
    """A platform added to the configuration that has not run the course gets one line
    saying so on the Platforms page: no picture, no cause of another platform's. A cause
    awaiting a platform's next run is listed only under the platform whose record showed it."""
    import runpy

    from conftest import ROOTS

    first = runpy.run_path(str(ROOTS / "test-platform" / "conf.py"))["verified_platforms"]
    both = {"verified_platforms": [*first, {
        "name": "stand-in-2", "label": "Stand-in 2", "backend": "cpu",
        "env": {"VERIFIED_TEST_PLATFORM": "2"}}]}
    copy = site("platform")
    copy.build("record", fresh=True, confoverrides=both)
    copy.build("platform", fresh=True,
               confoverrides={**both, "verified_platform_run": "stand-in"})
    html = copy.build("html", fresh=True, confoverrides=both)
    assert html.warning_lines() == []
    page = html.html("platforms")
    text = unescape(re.sub(r"<[^>]+>", "", page))
    assert text.count("Stand-in 2 has no record yet: no page has run there (make platform "
                      "PLATFORM=stand-in-2 on a machine that has it), so nothing here speaks "
                      "for it.") == 1
    assert "Why blocks differ on Stand-in 2" not in text
    assert page.count('class="platforms-chart"') == 1  # Stand-in's alone
    assert text.count("An operation the stand-in lacks (1 block") == 1
    # Both platforms' records now, then an edit above the failing block: its cause awaits
    # Stand-in's next run, and is not Stand-in 2's, which never showed it.
    copy.build("platform", fresh=True,
               confoverrides={**both, "verified_platform_run": "stand-in-2"})
    copy.edit("index.md", "print(1.0001 if THERE else 1.0)", "print(1.0002 if THERE else 1.0)")
    copy.build("record", fresh=True, confoverrides=both)
    edited = copy.build("html", confoverrides=both)
    assert edited.warning_lines() == []
    text = unescape(re.sub(r"<[^>]+>", "", edited.html("platforms")))
    differ = text.split("Why blocks differ on Stand-in 2")
    assert len(differ) == 2
    assert "An operation the stand-in lacks (no block verified on Stand-in shows it now" \
        in differ[0]
    assert "An operation the stand-in lacks" not in differ[1]


def test_a_block_that_differs_for_two_reasons_is_listed_under_both(tmp_path):
    """A block can differ for two reasons (its own failure, then errors printed when the
    interpreter exits): every cause that explains it lists it, not only the first."""
    from conftest import target_site

    again, _, _ = target_site(tmp_path / "site", "platform", "platform")
    again.edit("platforms.md", "processes:\n", 'second-reason:\n  title: A second reason\n'
               '  model: The same block, for another reason.\n  chapter: index\n'
               '  errors: ["RuntimeError: UNIMPLEMENTED"]\nprocesses:\n')
    built = again.build("html", fresh=True)
    assert built.app.statuscode == 0, built.warnings
    page = (again.path / "_build" / "html" / "platforms.html").read_text(encoding="utf-8")
    text = re.sub(r"\s+", " ", unescape(re.sub(r"<[^>]+>", "", page)))
    for title in ("An operation the stand-in lacks", "A second reason"):
        assert re.search(re.escape(title) + r" \(1 block;.*?Shown by index, line \d+", text), title
