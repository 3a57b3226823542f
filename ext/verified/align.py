"""Align a page's blocks with a record of it, by source in page order, as a diff does.

A record is a list of blocks, each with its source's digest. Inserting three blocks into a
page moves every block after them; matching by position would then call each of those new.
Matching by source alone would pair a repeated block (``x``, twice) with the wrong one. So
the two sequences of digests are aligned as ``difflib`` aligns lines: an unchanged block is
paired with its own recorded entry, and only an inserted or edited block has none.

What a block prints can also name its place: IPython calls a block ``Cell [23]`` and its
input ``<ipython-input-23-…>`` (ipykernel ``/tmp/ipykernel_…/….py``), by execution count.
``cell_names`` takes those numbers out before two outputs are compared.
"""

from __future__ import annotations

import difflib
from collections import Counter
import re
from typing import Sequence

# How a traceback names a block: the worker's ``Cell [23], line 1`` (a SyntaxError's
# ``File "Cell [23]"``), IPython's ``In [23]`` and the input names IPython and ipykernel
# compile a block under.
_CELL_NAMES = (
    (re.compile(r"\bCell \[\d+\]"), "Cell [N]"),
    (re.compile(r"\bIn ?\[\d+\]"), "In [N]"),
    (re.compile(r"<ipython-input-\d+-[0-9a-f]+>"), "<input>"),
    (re.compile(r"/[^\s\"']*/ipykernel_\d+/\d+\.py"), "<input>"),
)


def cell_names(text: str) -> str:
    """``text`` with each block's execution count and input name replaced by a placeholder:
    a block moved down the page prints the same traceback."""
    for pattern, replacement in _CELL_NAMES:
        text = pattern.sub(replacement, text)
    return text


def align(current: Sequence[str], recorded: Sequence[str]) -> dict[int, int]:
    """``{current index: recorded index}`` for the blocks whose source is unchanged, paired
    in page order (the longest matching runs first, as ``difflib`` pairs lines)."""
    matcher = difflib.SequenceMatcher(a=list(current), b=list(recorded), autojunk=False)
    pairs: dict[int, int] = {}
    for first, second, size in matcher.get_matching_blocks():
        for offset in range(size):
            pairs[first + offset] = second + offset
    return pairs



def align_with_moves(current: Sequence[str], recorded: Sequence[str]) -> dict[int, int]:
    """``align``, and also each block moved past others (which an order-keeping alignment
    cannot pair) whose source occurs once in the page and once in the record: for showing
    what a platform last printed for a block that did not change, never for verifying it."""
    pairs = align(current, recorded)
    taken = set(pairs.values())
    in_page, in_record = Counter(current), Counter(recorded)
    first_in_record = {digest: index for index, digest in reversed(list(enumerate(recorded)))}
    for index, digest in enumerate(current):
        if index not in pairs and in_page[digest] == 1 and in_record[digest] == 1:
            other = first_in_record[digest]
            if other not in taken:
                pairs[index] = other
    return pairs


class Alignment:
    """One page's alignment with one record, worked out once per tuple of blocks."""

    def __init__(self, recorded: Sequence[str]):
        self.recorded = tuple(recorded)
        self._for: tuple[object, dict[int, int]] | None = None

    def pairs(self, blocks, digest) -> dict[int, int]:
        """``align`` of ``blocks`` (the page's, in order; ``digest`` gives a block's source
        digest) with the record, reused while the same tuple of blocks asks."""
        if self._for is None or self._for[0] is not blocks:
            self._for = (blocks, align([digest(block.source) for block in blocks],
                                       self.recorded))
        return self._for[1]
