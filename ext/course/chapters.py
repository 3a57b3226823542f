"""The chapters as data: number, title and thesis, read from the chapter pages themselves.

A chapter is a page whose name matches ``course_chapter_pattern`` and whose title starts with
its number (``# 01 · Arrays``); its thesis is the first block quote. From that one source:

* ``{chapter-grid} part1`` renders the cards of a part (landing page);
* every chapter page gets a progress control (filled in by ``progress.js``; invisible
  without JavaScript) and links to download it as a notebook and as source;
* ``_static/course-chapters.js`` gives ``progress.js`` the chapter list, so no list of
  chapters is written twice.
"""

from __future__ import annotations

import html
import json
import re
from dataclasses import dataclass
from pathlib import Path

from docutils import nodes
from sphinx.application import Sphinx
from sphinx.util import logging
from sphinx.util.docutils import SphinxDirective

from .pagedata import page_data

logger = logging.getLogger(__name__)

TITLE = re.compile(r"^(\d+)\s*·\s*(.+)$")


@dataclass(frozen=True)
class Chapter:
    docname: str
    number: int
    title: str
    thesis: str
    thesis_code: tuple[str, ...] = ()  # the thesis's inline-code spans, shown as code


def code_spans(node: nodes.Node) -> tuple[str, ...]:
    return tuple(literal.astext() for literal in node.findall(nodes.literal))


def thesis_html(chapter: Chapter) -> str:
    """The thesis, escaped, with its inline-code spans as ``<code>``."""
    markup = html.escape(chapter.thesis)
    for span in chapter.thesis_code:
        escaped = html.escape(span)
        markup = markup.replace(escaped, f"<code>{escaped}</code>", 1)
    return markup


class chapter_grid(nodes.General, nodes.Element):
    """Placeholder for the cards of one part; filled once every page has been read."""


class ChapterGridDirective(SphinxDirective):
    required_arguments = 1

    def run(self) -> list[nodes.Node]:
        node = chapter_grid(part=self.arguments[0].strip())
        self.set_source_info(node)
        aggregate_pages(self.env)[self.env.docname] = True
        return [node]


def chapters(env) -> dict[str, Chapter]:
    return page_data(env, "course_chapters")


def aggregate_pages(env) -> dict[str, bool]:
    """Pages whose content is made from other pages (re-read when any page changes)."""
    return page_data(env, "course_aggregate_pages")


def ordered(env) -> list[Chapter]:
    return sorted(chapters(env).values(), key=lambda c: c.number)


def is_chapter_page(app: Sphinx, docname: str) -> bool:
    return re.fullmatch(app.config.course_chapter_pattern, docname) is not None


def on_doctree_read(app: Sphinx, doctree: nodes.document) -> None:
    """Reads a chapter's number, title and thesis; adds its progress control and downloads."""
    env = app.env
    docname = env.docname
    chapters(env).pop(docname, None)
    if not is_chapter_page(app, docname):
        return
    section = next(iter(doctree.findall(nodes.section)), None)
    title = section[0].astext() if section is not None else ""
    match = TITLE.match(title)
    quote = next(iter(doctree.findall(nodes.block_quote)), None)
    if match is None or quote is None:
        logger.warning("a chapter page needs a title '# NN · Title' and its thesis as the first "
                       "block quote", location=(docname, 1), type="course", subtype="chapter")
        return
    chapters(env)[docname] = Chapter(docname, int(match.group(1)), match.group(2).strip(),
                                     quote.astext().strip(), code_spans(quote))
    control = nodes.raw("", f'<div class="course-progress-control" data-chapter="{docname}" '
                            f'hidden></div>', format="html")
    downloads = nodes.paragraph(classes=["course-downloads"])
    downloads += nodes.Text("Download this chapter: ")
    for label, target in (("notebook with outputs (.ipynb)", download_uri(docname, "ipynb")),
                          ("source (.md)", download_uri(docname, "md"))):
        if len(downloads) > 1:
            downloads += nodes.Text(" · ")
        downloads += nodes.reference(label, label, refuri=target, classes=["download"])
    quote.parent.insert(quote.parent.index(quote) + 1, [control, downloads])


def download_uri(docname: str, suffix: str) -> str:
    """Relative to the chapter page's own URL."""
    depth = docname.count("/")
    return "../" * depth + f"_downloads/chapters/{docname}.{suffix}"


def on_env_get_outdated(app, env, added, changed, removed) -> list[str]:
    if added or changed or removed:
        return sorted(set(aggregate_pages(env)) - set(added) - set(changed))
    return []


def card_html(uri: str, chapter: Chapter) -> str:
    """One sphinx-design card: number and title, the thesis; the whole card is the link."""
    heading = html.escape(f"ch {chapter.number:02d} · {chapter.title}")
    return (
        '<div class="sd-col sd-d-flex-row">'
        '<div class="sd-card sd-sphinx-override sd-w-100 sd-shadow-sm sd-card-hover '
        f'course-chapter-card" data-chapter="{html.escape(chapter.docname)}">'
        '<div class="sd-card-body">'
        f'<p class="sd-card-title sd-font-weight-bold"><a class="sd-stretched-link" '
        f'href="{html.escape(uri)}">{heading}</a></p>'
        f'<p class="sd-card-text">{thesis_html(chapter)}</p>'
        "</div></div></div>")


def on_doctree_resolved(app: Sphinx, doctree: nodes.document, docname: str) -> None:
    for node in list(doctree.findall(chapter_grid)):
        part = node["part"]
        members = [c for c in ordered(app.env) if c.docname.startswith(part + "/")]
        if not members:
            logger.warning(f"no chapters found under {part!r}", location=node, type="course",
                           subtype="chapter")
        cards = "".join(card_html(app.builder.get_relative_uri(docname, c.docname), c)
                        for c in members)
        markup = ('<div class="sd-container-fluid sd-sphinx-override sd-mb-4 '
                  'course-chapter-grid"><div class="sd-row sd-row-cols-1 sd-row-cols-sm-1 '
                  f'sd-row-cols-md-2 sd-row-cols-lg-2 sd-g-3">{cards}</div></div>')
        node.replace_self(nodes.raw("", markup, format="html"))


def chapter_list_script(app: Sphinx) -> str:
    data = [{"docname": c.docname, "number": c.number, "title": c.title,
             "uri": app.builder.get_target_uri(c.docname)} for c in ordered(app.env)]
    return "window.COURSE_CHAPTERS = " + json.dumps(data, ensure_ascii=False) + ";\n"


def on_build_finished(app: Sphinx, exception) -> None:
    if exception is not None or app.builder.format != "html":
        return
    static = Path(app.outdir, "_static")
    static.mkdir(parents=True, exist_ok=True)
    (static / "course-chapters.js").write_text(chapter_list_script(app), encoding="utf-8")

