"""course: what makes the site a course rather than a folder of pages.

    chapters.py   chapter data read from the chapter pages; cards, progress controls
    readings.py   the registry of official pages, ``{reading}``, coverage, the reading map
    api.py        the ``{api}`` role, checked against the installed JAX
    landing.py    the generated verification statement; the "Down the stack" aside
    downloads.py  each chapter as a notebook with outputs, and as source
"""

from __future__ import annotations

from sphinx.application import Sphinx

from . import api, chapters, downloads, landing, pagedata, readings

CONFIG = {
    # name: (default, types)
    "course_readings": ("", (str,)),
    "course_require_all_readings": (True, (bool,)),
    "course_chapter_pattern": (r"part\d+/\d\d-[\w-]+", (str,)),
    "course_sharding_chapter": ("", (str,)),
    "course_kernel_path_url": ("", (str,)),
}


def setup(app: Sphinx) -> dict:
    for name, (default, types) in CONFIG.items():
        app.add_config_value(name, default, "env", types=types)
    app.add_directive("reading", readings.ReadingDirective)
    app.add_directive("reading-map", readings.ReadingMapDirective)
    app.add_directive("chapter-grid", chapters.ChapterGridDirective)
    app.add_directive("verification-statement", landing.VerificationStatementDirective)
    app.add_directive("down-the-stack", landing.DownTheStackDirective)
    app.add_role("api", api.ApiRole())
    app.add_node(chapters.chapter_grid)
    app.add_node(readings.reading_map)
    app.connect("env-purge-doc", pagedata.on_env_purge_doc)
    app.connect("env-merge-info", pagedata.on_env_merge_info)
    app.connect("builder-inited", readings.on_builder_inited)
    app.connect("env-check-consistency", readings.on_env_check_consistency)
    app.connect("env-check-consistency", api.on_env_check_consistency)
    app.connect("env-before-read-docs", api.on_env_before_read_docs)
    app.connect("env-get-outdated", chapters.on_env_get_outdated)
    app.connect("env-get-outdated", landing.on_env_get_outdated)
    app.connect("doctree-read", chapters.on_doctree_read)
    app.connect("doctree-resolved", chapters.on_doctree_resolved)
    app.connect("doctree-resolved", readings.on_doctree_resolved)
    app.connect("build-finished", chapters.on_build_finished)
    app.connect("build-finished", downloads.on_build_finished)
    app.add_css_file("course.css")
    app.add_js_file("course-chapters.js")
    app.add_js_file("progress.js")
    return {"version": "1.0", "parallel_read_safe": True, "parallel_write_safe": True,
            "env_version": 3}
