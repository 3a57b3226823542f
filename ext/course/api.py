"""The ``{api}`` role: ``{api}`jax.lax.scan``` links a JAX name to its official API page.

Names are checked offline against the installed JAX once per build (after reading), so a
misspelled or removed API is a warning at the ``file:line`` that used it.
"""

from __future__ import annotations

import importlib

from docutils import nodes
from sphinx.util import logging
from sphinx.util.docutils import SphinxRole

from .pagedata import page_data

logger = logging.getLogger(__name__)

BASE_URL = "https://docs.jax.dev/en/latest/"
# Modules whose classes and functions are documented on the module's own page.
MODULE_PAGES = {"jax.sharding": "jax.sharding.html", "jax.stages": "jax.stages.html",
                "jax.errors": "errors.html"}


def api_url(name: str) -> str:
    """The official page for ``name`` (the docs' own URL patterns; no network)."""
    module, _, _ = name.rpartition(".")
    if module in MODULE_PAGES:
        return f"{BASE_URL}{MODULE_PAGES[module]}#{name}"
    return f"{BASE_URL}_autosummary/{name}.html"


def resolve(name: str) -> bool:
    """Whether ``name`` exists in the installed JAX: the longest importable module prefix,
    then attributes."""
    parts = name.split(".")
    for split in range(len(parts), 0, -1):
        try:
            target = importlib.import_module(".".join(parts[:split]))
        except ImportError:
            continue
        try:
            for attribute in parts[split:]:
                target = getattr(target, attribute)
        except AttributeError:
            return False
        return True
    return False


class ApiRole(SphinxRole):
    def run(self):
        name = self.text.strip()
        display = name
        api_refs(self.env).setdefault(self.env.docname, []).append((name, self.lineno))
        link = nodes.reference("", "", refuri=api_url(name), internal=False,
                               classes=["api-link"])
        link += nodes.literal(display, display)
        return [link], []


def api_refs(env) -> dict[str, list[tuple[str, int]]]:
    return page_data(env, "course_api_refs")


def on_env_before_read_docs(app, env, docnames) -> None:
    app._course_api_read = set(docnames)  # only these pages' names need checking


def on_env_check_consistency(app, env) -> None:
    refs = api_refs(env)
    for docname in sorted(set(refs) & getattr(app, "_course_api_read", set())):
        for name, line in refs[docname]:
            if not name.startswith("jax") or not resolve(name):
                logger.warning(f"{name!r} is not an API of the installed JAX",
                               location=(docname, line), type="course", subtype="api")
