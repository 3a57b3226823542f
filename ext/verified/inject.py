"""Inject: put each page's results into its doctree (Sphinx's ``doctree-read``).

Each ``code_cell`` placeholder becomes the rendered block: the result of this build (run
now, cached, or the verified record's where it stands in for a run), compared with the
verified record for its caption, with one verdict line per verified target under it. A
block that runs on a platform alone shows that platform's recorded output, and prose glued
from it reads the same record.
"""

from __future__ import annotations

import dataclasses

from docutils import nodes
from sphinx.application import Sphinx
from sphinx.util import logging

from . import glue
from .capture_rules import failure_sign
from .directive import code_cell
from .locate import failure_line
from .model import BlockResult, DocResult, Environment
from .record import compare
from .render import Verification, failure_report, render_block
from .replay import caption as replay_caption
from .state import BuildState, state
from .verdict import DEPENDS, Verdict, chapter_notes, label_block, verdict_nodes

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
    result = build.results.get(docname)
    elsewhere: dict[int, Verification] = {}
    depending: list[Verdict] = []  # blocks that did not run on a target after one that fails
    sections: dict[int, str] = {}
    glue_problems = False
    if result is not None:
        result, elsewhere = with_platform_blocks(build, docname, found.job.blocks, result)
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
            logger.error(failure_report(block, block_result, where),
                         location=(docname, failure_line(block, block_result, found.job.path)),
                         type="verified", subtype="block-failed")
        elif not block.stderr_failure and (sign := stderr_failure(block_result)):
            where = f" on {block.platform}" if block.platform else ""
            logger.warning(f"code-cell passed{where}, but its stderr says something failed: "
                           f"{sign!r}; where the page means it, declare :stderr: failure",
                           location=(docname, block.line), type="verified",
                           subtype="stderr-failure")
        verification = elsewhere.get(block.index) or _verify(build, docname, block,
                                                             block_result)
        prompt = next(iter(node.findall(nodes.paragraph)), None)
        verdicts = [item for item in build.targets.verdicts(
            docname, block, found.job.blocks, verification.recorded,
            found.job.settings) if item.target.name != block.platform]
        # (a block that runs on one platform alone: its caption speaks for that platform)
        depending += [item for item in verdicts if item.kind == DEPENDS]
        verdicts = [item for item in verdicts if item.kind != DEPENDS]  # said once, at the top
        sections[block.index] = _section_title(node)
        environment = verification.recorded_environment if block.index in elsewhere \
            else result.environment
        cell = render_block(block, block_result, environment, verification, prompt,
                            verdict_nodes(verdicts, set(block.tags)))
        label_block(app.env, docname, block, cell)
        node.replace_self(cell)
    _insert_at_top(doctree, chapter_notes(depending, sections))
    # After the blocks' errors: a name a failed block never got to glue follows from them.
    stopped = next((block.line for block in found.job.blocks if not block.platform
                    and result.blocks[block.index].failed), None) if result else None
    if found is not None and not found.job.blocks and not found.problems:
        result = DocResult(docname, "", Environment(), [])  # no block could glue a value
    elif not (found and found.job.blocks):
        result = None
    glue_problems |= glue.resolve(doctree, result, stopped,
                                  _awaited_glue(build, found) if found else None)
    if glue_problems:
        # The page's doctree is kept while its text and results stay as they are: read it
        # again next build, so that the problem is reported until it is mended.
        app.env.note_reread()


def _section_title(node: nodes.Node) -> str:
    """The title of the section a block stands in (how the page names where it is)."""
    section = node.parent
    while section is not None and not isinstance(section, nodes.section):
        section = section.parent
    title = next(iter(section.findall(nodes.title)), None) if section is not None else None
    return title.astext() if title is not None else ""


def _insert_at_top(doctree: nodes.document, notes: list[nodes.Node]) -> None:
    """Page-wide caption lines, under the page's title."""
    if not notes:
        return
    section = next(iter(doctree.findall(nodes.section)), None)
    parent = section if section is not None else doctree
    at = 1 if section is not None and section.children and isinstance(
        section[0], nodes.title) else 0
    parent[at:at] = notes


def _platform_label(build: BuildState, name: str) -> str:
    return next((target.label for target in build.config.platforms if target.name == name), name)


def _awaited_glue(build: BuildState, found) -> dict[str, str]:
    """The names glued by a block that runs on a platform alone and has not run there in its
    current form (its code, or code above it, changed since): why their values are missing."""
    awaited: dict[str, str] = {}
    blocks = found.job.blocks
    for block in blocks:
        if block.platform and build.targets.only_there(found.job.docname, block, blocks) is None:
            label = _platform_label(build, block.platform)
            for name in glue.glued_names(block.source):
                awaited.setdefault(name, (
                    f"the block that glues it (line {block.line}) runs on {label} only and is "
                    f"not yet verified there (it or a block above it changed since that run)"))
    return awaited


def with_platform_blocks(build: BuildState, docname: str, blocks, result: DocResult
                        ) -> tuple[DocResult, dict[int, Verification]]:
    """The page's result with each block that runs on a platform alone taken from that
    platform's record (when it holds the block's current source), and how to caption it
    (the page and its notebook show the same outputs)."""
    taken: dict[int, BlockResult] = {}
    captions: dict[int, Verification] = {}
    for block in blocks:
        if not block.platform:
            continue
        there = build.targets.only_there(docname, block, blocks)
        if there is None:
            label = _platform_label(build, block.platform)
            text = f"runs on {label} only, and is not yet verified there"
            captions[block.index] = Verification(compare(block, result.blocks[block.index],
                                                         None, {}), None, None, caption=text)
            continue
        target, record, recorded = there
        environment = record.environment
        details = [part for part in (environment.device_kind,
                                     environment.jax and f"jax {environment.jax}") if part]
        text = (f"ran on {target.label}" + (f" ({', '.join(details)})" if details else "")
                + f" on {environment.date}; this machine did not run it")
        taken[block.index] = recorded.as_result(block.index)
        captions[block.index] = Verification(compare(block, taken[block.index], None, {}),
                                             None, environment, caption=text)
    if not taken:
        return result, captions
    merged = [taken.get(block_result.index, block_result) for block_result in result.blocks]
    return dataclasses.replace(result, blocks=merged), captions


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


def _verify(build: BuildState, docname: str, block, block_result: BlockResult) -> Verification:
    record = build.record_for(docname)
    recorded = record.block_for(block, build.collected[docname].job.blocks) if record else None
    comparison = compare(block, block_result, recorded, build.config.normalizers,
                         record.environment.jax if record else None)
    verification = Verification(comparison, recorded, record.environment if record else None)
    if comparison.verdict == "unchecked" and build.from_record(docname):
        verification.caption = replay_caption(record.environment)
    return verification


def result_for(app: Sphinx, docname: str) -> DocResult | None:
    """This build's result for a page (executed now, or from the record or the cache), if
    it has one."""
    build = state(app)
    if docname in build.results:
        return build.results[docname]
    found = build.collected.get(docname)
    return build.stored(found) if found and found.job.blocks else None


def stderr_failure(result: BlockResult) -> str | None:
    """The first line of a block's stderr (any process's) that says something failed."""
    outputs = [*result.outputs, *(o for other in result.others for o in other.outputs)]
    return next((sign for output in outputs if output.kind == "stderr"
                 and (sign := failure_sign(output.text))), None)
