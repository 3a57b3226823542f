"""The configuration the environment keeps is conf.py's, so a warm build sees it unchanged.

Themes and extensions fill in configuration values once the builder exists (the book theme's
``html_theme_options`` and ``templates_path``, sphinx-design's and sphinx-copybutton's
``html_static_path``, MyST's ``mathjax4_config``). Sphinx pickles the environment with those
filled-in values and, on the next build, compares them with conf.py's, before anything has
filled them in again: every warm build then says "The configuration has changed (6 options:
…)". So the values as configured (after ``config-inited``) are remembered, put back for the
moment the environment is pickled (from ``env-updated``), and the filled-in ones restored
after it (``env-check-consistency``, or ``write-started`` when nothing was read and nothing
pickled), for the pages still to be written.
"""

from __future__ import annotations

import copy

from sphinx.application import Sphinx
from sphinx.util._serialise import stable_str

_CONFIGURED = "_verified_configured"
_FILLED_IN = "_verified_filled_in"


def remember(app: Sphinx, config) -> None:
    """``config-inited``, last: the values the next build will compare with (a theme loaded
    with the builder may emit it again, after filling in values: the first one counts)."""
    if getattr(app, _CONFIGURED, None) is not None:
        return
    setattr(app, _CONFIGURED, {item.name: _copy(item.value) for item in config})


def _copy(value):
    """A copy that a later in-place change (``html_static_path.append``) does not reach."""
    try:
        return copy.deepcopy(value)
    except Exception:  # a value that cannot be copied is compared as it is
        return value


def as_configured(app: Sphinx, env) -> None:
    """``env-updated``: the configured values back in place of those filled in since."""
    configured = getattr(app, _CONFIGURED, None)
    if configured is None:
        return
    filled_in = {}
    for item in app.config:
        if item.name in configured and stable_str(item.value) != stable_str(configured[item.name]):
            filled_in[item.name] = item.value
            setattr(app.config, item.name, configured[item.name])
    setattr(app, _FILLED_IN, filled_in)


def as_filled_in(app: Sphinx, *args) -> None:
    """``env-check-consistency`` (after the pickle) or ``write-started``: the filled-in
    values again."""
    for name, value in getattr(app, _FILLED_IN, {}).items():
        setattr(app.config, name, value)
    setattr(app, _FILLED_IN, {})


def setup(app: Sphinx) -> None:
    app.connect("config-inited", remember, priority=999)
    app.connect("env-updated", as_configured, priority=999)
    app.connect("env-check-consistency", as_filled_in, priority=0)
    app.connect("write-started", as_filled_in, priority=0)
