"""Glued values: a block names a value (``from myst_nb import glue; glue("name", value)``),
and prose inserts it (``{glue}`name` ``, or ``{glue:text}`name:.2f` ``), so a sentence
agrees with the output printed above it on every machine that builds the page.

The syntax is MyST-NB's. The role only parses and leaves a ``glue_ref`` placeholder; once
the page's result is at hand, ``resolve`` swaps it for the value's text, or reports the
unknown name at the role's line.
"""

from __future__ import annotations

import difflib
import re
from ast import literal_eval
from pathlib import Path

from docutils import nodes
from sphinx.domains import Domain
from sphinx.util import logging
from sphinx.util.docutils import SphinxRole

from .model import DocResult

logger = logging.getLogger(__name__)


class glue_ref(nodes.Inline, nodes.Element):
    """Placeholder for a glued value; carries ``key`` and ``format_spec``."""


class GlueDomain(Domain):
    """``{glue:text}`` and ``{glue:any}`` are looked up as roles of a ``glue`` domain (as in
    MyST-NB); plain ``{glue}`` is a role of its own."""

    name = "glue"
    label = "Glue"

    def clear_doc(self, docname: str) -> None:
        pass  # the domain keeps no data: values live in each page's result

    def merge_domaindata(self, docnames, otherdata) -> None:
        pass

    def resolve_xref(self, env, fromdocname, builder, typ, target, node, contnode):
        return None  # glued values are inserted when the page is read, never cross-referenced

    def resolve_any_xref(self, env, fromdocname, builder, target, node, contnode):
        return []


class GlueRole(SphinxRole):
    """``{glue}`name` `` (the value's text) and ``{glue:text}`name:format` ``."""

    def __init__(self, formatted: bool):
        super().__init__()
        self.formatted = formatted

    def run(self) -> tuple[list[nodes.Node], list[nodes.system_message]]:
        key, format_spec = self.text.strip(), ""
        if self.formatted and ":" in key:
            key, format_spec = key.rsplit(":", 1)
        if "::" in key:
            logger.error(f"glue {key!r}: a page inserts only its own values (no 'page::name')",
                         location=self.get_location(), type="verified", subtype="glue")
            return [], []
        node = glue_ref(self.rawtext, key=key, format_spec=format_spec)
        self.set_source_info(node)
        return [node], []


# Scalar reprs that are not Python literals: NumPy 2's ``np.float64(0.5)`` and JAX's
# ``Array(0.5, dtype=float32)``; their value is the literal inside.
_SCALAR_REPR = re.compile(r"^(?:np\.\w+|numpy\.\w+|Array)\((.*?)(?:, dtype=[\w\[\]]+)?"
                          r"(?:, weak_type=True)?\)$", re.S)


def plain_value(text: str):
    """A glued text/plain repr read back as a value (the text itself when it is no literal)."""
    scalar = _SCALAR_REPR.match(text.strip())
    try:
        return literal_eval(scalar.group(1) if scalar else text)
    except (SyntaxError, ValueError):
        return text


def format_plain_text(text: str, format_spec: str) -> str:
    """MyST-NB's ``glue:text`` rule: the text/plain repr read as a literal (NumPy and JAX
    scalars too), then formatted by the spec's type character (``d`` as an int,
    ``f``/``e``/``g``/``%`` as a float)."""
    value = plain_value(text)
    if not format_spec:
        return str(value)
    kind = format_spec[-1]
    if kind in "bcdoxX":
        value = int(value)
    elif kind in "eEfFgGn%":
        value = float(value)
    elif kind == "s":
        value = str(value)
    return format(value, format_spec)


def glued_names(source: str) -> set[str]:
    """The names a block's code glues with a literal name (``glue("speed", ...)``)."""
    return set(re.findall(r"""\bglue\(\s*["']([^"']+)["']""", source))


def glued_values(result: DocResult) -> dict[str, str]:
    """Every value the page glued, by name (a later glue of the same name wins)."""
    return {output.name: output.text for block in result.blocks for output in block.outputs
            if output.kind == "glue"}


def _where(node: nodes.Node) -> str | nodes.Node:
    """The role's own line: MyST gives an inline role its paragraph's first line, so the
    role's text is looked for in the source from there."""
    try:
        lines = Path(node.source).read_text(encoding="utf-8").splitlines()
    except (OSError, TypeError):
        return node
    role = re.fullmatch(r":([\w:.-]+):(`.*`)", node.rawsource or "", re.S)
    if role is None:
        return node
    written = f"{{{role[1]}}}{role[2]}"  # the MyST spelling, {glue}`name`
    for number in range(max((node.line or 1) - 1, 0), len(lines)):
        if written in lines[number]:
            return f"{node.source}:{number + 1}"
    return node


def _did_you_mean(key: str, values: dict[str, str]) -> str:
    close = difflib.get_close_matches(key, values, n=1)
    return f"did you mean {close[0]!r}? " if close else ""


def resolve(doctree: nodes.document, result: DocResult | None,
            stopped: int | None = None, awaited: dict[str, str] | None = None,
            marks: dict[str, str] | None = None) -> bool:
    """Replaces every ``glue_ref`` with its value's text; unknown names are located errors.
    ``stopped``: the line of the page's failed block, if one failed; a name no block glued
    then may be one a block after it never got to glue, and the error says so. ``awaited``:
    names that a block not yet run where it runs would glue, with why there is no value yet.
    ``marks``: names whose value is from an earlier run, with what to say of it beside the
    value. Returns whether it reported a problem."""
    values = glued_values(result) if result else {}
    reported = False
    for node in list(doctree.findall(glue_ref)):
        key = node["key"]
        if result is None:
            node.replace_self([])  # the page did not run: that error is reported already
            continue
        if key not in values:
            known = ", ".join(sorted(values)) or "none"
            why = (f"no value yet: {awaited[key]}" if awaited and key in awaited else
                   f"no value: the page stopped at its failed block (line {stopped}, reported "
                   f"above) before any block glued it" if stopped is not None else
                   "this page has no code-cell to glue it" if not result.blocks else
                   f"no block of this page glued that name ({_did_you_mean(key, values)}"
                   f"glued: {known})")
            logger.error(f"glue {key!r}: {why}", location=_where(node), type="verified",
                         subtype="glue")
            reported = True
            node.replace_self([])
            continue
        try:
            text = format_plain_text(values[key], node["format_spec"])
        except (TypeError, ValueError, OverflowError) as err:
            shown = values[key] if len(values[key]) <= 60 else values[key][:50] + "…"
            logger.error(f"glue {key!r}: cannot format {shown!r} as "
                         f"{node['format_spec']!r}: {err}",
                         location=_where(node), type="verified", subtype="glue")
            reported = True
            node.replace_self([])
            continue
        if marks and key in marks:
            note = f" ({marks[key]})"
            node.replace_self([nodes.inline(text, text, classes=["glued", "glued-stale"]),
                               nodes.inline(note, note, classes=["glued-stale-mark"])])
            continue
        node.replace_self(nodes.inline(text, text, classes=["glued"]))
    return reported
