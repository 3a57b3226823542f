"""The generated Errors page (``{errors-index}``): every exception a block raises in any
record — the CPU's, each older version's, each platform's — grouped by type, each with its
first message line, where it was raised, and a link to the block that teaches it.

A reader who meets ``ConcretizationTypeError`` or a TPU's ``UNIMPLEMENTED`` finds the lesson
from the message: each entry is also an index entry, by type and by message.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

from docutils import nodes
from sphinx import addnodes
from sphinx.util.docutils import SphinxDirective

from .model import EXPECTED_ERROR, FAILED, Block
from .outcome import page_outcome
from .pages import reader_builder
from .selfcheck import exception_only
from .state import state
from .verdict import block_label

_NAME = re.compile(r"[A-Za-z_]\w*")


@dataclass
class Raised:
    """One exception line, raised by one block, in the records that hold it."""

    ename: str  # the type's own name: ``TracerBoolConversionError``
    message: str  # the first line of the message
    docname: str
    block: Block
    section: str
    where: list[str] = field(default_factory=list)  # "CPU", "jax 0.4.38", "TPU v5e"


def exception_line(text: str) -> tuple[str, str]:
    """(type name, first message line) of a recorded traceback or exception line."""
    first = exception_only(text.strip("\n")).split("\n", 1)[0]
    qualified, _, message = first.partition(": ")
    return qualified.rsplit(".", 1)[-1].strip(), message.strip()


def raised_everywhere(build, env) -> list[Raised]:
    """Every (block, exception line) of every current record, with where it is raised."""
    found: dict[tuple, Raised] = {}
    for docname in sorted(env.found_docs):
        outcome = page_outcome(build, env, docname)
        if outcome is None:
            continue
        sections = build.collect(env, docname).sections

        def note(block: Block, text: str, where: str) -> None:
            ename, message = exception_line(text)
            if not _NAME.fullmatch(ename):  # why a block failed without raising: no exception
                return
            key = (docname, block.index, ename, message)
            entry = found.setdefault(key, Raised(ename, message, docname, block,
                                                 sections[block.index]))
            if where not in entry.where:
                entry.where.append(where)

        for block in outcome.blocks:
            recorded = outcome.main[block.index]
            if recorded is not None and recorded.status in (EXPECTED_ERROR, FAILED):
                for output in recorded.outputs:
                    if output.kind == "error":
                        note(block, output.text, "CPU")
            for target, _ in outcome.targets:
                there = outcome.there[target.name][block.index]
                if there is None:
                    continue
                if there.status == FAILED and there.error:
                    note(block, there.error, target.label)
                elif there.status == EXPECTED_ERROR:
                    for output in there.outputs:
                        if output.kind == "error":
                            note(block, output.text, target.label)
    return sorted(found.values(), key=lambda r: (r.ename.lower(), r.message, r.docname,
                                                 r.block.line))


class ErrorsIndex(SphinxDirective):
    """``{errors-index}``: the exceptions of every record, by type."""

    def run(self) -> list[nodes.Node]:
        build = state(self.env)
        self.env.note_dependency(self.env.doc2path(self.env.docname))
        if not reader_builder(self.env._app.builder):
            return []  # a build that writes or checks records publishes no page
        raised = raised_everywhere(build, self.env)
        if not raised:
            text = "No block raises an exception in any record."
            return [nodes.paragraph(text, text)]
        out: list[nodes.Node] = []
        types = sorted({r.ename for r in raised}, key=str.lower)
        summary = nodes.paragraph()
        summary += nodes.Text(f"{len(raised)} exceptions of {len(types)} types: ")
        for position, ename in enumerate(types):
            if position:
                summary += nodes.Text(", ")
            ref = nodes.reference("", "", refid=_type_id(ename))
            ref += nodes.literal(ename, ename)
            summary += ref
        out.append(summary)
        for ename in types:
            section = nodes.section(ids=[_type_id(ename)])
            section += nodes.title(ename, ename)
            listing = nodes.bullet_list(classes=["errors-index"])
            for entry in (r for r in raised if r.ename == ename):
                listing += self._item(entry)
            section += listing
            out.append(section)
        return out

    def _item(self, entry: Raised) -> nodes.list_item:
        anchor = f"error-{entry.docname.replace('/', '-')}-{entry.block.line}-" \
                 f"{self.env.new_serialno('errors-index')}"
        item = nodes.list_item(ids=[anchor])
        words = entry.message[:80]
        item += addnodes.index(entries=[
            ("single", f"{entry.ename}; {words}" if words else entry.ename, anchor, "", None),
            *([("single", f"{words}; {entry.ename}", anchor, "", None)] if words else []),
        ])
        para = nodes.paragraph()
        if entry.message:
            para += nodes.literal(entry.message, entry.message)
            para += nodes.Text(" — ")
        ref = addnodes.pending_xref("", refdomain="std", reftype="ref",
                                    reftarget=block_label(entry.docname, entry.block),
                                    refexplicit=True, refdoc=self.env.docname)
        text = f"{entry.docname}, line {entry.block.line}"
        ref += nodes.inline(text, text)
        para += ref
        if entry.section:
            para += nodes.Text(f" (§ {entry.section})")
        para += nodes.Text(f"; on {', '.join(entry.where)}")
        item += para
        return item


def _type_id(ename: str) -> str:
    return "error-type-" + nodes.make_id(ename)
