"""verified: every code block runs, and its real output is rendered with its provenance.

The pipeline, one module per phase:

    directive.py  parse ``{code-cell}`` and leave a placeholder node
    collect.py    read a page's blocks and settings from its source, and key them
    state.py      what one build knows: configuration, collected pages, results, records
    schedule.py   before Sphinx reads, run the pages that need it, concurrently
    replay.py     a page's verified record stands in for running it, when it is of exactly
                  what would run
    execute.py    run one page in a fresh subprocess (worker.py is the child side)
    multiprocess.py  run a page as N cooperating processes (multi-host JAX), in lock-step
                  (driver.py: what both drivers share; gate.py: the gate and the slots)
    cache.py      store results by key; record.py keeps the verified record
                  (tolerance.py compares the numbers a block declared machine-rounded)
    targets.py    the other places every page runs: older versions, other platforms
    target_record.py  their records; verdict.py  each block's verdict on each target
    outcome.py    a page's outcome (blocks, records paired by source, verdicts, result,
                  glued values), worked out once per build and read by every page below
    render.py     turn a typed result into docutils nodes (glue.py: values prose inserts)
    inject.py     put results, captions and verdicts into each page's doctree
    report.py     the execution report after each build
    builders.py   the builders that execute instead of publishing: ``doctest``, ``record``,
                  and for the targets ``matrix``, ``matrix-doctest``, ``platform`` and
                  ``platform-doctest``
    pages.py      the generated Versions and Platforms pages (verdict_chart.py: their
                  picture); errors_page.py  the generated Errors page
    selfcheck.py  run in a reader's kernel: a chapter notebook's check of every cell

Around them: align.py matches a page's blocks with a record by source; stop.py ends every
worker when the build is interrupted; reap.py ends what a page started, however the build
ends (each worker a subreaper, with a guard for a killed build); hang.py speaks of a long block and shows where a
stopped one was; locate.py puts a syntax error at its line; mistakes.py turns a user's
mistake into one line; steady.py keeps the stored configuration conf.py's.
"""

from __future__ import annotations

import logging
from pathlib import Path

from sphinx.application import Sphinx

from . import config, errors_page, glue, inject, pages, report, schedule, state, steady
from .builders import (MatrixDoctestBuilder, MatrixRecordBuilder, PlatformDoctestBuilder,
                       PlatformRecordBuilder, RecordBuilder, VerifiedDoctestBuilder,
                       check_targets)
from .directive import CodeCellDirective, code_cell
from .render import depart_reveal_html, depart_reveal_plain, reveal, visit_reveal_html, visit_reveal_plain

STATIC = Path(__file__).with_name("static")


def _copy_static(app: Sphinx, exception) -> None:
    """Copies verified.css into the HTML output (without touching html_static_path, so the
    configuration stays what conf.py says and never looks changed to Sphinx)."""
    if exception is None and app.builder.format == "html":
        from sphinx.util.fileutil import copy_asset_file

        copy_asset_file(STATIC / "verified.css", Path(app.outdir) / "_static", force=True)


class _QuietMystConfig(logging.Filter):
    """myst-parser logs its whole configuration (1,300 characters) on every build, and no
    setting turns that off: this drops that one message, and nothing else of it."""

    def filter(self, record: logging.LogRecord) -> bool:
        return "myst v%s:" not in str(record.msg)


def _quiet_myst_config() -> None:
    logger = logging.getLogger("sphinx.myst_parser.sphinx_ext.main")
    if not any(isinstance(f, _QuietMystConfig) for f in logger.filters):
        logger.addFilter(_QuietMystConfig())


def setup(app: Sphinx) -> dict:
    _quiet_myst_config()
    config.register(app)
    steady.setup(app)
    app.add_directive("code-cell", CodeCellDirective)
    app.add_node(code_cell)
    app.add_node(glue.glue_ref)
    app.add_role("glue", glue.GlueRole(formatted=False))
    glue.GlueDomain.roles = {"any": glue.GlueRole(formatted=False),
                             "text": glue.GlueRole(formatted=True)}
    app.add_domain(glue.GlueDomain)
    plain = (visit_reveal_plain, depart_reveal_plain)
    app.add_node(reveal, html=(visit_reveal_html, depart_reveal_html),
                 latex=plain, text=plain, man=plain, texinfo=plain)
    app.connect("doctree-read", inject.on_doctree_read, priority=400)
    for builder in (VerifiedDoctestBuilder, RecordBuilder, MatrixRecordBuilder,
                    MatrixDoctestBuilder, PlatformRecordBuilder, PlatformDoctestBuilder):
        app.add_builder(builder)
    app.add_directive("versions-matrix", pages.VersionsMatrix)
    app.add_directive("platforms-matrix", pages.PlatformsMatrix)
    app.add_directive("errors-index", errors_page.ErrorsIndex)
    app.connect("env-get-outdated", pages.generated_outdated)
    app.connect("builder-inited", state.on_builder_inited)
    app.connect("builder-inited", check_targets, priority=600)
    app.connect("build-finished", _copy_static)
    app.add_css_file("verified.css")
    app.connect("env-get-outdated", schedule.on_env_get_outdated)
    app.connect("env-before-read-docs", schedule.on_env_before_read_docs)
    app.connect("build-finished", report.on_build_finished)
    return {"version": "1.0", "parallel_read_safe": True, "parallel_write_safe": True,
            "env_version": 1}
