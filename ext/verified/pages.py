"""The generated pages: Versions (``{versions-matrix}``) and Platforms (``{platforms-matrix}``).

Both count, chapter by chapter, the verdict of every block on every target of their kind,
from the committed records alone (verdict.py), and list what differs: Versions by the
exception an older JAX raises, Platforms by cause, each cause with the model that predicts
it and the chapter that teaches it.
"""

from __future__ import annotations

import hashlib
import re
from dataclasses import dataclass, field

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
    # The same in each target's last run (outcome.py), and the targets with a record of it.
    last_run: dict[str, list[tuple[Block, Verdict]]] = field(default_factory=dict)
    recorded: frozenset[str] = frozenset()

    def counts(self, target: str) -> dict[str, int]:
        tally = {kind: 0 for kind in VERDICTS}
        for _, item in self.verdicts.get(target, []):
            tally[item.kind] += 1
        return tally

    def skipped(self, target: str) -> int:
        """Blocks with no verdict there: they never run there (skip-execution, or they run
        on another platform alone)."""
        return len(self.blocks) - len(self.verdicts.get(target, []))


def verdicts_of_page(build, env, docname: str, targets: tuple[Target, ...]
                     ) -> PageVerdicts | None:
    """Each block's verdict on each target, from the page's outcome (None: a page without
    blocks)."""
    outcome = page_outcome(build, env, docname)
    if outcome is None:
        return None
    return PageVerdicts(docname, outcome.blocks, outcome.on(targets),
                        outcome.on(targets, last_run=True),
                        frozenset(target.name for target, record in outcome.targets if record))


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


def _has_run(pages: list[PageVerdicts], platform: Target) -> bool:
    """Whether the platform has a record of any page (else it has not run the course)."""
    return any(platform.name in page.recorded for page in pages)


def reader_builder(builder) -> bool:
    """Whether this build renders the generated pages for readers (not one that writes or
    checks records, which reads them only to execute the others)."""
    return not (getattr(builder, "runs_pages_itself", False)
                or builder.name in ("doctest", "record"))


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

    def _tables(self, pages: list[PageVerdicts], targets: tuple[Target, ...],
                last_column=None) -> list[nodes.Node]:
        """One table per target, so that each fits the reading width: a column per verdict
        some block has there, and ``skipped`` for blocks that never run there, so that each
        row's verdicts add up to its blocks. ``last_column`` (header, page -> text) goes on
        the last table."""
        return [self._table(pages, target, last_column if position == len(targets) - 1
                            else None) for position, target in enumerate(targets)]

    def _table(self, pages: list[PageVerdicts], target: Target, last_column=None) -> nodes.Node:
        counts = {page.docname: page.counts(target.name) for page in pages}
        columns = [(kind, title) for kind, title in self.columns
                   if any(tally[kind] for tally in counts.values())]
        skipped = {page.docname: page.skipped(target.name) for page in pages}
        headers = ["Chapter", "blocks", *(title for _, title in columns)]
        if any(skipped.values()):
            headers.append("skipped")
        if last_column:
            headers.append(last_column[0])
        table = nodes.table(classes=[self.table_class])
        title = f"On {target.label}"
        if any(skipped.values()):
            title += " (skipped: blocks that never run there: skip-execution, or run on " \
                     "another platform alone)"
        table += nodes.title(title, title)
        group = nodes.tgroup(cols=len(headers))
        table += group
        for _ in headers:
            group += nodes.colspec(colwidth=1)
        head = nodes.thead()
        group += head
        head += self._row([nodes.Text(h) for h in headers])
        body = nodes.tbody()
        group += body
        for page in pages:
            cells: list[nodes.Node] = [self._doc_link(page.docname),
                                       nodes.Text(str(len(page.blocks)))]
            cells += [nodes.Text(str(counts[page.docname][kind])) for kind, _ in columns]
            if any(skipped.values()):
                cells.append(nodes.Text(str(skipped[page.docname])))
            if last_column:
                cells.append(nodes.Text(last_column[1](page)))
            body += self._row(cells, page.docname)
        cells = [nodes.Text("all chapters"), nodes.Text(str(sum(len(p.blocks) for p in pages)))]
        cells += [nodes.Text(str(sum(tally[kind] for tally in counts.values())))
                  for kind, _ in columns]
        if any(skipped.values()):
            cells.append(nodes.Text(str(sum(skipped.values()))))
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
        return reader_builder(self.env._app.builder)


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
        if not self._reader_build():
            return []  # a build that writes or checks records publishes no page
        versions = build.config.matrix
        pages = page_verdicts(build, self.env, versions)
        main_version = next((record.environment.jax for record in
                             (build.record_for(page.docname) for page in pages)
                             if record and record.environment.jax), None)
        tables = self._tables(pages, versions, (
            "needs jax", lambda page: minimum_version(page, versions, main_version)))
        return [*tables, *self._unknown_minimum(pages, versions, main_version),
                *self._differences(pages, versions)]

    def _unknown_minimum(self, pages, versions, main_version) -> list[nodes.Node]:
        """Why a chapter's minimum version reads ``?``, chapter by chapter."""
        listing = nodes.bullet_list(classes=["versions-unknown"])
        for page in pages:
            if minimum_version(page, versions, main_version) != "?":
                continue
            awaiting = [(version, page.counts(version.name)[UNVERIFIED]) for version in versions
                        if page.counts(version.name)[UNVERIFIED]]
            item = nodes.list_item()
            para = nodes.paragraph()
            para += self._doc_link(page.docname)
            if awaiting:
                why = "; ".join(f"{count} block{'s' if count != 1 else ''} not yet verified on "
                                f"{version.label} (changed since that run, or after a change)"
                                for version, count in awaiting)
                command = f"make matrix PAGES={page.docname}"
                para += nodes.Text(f": ? because {why}; ")
                para += nodes.literal(command, command)
                para += nodes.Text(" verifies them.")
            else:
                para += nodes.Text(": ? because the verified record names no jax version.")
            item += para
            listing += item
        if not listing.children:
            return []
        text = "A chapter whose minimum version is not known yet:"
        return [nodes.paragraph(text, text), listing]

    def _forms(self) -> list[tuple[str, str]]:
        forms = []
        for line in self.content:
            if not line.strip():
                continue
            if "=>" not in line:
                self.env.note_reread()  # reported until mended
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
        for match, _ in forms:
            if match not in used:
                self.env.note_reread()  # reported until mended
                logger.warning(f"versions-matrix: no block fails with {match!r} "
                               f"(the matrix no longer shows this difference)",
                               location=self.get_location(), type="verified", subtype="matrix")
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
            self.env.note_reread()  # reported until mended
            logger.error(f"platforms-matrix: {err}", location=self.get_location(),
                         type="verified", subtype="platforms")
            return []
        platforms = build.config.platforms
        if not self._reader_build():
            # A build that writes or checks records publishes no page, but a chapter's {ref}
            # to a cause must still resolve there.
            for cause in causes:
                self._cause_item(cause)
            return []
        if not platforms:
            text = "No platform is verified (verified_platforms is empty)."
            return [nodes.paragraph(text, text)]
        pages = page_verdicts(build, self.env, platforms)
        return [*self._tables(pages, platforms), *self._charts(pages, platforms),
                *self._causes(pages, platforms, causes)]

    def _charts(self, pages: list[PageVerdicts], platforms) -> list[nodes.Node]:
        """The table as a picture: a chapter's verdicts on a platform as one stacked bar."""
        charts = []
        for platform in platforms:
            if not _has_run(pages, platform):
                continue
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
            if not _has_run(pages, platform):
                text = (f"{platform.label} has no record yet: no page has run there "
                        f"(make platform PLATFORM={platform.name} on a machine that has it), so "
                        f"nothing here speaks for it.")
                out.append(nodes.paragraph(text, text, classes=["platforms-no-record"]))
                continue
            grouped: dict[str, list[tuple[str, Block]]] = {cause.key: [] for cause in causes}
            unexplained: list[tuple[str, Block, Verdict]] = []
            for page in pages:
                for block, item in page.verdicts.get(platform.name, []):
                    if item.kind not in self.EXPLAINED:
                        continue
                    # A block can differ for more than one reason (an assertion, then errors
                    # printed at the interpreter's exit): each cause it shows lists it.
                    explaining = [c for c in causes if c.explains(page.docname, block, item)]
                    if not explaining:
                        unexplained.append((page.docname, block, item))
                    for cause in explaining:
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
                    # A cause this platform's last run showed, on a page awaiting its next run;
                    # never one only another platform shows.
                    pending = sorted(page.docname for page in pages if page.docname in awaiting
                                     and any(item.kind in self.EXPLAINED
                                             and cause.explains(page.docname, block, item)
                                             for block, item in page.last_run.get(
                                                 platform.name, [])))
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
        # A cause that names a page no platform has a record of (new, or unable to run when
        # the platform last ran) belongs to no platform's record yet: listed apart, not lost.
        unrun = {page.docname for page in pages if not page.recorded}
        first_runs = nodes.bullet_list(classes=["platforms-first-run"])
        for cause in causes:
            waiting = sorted(cause.pages() & unrun)
            if cause.key in used or not waiting:
                continue
            used.add(cause.key)
            first_runs += self._cause_naming_pages(
                cause, " (it names ", waiting, ", which no platform has a record of yet)")
        if first_runs.children:
            text = "Awaiting a platform's first run of a page"
            out += [nodes.rubric(text, text), first_runs]
        for cause in causes:
            if cause.key not in used:
                self.env.note_reread()  # reported until mended
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
        return self._cause_naming_pages(
            cause, f" (no block verified on {platform.label} shows it now: it has not run the "
                   f"current code of ", pending, ")")

    def _cause_naming_pages(self, cause: Cause, opening: str, docnames: list[str],
                            closing: str) -> nodes.list_item:
        """A cause's item whose heading names pages rather than blocks, and its model."""
        item = self._cause_item(cause)
        head = nodes.paragraph()
        head += nodes.strong(cause.title, cause.title)
        head += nodes.Text(opening)
        for position, docname in enumerate(docnames):
            if position:
                head += nodes.Text(", ")
            head += self._doc_link(docname)
        head += nodes.Text(closing)
        item += head
        inline, messages = self.parse_inline(cause.model, lineno=self.lineno)
        item += nodes.paragraph("", "", *inline)
        item += messages
        return item


def generated_outdated(app, env, added, changed, removed) -> list[str]:
    """The generated pages read every page's blocks and records: they are read again when
    any of those changed since they were last read (or the build is of another kind), not
    on every build; a page that warned is read again by each build until it is mended."""
    build = state(app)
    pages, inputs = [], []
    for docname in sorted(env.found_docs):
        found = build.collect(env, docname)
        if found is None:
            continue
        if found.uses_generated and docname not in added | changed:
            pages.append(docname)
        if found.job.blocks and not found.problems:
            inputs.append((docname, [(block.line, block.source) for block in found.job.blocks],
                           found.sections, build.read_stamp(found)))
    if not pages:
        return []
    stamp = hashlib.sha256(repr((reader_builder(app.builder), inputs)).encode()).hexdigest()
    if getattr(env, "verified_generated_stamp", None) == stamp:
        return []
    env.verified_generated_stamp = stamp
    return pages
