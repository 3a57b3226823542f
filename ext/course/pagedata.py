"""Per-page data kept on the build environment, purged and merged like Sphinx's own.

Each name is an ``env`` attribute holding ``{docname: value}``; the handlers made here keep
it right when a page is re-read or read in a parallel worker.
"""

from __future__ import annotations

PAGE_DATA = ("course_api_refs", "course_reading_assignments", "course_chapters",
             "course_aggregate_pages")


def page_data(env, name: str) -> dict:
    if not hasattr(env, name):
        setattr(env, name, {})
    return getattr(env, name)


def on_env_purge_doc(app, env, docname) -> None:
    for name in PAGE_DATA:
        page_data(env, name).pop(docname, None)


def on_env_merge_info(app, env, docnames, other) -> None:
    for name in PAGE_DATA:
        mine, theirs = page_data(env, name), page_data(other, name)
        for docname in docnames:
            if docname in theirs:
                mine[docname] = theirs[docname]
