"""Where in the page's file a failed block went wrong: a syntax error at its offending line,
anything else at the block's fence.

A block's code starts a few lines below its fence (after its options); a syntax error names
the line within the block (``Cell [23], line 2``), which is the file line to point at.
"""

from __future__ import annotations

import re

from .model import Block, BlockResult

SYNTAX_ERRORS = ("SyntaxError", "IndentationError", "TabError")
# Python's compiler names the line in the cell; IPython's tokenizer (an inconsistent dedent,
# found while IPython transforms the cell) names it in ``<tokenize>``.
_LINE = re.compile(r"\((?:Cell \[\d+\]|<tokenize>), line (\d+)\)$")


def body_line(block: Block, text: str) -> int:
    """The file line of the block's first line of code: the first line after the fence from
    which the file reads as the block's source (the fence line when it cannot be found).
    Blank lines before the code do not count: IPython drops them before numbering lines."""
    lines = text.splitlines()
    code = block.source.splitlines()
    while code and not code[0].strip():
        code.pop(0)
    if not code:
        return block.line
    for start in range(block.line, min(len(lines), block.line + 50)):
        if lines[start:start + len(code)] == code:
            return start + 1
    return block.line


def failure_line(block: Block, result: BlockResult, code_line: int) -> int:
    """The file line a block's failure is reported at; ``code_line``: the file line of the
    block's first line of code (``body_line``, found when the page was collected)."""
    error = result.error
    if error is None or error.ename not in SYNTAX_ERRORS:
        return block.line
    found = _LINE.search(error.evalue.splitlines()[0] if error.evalue else "")
    if not found:
        return block.line
    line = int(found.group(1))
    if line > len(block.source.strip("\n").splitlines()):
        return block.line  # not the block's own line: text the block tokenized, say
    return code_line + line - 1
