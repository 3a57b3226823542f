"""The verified record stands in for running a page: a clone with a record and no _build
executes nothing; an edit, another version or FRESH runs the page; doctest always runs.
The roots are plain Python pages; "a fresh clone" is a root whose record was made, with
_build (the execution cache) removed."""

from __future__ import annotations

import json
import re
import shutil
import subprocess
from pathlib import Path

import pytest

from verified.collect import job_key
from verified.model import (Block, BlockResult, DocJob, DocResult, DocSettings, Environment,
                            Output, ProcessResult)
from verified.record import make_record, read_record, write_record
from verified.replay import IMAGES, prune_images, replay, write_images

ROOT = Path(__file__).resolve().parent.parent
BASIC_BLOCKS = 12  # 10 in index.md (one skip-execution), 2 in other.md


def report(build) -> dict:
    return json.loads((build.outdir.parent / "execution-report.json").read_text())


def statuses(build) -> set[tuple[str, str]]:
    return {(row["docname"], row["status"]) for row in report(build)["blocks"]}


def cloned(site, name: str = "basic"):
    """A copy of a root with its record made and _build removed, as a fresh clone has it."""
    copy = site(name)
    assert copy.build("record", fresh=True).app.statuscode == 0
    shutil.rmtree(copy.path / "_build")
    return copy


def test_a_fresh_clone_builds_from_the_record_with_nothing_executed(site):
    copy = cloned(site)
    build = copy.build()
    assert build.app.statuscode == 0 and build.warning_lines() == []
    assert "executing" not in build.status
    assert (f"{BASIC_BLOCKS} blocks: 0 ran, 0 cached, 11 from the record, 0 did not run cleanly "
            f"(1 skipped)") in build.status
    assert "2 page(s) shown from the verified record" in build.status
    assert statuses(build) == {("index", "from-record"), ("index", "skipped"),
                               ("other", "from-record")}
    record = json.loads((copy.path / "record" / "index.json").read_text())
    environment = record["environment"]
    page = build.html()
    # Every output is the recorded one, the varies block's too (a new run prints another).
    assert f"<pre><span></span>{record['blocks'][9]['outputs'][0]['text'].strip()}\n" in page
    # The figure comes from the record's images.
    assert re.search(r'class="cell-figure" src="data:image/png;base64,iVBOR', page)
    assert list((copy.path / "record" / IMAGES).glob("*.png"))
    # Captions say where and when it ran: the record's machine.
    machine = f"on {environment['cpu_model']} ({environment['isa']}"
    assert page.count(f"· verified {environment['date']} {machine}") == 8
    assert f"· recorded {environment['date']} {machine}" in page  # the varies block
    assert "varies from run to run" in page and "not yet in the verified record" not in page


def test_a_rebuild_from_the_record_reads_nothing_again(site):
    copy = cloned(site)
    copy.build()
    again = copy.build()
    assert "executing" not in again.status
    assert "0 added, 0 changed, 0 removed" in again.status  # no page read again
    assert f"0 ran, 0 cached, 11 from the record, 0 did not run cleanly" in again.status


def test_an_edited_block_executes_its_page_and_the_others_come_from_the_record(site):
    copy = cloned(site)
    copy.edit("other.md", "value = 7", "value = 8")
    build = copy.build()
    assert build.app.statuscode == 0
    assert "executed other: 2 blocks" in build.status and "executed index" not in build.status
    assert "1 page(s) out of date with their record" in build.status
    assert "other: block 2 (line 9) is not the recorded one" in build.status
    assert report(build)["out_of_date_with_record"] == {
        "other": "block 2 (line 9) is not the recorded one"}
    assert statuses(build) == {("index", "from-record"), ("index", "skipped"),
                               ("other", "ran"), ("other", "expected-error")}
    page = build.html("other")
    assert "<pre><span></span>48\n" in page  # the edited block's live output
    assert "not yet in the verified record" in page
    # A prose edit next: the page is read again and shown from the execution cache, and the
    # build says so instead of claiming to execute it.
    copy.edit("other.md", "# Other", "# Other, edited")
    again = copy.build()
    assert "executed other" not in again.status
    assert ("1 page(s) out of date with their record, shown from the execution cache"
            in again.status)


def test_an_edited_option_executes_its_page(site):
    copy = cloned(site)
    copy.edit("other.md", ":raises: NameError", ":raises: NameError\n:timeout: 30")
    build = copy.build()
    assert "executed other: 2 blocks" in build.status and "executed index" not in build.status
    assert ("other: a block's execution options, the page's settings or verified_env "
            "changed") in build.status


@pytest.mark.parametrize(("field", "value", "why"), [
    ("jax", "0.4.38", "recorded with jax 0.4.38, this build has "),
    ("python", "3.10.12", "recorded with Python 3.10, this build has 3."),
    ("platform", "linux-aarch64", "recorded with platform linux-aarch64, this build has linux-"),
])
def test_another_version_in_the_record_executes_its_page(site, field, value, why):
    copy = cloned(site)
    path = copy.path / "record" / "other.json"
    data = json.loads(path.read_text())
    data["environment"][field] = value
    path.write_text(json.dumps(data))
    build = copy.build()
    assert "executed other: 2 blocks" in build.status and "executed index" not in build.status
    assert f"other: {why}" in build.status


def test_a_record_made_before_keys_executes_its_page(site):
    copy = cloned(site)
    path = copy.path / "record" / "other.json"
    data = json.loads(path.read_text())
    del data["key"]
    path.write_text(json.dumps(data))
    build = copy.build()
    assert build.app.statuscode == 0
    assert "executed other: 2 blocks" in build.status and "executed index" not in build.status
    assert "other: its record was made before records held their page's key" in build.status


def test_a_missing_image_executes_its_page(site):
    copy = cloned(site)
    for image in (copy.path / "record" / IMAGES).iterdir():
        image.write_bytes(image.read_bytes()[:-1])  # no longer what the record's digest names
    build = copy.build()
    assert "executed index: 10 blocks" in build.status and "executed other" not in build.status
    assert f"index: an image of block 9 (line 58) is not in {IMAGES}/ beside the record" \
        in build.status


def test_a_deleted_image_says_git_restores_it(site, monkeypatch):
    """The record is whole: putting the image back mends it, no `make record` needed."""
    copy = cloned(site)
    (image,) = (copy.path / "record" / IMAGES).iterdir()
    image.unlink()
    monkeypatch.chdir(copy.path)
    build = copy.build()
    assert "executed index: 10 blocks" in build.status
    assert ("1 page(s) miss a file beside their record, so executed (restoring the file from "
            "git mends it; no `make record` needed):\n"
            f"  index: an image of block 9 (line 58) is not in {IMAGES}/ beside the record; "
            f"`git checkout -- record/{IMAGES}/{image.name}` restores it\n") in build.status
    assert "out of date with their record" not in build.status


def test_fresh_executes_every_page(site):
    copy = cloned(site)
    build = copy.build(confoverrides={"verified_fresh": True})
    assert "executed index: 10 blocks" in build.status
    assert "executed other: 2 blocks" in build.status
    assert f"11 ran, 0 cached, 0 from the record, 0 did not run cleanly" in build.status
    # Cached now, a fresh build still runs every page.
    again = copy.build(confoverrides={"verified_fresh": True})
    assert "executing 2 page(s)" in again.status


def test_make_html_fresh_passes_verified_fresh():
    def html_command(*variables: str) -> str:
        return subprocess.run(["make", "-n", "html", *variables], cwd=ROOT, text=True,
                              capture_output=True, check=True).stdout

    assert "-D verified_fresh=1" in html_command("FRESH=1")
    assert "verified_fresh" not in html_command()


def test_doctest_executes_every_page_even_when_the_record_matches(site):
    copy = cloned(site)
    assert "0 ran" in copy.build().status  # the record matches
    checked = copy.build("doctest", fresh=True)
    assert checked.app.statuscode == 0
    assert "executed index: 10 blocks" in checked.status
    assert "executed other: 2 blocks" in checked.status
    assert "from-record" not in {status for _, status in statuses(checked)}
    assert "11 passed, 0 failed, 1 skipped (skip-execution)" in \
        (checked.outdir / "output.txt").read_text()


def test_glued_values_come_from_the_record(site, monkeypatch):
    copy = site("numbers")
    monkeypatch.setenv("NUDGE", "0.25")  # not in the key: only the record knows the run
    assert copy.build("record", fresh=True).app.statuscode == 0
    monkeypatch.delenv("NUDGE")
    shutil.rmtree(copy.path / "_build")
    build = copy.build()
    assert "executing" not in build.status
    text = re.sub(r"<[^>]+>", "", build.html())
    assert "The loss was 0.750 after 100 steps" in text
    assert "loss 0.750000000 after 100 steps" in text


@pytest.mark.jax
def test_a_target_run_executes_although_the_record_matches(site):
    copy = cloned(site, "platform")
    run = copy.build("platform", fresh=True)
    assert run.app.statuscode == 0
    assert "Stand-in: index: 7 blocks" in run.status  # it ran there
    # Its own report: what ran there, nothing from the main record.
    rows = json.loads((run.outdir / "execution-report.json").read_text())["blocks"]
    assert {row["status"] for row in rows} <= {"ran", "expected-error", "failed",
                                                "failed-because", "skipped", "not-run-there"}


# -- replay() itself ---------------------------------------------------------------------

ENVIRONMENT = Environment(python="3.11.7", jax="0.10.2", jaxlib="0.10.2",
                          platform="linux-x86_64", date="2026-12-05")
IDENTITY = {"python": "3.11", "jax": "0.10.2", "jaxlib": "0.10.2", "platform": "linux-x86_64",
            "env": []}
PNG = "iVBORw0KGgo="  # a PNG signature, base64


def _page(*sources: str, processes: int = 1) -> DocJob:
    return DocJob("page", "page.md", DocSettings(processes=processes),
                  tuple(Block(index, 3 + 4 * index, source) for index, source in enumerate(sources)))


def _recorded(tmp_path, job: DocJob, result: DocResult):
    record = make_record(job.blocks, result)
    record.key = job_key(job, IDENTITY)
    write_images(tmp_path, result)
    return record


def test_replay_restores_images_and_every_process(tmp_path, monkeypatch):
    job = _page("plot()", "print(1)", processes=2)
    figure = Output(kind="display", text="<Figure>", data={"image/png": PNG})
    result = DocResult("page", "k", ENVIRONMENT, [
        BlockResult(0, "ran", outputs=[figure],
                    others=[ProcessResult(1, "ran", outputs=[figure])]),
        BlockResult(1, "ran", outputs=[Output(kind="stdout", text="1\n")],
                    others=[ProcessResult(1, "ran", outputs=[Output(kind="stdout", text="2\n")])]),
    ])
    record = _recorded(tmp_path, job, result)
    assert record.blocks[0].outputs[0].data["image/png"].startswith("sha256:")
    reads = []
    monkeypatch.setattr(Path, "read_bytes",
                        lambda path, read=Path.read_bytes: reads.append(path) or read(path))
    replayed = replay(job, record, IDENTITY, tmp_path)
    assert replayed.reason == ""
    assert len(reads) == 2  # each image read (and its digest checked) once
    blocks = replayed.result.blocks
    assert blocks[0].outputs[0].data == {"image/png": PNG}
    assert blocks[0].others[0].outputs[0].data == {"image/png": PNG}
    assert blocks[1].others[0].outputs[0].text == "2\n"
    assert replayed.result.environment == ENVIRONMENT


def test_replay_refuses_what_the_record_is_not_of(tmp_path):
    job = _page("a = 1", "a + 1")
    result = DocResult("page", "k", ENVIRONMENT, [BlockResult(0, "ran"), BlockResult(1, "ran")])
    record = _recorded(tmp_path, job, result)
    assert replay(job, record, IDENTITY, tmp_path).result is not None
    assert replay(job, None, IDENTITY, tmp_path).reason == ""  # no record: nothing stale
    cases = {
        "block 2 (line 7) is not the recorded one": _page("a = 1", "a + 2"),
        "block 3 (line 11) is not the recorded one": _page("a = 1", "a + 1", "a"),
        "the record has 2 blocks, the page 1": _page("a = 1"),
        "a block's execution options, the page's settings or verified_env changed":
            _page("a = 1", "a + 1", processes=2),
    }
    for why, changed in cases.items():
        assert replay(changed, record, IDENTITY, tmp_path).reason == why
    other = {**IDENTITY, "env": [["X", "1"]]}
    assert replay(job, record, other, tmp_path).reason.startswith("a block's execution options")
    newer = {**IDENTITY, "jaxlib": "0.10.3"}
    assert replay(job, record, newer, tmp_path).reason == \
        "recorded with jaxlib 0.10.2, this build has 0.10.3"


def test_prune_keeps_only_the_images_a_record_names(tmp_path):
    job = _page("plot()")
    result = DocResult("page", "k", ENVIRONMENT, [BlockResult(0, "ran", outputs=[
        Output(kind="display", data={"image/png": PNG})])])
    write_record(tmp_path, _recorded(tmp_path, job, result))
    stale = tmp_path / IMAGES / ("0" * 64 + ".png")
    stale.write_bytes(b"old")
    assert prune_images(tmp_path) == [stale]
    assert len(list((tmp_path / IMAGES).iterdir())) == 1
    assert replay(job, read_record(tmp_path, "page"), IDENTITY, tmp_path).result is not None
