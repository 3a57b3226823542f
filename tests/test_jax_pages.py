"""End to end with real JAX: per-page device counts, JAX captions, and the site's own pages."""

from __future__ import annotations

import re
import runpy
from pathlib import Path

import jupytext
import pytest

from verified.collect import collect
from verified.record import BUILTIN_NORMALIZERS

pytestmark = pytest.mark.jax
ROOT = Path(__file__).resolve().parent.parent
SOURCE = ROOT / "source"
PLATFORMS = frozenset(runpy.run_path(str(ROOT / "conf.py")).get("verified_platforms", ()))


def test_each_page_gets_its_own_device_count(site):
    build = site("devices").build()
    assert build.app.statuscode == 0, build.warnings
    index, eight = build.html("index"), build.html("eight")
    assert "<pre><span></span>1\n" in index
    assert "<pre><span></span>8 6\n" in eight
    assert re.search(r"jax 0\.10\.2 \(jaxlib 0\.10\.2\) · cpu · 1 device · ran \d{4}-\d\d-\d\d", index)
    assert "· cpu · 8 devices · ran" in eight


def test_site_pages_are_text_notebooks_that_jupytext_reads():
    assert PLATFORMS, "conf.py declares no verified_platforms"
    for path in sorted(SOURCE.rglob("*.md")):
        found = collect(path.stem, path, frozenset(BUILTIN_NORMALIZERS), platforms=PLATFORMS)
        assert not found.problems, (path, found.problems)
        if not found.job.blocks:
            continue
        notebook = jupytext.read(path, fmt="md:myst")
        cells = [cell.source for cell in notebook.cells if cell.cell_type == "code"]
        assert cells == [block.source for block in found.job.blocks], path
        assert notebook.metadata["kernelspec"]["name"] == "python3", path


def test_landing_page_runs_jax():
    found = collect("index", SOURCE / "index.md")
    assert any("import jax" in block.source for block in found.job.blocks)
