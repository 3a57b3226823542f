"""A chapter's prose as its notebook shows it: the course's roles and directives rendered as
the page renders them (Markdown), not left as MyST markup that Jupyter prints raw.

``{glue:text}`` and ``{glue}`` become the value this build glued (the same formatting as the
page, ``verified.glue``); ``{api}`` a link to the official API page; ``{reading}`` the
assigned-reading box as a quotation; ``{doc}`` and ``{ref}`` their titles.
"""

from __future__ import annotations

import posixpath
import re
from dataclasses import dataclass, field

from verified.glue import format_plain_text

from .api import api_url


@dataclass(frozen=True)
class Reading:
    title: str
    level: str
    url: str


@dataclass
class TextContext:
    """What the prose of one page refers to, gathered at build time."""

    docname: str
    glued: dict[str, str] = field(default_factory=dict)  # name -> the value's text/plain
    # name -> what to say beside a value from a platform's earlier run (outcome.py)
    marks: dict[str, str] = field(default_factory=dict)
    readings: dict[str, Reading] = field(default_factory=dict)
    titles: dict[str, str] = field(default_factory=dict)  # docname -> title
    labels: dict[str, str] = field(default_factory=dict)  # label -> its section's title


_ROLE = re.compile(r"\{(glue:text|glue|api|doc|ref)\}`([^`]+)`")
_EXPLICIT = re.compile(r"^(.*?)\s*<([^<>]+)>$", re.S)
_DIRECTIVE = re.compile(r"^(?P<fence>`{3,})\{(?P<name>reading|down-the-stack)\}[ \t]*"
                        r"(?P<argument>[^\n]*)\n(?P<body>.*?)^(?P=fence)[ \t]*$", re.M | re.S)


def render_markdown(text: str, context: TextContext) -> str:
    text = _DIRECTIVE.sub(lambda match: _directive(match, context), text)
    return _ROLE.sub(lambda match: _role(match.group(1), match.group(2), context), text)


def _role(name: str, content: str, context: TextContext) -> str:
    if name in ("glue", "glue:text"):
        key, spec = content, ""
        if name == "glue:text" and ":" in content:
            key, spec = content.rsplit(":", 1)
        if key not in context.glued:
            return f"`{content}`"  # the page reports the unknown name; the text stays readable
        try:
            text = format_plain_text(context.glued[key], spec)
        except (TypeError, ValueError):
            text = context.glued[key]
        return f"{text} ({context.marks[key]})" if key in context.marks else text
    if name == "api":
        return f"[`{content}`]({api_url(content.strip())})"
    explicit = _EXPLICIT.match(content)
    if explicit:
        return explicit.group(1)
    if name == "doc":
        return context.titles.get(_docname(context.docname, content), content)
    return context.labels.get(content, content)


def _docname(current: str, target: str) -> str:
    if target.startswith("/"):
        return target.lstrip("/")
    return posixpath.normpath(posixpath.join(posixpath.dirname(current), target))


def _quoted(lines: list[str]) -> str:
    return "\n".join(f"> {line}".rstrip() for line in lines)


def _directive(match: re.Match, context: TextContext) -> str:
    body = match.group("body").strip("\n").splitlines()
    if match.group("name") == "down-the-stack":
        return _quoted(["**Down the stack**", "", *body])
    key = match.group("argument").strip().removesuffix(".html")
    page = context.readings.get(key)
    if page is None:
        return _quoted(["**Assigned reading**", "", *body])
    level = f"JAX {page.level}" if page.level[:1].isdigit() else page.level
    return _quoted([f"**Assigned reading** · [**{page.title}**]({page.url}) · {level}", "",
                    *body])
