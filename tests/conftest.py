"""Shared fixtures: copies of the read-only test roots, and a build helper."""

from __future__ import annotations

import io
import os
import re
import shutil
import sys
from dataclasses import dataclass
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "ext"))

from sphinx.testing.util import SphinxTestApp  # noqa: E402

ROOTS = Path(__file__).parent / "roots"


def reader_kernel_env(**extra: str) -> dict[str, str]:
    """The environment of a Jupyter kernel as a reader starts it: ipykernel forwards what is
    written on file descriptors 1 and 2 (XLA's C++ log lines) unless it finds itself under
    pytest, which it tells by this variable."""
    env = {name: value for name, value in os.environ.items() if name != "PYTEST_CURRENT_TEST"}
    return {**env, **extra}


@dataclass
class Build:
    app: SphinxTestApp
    status: str
    warnings: str

    @property
    def outdir(self) -> Path:
        return Path(self.app.outdir)

    def html(self, page: str = "index") -> str:
        return (self.outdir / f"{page}.html").read_text(encoding="utf-8")

    def warning_lines(self) -> list[str]:
        """Warnings/errors with the temporary source path removed: 'page.md:LINE: LEVEL: ...'."""
        prefix = str(self.app.srcdir) + "/"
        return [line.replace(prefix, "") for line in self.warnings.splitlines()
                if ": WARNING: " in line or ": ERROR: " in line]


def alive(pid: int) -> bool:
    """Whether ``pid`` runs (a zombie, dead but not yet reaped by its new parent, does not)."""
    try:
        with open(f"/proc/{pid}/stat", encoding="utf-8") as stat:
            return stat.read().rsplit(")", 1)[1].split()[0] != "Z"
    except OSError:
        return False


def strip_colours(text: str) -> str:
    return re.sub(r"\x1b\[[0-9;]*m", "", text)


class Site:
    """A private, writable copy of a test root that can be built repeatedly."""

    def __init__(self, path: Path):
        self.path = path

    def build(self, buildername: str = "html", *, fresh: bool = False, parallel: int = 0,
              confoverrides: dict | None = None, outdir: str | None = None) -> Build:
        status, warning = io.StringIO(), io.StringIO()
        builddir = self.path / "_build"
        app = SphinxTestApp(buildername, srcdir=self.path, builddir=builddir,
                            freshenv=fresh, confoverrides=confoverrides or {},
                            status=status, warning=warning, parallel=parallel)
        try:
            app.build()
        finally:
            app.cleanup()
        return Build(app, strip_colours(status.getvalue()), strip_colours(warning.getvalue()))

    def edit(self, page: str, old: str, new: str) -> None:
        path = self.path / page
        text = path.read_text(encoding="utf-8")
        assert old in text, f"{old!r} not in {page}"
        path.write_text(text.replace(old, new, 1), encoding="utf-8")


def html_table(page: str) -> dict[str, list[str]]:
    """A generated page's table: each row's cells by its first cell, markup removed."""
    from html import unescape

    rows = {}
    for row in re.findall(r"<tr[^>]*>(.*?)</tr>", page, re.S):
        cells = [unescape(re.sub(r"<[^>]+>", "", cell)).strip()
                 for cell in re.findall(r"<t[dh][^>]*>(.*?)</t[dh]>", row, re.S)]
        rows[cells[0]] = cells[1:]
    return rows


def html_tables(page: str) -> list[tuple[str, dict[str, list[str]]]]:
    """Each table of a generated page: its caption, and its rows as ``html_table`` gives them."""
    from html import unescape

    def text(caption: str) -> str:  # without its permalink
        caption = re.sub(r'<a class="headerlink".*?</a>', "", caption, flags=re.S)
        return unescape(re.sub(r"<[^>]+>", "", caption)).strip()

    return [(text(caption), html_table(body))
            for caption, body in re.findall(r"<table[^>]*>\s*<caption>(.*?)</caption>(.*?)</table>",
                                            page, re.S)]


def target_site(folder: Path, root: str, builder: str) -> tuple[Site, Build, Build]:
    """A copy of a test root with its main record and one target's record made (``builder``:
    ``matrix`` or ``platform``), then built as HTML: (site, the target run, the HTML build)."""
    shutil.copytree(ROOTS / f"test-{root}", folder)
    copy = Site(folder)
    copy.build("record", fresh=True)
    run = copy.build(builder, fresh=True)
    return copy, run, copy.build("html", fresh=True)


@pytest.fixture
def site(tmp_path):
    """``site("basic")`` → a fresh copy of tests/roots/test-basic."""

    def make(name: str, into: str = "site") -> Site:
        target = tmp_path / into
        shutil.copytree(ROOTS / f"test-{name}", target)
        return Site(target)

    return make
