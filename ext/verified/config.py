"""Configuration: each ``conf.py`` value declared once, validated into one dataclass.

Also validates the per-document ``execution:`` front-matter settings.
"""

from __future__ import annotations

import os
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from sphinx.application import Sphinx
from sphinx.errors import ConfigError

from .model import DocSettings
from .targets import parse_platforms, parse_versions
from .tolerance import parse_tolerance

# name: (default, rebuild, types)
CONFIG_VALUES: dict[str, tuple[Any, str, tuple[type, ...]]] = {
    "verified_timeout": (120, "env", (int, float)),
    "verified_jobs": (0, "", (int,)),
    "verified_env": ({}, "env", (dict,)),
    "verified_record_dir": ("record", "env", (str,)),
    "verified_cache_dir": ("", "", (str,)),
    "verified_report": ("", "", (str,)),
    "verified_normalizers": ({}, "env", (dict,)),
    # doctest and record only: the pages to execute (docnames); empty means every page.
    "verified_pages": ([], "", (list, tuple)),
    # The other verified versions (`make matrix`): "0.4.38" runs under .venv-jax-0.4.38, or
    # {"version": ..., "python": interpreter, "env": {...}} (matrix.py).
    "verified_matrix": ([], "env", (list, tuple)),
    # The verified platforms (`make platform`): "tpu-v5e", or {"name": ..., "label": ...,
    # "backend": ..., ...} (targets.py). Each runs every page with this JAX on that platform.
    "verified_platforms": ([], "env", (list, tuple)),
    # `make platform` and `make platform-doctest` only: the verified platforms to run here
    # (names, `-D verified_platform_run=a,b`); empty means every one of them.
    "verified_platform_run": ([], "", (list, tuple, str)),
    # {page: [a piece of a block's source, ...]}: blocks whose output varies on the other
    # versions only; the matrix checks that they run, not what they print.
    "verified_matrix_varies": ({}, "env", (dict,)),
    # Cores of its own for each page's interpreter (0: it may use every usable core). XLA
    # sizes its thread pool from them: 1 is the one-core profile, pages still side by side.
    "verified_worker_cores": (0, "", (int,)),
    # Execute every page, reading neither the verified record nor the cache (`make html
    # FRESH=1`); doctest, record and the target builders always do.
    "verified_fresh": (False, "", (bool,)),
}


@dataclass(frozen=True)
class ExecutionConfig:
    """The validated configuration the scheduler, renderer and builders share."""

    timeout: float
    jobs: int
    env: dict[str, str]
    record_dir: Path
    cache_dir: Path
    report_path: Path
    normalizers: dict[str, tuple[tuple[str, str], ...]]
    pages: frozenset[str] = frozenset()
    matrix: tuple = ()  # targets.Target, one per other verified version
    platforms: tuple = ()  # targets.Target, one per verified platform
    platform_run: frozenset[str] = frozenset()  # the platforms `make platform` runs (all: empty)
    matrix_varies: dict[str, tuple[str, ...]] = field(default_factory=dict)
    worker_cores: int = 0
    fresh: bool = False


def register(app: Sphinx) -> None:
    for name, (default, rebuild, types) in CONFIG_VALUES.items():
        app.add_config_value(name, default, rebuild, types=types)


def validate(app: Sphinx) -> ExecutionConfig:
    """Builds the dataclass from ``app.config``; a bad value is a ``ConfigError`` naming it."""
    config = app.config
    timeout = config.verified_timeout
    if isinstance(timeout, bool) or not isinstance(timeout, (int, float)) or timeout <= 0:
        raise ConfigError(f"verified_timeout must be a positive number of seconds, got {timeout!r}")
    jobs = config.verified_jobs
    if isinstance(jobs, bool) or not isinstance(jobs, int) or jobs < 0:
        raise ConfigError(f"verified_jobs must be a non-negative integer (0: one per core), got {jobs!r}")
    env = config.verified_env
    if not isinstance(env, dict) or not all(
            isinstance(k, str) and isinstance(v, str) for k, v in env.items()):
        raise ConfigError(f"verified_env must map variable names to strings, got {env!r}")
    for option in ("verified_record_dir", "verified_cache_dir", "verified_report"):
        if not isinstance(getattr(config, option), str):
            raise ConfigError(f"{option} must be a path string, got {getattr(config, option)!r}")
    if not config.verified_record_dir:
        raise ConfigError("verified_record_dir must not be empty")

    pages = config.verified_pages
    if isinstance(pages, str):  # `-D verified_pages=a,b` on the command line
        pages = [page for page in pages.split(",") if page]
    if not isinstance(pages, (list, tuple)) or not all(
            isinstance(page, str) and page for page in pages):
        raise ConfigError(f"verified_pages must be a list of page names, got {pages!r}")

    worker_cores = config.verified_worker_cores
    usable = usable_cores()
    if (isinstance(worker_cores, bool) or not isinstance(worker_cores, int)
            or not 0 <= worker_cores <= usable):
        raise ConfigError(f"verified_worker_cores must be an integer from 0 (every usable core) "
                          f"to {usable} (the usable cores), got {worker_cores!r}")
    if worker_cores:
        jobs = min(jobs or usable, usable // worker_cores)

    fresh = config.verified_fresh
    if not isinstance(fresh, bool):
        raise ConfigError(f"verified_fresh must be True or False (-D verified_fresh=1), "
                          f"got {fresh!r}")

    confdir = Path(app.confdir)
    build_root = Path(app.outdir).parent
    platforms = _targets("verified_platforms", parse_platforms, config.verified_platforms,
                         confdir)
    platform_run = _platform_run(config.verified_platform_run, platforms)
    return ExecutionConfig(
        timeout=float(timeout),
        jobs=jobs or usable_cores(),
        env=dict(env),
        record_dir=confdir / config.verified_record_dir,
        cache_dir=(confdir / config.verified_cache_dir if config.verified_cache_dir
                   else build_root / ".execution-cache"),
        report_path=(confdir / config.verified_report if config.verified_report
                     else build_root / "execution-report.json"),
        normalizers=_validate_normalizers(config.verified_normalizers),
        pages=frozenset(pages),
        matrix=_targets("verified_matrix", parse_versions, config.verified_matrix, confdir),
        platforms=platforms,
        platform_run=platform_run,
        matrix_varies=_matrix_varies(config.verified_matrix_varies),
        worker_cores=worker_cores,
        fresh=fresh,
    )


def _platform_run(value: Any, platforms: tuple) -> frozenset[str]:
    """The platforms a platform run runs: names of verified platforms (a comma-separated
    string on the command line)."""
    if isinstance(value, str):
        value = [name for name in value.split(",") if name]
    known = {target.name for target in platforms}
    if not isinstance(value, (list, tuple)) or not all(name in known for name in value):
        raise ConfigError(f"verified_platform_run must name verified platforms "
                          f"({', '.join(sorted(known)) or 'none'}), got {value!r}")
    return frozenset(value)


def _matrix_varies(value: Any) -> dict[str, tuple[str, ...]]:
    if not isinstance(value, dict) or not all(
            isinstance(page, str) and isinstance(pieces, (list, tuple))
            and all(isinstance(piece, str) and piece for piece in pieces)
            for page, pieces in value.items()):
        raise ConfigError(f"verified_matrix_varies must map pages to lists of source pieces, "
                          f"got {value!r}")
    return {page: tuple(pieces) for page, pieces in value.items()}


def _targets(option: str, parse, value: Any, confdir: Path) -> tuple:
    try:
        return parse(value, confdir)
    except ValueError as err:
        raise ConfigError(f"{option}: {err}") from None


def _validate_normalizers(value: Any) -> dict[str, tuple[tuple[str, str], ...]]:
    """``{name: [[regex, replacement], ...]}``; each regex must compile."""
    if not isinstance(value, dict):
        raise ConfigError(f"verified_normalizers must be a dict, got {value!r}")
    result = {}
    for name, rules in value.items():
        if not isinstance(name, str) or not isinstance(rules, (list, tuple)) or not rules:
            raise ConfigError(
                f"verified_normalizers[{name!r}] must be a non-empty list of [regex, replacement]")
        pairs = []
        for rule in rules:
            if (not isinstance(rule, (list, tuple)) or len(rule) != 2
                    or not all(isinstance(part, str) for part in rule)):
                raise ConfigError(
                    f"verified_normalizers[{name!r}]: each rule is [regex, replacement], got {rule!r}")
            try:
                re.compile(rule[0])
            except re.error as err:
                raise ConfigError(
                    f"verified_normalizers[{name!r}]: bad regex {rule[0]!r}: {err}") from None
            pairs.append((rule[0], rule[1]))
        result[name] = tuple(pairs)
    return result


def usable_cores() -> int:
    """The cores this process may run on (``taskset`` narrows them), not the machine's."""
    return len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1


SETTING_KEYS = ("host_devices", "env", "timeout", "budget", "exclusive", "tolerance",
                "processes")


def parse_doc_settings(front_matter: dict[str, Any] | None) -> DocSettings:
    """The ``execution:`` key of a document's front matter; ValueError says what is wrong."""
    data = (front_matter or {}).get("execution")
    if data is None:
        return DocSettings()
    if not isinstance(data, dict):
        raise ValueError(f"'execution' must be a mapping of settings, got {data!r}")
    unknown = sorted(set(data) - set(SETTING_KEYS))
    if unknown:
        raise ValueError(
            f"unknown execution setting(s) {', '.join(unknown)}; known: {', '.join(SETTING_KEYS)}")
    devices = data.get("host_devices")
    if devices is not None and (isinstance(devices, bool) or not isinstance(devices, int)
                                or devices < 1):
        raise ValueError(f"host_devices must be a positive integer, got {devices!r}")
    processes = data.get("processes", 1)
    if isinstance(processes, bool) or not isinstance(processes, int) or processes < 1:
        raise ValueError(f"processes must be a positive integer, got {processes!r}")
    env = data.get("env") or {}
    if not isinstance(env, dict) or not all(isinstance(k, str) for k in env):
        raise ValueError(f"env must map variable names to values, got {env!r}")
    unset = sorted(name for name, value in env.items()
                   if not isinstance(value, (str, int, float)) or isinstance(value, bool))
    if unset:  # ``FOO: null`` would set FOO to "None", ``FOO: yes`` to "True"
        raise ValueError(f"env values are strings or numbers; {', '.join(unset)} "
                         f"{'is' if len(unset) == 1 else 'are'} not (quote the value)")
    for key in ("timeout", "budget"):
        value = data.get(key)
        if value is not None and (isinstance(value, bool) or not isinstance(value, (int, float))
                                  or value <= 0):
            raise ValueError(f"{key} must be a positive number of seconds, got {value!r}")
    exclusive = data.get("exclusive", False)
    if not isinstance(exclusive, bool) and exclusive != "varies":
        raise ValueError(f"exclusive must be true, false or varies, got {exclusive!r}")
    tolerance = data.get("tolerance")
    if tolerance is not None:
        try:
            tolerance = parse_tolerance(str(tolerance))
        except ValueError as err:
            raise ValueError(f"tolerance: {err}") from None
    return DocSettings(
        tolerance=tolerance,
        host_devices=devices,
        env=tuple(sorted((k, str(v)) for k, v in env.items())),
        timeout=data.get("timeout"),
        budget=data.get("budget"),
        exclusive=exclusive is True,
        exclusive_varies=exclusive == "varies",
        processes=processes,
    )
