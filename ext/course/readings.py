"""Assigned reading: the registry of official pages, the ``{reading}`` directive, and the
build-time check that every required page is assigned somewhere.

````md
```{reading} 201/jit
Read it for the list of what may and may not be traced.
```
````
"""

from __future__ import annotations

import weakref
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path

import yaml
from docutils import nodes
from sphinx.application import Sphinx
from sphinx.util import logging
from sphinx.util.docutils import SphinxDirective

from .pagedata import page_data

logger = logging.getLogger(__name__)

DEFAULT_REGISTRY = Path(__file__).with_name("readings.yaml")


@dataclass(frozen=True)
class OfficialPage:
    key: str
    level: str
    title: str
    required: bool
    url: str
    line: int  # line of the entry in the registry file


@dataclass(frozen=True)
class Registry:
    path: Path
    pages: dict[str, OfficialPage]


@lru_cache(maxsize=8)
def load_registry(path: str) -> Registry:
    """Parses the YAML registry; each entry remembers its line, for located warnings."""
    text = Path(path).read_text(encoding="utf-8")
    data = yaml.safe_load(text)
    base = data["base_url"]
    lines = text.splitlines()
    pages = {}
    for entry in data["pages"]:
        key = entry["key"]
        line = next((n for n, content in enumerate(lines, 1) if f"key: {key}," in content), 0)
        pages[key] = OfficialPage(key=key, level=str(entry["level"]), title=entry["title"],
                                  required=bool(entry["required"]), url=f"{base}{key}.html",
                                  line=line)
    return Registry(Path(path), pages)


# The registry file of each build, keyed by its Config object (shared by app, env, builder).
_REGISTRY_PATHS: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()


def on_builder_inited(app: Sphinx) -> None:
    configured = app.config.course_readings
    path = Path(app.confdir, configured) if configured else DEFAULT_REGISTRY
    _REGISTRY_PATHS[app.config] = str(path)


def registry(owner) -> Registry:
    """The registry of ``owner``'s build (anything with ``.config``)."""
    return load_registry(_REGISTRY_PATHS[owner.config])


class ReadingDirective(SphinxDirective):
    """An "Assigned reading" box: the official page, linked, and what to read it for."""

    required_arguments = 1
    has_content = True

    def run(self) -> list[nodes.Node]:
        key = self.arguments[0].strip().removesuffix(".html")
        page = registry(self).pages.get(key)
        if page is None:
            logger.warning(f"unknown official page {key!r}; known pages are listed in "
                           f"{registry(self).path.name}",
                           location=(self.env.docname, self.lineno), type="course",
                           subtype="reading")
            return []
        if not "\n".join(self.content).strip():
            logger.warning(f"assigned reading {key!r} says nothing about what to read it for",
                           location=(self.env.docname, self.lineno), type="course",
                           subtype="reading")
        assignments(self.env).setdefault(self.env.docname, []).append(key)

        box = nodes.admonition(classes=["assigned-reading"])
        box += nodes.title("Assigned reading", "Assigned reading")
        heading = nodes.paragraph(classes=["assigned-reading-page"])
        link = nodes.reference("", "", refuri=page.url, internal=False)
        link += nodes.strong(page.title, page.title)
        heading += link
        label = f" · JAX {page.level}" if page.level[0].isdigit() else f" · {page.level}"
        heading += nodes.Text(label)
        box += heading
        box += self.parse_content_to_nodes()
        self.set_source_info(box)
        return [box]


def assignments(env) -> dict[str, list[str]]:
    return page_data(env, "course_reading_assignments")


def chapters_assigning(env) -> dict[str, list[str]]:
    """Official page key → the documents that assign it, in name order."""
    result: dict[str, list[str]] = {}
    for docname in sorted(assignments(env)):
        for key in assignments(env)[docname]:
            if docname not in result.setdefault(key, []):
                result[key].append(docname)
    return result


def on_env_check_consistency(app, env) -> None:
    """Every required official page must be assigned in at least one chapter."""
    if not app.config.course_require_all_readings:
        return
    reg = registry(app)
    assigned = chapters_assigning(env)
    for page in reg.pages.values():
        if page.required and page.key not in assigned:
            logger.warning(f"official page {page.key!r} ({page.title}) is not assigned in any "
                           f"chapter", location=f"{reg.path}:{page.line}", type="course",
                           subtype="coverage")


class reading_map(nodes.General, nodes.Element):
    """Placeholder for the table of official pages and the chapters that assign them."""


class ReadingMapDirective(SphinxDirective):
    def run(self) -> list[nodes.Node]:
        from .chapters import aggregate_pages

        aggregate_pages(self.env)[self.env.docname] = True
        node = reading_map()
        self.set_source_info(node)
        return [node]


def _cell(*children: nodes.Node) -> nodes.entry:
    entry = nodes.entry()
    paragraph = nodes.paragraph()
    for child in children:
        paragraph += child
    entry += paragraph
    return entry


def reading_map_table(app: Sphinx, fromdoc: str) -> nodes.table:
    """Every official page, by level, with links to the chapters that assign it."""
    from .chapters import chapters

    assigned = chapters_assigning(app.env)
    known = chapters(app.env)
    table = nodes.table(classes=["course-reading-map"])
    group = nodes.tgroup(cols=3)
    table += group
    for width in (12, 50, 38):
        group += nodes.colspec(colwidth=width)
    head = nodes.thead()
    header = nodes.row()
    for label in ("Level", "Official page", "Assigned in"):
        header += _cell(nodes.Text(label))
    head += header
    group += head
    body = nodes.tbody()
    for page in registry(app).pages.values():
        row = nodes.row()
        row += _cell(nodes.Text(page.level))
        link = nodes.reference("", "", refuri=page.url)
        link += nodes.Text(page.title)
        row += _cell(link)
        places: list[nodes.Node] = []
        for docname in assigned.get(page.key, []):
            if places:
                places.append(nodes.Text(", "))
            chapter = known.get(docname)
            label = f"{chapter.number:02d} {chapter.title}" if chapter else docname
            ref = nodes.reference("", "", refuri=app.builder.get_relative_uri(fromdoc, docname))
            ref += nodes.Text(label)
            places.append(ref)
        if not places:
            places.append(nodes.Text("required, not yet assigned" if page.required
                                     else "optional, not assigned"))
        row += _cell(*places)
        body += row
    group += body
    return table


def on_doctree_resolved(app: Sphinx, doctree: nodes.document, docname: str) -> None:
    for node in list(doctree.findall(reading_map)):
        node.replace_self(reading_map_table(app, docname))
