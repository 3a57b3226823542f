"""course: what makes the site a course: assigned reading and links to the JAX API."""

from __future__ import annotations

from sphinx.application import Sphinx

from . import api, readings


def setup(app: Sphinx) -> dict:
    app.add_config_value("course_readings", "", "env", types=(str,))
    app.add_config_value("course_require_all_readings", True, "env", types=(bool,))
    app.add_directive("reading", readings.ReadingDirective)
    app.add_role("api", api.ApiRole())
    for module in (readings, api):
        app.connect("env-purge-doc", module.on_env_purge_doc)
        app.connect("env-merge-info", module.on_env_merge_info)
        app.connect("env-check-consistency", module.on_env_check_consistency)
    app.connect("env-before-read-docs", api.on_env_before_read_docs)
    return {"version": "1.0", "parallel_read_safe": True, "parallel_write_safe": True,
            "env_version": 1}
