"""A page's outcome: its blocks, their records on every target paired with them, each block's
verdicts, this build's result and the values it glued, worked out once per page per build.

The HTML injection, the notebooks, the Errors page and the generated Versions and Platforms
pages all read the one ``PageOutcome``: each only renders it, so none pairs a block with
its record, or judges it, differently from the others.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from types import MappingProxyType
from typing import Mapping

from .glue import glued_names, glued_values
from .model import Block, BlockResult, DocResult, DocSettings
from .record import Record, RecordedBlock, compare
from .render import Verification
from .replay import caption as replay_caption
from .state import BuildState
from .target_record import TargetBlock, TargetRecord
from .targets import Target
from .verdict import Verdict, stale_mark


@dataclass(frozen=True)
class PageOutcome:
    """Everything known of one page's blocks in this build (read-only)."""

    docname: str
    blocks: tuple[Block, ...]
    settings: DocSettings
    record: Record | None  # the main (CPU) verified record
    main: tuple[RecordedBlock | None, ...]  # each block's entry in it, paired by source
    targets: tuple[tuple[Target, TargetRecord | None], ...]  # every other target's record
    # For each target's name, each block's entry there if that run verifies it now.
    there: Mapping[str, tuple[TargetBlock | None, ...]]
    verdicts: tuple[tuple[Verdict, ...], ...]  # each block's verdict on every target
    # ... and on every platform in that platform's last run, verified now or not (what a
    # platform showed stays its own while it awaits a run of the current code).
    last_run: tuple[tuple[Verdict, ...], ...]
    # This build's result (None: the page did not run), each block that runs on a platform
    # alone taken from that platform's record, and how each block stands against the record.
    result: DocResult | None
    verifications: Mapping[int, Verification]
    elsewhere: frozenset[int]  # blocks captioned for the platform they ran on
    stale: Mapping[str, str]  # glued name -> mark: a value from a platform's earlier run
    stale_blocks: frozenset[int]  # blocks shown from such a run (their caption says so)
    awaited: Mapping[str, str]  # glued name -> why it has no value yet

    def on(self, targets: tuple[Target, ...], last_run: bool = False
           ) -> dict[str, list[tuple[Block, Verdict]]]:
        """Each block's verdict on each of ``targets``, by target name (``last_run``: in
        each platform's last run)."""
        names = {target.name for target in targets}
        found: dict[str, list[tuple[Block, Verdict]]] = {t.name: [] for t in targets}
        for block, verdicts in zip(self.blocks, self.last_run if last_run else self.verdicts):
            for item in verdicts:
                if item.target.name in names:
                    found[item.target.name].append((block, item))
        return found

    @property
    def glued(self) -> dict[str, str]:
        """Every value the page glued, by name (a platform-only block's from its record)."""
        return glued_values(self.result) if self.result is not None else {}


def page_outcome(build: BuildState, env, docname: str) -> PageOutcome | None:
    """The page's outcome, worked out the first time a consumer asks in this build (None: a
    page that is no MyST page or has no blocks)."""
    if docname not in build.outcomes:
        found = build.collect(env, docname)
        build.outcomes[docname] = (compute_outcome(build, docname, found.job.blocks,
                                                   found.job.settings)
                                   if found is not None and found.job.blocks else None)
    return build.outcomes[docname]


def compute_outcome(build: BuildState, docname: str, blocks: tuple[Block, ...],
                    settings: DocSettings) -> PageOutcome:
    record = build.record_for(docname)
    main = tuple(record.block_for(block, blocks) if record else None for block in blocks)
    targets = tuple((target, build.targets.get(target, docname))
                    for target in build.targets.targets)
    there = {target.name: tuple(record_there.verified_for(block, blocks) if record_there
                                else None for block in blocks)
             for target, record_there in targets}
    verdicts = tuple(tuple(build.targets.verdicts(docname, block, blocks, recorded, settings))
                     for block, recorded in zip(blocks, main))
    last_run = tuple(tuple(build.targets.verdicts(docname, block, blocks, recorded, settings,
                                                  build.config.platforms, last_run=True))
                     for block, recorded in zip(blocks, main))
    result = result_of(build, docname)
    verifications: dict[int, Verification] = {}
    stale: dict[str, str] = {}
    stale_blocks: set[int] = set()
    if result is not None:
        result, verifications, stale, stale_blocks = with_platform_blocks(build, docname, blocks,
                                                                          result)
        elsewhere = frozenset(verifications)
        for block in blocks:
            if block.index not in verifications:
                verifications[block.index] = _verify(build, docname, block, main[block.index],
                                                     result.blocks[block.index])
    else:
        elsewhere = frozenset()
    return PageOutcome(docname, blocks, settings, record, main, targets,
                       MappingProxyType(there), verdicts, last_run, result,
                       MappingProxyType(verifications), elsewhere, MappingProxyType(stale),
                       frozenset(stale_blocks),
                       MappingProxyType(_awaited_glue(build, docname, blocks, stale)))


def result_of(build: BuildState, docname: str) -> DocResult | None:
    """This build's result for a page (executed now, or from the record or the cache), if
    it has one."""
    if docname in build.results:
        return build.results[docname]
    found = build.collected.get(docname)
    return build.stored(found) if found and found.job.blocks and not found.problems else None


def platform_label(build: BuildState, name: str) -> str:
    return next((target.label for target in build.config.platforms if target.name == name), name)


def _awaited_glue(build: BuildState, docname: str, blocks: tuple[Block, ...],
                  stale: Mapping[str, str]) -> dict[str, str]:
    """The names glued by a block that runs on a platform alone, has not run there in its
    current form and has no earlier run to show: why their values are missing."""
    awaited: dict[str, str] = {}
    for block in blocks:
        if block.platform and build.targets.only_there(docname, block, blocks) is None:
            label = platform_label(build, block.platform)
            for name in glued_names(block.source):
                if name not in stale:
                    awaited.setdefault(name, (
                        f"the block that glues it (line {block.line}) runs on {label} only "
                        f"and is not yet verified there (it or a block above it changed "
                        f"since that run)"))
    return awaited


def with_platform_blocks(build: BuildState, docname: str, blocks, result: DocResult
                         ) -> tuple[DocResult, dict[int, Verification], dict[str, str], set[int]]:
    """The page's result with each block that runs on a platform alone taken from that
    platform's record, how to caption it (the page and its notebook show the same outputs),
    the mark of each value glued from a run that no longer verifies the block, and which
    blocks are shown from such a run.

    The record verifies the block when it holds the page's current code up to the block.
    After an edit above it, the block's output from that run is still the last the platform
    printed: it is shown, marked as from that run and not re-verified, rather than nothing
    (a contributor without the platform then builds the page clean, and nothing stale reads
    as current)."""
    taken: dict[int, BlockResult] = {}
    captions: dict[int, Verification] = {}
    stale: dict[str, str] = {}
    stale_blocks: set[int] = set()
    for block in blocks:
        if not block.platform:
            continue
        there = build.targets.only_there(docname, block, blocks)
        mark = ""
        if there is None:
            there = build.targets.last_run_there(docname, block, blocks)
            if there is None:
                label = platform_label(build, block.platform)
                text = f"runs on {label} only, and is not yet verified there"
                captions[block.index] = Verification(compare(block, result.blocks[block.index],
                                                             None, {}), None, None, caption=text)
                continue
            mark = stale_mark(there[0].label, there[1].environment.date)
        target, record, recorded = there
        environment = record.environment
        if mark:
            text = f"runs on {target.label} only: output {mark}"
        else:
            details = [part for part in (environment.device_kind,
                                         environment.jax and f"jax {environment.jax}") if part]
            text = (f"ran on {target.label}" + (f" ({', '.join(details)})" if details else "")
                    + f" on {environment.date}; this machine did not run it")
        taken[block.index] = recorded.as_result(block.index)
        captions[block.index] = Verification(compare(block, taken[block.index], None, {}),
                                             None, environment, caption=text)
        if mark:
            stale_blocks.add(block.index)
            for output in recorded.outputs:
                if output.kind == "glue":
                    stale[output.name] = mark
    if not taken:
        return result, captions, stale, stale_blocks
    merged = [taken.get(block_result.index, block_result) for block_result in result.blocks]
    return dataclasses.replace(result, blocks=merged), captions, stale, stale_blocks


def _verify(build: BuildState, docname: str, block: Block, recorded: RecordedBlock | None,
            block_result: BlockResult) -> Verification:
    record = build.record_for(docname)
    comparison = compare(block, block_result, recorded, build.config.normalizers,
                         record.environment.jax if record else None)
    verification = Verification(comparison, recorded, record.environment if record else None)
    if comparison.verdict == "unchecked" and build.from_record(docname):
        verification.caption = replay_caption(record.environment)
    return verification
