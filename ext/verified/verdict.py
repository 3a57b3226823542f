"""Verdicts: how each block behaves on each verified target, from the committed records.

``make html`` runs no other interpreter: each caption's verdict compares a target's record
(target_record.py) with the main verified record, within the block's declared tolerance,
and the generated Versions and Platforms pages (pages.py) count the same verdicts.
"""

from __future__ import annotations

import dataclasses
import hashlib
import re
from collections.abc import Sequence
from dataclasses import dataclass

from docutils import nodes

from .align import align_with_moves
from .model import (FAILED, FAILED_BECAUSE, NOT_RUN, NOT_RUN_THERE, SKIPPED, Block,
                     DocSettings)
from .record import RecordedBlock, UnreadableRecord, compare, source_digest
from .render import folded, in_readers_words, output_nodes
from .replay import warn_unreadable
from .target_record import (TargetBlock, TargetRecord, read_target_record,
                            target_record_path)
from .targets import PLATFORM, Target, rewrite_command

# Verdicts, as captions, the generated pages and the report name them.
SAME = "same"
DIFFERS = "differs"
RUNS = "runs"  # an ``:output: varies`` block: it ran, its output is not compared
FAILS = "fails"
DEPENDS = "failed-because"
NEEDS_DEVICES = "needs-devices"  # failed on a page that asks for more devices than it has
NOT_THERE = "not-run-there"  # the page does not run on the target (the record says why)
ONLY_THERE = "only-there"  # a block that runs on this platform alone (``:platform:``)
UNVERIFIED = "not-verified"  # no record of this block's current source
VERDICTS = (SAME, DIFFERS, RUNS, FAILS, DEPENDS, NEEDS_DEVICES, NOT_THERE, ONLY_THERE,
            UNVERIFIED)
_DEVICE_ERROR = re.compile(r"device|mesh", re.IGNORECASE)
# Another machine installs its packages elsewhere (a TPU VM's JAX is not in a site-packages):
# a source file's path, or what the record made of it, reads the same on both sides.
TARGET_PATHS = "target-paths"
_TARGET_PATH_RULES = ((r"\(?(?:/[^\s:'\"()]+\.py|<path>)\)?", "<path>"),)


@dataclass
class Verdict:
    kind: str  # one of VERDICTS
    target: Target
    detail: str = ""  # fails: the exception line; differs: the diff; not-run-there: why
    because: Block | None = None  # failed-because: the block it depends on
    recorded: TargetBlock | None = None
    devices: tuple[int, int] | None = None  # needs-devices: (asked for, the target has)
    date: str = ""  # when the target's record was made

    def text(self) -> str:
        label = self.target.label
        if self.kind == SAME:
            return f"also verified on {label} (same output)"
        if self.kind == DIFFERS:
            return f"on {label} the output differs"
        if self.kind == RUNS:
            return f"runs on {label} (output varies, not compared)"
        if self.kind == FAILS:
            return f"on {label}: {in_readers_words(self.detail)}"
        if self.kind == NEEDS_DEVICES:
            wanted, has = self.devices
            return f"needs {wanted} devices ({label} here has {has})"
        if self.kind == NOT_THERE:
            return f"not run on {label}: {self.detail}"
        if self.kind == ONLY_THERE:
            return f"runs on {label} only: verified there {self.date}"
        if self.kind == DEPENDS:  # a page's captions say it once (``chapter_notes``)
            return f"on {label}: not run, because an earlier block fails there"
        return f"not yet verified on {label}" + (f": {self.detail}" if self.detail else "")


def verdict(block: Block, blocks: tuple[Block, ...], main: RecordedBlock | None,
            record: TargetRecord | None, target: Target,
            normalizers: dict[str, tuple[tuple[str, str], ...]],
            settings: DocSettings | None = None, last_run: bool = False) -> Verdict | None:
    """How ``block`` behaves on ``target``, from the committed records alone: None for a
    block that never runs there (skip-execution, or only on another platform);
    not-verified when either record is stale for it (the block, or one before it, changed
    since that run). ``settings`` are the page's: the devices and processes it asks for.
    ``last_run``: how it behaved in the target's last run of its unchanged source instead,
    verified now or not (what that platform showed, not what it verifies)."""
    if block.skip or (block.platform and block.platform != target.name):
        return None
    settings = settings or DocSettings()
    if target.no_multiprocess and settings.processes > 1:  # what the page is, not what ran
        return Verdict(NOT_THERE, target, detail=target.no_multiprocess)
    host_devices = settings.host_devices
    recorded = None if record is None else (last_run_entry(record, block, blocks) if last_run
                                            else record.verified_for(block, blocks))
    date = record.environment.date if record else ""
    if recorded is None:
        return Verdict(UNVERIFIED, target, detail=why_unverified(block, blocks, record, target))
    if recorded.status == NOT_RUN_THERE:
        return Verdict(NOT_THERE, target, detail=record.reason, recorded=recorded)
    if block.platform:
        return Verdict(ONLY_THERE, target, recorded=recorded, date=date)
    if main is None:
        return Verdict(UNVERIFIED, target)
    has = record.environment.device_count
    if (recorded.status == FAILED and host_devices and has is not None and host_devices > has
            and _DEVICE_ERROR.search(recorded.error)):
        return Verdict(NEEDS_DEVICES, target, detail=recorded.error, recorded=recorded,
                       devices=(host_devices, has))
    if recorded.status == FAILED_BECAUSE:
        earlier = blocks[recorded.because] if recorded.because is not None \
            and recorded.because < len(blocks) else None
        return Verdict(DEPENDS, target, because=earlier, recorded=recorded)
    if recorded.status == FAILED:
        return Verdict(FAILS, target, detail=recorded.error, recorded=recorded)
    if not block.varies:
        block = dataclasses.replace(block, normalize=(*block.normalize, TARGET_PATHS))
        normalizers = {**normalizers, TARGET_PATHS: _TARGET_PATH_RULES}
    comparison = compare(block, recorded.as_result(block.index), main, normalizers)
    if comparison.verdict == "unchecked":
        return Verdict(RUNS, target, recorded=recorded)
    if comparison.verdict == "match":
        return Verdict(SAME, target, recorded=recorded)
    return Verdict(DIFFERS, target, detail=comparison.diff, recorded=recorded)


def last_run_entry(record: TargetRecord, block: Block, blocks: tuple[Block, ...]
                   ) -> TargetBlock | None:
    """The entry of the block's unchanged source in a target's record, paired by source
    (``align.py``; a block moved past others too), whether or not that run verifies it now."""
    pairs = align_with_moves([source_digest(b.source) for b in blocks],
                  [recorded.source_sha256 for recorded in record.blocks])
    return record.blocks[pairs[block.index]] if block.index in pairs else None


def why_unverified(block: Block, blocks: tuple[Block, ...], record: TargetRecord | None,
                   target: Target) -> str:
    """Why a target's record does not verify a block: the block changed since that run, or
    it did not and an earlier block did (the block then starts from another state, so the
    target has not verified it until the page runs there again); "" if it never ran there."""
    if record is None or record.reason:
        return ""
    there = align_with_moves([source_digest(b.source) for b in blocks],
                  [recorded.source_sha256 for recorded in record.blocks])
    if block.index in there:
        return f"an earlier block changed since the {target.label} run"
    return f"this block is new or edited since the {target.label} run"


def as_on_target(config, docname: str, block: Block, target: Target) -> Block:
    """The block as a version target compares it: ``verified_matrix_varies`` names blocks
    whose output varies from run to run on the other versions only (what the page measures
    does not work there), by page and a piece of their source."""
    if target.kind == PLATFORM:
        return block
    for piece in config.matrix_varies.get(docname, ()):
        if piece in block.source:
            return dataclasses.replace(block, varies=True)
    return block


class TargetRecords:
    """The committed records of every target, read once per build."""

    def __init__(self, config):
        self.config = config
        self.targets: tuple[Target, ...] = (*config.matrix, *config.platforms)
        self._read: dict[tuple[str, str], TargetRecord | None] = {}

    def get(self, target: Target, docname: str) -> TargetRecord | None:
        key = (target.dirname, docname)
        if key not in self._read:
            try:
                self._read[key] = read_target_record(self.config.record_dir, target, docname)
            except UnreadableRecord as err:  # said once; the page's verdicts there: none
                warn_unreadable(err, docname, rewrite_command(target, docname))
                self._read[key] = None
        return self._read[key]

    def stamp(self, docname: str) -> tuple:
        """The digests of a page's target records (a page re-renders when one changes)."""
        digests = []
        for target in self.targets:
            path = target_record_path(self.config.record_dir, target, docname)
            digests.append(hashlib.sha256(path.read_bytes()).hexdigest() if path.exists()
                           else None)
        return tuple(digests)

    def verdicts(self, docname: str, block: Block, blocks: tuple[Block, ...],
                 main: RecordedBlock | None, settings: DocSettings | None = None,
                 targets: tuple[Target, ...] | None = None,
                 last_run: bool = False) -> list[Verdict]:
        """The block's verdict on each target (``targets``: these only), None left out;
        ``last_run``: in each target's last run (``verdict``)."""
        found = []
        for target in self.targets if targets is None else targets:
            result = verdict(as_on_target(self.config, docname, block, target), blocks, main,
                             self.get(target, docname), target, self.config.normalizers,
                             settings, last_run)
            if result is not None:
                found.append(result)
        return found

    def only_there(self, docname: str, block: Block, blocks: tuple[Block, ...]
                   ) -> tuple[Target, TargetRecord, TargetBlock] | None:
        """For a block that runs on one platform alone: that platform, its record and the
        block's entry, if that platform ran the page's current code up to this block."""
        target = next((t for t in self.config.platforms if t.name == block.platform), None)
        record = self.get(target, docname) if target else None
        recorded = record.verified_for(block, blocks) if record else None
        return (target, record, recorded) if recorded is not None else None

    def last_run_there(self, docname: str, block: Block, blocks: tuple[Block, ...]
                       ) -> tuple[Target, TargetRecord, TargetBlock] | None:
        """For a block that runs on one platform alone and is not verified there now: the
        entry of its unchanged source in that platform's last run (paired by source, as the
        main record pairs blocks), when it ran there. What it printed then is all there is
        until the platform runs the page again; it is shown as that, never as current."""
        target = next((t for t in self.config.platforms if t.name == block.platform), None)
        record = self.get(target, docname) if target else None
        if record is None or record.reason:
            return None
        recorded = last_run_entry(record, block, blocks)
        if recorded is None or recorded.status in (SKIPPED, NOT_RUN, NOT_RUN_THERE,
                                                   FAILED_BECAUSE):
            return None  # the block itself changed, or it printed nothing of its own
        return target, record, recorded


def stale_mark(label: str, date: str) -> str:
    """How an output of a platform's earlier run reads where it is shown before that platform
    has run the page's current code (the block's caption and each value glued from it)."""
    return f"from the {label} run of {date}, not yet re-verified there after an edit"


def verdict_nodes(verdicts: list[Verdict], tags: set[str]) -> list[nodes.Node]:
    """One caption line per target; a differing output is one click away."""
    rendered: list[nodes.Node] = []
    for item in verdicts:
        text = item.text()
        classes = ["cell-caption", "cell-target", f"cell-target-{item.target.kind}",
                   f"cell-matrix-{item.kind}"]
        line = nodes.paragraph(text, "", classes=classes)
        line += nodes.Text(text)
        rendered.append(line)
        if item.kind in (DIFFERS, FAILS, NEEDS_DEVICES) and item.recorded is not None:
            outputs = output_nodes(item.recorded.outputs, "remove-stderr" in tags)
            if outputs:
                rendered.append(folded(f"Show the output on {item.target.label}",
                                       "cell-matrix-output", *outputs))
    return rendered


def chapter_notes(depending: list[Verdict], sections: dict[int, str],
                  short: Sequence[Verdict] = ()) -> list[nodes.Node]:
    """One line per target for a page's blocks that did not run there because an earlier
    block fails there (said once, at the top, not under each of them): how many, where the
    failing blocks are, by section (``sections``: block index to title), each section linked
    to its first failing block, and how many blocks fail there for want of devices
    (``short``: their needs-devices verdicts)."""
    rendered: list[nodes.Node] = []
    by_target: dict[str, list[Verdict]] = {}
    for item in depending:
        by_target.setdefault(item.target.name, []).append(item)
    for items in by_target.values():
        label, count = items[0].target.label, len(items)
        failing = sorted({item.because.index: item.because for item in items
                          if item.because is not None}.values(), key=lambda b: b.index)
        places: dict[str, Block] = {}  # section title: its first failing block
        for block in failing:
            places.setdefault(sections.get(block.index, ""), block)
        line = nodes.paragraph(classes=["cell-caption", "chapter-target-note",
                                        f"cell-target-{items[0].target.kind}"])
        blocks, them = ("1 block", "it") if count == 1 else (f"{count} blocks", "them")
        line += nodes.Text(f"On {label}, {blocks} of this page did not run, because ")
        if len(failing) <= 1:
            line += nodes.Text(f"a block before {them} fails there")
        else:
            line += nodes.Text(f"blocks before {them} fail there")
        named = [(title, block) for title, block in places.items() if title]
        for at, (title, block) in enumerate(named):
            line += nodes.Text(": in " if at == 0 else
                               (" and " if at == len(named) - 1 else ", "))
            words = f"“{title}”"
            line += nodes.reference(words, words, refid=block_anchor(block), internal=True)
        line += nodes.Text(".")
        lacking = [item.devices for item in short if item.target.name == items[0].target.name]
        if lacking:
            asked, has = max(lacking)
            which = "1 block fails" if len(lacking) == 1 else f"{len(lacking)} blocks fail"
            line += nodes.Text(f" {which} there for want of devices: the page asks for "
                               f"{asked}, and {label} here has {has}.")
        rendered.append(line)
    return rendered


def block_anchor(block: Block) -> str:
    return f"block-line-{block.line}"


def block_label(docname: str, block: Block) -> str:
    """A std-domain label for a block (the generated pages link to blocks with it)."""
    return f"verified-block:{docname}:{block.line}"


def label_block(env, docname: str, block: Block, cell: nodes.Element) -> None:
    """Gives a rendered block an anchor and a std-domain label."""
    anchor = block_anchor(block)
    cell["ids"].append(anchor)
    env.get_domain("std").anonlabels[block_label(docname, block)] = (docname, anchor)
