"""The ``glue(...)`` lines of a block, which a chapter shows apart from its code.

They are plumbing for the prose (a block names a value, a sentence inserts it): on the page
they crowd the code a reader came to read, so the rendered input leaves them out and says how
many it left out; the notebook download keeps the block whole.
"""

from __future__ import annotations

import ast


def _is_glue(statement: ast.stmt) -> bool:
    """``glue(...)``, ``myst_nb.glue(...)``, or ``from myst_nb import glue``."""
    if isinstance(statement, ast.ImportFrom):
        return statement.module == "myst_nb" and [a.name for a in statement.names] == ["glue"]
    if isinstance(statement, ast.Expr) and isinstance(statement.value, ast.Call):
        function = statement.value.func
        name = function.id if isinstance(function, ast.Name) else \
            function.attr if isinstance(function, ast.Attribute) else ""
        return name == "glue"
    return False


def _bodies(statement: ast.stmt) -> list[list[ast.stmt]]:
    return [body for body in (getattr(statement, name, None)
                              for name in ("body", "orelse", "finalbody"))
            if isinstance(body, list) and body and isinstance(body[0], ast.stmt)]


def _glue_only(statement: ast.stmt) -> bool:
    """A glue statement, or a loop/``with``/``if`` that does nothing but glue."""
    if _is_glue(statement):
        return True
    bodies = _bodies(statement)
    return (isinstance(statement, (ast.For, ast.With, ast.If)) and bool(bodies)
            and all(_glue_only(s) for body in bodies for s in body))


def _removed(body: list[ast.stmt], top: bool) -> list[ast.stmt]:
    """The statements of a body to leave out: its glue-only ones, unless that would empty
    a nested body; then, recursively, those of what it keeps."""
    gone = [s for s in body if _glue_only(s)]
    if not top and len(gone) == len(body):
        gone = []
    found = list(gone)
    for statement in body:
        if statement not in gone:
            for inner in _bodies(statement):
                found += _removed(inner, top=False)
    return found


def without_glue(source: str) -> tuple[str, int]:
    """The block's code without its glue statements, and how many ``glue`` calls were
    left out (0, and the source unchanged, for code Python cannot parse, such as a magic)."""
    try:
        tree = ast.parse(source)
    except SyntaxError:
        return source, 0
    removed = _removed(tree.body, top=True)
    if not removed:
        return source, 0
    lines = source.splitlines()
    dropped: set[int] = set()
    calls = 0
    for statement in removed:
        dropped.update(range(statement.lineno - 1, statement.end_lineno))
        calls += sum(1 for node in ast.walk(statement) if isinstance(node, ast.Expr)
                     and _is_glue(node))
    kept: list[str] = []
    for number, line in enumerate(lines):
        if number in dropped:
            continue
        if not line.strip() and (not kept or not kept[-1].strip()):
            continue  # no blank line where a removed one left two, or at the start
        kept.append(line)
    while kept and not kept[-1].strip():
        kept.pop()
    return "\n".join(kept), calls
