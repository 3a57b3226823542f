"""A warm build with nothing changed finds the configuration unchanged and re-reads nothing,
though the theme and extensions fill in configuration values during each build."""

from __future__ import annotations


def test_a_warm_build_sees_the_configuration_unchanged(site):
    copy = site("steady")
    first = copy.build()
    assert first.app.statuscode == 0
    again = copy.build()
    assert "The configuration has changed" not in again.status, again.status
    assert "updating environment: 0 added, 0 changed, 0 removed" in again.status
    # The filled-in values still reach the pages written: the extensions' static files.
    copy.edit("index.md", "Math:", "Maths:")
    page = copy.build().html()
    assert "copybutton.js" in page and "sphinx-design" in page and "Maths:" in page
