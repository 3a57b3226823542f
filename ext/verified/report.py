"""The execution report: after each build, every block's document, line, status, duration
and environment in ``execution-report.json``, and the console's ``N blocks: …`` line.
"""

from __future__ import annotations

import json
import os
from dataclasses import asdict

from sphinx.application import Sphinx
from sphinx.util import logging

from .model import CACHED, FAILED, FROM_RECORD, NOT_RUN, SKIPPED
from .state import has_state, relative, state

logger = logging.getLogger(__name__)

# A block that runs on a verified platform alone (``:platform:``): not run by this build.
ELSEWHERE = "platform-only"


def block_statuses(app: Sphinx) -> list[dict]:
    """Every block of every page, with its status this build (for the report)."""
    build = state(app)
    rows = []
    for docname in sorted(build.collected):
        found = build.collected[docname]
        if (not found.job.blocks and not found.problems) or not build.selected(docname):
            continue
        result = build.results.get(docname)
        executed = docname in build.executed
        if result is None and not found.problems:
            result = build.stored(found)
        stored = FROM_RECORD if build.from_record(docname) else CACHED
        for problem in found.problems:
            rows.append({"document": relative(found.job.path, app.srcdir), "docname": docname,
                         "line": problem.line, "status": FAILED, "duration": 0.0,
                         "environment": None})
        for block in found.job.blocks:
            block_result = result.blocks[block.index] if result else None
            if block.platform:
                status, duration = ELSEWHERE, 0.0
            elif block_result is None:
                status, duration = NOT_RUN, 0.0
            elif executed or block_result.status in (FAILED, SKIPPED, NOT_RUN):
                status, duration = block_result.status, block_result.duration
            else:
                status, duration = stored, block_result.duration
            rows.append({
                "document": relative(found.job.path, app.srcdir),
                "docname": docname,
                "line": block.line,
                "status": status,
                "duration": round(duration, 4),
                "exclusive": block.exclusive,
                "started": block_result.started if block_result else 0.0,
                "ended": block_result.ended if block_result else 0.0,
                # Compared with the record within this tolerance (None: exactly).
                "tolerance": block.tolerance.describe() if block.tolerance else None,
                "version": result.environment.jax if result else None,
                "environment": asdict(result.environment) if result else None,
            })
    return rows


def unrecorded_blocks(build) -> dict[str, int]:
    """Per page, the blocks that run here and have no entry in the verified record (new or
    edited since ``make record``), matched by source in page order."""
    counts = {}
    for docname in sorted(build.collected):
        found = build.collected[docname]
        if found.problems or not build.selected(docname):
            continue
        runs = [block for block in found.job.blocks if not block.skip and not block.platform]
        if not runs:
            continue
        record = build.record_for(docname)
        missing = sum(1 for block in runs
                      if record is None or record.block_for(block, found.job.blocks) is None)
        if missing:
            counts[docname] = missing
    return counts


def unrecorded_note(build) -> str:
    """``3 blocks not in the record; run `make record PAGES=part1/02-tracing```; for a page
    with a block that fails, what to do first (``make record`` writes only a clean run)."""
    counts = unrecorded_blocks(build)
    if not counts:
        return ""
    total = sum(counts.values())
    where = f" ({', '.join(f'{page}: {n}' for page, n in counts.items())})" \
        if len(counts) > 1 else ""
    failing = {docname: place for docname in counts if (place := _first_failure(build, docname))}
    ready = [docname for docname in counts if docname not in failing]
    advice = [f"run `make record PAGES={','.join(ready)}`"] if ready else []
    advice += [f"mend the block that fails at {place} first (its error is above): `make record` "
               f"writes a page only when it runs cleanly" for place in failing.values()]
    return f"{total} block{'s' if total != 1 else ''} not in the record{where}; " + \
        "; ".join(advice)


def _first_failure(build, docname: str) -> str:
    """``source/part1/02-tracing.md:57``: the first block of the page that failed in this
    build, or ""."""
    result = build.results.get(docname)
    found = build.collected[docname]
    failed = next((block for block in found.job.blocks if result is not None
                   and not block.platform and result.blocks[block.index].failed), None)
    return f"{os.path.relpath(found.job.path)}:{failed.line}" if failed else ""


def on_build_finished(app: Sphinx, exception) -> None:
    if exception is not None or not has_state(app):
        return
    if getattr(app.builder, "runs_pages_itself", False):
        return  # a target build writes its own report (builders.py)
    build = state(app)
    rows = block_statuses(app)
    # Each page executed by this build: its wall time, start-up included (for `make bench`).
    pages = [{"docname": docname, "duration": round(build.results[docname].duration, 4),
              "exclusive": build.collected[docname].job.settings.exclusive}
             for docname in sorted(build.executed)]
    path = build.config.report_path
    path.parent.mkdir(parents=True, exist_ok=True)
    # Each page whose record could not stand in for running it, and why.
    out_of_date = {docname: replayed.reason for docname, replayed in sorted(build.replays.items())
                   if replayed.reason}
    path.write_text(json.dumps({"builder": app.builder.name, "pages": pages, "blocks": rows,
                                "out_of_date_with_record": out_of_date},
                               indent=1) + "\n", encoding="utf-8")
    counts = {status: sum(1 for r in rows if r["status"] == status)
              for status in ("ran", "expected-error", CACHED, FROM_RECORD, "failed", "skipped",
                             "not-run")}
    # "did not run cleanly", as `make doctest` says it per block: there, "failed" counts the
    # comparisons with the record, on the line before this one.
    summary = (f"{len(rows)} blocks: {counts['ran'] + counts['expected-error']} ran, "
               f"{counts[CACHED]} cached, {counts[FROM_RECORD]} from the record, "
               f"{counts['failed']} did not run cleanly")
    extra = [f"{counts[s]} {s}" for s in ("skipped", "not-run") if counts[s]]
    elsewhere = sum(1 for r in rows if r["status"] == ELSEWHERE)
    if elsewhere:
        extra.append(f"{elsewhere} on a verified platform only")
    logger.info(summary + (f" ({', '.join(extra)})" if extra else ""))
    if not build.fresh:
        note = unrecorded_note(build)
        if note:
            logger.info(note)
    if counts["failed"] or build.comparison_failed:
        # Each failure was reported at its file:line; the build fails with or without -W.
        app.statuscode = 1
