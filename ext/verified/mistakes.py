"""A user's mistake ends the build with one line that says what to do, and a non-zero exit.

Sphinx answers any exception, its own errors included, with a crash report that asks for a
bug report; a wrong ``PAGES=`` or ``make platform`` on a machine without the chip is no
bug. ``UserMistake`` is a ``SystemExit`` with a message: Sphinx lets it through (it catches
``Exception``), and Python prints the message alone on stderr and exits with status 1.
"""

from __future__ import annotations

import difflib
import re

SUFFIXES = (".md", ".ipynb", ".rst")
# JAX's advice when a named backend is missing, about automatic backend choice: beside the
# point when the backend was named on purpose.
_JAX_PLATFORMS_HINT = re.compile(r"\s*\(set JAX_PLATFORMS='' to automatically choose an "
                                 r"available backend\)")


class UserMistake(SystemExit):
    """One line on stderr, exit status 1, no traceback."""


def page_mistakes(pages, found_docs, source_folder: str = "source") -> UserMistake | None:
    """The pages ``PAGES=`` names that do not exist, each with the page it probably means
    (a path copied from an error message: ``source/part1/02-tracing.md``)."""
    unknown = sorted(set(pages) - set(found_docs))
    if not unknown:
        return None
    parts = []
    for page in unknown:
        meant = _meant(page, found_docs, source_folder)
        parts.append(f"no page {page!r}" + (f"; did you mean {meant}?" if meant else
                                            " (PAGES names pages as part1/02-tracing)"))
    return UserMistake("; ".join(parts))


def _meant(page: str, found_docs, source_folder: str) -> str | None:
    name = page.replace("\\", "/")
    name = name[2:] if name.startswith("./") else name
    name = name.removeprefix(f"{source_folder}/")
    for suffix in SUFFIXES:
        name = name.removesuffix(suffix)
    if name in found_docs:
        return name
    close = difflib.get_close_matches(name, sorted(found_docs), n=1, cutoff=0.6)
    return close[0] if close else None


def target_absent(label: str, why: str) -> UserMistake:
    """``make platform`` where JAX sees no such chip."""
    return UserMistake(f"no {label} here: {_JAX_PLATFORMS_HINT.sub('', why)}; run it on a "
                       f"{label} machine with SYSTEM=1")


def pages_not_for(builder: str) -> UserMistake:
    """``PAGES=`` given to a build that shows every page (``make html``): said, not ignored."""
    return UserMistake(f"PAGES= limits `make doctest`, `make record`, `make portability` and "
                       f"the target runs; `make {builder}` builds every page and runs only "
                       f"those whose code changed since their record: run it without PAGES")
