"""Verified targets: the other places every page also runs, each with its own record.

A target is another interpreter for the same pages: an older JAX in its own virtualenv
(``verified_matrix``) or the course's own JAX on another platform (``verified_platforms``,
e.g. a TPU). Both are the same idea: a label for captions, how the interpreter starts, and
a record folder under the record directory. Nothing here runs a page.
"""

from __future__ import annotations

import dataclasses
import json
import os
import re
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from .model import DocJob

VERSION = "version"
PLATFORM = "platform"
MATRIX_DIR = "matrix"  # record/matrix/jax-<version>/<page>.json
PLATFORM_DIR = "platform"  # record/platform/<name>/<page>.json
TARGET_DIRS = (MATRIX_DIR, PLATFORM_DIR)  # under the record directory, beside the main record


@dataclass(frozen=True)
class Target:
    """One other place every page runs."""

    kind: str  # VERSION or PLATFORM
    name: str  # "0.4.38", "tpu-v5e"
    label: str  # how captions name it: "jax 0.4.38", "TPU v5e"
    python: Path  # the interpreter that runs its pages
    env: tuple[tuple[str, str], ...] = ()  # set over verified_env for its pages
    # A platform: the JAX backend its pages must see, and the start of the device kind.
    backend: str = ""
    device_kind: str = ""
    # Why pages of several cooperating processes do not run there ("" where they do).
    no_multiprocess: str = ""
    # Wall-time limit for one page there (None: the blocks' own limits only).
    page_limit: float | None = None

    @property
    def dirname(self) -> str:
        """Its record folder, relative to the record directory."""
        if self.kind == VERSION:
            return f"{MATRIX_DIR}/jax-{self.name}"
        return f"{PLATFORM_DIR}/{self.name}"

    @property
    def serial(self) -> bool:
        """Whether its pages must run one at a time (one program holds an accelerator)."""
        return self.kind == PLATFORM and self.backend not in ("", "cpu")


def rewrite_command(target: Target, docname: str) -> str:
    """How a page's record on ``target`` is made again, as advice says it."""
    if target.kind == VERSION:
        return f"`make matrix PAGES={docname}`"
    return f"`make platform PLATFORM={target.name} PAGES={docname}` on a {target.label} machine"


# The platforms the course knows by name. A TPU machine holds its chip for one program, so
# its pages run one at a time; jax.distributed needs sockets, which the course's TPU machine
# does not allow, so multi-process pages are recorded as not run there.
KNOWN_PLATFORMS: dict[str, dict[str, Any]] = {
    "tpu-v5e": {
        "label": "TPU v5e",
        "backend": "tpu",
        "device_kind": "TPU v5",
        "env": {"JAX_PLATFORMS": "tpu,cpu"},
        "no_multiprocess": "its pages run as several processes that talk over sockets, "
                           "and the TPU machine it is verified on allows none",
        "page_limit": 300,
    },
}


def parse_versions(value: Any, confdir: Path) -> tuple[Target, ...]:
    """``verified_matrix``: ``["0.4.38"]`` (interpreter ``.venv-jax-0.4.38/bin/python``) or
    dicts with ``version``, optional ``python`` (relative to conf.py) and ``env``."""
    if not isinstance(value, (list, tuple)):
        raise ValueError(f"must be a list of versions, got {value!r}")
    targets = []
    for entry in value:
        if isinstance(entry, str):
            entry = {"version": entry}
        if not isinstance(entry, dict) or not isinstance(entry.get("version"), str) \
                or not re.fullmatch(r"[\w.+-]+", entry["version"]):
            raise ValueError(f"each entry is a version string or "
                             f"{{'version': ..., 'python': ..., 'env': {{...}}}}, got {entry!r}")
        _no_unknown(entry, {"version", "python", "env"})
        python = entry.get("python") or f".venv-jax-{entry['version']}/bin/python"
        targets.append(Target(VERSION, entry["version"], f"jax {entry['version']}",
                              _path(python, confdir, entry), _env(entry)))
    _no_twice(targets)
    return tuple(targets)


def parse_platforms(value: Any, confdir: Path) -> tuple[Target, ...]:
    """``verified_platforms``: names the course knows (``"tpu-v5e"``) or dicts with ``name``,
    ``label``, ``backend`` (the JAX backend the pages must see), and optional ``device_kind``,
    ``env``, ``python``, ``no_multiprocess`` (why such pages do not run there) and
    ``page_limit`` (seconds)."""
    if not isinstance(value, (list, tuple)):
        raise ValueError(f"must be a list of platforms, got {value!r}")
    targets = []
    for entry in value:
        if isinstance(entry, str):
            if entry not in KNOWN_PLATFORMS:
                raise ValueError(f"unknown platform {entry!r}; known: "
                                 f"{', '.join(sorted(KNOWN_PLATFORMS))}, or give a dict")
            entry = {"name": entry, **KNOWN_PLATFORMS[entry]}
        if not isinstance(entry, dict):
            raise ValueError(f"each entry is a platform name or a dict, got {entry!r}")
        _no_unknown(entry, {"name", "label", "backend", "device_kind", "env", "python",
                            "no_multiprocess", "page_limit"})
        name, label, backend = entry.get("name"), entry.get("label"), entry.get("backend")
        if not isinstance(name, str) or not re.fullmatch(r"[a-z0-9][a-z0-9.-]*", name):
            raise ValueError(f"a platform's name is lower-case letters, digits, '.' and '-', "
                             f"got {name!r}")
        for key in ("label", "backend"):
            if not isinstance(entry.get(key), str) or not entry[key]:
                raise ValueError(f"platform {name!r} needs a {key} (a non-empty string)")
        for key in ("device_kind", "no_multiprocess"):
            if not isinstance(entry.get(key, ""), str):
                raise ValueError(f"platform {name!r}: {key} must be a string")
        limit = entry.get("page_limit")
        if limit is not None and (isinstance(limit, bool) or not isinstance(limit, (int, float))
                                  or limit <= 0):
            raise ValueError(f"platform {name!r}: page_limit must be a positive number of "
                             f"seconds, got {limit!r}")
        targets.append(Target(
            PLATFORM, name, label, _path(entry.get("python") or sys.executable, confdir, entry),
            _env(entry), backend=backend, device_kind=entry.get("device_kind", ""),
            no_multiprocess=entry.get("no_multiprocess", ""),
            page_limit=float(limit) if limit is not None else None))
    _no_twice(targets)
    return tuple(targets)


def _no_unknown(entry: dict, known: set[str]) -> None:
    unknown = sorted(set(entry) - known)
    if unknown:
        raise ValueError(f"unknown key(s) {', '.join(unknown)} in {entry!r}")


def _path(python: Any, confdir: Path, entry: dict) -> Path:
    if not isinstance(python, str) or not python:
        raise ValueError(f"python must be a path: {entry!r}")
    return confdir / python


def _env(entry: dict) -> tuple[tuple[str, str], ...]:
    env = entry.get("env") or {}
    if not isinstance(env, dict) or not all(
            isinstance(k, str) and isinstance(v, str) for k, v in env.items()):
        raise ValueError(f"env must be a mapping of strings: {entry!r}")
    return tuple(sorted(env.items()))


def _no_twice(targets: list[Target]) -> None:
    names = [target.name for target in targets]
    if len(set(names)) != len(names):
        raise ValueError(f"a name is given twice: {names!r}")


# -- what a target runs -----------------------------------------------------------------------

def job_for(job: DocJob, target: Target) -> DocJob:
    """The page as ``target`` runs it: blocks marked to run on another platform alone left
    out, and the page's time budget capped by the target's page limit (a page that hangs
    there is stopped)."""
    job = job.for_platform(target.name if target.kind == PLATFORM else None)
    if target.page_limit is None:
        return job
    budget = min(job.settings.budget or target.page_limit, target.page_limit)
    return dataclasses.replace(job, settings=dataclasses.replace(job.settings, budget=budget))


# -- is the platform here? --------------------------------------------------------------------

_PROBE = """
import json, jax
try:
    devices = jax.devices()
    print(json.dumps({"backend": jax.default_backend(), "count": len(devices),
                      "kind": devices[0].device_kind}))
except Exception as err:
    print(json.dumps({"error": f"{type(err).__name__}: {str(err).splitlines()[0]}"}))
"""


def probe(target: Target, env: dict[str, str], timeout: float = 180.0) -> str:
    """Why ``target`` cannot run here (its JAX sees another backend or device), or ``""``."""
    full_env = {**os.environ, **env, **dict(target.env)}
    try:
        done = subprocess.run([str(target.python), "-c", _PROBE], capture_output=True,
                              text=True, env=full_env, timeout=timeout)
    except (OSError, subprocess.TimeoutExpired) as err:
        return f"its interpreter {target.python} did not answer ({err})"
    lines = done.stdout.strip().splitlines()
    try:
        seen = json.loads(lines[-1])
    except (IndexError, ValueError):
        tail = done.stderr.strip().splitlines()[-1:] or ["no output"]
        return f"its interpreter could not import JAX ({tail[0]})"
    if "error" in seen:
        return f"JAX here sees no {target.backend.upper()} ({seen['error']})"
    if seen["backend"] != target.backend:
        return (f"JAX here sees no {target.backend.upper()}: its default backend is "
                f"{seen['backend']} ({seen['count']} × {seen['kind']})")
    if target.device_kind and not seen["kind"].startswith(target.device_kind):
        return f"JAX here sees {seen['kind']}, not {target.device_kind}"
    return ""
