"""The generated pages: Versions (``{versions-matrix}``) and Platforms (``{platforms-matrix}``).

Both count, chapter by chapter, the verdict of every block on every target of their kind,
from the committed records alone (verdict.py), and list what differs: Versions by the
exception an older JAX raises, Platforms by cause, each cause with the model that predicts
it and the chapter that teaches it.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

import yaml
from docutils import nodes
from sphinx import addnodes
from sphinx.util import logging
from sphinx.util.docutils import SphinxDirective

from .model import Block
from .outcome import page_outcome
from .state import state
from .targets import Target
from .verdict_chart import data_uri, describe, stacked_bars
from .verdict import (DEPENDS, DIFFERS, FAILS, NEEDS_DEVICES, NOT_THERE, ONLY_THERE, RUNS, SAME,
                      UNVERIFIED, VERDICTS, Verdict, block_label)

logger = logging.getLogger(__name__)


@dataclass
class PageVerdicts:
    """One page's verdicts on every target (what the generated pages show)."""

    docname: str
    blocks: tuple[Block, ...]
    verdicts: dict[str, list[tuple[Block, Verdict]]]  # target name -> (block, verdict)

    def counts(self, target: str) -> dict[str, int]:
        tally = {kind: 0 for kind in VERDICTS}
        for _, item in self.verdicts.get(target, []):
            tally[item.kind] += 1
        return tally


def verdicts_of_page(build, env, docname: str, targets: tuple[Target, ...]
                     ) -> PageVerdicts | None:
    """Each block's verdict on each target, from the page's outcome (None: a page without
    blocks)."""
    outcome = page_outcome(build, env, docname)
    if outcome is None:
        return None
    return PageVerdicts(docname, outcome.blocks, outcome.on(targets))


def page_verdicts(build, env, targets: tuple[Target, ...]) -> list[PageVerdicts]:
    """Every page with blocks, with each block's verdict on each target (from the records)."""
    pages = (verdicts_of_page(build, env, docname, targets) for docname in sorted(env.found_docs))
    return [page for page in pages if page is not None]


def version_key(version: str) -> tuple:
    return tuple(int(part) if part.isdigit() else part for part in re.split(r"[.+-]", version))


def minimum_version(page: PageVerdicts, versions: tuple[Target, ...],
                    main_version: str | None) -> str:
    """The oldest verified version from which on every block of the page runs (same, differs
    or varies) on every verified version; ``?`` when a record is missing or stale."""
    ordered = sorted(versions, key=lambda v: version_key(v.name), reverse=True)
    oldest = main_version or "?"
    for version in ordered:
        counts = page.counts(version.name)
        if counts[UNVERIFIED]:
            return "?"
        if counts[FAILS] or counts[DEPENDS]:
            break
        oldest = version.name
    return oldest


class _VerdictPage(SphinxDirective):
    """What both generated pages share: the chapter × verdict table and links."""

    has_content = True
    columns: tuple[tuple[str, str], ...] = ()
    table_class = ""

    def _doc_link(self, docname: str, text: str | None = None) -> nodes.Node:
        ref = addnodes.pending_xref("", refdomain="std", reftype="doc",
                                    reftarget="/" + docname, refexplicit=text is not None,
                                    refdoc=self.env.docname)
        ref += nodes.inline(text or docname, text or docname)
        return ref

    def _block_link(self, docname: str, block: Block) -> nodes.Node:
        text = f"{docname}, line {block.line}"
        ref = addnodes.pending_xref("", refdomain="std", reftype="ref",
                                    reftarget=block_label(docname, block),
                                    refexplicit=True, refdoc=self.env.docname)
        ref += nodes.inline(text, text)
        return ref

    def _block_links(self, para: nodes.paragraph, found: list[tuple[str, Block]]) -> None:
        for position, (docname, block) in enumerate(found):
            if position:
                para += nodes.Text(", ")
            para += self._block_link(docname, block)

    def _table(self, pages: list[PageVerdicts], targets: tuple[Target, ...],
               last_column=None) -> nodes.Node:
        headers = ["Chapter", "blocks"]
        for target in targets:
            headers += [f"{target.label}: {title}" for _, title in self.columns]
        if last_column:
            headers.append(last_column[0])
        table = nodes.table(classes=[self.table_class])
        group = nodes.tgroup(cols=len(headers))
        table += group
        for _ in headers:
            group += nodes.colspec(colwidth=1)
        head = nodes.thead()
        group += head
        head += self._row([nodes.Text(h) for h in headers])
        body = nodes.tbody()
        group += body
        totals = {target.name: {kind: 0 for kind in VERDICTS} for target in targets}
        total_blocks = 0
        for page in pages:
            cells: list[nodes.Node] = [self._doc_link(page.docname),
                                       nodes.Text(str(len(page.blocks)))]
            total_blocks += len(page.blocks)
            for target in targets:
                counts = page.counts(target.name)
                for kind, _ in self.columns:
                    totals[target.name][kind] += counts[kind]
                    cells.append(nodes.Text(str(counts[kind])))
            if last_column:
                cells.append(nodes.Text(last_column[1](page)))
            body += self._row(cells, page.docname)
        cells = [nodes.Text("all chapters"), nodes.Text(str(total_blocks))]
        for target in targets:
            cells += [nodes.Text(str(totals[target.name][kind])) for kind, _ in self.columns]
        if last_column:
            cells.append(nodes.Text(""))
        body += self._row(cells, "total")
        return table

    def _row(self, cells, name: str = "") -> nodes.row:
        prefix = self.table_class.removesuffix("-matrix")
        row = nodes.row(classes=[f"{prefix}-row-{name.replace('/', '-')}"] if name else [])
        for content in cells:
            entry = nodes.entry()
            paragraph = nodes.paragraph()
            paragraph += content
            entry += paragraph
            row += entry
        return row

    def _reader_build(self) -> bool:
        """Whether this build renders the page for readers (not one that writes or checks
        records, which reads it only to execute the others)."""
        builder = self.env._app.builder
        return not (getattr(builder, "runs_pages_itself", False)
                    or builder.name in ("doctest", "record"))


class VersionsMatrix(_VerdictPage):
    """``{versions-matrix}``: the table chapter × version, the API differences found and the
    minimum version per chapter, from the committed records.

    Each content line ``EXCEPTION LINE => old form -> new form`` names the forms behind a
    difference (the exception line as the matrix records it, or its start)."""

    columns = ((SAME, "same"), (DIFFERS, "differs"), (RUNS, "varies"), (FAILS, "fails"),
               (DEPENDS, "fails after an earlier block"), (UNVERIFIED, "not yet verified"))
    table_class = "versions-matrix"

    def run(self) -> list[nodes.Node]:
        build = state(self.env)
        self.env.note_dependency(self.env.doc2path(self.env.docname))
        versions = build.config.matrix
        pages = page_verdicts(build, self.env, versions)
        main_version = next((record.environment.jax for record in
                             (build.record_for(page.docname) for page in pages)
                             if record and record.environment.jax), None)
        table = self._table(pages, versions, (
            "needs jax", lambda page: minimum_version(page, versions, main_version)))
        return [table, *self._differences(pages, versions)]

    def _forms(self) -> list[tuple[str, str]]:
        forms = []
        for line in self.content:
            if not line.strip():
                continue
            if "=>" not in line:
                logger.warning(f"versions-matrix: expected 'EXCEPTION => old -> new', "
                               f"got {line!r}", location=self.get_location(),
                               type="verified", subtype="matrix")
                continue
            match, _, forms_text = line.partition("=>")
            forms.append((match.strip(), forms_text.strip()))
        return forms

    def _differences(self, pages, versions) -> list[nodes.Node]:
        forms = self._forms()
        used = set()
        out: list[nodes.Node] = []
        for version in versions:
            found: dict[str, list[tuple[str, Block]]] = {}
            for page in pages:
                for block, item in page.verdicts.get(version.name, []):
                    if item.kind == FAILS:
                        found.setdefault(item.detail, []).append((page.docname, block))
            section_title = f"Where {version.label} differs"
            out.append(nodes.rubric(section_title, section_title))
            if not found:
                text = f"No block fails on {version.label}."
                out.append(nodes.paragraph(text, text))
                continue
            listing = nodes.bullet_list(classes=["versions-differences"])
            for detail in sorted(found):
                named = next(((m, f) for m, f in forms if detail.startswith(m)), None)
                item = nodes.list_item()
                para = nodes.paragraph()
                if named:
                    used.add(named[0])
                    para += nodes.strong(named[1], named[1])
                    para += nodes.Text(": ")
                para += nodes.literal(detail, detail)
                para += nodes.Text(" — shown by ")
                self._block_links(para, found[detail])
                item += para
                listing += item
            out.append(listing)
        if self._reader_build():
            for match, _ in forms:
                if match not in used:
                    logger.warning(f"versions-matrix: no block fails with {match!r} "
                                   f"(the matrix no longer shows this difference)",
                                   location=self.get_location(), type="verified",
                                   subtype="matrix")
        return out


@dataclass
class Cause:
    """Why blocks differ on a platform: what the Platforms page groups differences by."""

    key: str
    title: str
    model: str  # the model that predicts it (inline markup)
    chapter: str  # the docname of the chapter that teaches it
    verdict: str = ""  # a verdict kind that is this cause by itself (needs-devices)
    errors: tuple[str, ...] = ()  # starts of exception lines
    blocks: tuple[tuple[str, str], ...] = ()  # (page, a piece of the block's source)

    def explains(self, docname: str, block: Block, item: Verdict) -> bool:
        if self.verdict and item.kind == self.verdict:
            return True
        if item.kind in (FAILS, NEEDS_DEVICES) and any(
                item.detail.startswith(error) for error in self.errors):
            return True
        return any(page == docname and piece in block.source for page, piece in self.blocks)

    def pages(self) -> set[str]:
        """The pages it names: its chapter and the pages of the blocks it explains."""
        return {self.chapter, *(page for page, _ in self.blocks)}


CAUSE_KEYS = {"title", "model", "chapter", "verdict", "errors", "blocks"}


def parse_causes(text: str) -> list[Cause]:
    """The directive's YAML content: ``{key: {title, model, chapter, verdict?, errors?,
    blocks?: [{page: piece of source}]}}``; ValueError says what is wrong."""
    data = yaml.safe_load(text) if text.strip() else {}
    if not isinstance(data, dict):
        raise ValueError("the content must map cause names to their description")
    causes = []
    for key, entry in data.items():
        if not isinstance(entry, dict):
            raise ValueError(f"cause {key!r} must be a mapping")
        unknown = sorted(set(entry) - CAUSE_KEYS)
        if unknown:
            raise ValueError(f"cause {key!r}: unknown key(s) {', '.join(unknown)}")
        for required in ("title", "model", "chapter"):
            if not isinstance(entry.get(required), str) or not entry[required].strip():
                raise ValueError(f"cause {key!r} needs a {required}")
        if entry.get("verdict") not in (None, NEEDS_DEVICES, NOT_THERE):
            raise ValueError(f"cause {key!r}: verdict must be {NEEDS_DEVICES} or {NOT_THERE}")
        errors = entry.get("errors") or []
        pieces = entry.get("blocks") or []
        if not isinstance(errors, list) or not all(isinstance(e, str) and e for e in errors):
            raise ValueError(f"cause {key!r}: errors must be a list of exception-line starts")
        blocks = []
        for piece in pieces:
            if (not isinstance(piece, dict) or len(piece) != 1
                    or not all(isinstance(v, str) and v for v in piece.values())):
                raise ValueError(f"cause {key!r}: each block is {{page: piece of its source}}, "
                                 f"got {piece!r}")
            blocks.extend(piece.items())
        causes.append(Cause(str(key), entry["title"].strip(), entry["model"].strip(),
                            entry["chapter"].strip(), entry.get("verdict") or "",
                            tuple(errors), tuple(blocks)))
    return causes


class PlatformsMatrix(_VerdictPage):
    """``{platforms-matrix}``: the table chapter × verdict on each verified platform, and
    every block that differs or fails there, grouped by cause (the YAML content names the
    causes: title, model, chapter, and which blocks or exceptions each explains). A
    difference no cause explains is listed as not yet explained; a cause that explains no
    block is a warning (the platform no longer shows it)."""

    columns = ((SAME, "same"), (DIFFERS, "differs"), (RUNS, "varies"), (FAILS, "fails"),
               (NEEDS_DEVICES, "needs more devices"),
               (DEPENDS, "fails after an earlier block"), (NOT_THERE, "not run there"),
               (ONLY_THERE, "runs there only"), (UNVERIFIED, "not yet verified"))
    table_class = "platforms-matrix"
    EXPLAINED = (DIFFERS, FAILS, NEEDS_DEVICES, NOT_THERE)

    def run(self) -> list[nodes.Node]:
        build = state(self.env)
        self.env.note_dependency(self.env.doc2path(self.env.docname))
        try:
            causes = parse_causes("\n".join(self.content))
        except (ValueError, yaml.YAMLError) as err:
            logger.error(f"platforms-matrix: {err}", location=self.get_location(),
                         type="verified", subtype="platforms")
            return []
        platforms = build.config.platforms
        if not platforms:
            text = "No platform is verified (verified_platforms is empty)."
            return [nodes.paragraph(text, text)]
        pages = page_verdicts(build, self.env, platforms)
        charts = self._charts(pages, platforms) if self._reader_build() else []
        return [self._table(pages, platforms), *charts, *self._causes(pages, platforms, causes)]

    def _charts(self, pages: list[PageVerdicts], platforms) -> list[nodes.Node]:
        """The table as a picture: a chapter's verdicts on a platform as one stacked bar."""
        charts = []
        for platform in platforms:
            rows = [(page.docname, page.counts(platform.name)) for page in pages]
            title = f"Verdicts per chapter on {platform.label}"
            png = stacked_bars(rows, self.columns, title)
            charts.append(nodes.image(uri=data_uri(png), alt=describe(rows, self.columns, title),
                                      classes=["platforms-chart"]))
        return charts

    def _causes(self, pages, platforms, causes: list[Cause]) -> list[nodes.Node]:
        out: list[nodes.Node] = []
        used: set[str] = set()
        for platform in platforms:
            grouped: dict[str, list[tuple[str, Block]]] = {cause.key: [] for cause in causes}
            unexplained: list[tuple[str, Block, Verdict]] = []
            for page in pages:
                for block, item in page.verdicts.get(platform.name, []):
                    if item.kind not in self.EXPLAINED:
                        continue
                    cause = next((c for c in causes if c.explains(page.docname, block, item)),
                                 None)
                    if cause is None:
                        unexplained.append((page.docname, block, item))
                    else:
                        grouped[cause.key].append((page.docname, block))
                        used.add(cause.key)
            # Pages whose current code the platform has not all run: a cause they showed
            # may be hidden there until the platform's next run, not gone.
            awaiting = {page.docname for page in pages if page.counts(platform.name)[UNVERIFIED]}
            title = f"Why blocks differ on {platform.label}"
            out.append(nodes.rubric(title, title))
            listing = nodes.bullet_list(classes=["platforms-causes"])
            for cause in causes:
                if not grouped[cause.key]:
                    pending = sorted(cause.pages() & awaiting)
                    if pending:
                        used.add(cause.key)
                        listing += self._awaiting(cause, platform, pending)
                    continue
                item = self._cause_item(cause)
                head = nodes.paragraph()
                head += nodes.strong(cause.title, cause.title)
                count = len(grouped[cause.key])
                head += nodes.Text(f" ({count} block{'s' if count != 1 else ''}; taught in ")
                head += self._doc_link(cause.chapter)
                head += nodes.Text(")")
                item += head
                inline, messages = self.parse_inline(cause.model, lineno=self.lineno)
                item += nodes.paragraph("", "", *inline)
                item += messages
                shown = nodes.paragraph()
                shown += nodes.Text("Shown by ")
                self._block_links(shown, grouped[cause.key])
                item += shown
                listing += item
            if listing.children:
                out.append(listing)
            else:
                text = f"No block differs on {platform.label}."
                out.append(nodes.paragraph(text, text))
            if unexplained:
                text = f"Not yet explained on {platform.label}"
                out.append(nodes.rubric(text, text))
                rest = nodes.bullet_list(classes=["platforms-unexplained"])
                for docname, block, verdict_item in unexplained:
                    item = nodes.list_item()
                    para = nodes.paragraph()
                    para += self._block_link(docname, block)
                    para += nodes.Text(f": {verdict_item.text()}")
                    item += para
                    rest += item
                out.append(rest)
        if self._reader_build():
            for cause in causes:
                if cause.key not in used:
                    logger.warning(f"platforms-matrix: cause {cause.key!r} explains no block "
                                   f"(the platform no longer shows it)",
                                   location=self.get_location(), type="verified",
                                   subtype="platforms")
        return out

    def _cause_item(self, cause: Cause) -> nodes.list_item:
        """A cause's list item, labelled `cause-KEY` so a chapter can {ref} it at its block."""
        label = f"cause-{cause.key}"
        self.env.get_domain("std").note_hyperlink_target(label, self.env.docname, label,
                                                          cause.title)
        return nodes.list_item(ids=[label])

    def _awaiting(self, cause: Cause, platform: Target, pending: list[str]) -> nodes.list_item:
        """A cause none of whose blocks is verified there now: its pages await a run."""
        item = self._cause_item(cause)
        head = nodes.paragraph()
        head += nodes.strong(cause.title, cause.title)
        head += nodes.Text(f" (no block verified on {platform.label} shows it now: it has not "
                           f"run the current code of ")
        for position, docname in enumerate(pending):
            if position:
                head += nodes.Text(", ")
            head += self._doc_link(docname)
        head += nodes.Text(")")
        item += head
        inline, messages = self.parse_inline(cause.model, lineno=self.lineno)
        item += nodes.paragraph("", "", *inline)
        item += messages
        return item


GENERATED = ("{versions-matrix}", "{platforms-matrix}", "{errors-index}")
# A page that uses one of them: its fence opens a line (prose that names one in backticks,
# as the authoring guide does, is not such a page and is not re-read every build).
_USES_GENERATED = re.compile(r"^ *(?:`{3,}|:{3,}) *(?:" + "|".join(map(re.escape, GENERATED))
                             + ")", re.MULTILINE)


def generated_outdated(app, env, added, changed, removed) -> list[str]:
    """The generated pages read every record, so they are re-read on every build."""
    pages = []
    for docname in sorted(env.found_docs - added - changed):
        path = Path(env.doc2path(docname))
        if path.suffix == ".md":
            text = path.read_text(encoding="utf-8")
            if _USES_GENERATED.search(text):
                pages.append(docname)
    return pages
