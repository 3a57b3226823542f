"""Inject: put each page's results into its doctree (Sphinx's ``doctree-read``).

Each ``code_cell`` placeholder becomes the rendered block: the result of this build (run
now, cached, or the verified record's where it stands in for a run), compared with the
verified record for its caption, with one verdict line per verified target under it. A
block that runs on a platform alone shows that platform's recorded output, and prose glued
from it reads the same record.
"""

from __future__ import annotations

from docutils import nodes
from sphinx.application import Sphinx
from sphinx.util import logging

from . import glue
from .directive import code_cell
from .locate import failure_line
from .model import DocResult, Environment
from .outcome import page_outcome
from .outcome import result_of as _result_of
from .render import failure_report, render_block
from .state import state
from .verdict import DEPENDS, NEEDS_DEVICES, Verdict, chapter_notes, label_block, verdict_nodes

logger = logging.getLogger(__name__)


def on_doctree_read(app: Sphinx, doctree: nodes.document) -> None:
    """Swaps every ``code_cell`` placeholder for the rendered block (before Sphinx's own
    collectors see the page, so figures are found like any other image)."""
    build = state(app)
    docname = app.env.docname
    found = build.collect(app.env, docname)
    for problem in (found.problems if found else ()):
        if not problem.reported:
            logger.error(problem.message, location=(docname, problem.line),
                         type="verified", subtype=problem.subtype)
    cells = list(doctree.findall(code_cell))
    by_line = {block.line: block for block in found.job.blocks} if found else {}
    outcome = page_outcome(build, app.env, docname)
    result = outcome.result if outcome else None
    depending: list[Verdict] = []  # blocks that did not run on a target after one that fails
    sections: dict[int, str] = {}
    short: list[Verdict] = []  # blocks that fail on a target for want of devices
    glue_problems = False
    if result is not None:
        glue_problems = _warn_duplicate_glue(docname, found.job.blocks, result)
    for node in cells:
        block = by_line.get(node["fence_line"])
        if result is not None and (block is None or block.source != node["source"]):
            # The page's text changed after its blocks were collected and run for this build:
            # the results belong to the old text, so none is shown, and the page is read again
            # (and run, if its code changed) by the next build.
            logger.error("the page changed while the build ran; build again",
                         location=node, type="verified", subtype="source-changed")
            app.env.note_reread()
            node.replace_self([])
            continue
        if result is None or block is None:
            # Not run: a problem with this page was reported above.
            node.replace_self([])
            continue
        block_result = result.blocks[block.index]
        if block_result.failed:
            where = f" on {block.platform}" if block.platform else ""
            line = failure_line(block, block_result, found.code_lines[block.index])
            logger.error(failure_report(block, block_result, where), location=(docname, line),
                         type="verified", subtype="block-failed")
        elif not block.stderr_failure and (sign := block_result.failure_in_stderr()):
            where = f" on {block.platform}" if block.platform else ""
            logger.warning(f"code-cell passed{where}, but its stderr says something failed: "
                           f"{sign!r}; where the page means it, declare :stderr: failure",
                           location=(docname, block.line), type="verified",
                           subtype="stderr-failure")
            app.env.note_reread()  # reported until mended (or declared)
        verification = outcome.verifications[block.index]
        prompt = next(iter(node.findall(nodes.paragraph)), None)
        verdicts = [item for item in outcome.verdicts[block.index]
                    if item.target.name != block.platform]
        # (a block that runs on one platform alone: its caption speaks for that platform)
        depending += [item for item in verdicts if item.kind == DEPENDS]
        short += [item for item in verdicts if item.kind == NEEDS_DEVICES]
        verdicts = [item for item in verdicts if item.kind != DEPENDS]  # said once, at the top
        sections[block.index] = found.sections[block.index]
        environment = verification.recorded_environment if block.index in outcome.elsewhere \
            else result.environment
        cell = render_block(block, block_result, environment, verification, prompt,
                            verdict_nodes(verdicts, set(block.tags)))
        label_block(app.env, docname, block, cell)
        node.replace_self(cell)
    _insert_at_top(doctree, chapter_notes(depending, sections, short))
    # After the blocks' errors: a name a failed block never got to glue follows from them.
    stopped = next((block.line for block in found.job.blocks if not block.platform
                    and result.blocks[block.index].failed), None) if result else None
    if found is not None and not found.job.blocks and not found.problems:
        result = DocResult(docname, "", Environment(), [])  # no block could glue a value
    elif not (found and found.job.blocks):
        result = None
    glue_problems |= glue.resolve(doctree, result, stopped,
                                  dict(outcome.awaited) if outcome else None,
                                  dict(outcome.stale) if outcome else None)
    if glue_problems:
        # The page's doctree is kept while its text and results stay as they are: read it
        # again next build, so that the problem is reported until it is mended.
        app.env.note_reread()


def _insert_at_top(doctree: nodes.document, notes: list[nodes.Node]) -> None:
    """Page-wide caption lines, under the page's title."""
    if not notes:
        return
    section = next(iter(doctree.findall(nodes.section)), None)
    parent = section if section is not None else doctree
    at = 1 if section is not None and section.children and isinstance(
        section[0], nodes.title) else 0
    parent[at:at] = notes


def _warn_duplicate_glue(docname: str, blocks, result: DocResult) -> bool:
    """Warns at each block that glues a name again; whether any did."""
    seen: set[str] = set()
    warned = False
    for block in blocks:
        for output in result.blocks[block.index].outputs:
            if output.kind == "glue":
                if output.name in seen:
                    logger.warning(f"glue {output.name!r} glued again: prose shows the last value",
                                   location=(docname, block.line), type="verified",
                                   subtype="glue")
                    warned = True
                seen.add(output.name)
    return warned


def result_for(app: Sphinx, docname: str) -> DocResult | None:
    """This build's result for a page (executed now, or from the record or the cache), if
    it has one."""
    return _result_of(state(app), docname)

