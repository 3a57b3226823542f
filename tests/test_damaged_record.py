"""A record that cannot be read (truncated, a merge conflict's markers) is one located line
that says how to mend it, and costs only its own page, which runs as in a fresh clone; the
same for a version's and a platform's record."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from conftest import ROOTS, Site, target_site
from verified.record import UnreadableRecord, load_record_json


def truncate(path: Path) -> None:
    """The first three lines only, as an interrupted write leaves it."""
    path.write_text("".join(path.read_text().splitlines(keepends=True)[:3]))


def conflict(path: Path) -> None:
    """A merge conflict's markers around the second line, as `git merge` leaves them."""
    lines = path.read_text().splitlines(keepends=True)
    path.write_text("".join([lines[0], "<<<<<<< HEAD\n", lines[1], "=======\n", lines[1],
                             ">>>>>>> other\n", *lines[2:]]))


def advice(path: str, line: int, reason: str, page: str, rewrite: str) -> str:
    return (f"{path}:{line}: WARNING: the record cannot be read ({reason}), so {page} runs as "
            f"in a fresh clone; restore it (`git checkout -- {path}`) or make it again "
            f"({rewrite}) [verified.record]")


def record_warnings(build) -> list[str]:
    """The damaged-record lines as printed (not through ``warning_lines``, which would hide
    an absolute path by taking the source folder out)."""
    return [line for line in build.warnings.splitlines() if "[verified.record]" in line]


def test_where_a_record_broke(tmp_path):
    path = tmp_path / "page.json"
    path.write_text(json.dumps({"docname": "page", "environment": {"python": "3.11"}}, indent=1) + "\n")
    truncate(path)
    with pytest.raises(UnreadableRecord) as caught:
        load_record_json(path)
    assert (caught.value.line, caught.value.reason) == (
        4, "Expecting property name enclosed in double quotes: column 1")
    path.write_text(json.dumps({"docname": "page", "environment": {"python": "3.11"}}, indent=1) + "\n")
    conflict(path)
    with pytest.raises(UnreadableRecord) as caught:
        load_record_json(path)
    assert (caught.value.line, caught.value.reason) == (2, "a merge conflict's markers")


@pytest.fixture
def clone(site, monkeypatch):
    """A root with its record made and _build removed; paths said from its top, as `make`
    says them."""

    def make(name: str) -> Site:
        copy = site(name)
        assert copy.build("record", fresh=True).app.statuscode == 0
        shutil.rmtree(copy.path / "_build")
        monkeypatch.chdir(copy.path)
        return copy

    return make


def test_a_truncated_record_costs_only_its_page(clone):
    copy = clone("basic")
    truncate(copy.path / "record" / "other.json")
    build = copy.build()
    assert build.warning_lines() == record_warnings(build) == [advice(
        "record/other.json", 4, "Expecting property name enclosed in double quotes: column 1",
        "other", "`make record PAGES=other`")]
    assert "1 page(s) shown from the verified record" in build.status
    assert "1 page(s) not in the verified record, so executed: other" in build.status
    assert "11 from the record" not in build.status and "executed other: 2 blocks" in build.status


def test_a_conflicted_record_leaves_a_doctest_of_another_page_whole(clone):
    """The course's landing page reads every record: the damaged one is said, not fatal."""
    copy = clone("course")
    conflict(copy.path / "record" / "part1" / "01-one.json")
    build = copy.build("doctest", fresh=True, confoverrides={"verified_pages": ["part1/02-two"]})
    # (The root's other warnings are its course features' own tests.)
    assert record_warnings(build) == [advice(
        "record/part1/01-one.json", 2, "a merge conflict's markers", "part1/01-one",
        "`make record PAGES=part1/01-one`")]
    assert "build succeeded" in build.status


@pytest.mark.parametrize("root, damage, rewrite", [
    ("matrix", conflict, "`make matrix PAGES=index`"),
    ("platform", truncate, "`make platform PLATFORM=stand-in PAGES=index` on a Stand-in machine"),
])
def test_a_damaged_target_record_costs_only_its_page_there(tmp_path, monkeypatch, root, damage,
                                                           rewrite):
    copy, _, _ = target_site(tmp_path / "site", root, root)
    folder = next((copy.path / "record" / ("matrix" if root == "matrix" else "platform")).iterdir())
    damage(folder / "index.json")
    monkeypatch.chdir(copy.path)
    build = copy.build("html", fresh=True)
    path = (folder / "index.json").relative_to(copy.path).as_posix()
    line, reason = ((2, "a merge conflict's markers") if damage is conflict else
                    (4, "Expecting property name enclosed in double quotes: column 1"))
    # (The Versions page of the matrix root then misses the difference that record showed.)
    assert record_warnings(build) == [advice(path, line, reason, "index", rewrite)]
    assert "cell-output" in build.html() or "<pre>" in build.html()
