"""Whether a machine's own Python can run ``make platform SYSTEM=1``: it must hold what a
platform build imports (Sphinx and the extensions conf.py names, the pages' imports, and
what those pull in), with the JAX the records are compared against.

Run as a script, before Sphinx (which it must not import: it may be what is missing), with
the standard library alone: ``python3 ext/verified/system_python.py requirements.txt``.
Missing packages are one message and exit status 1, instead of ``No module named sphinx``.
The test suite's packages are not asked for: a platform build never imports them.
"""

from __future__ import annotations

import re
import sys
from importlib import metadata
from pathlib import Path

_PIN = re.compile(r"^([A-Za-z0-9][A-Za-z0-9._-]*)\s*==\s*([^\s;#]+)")
_NAME = re.compile(r"^\s*([A-Za-z0-9][A-Za-z0-9._-]*)")
# Top-level requirements (requirements.in) for the test suite alone, and what myst-nb
# declares for running notebooks, which the pages' `from myst_nb import glue` never loads:
# a platform build imports none of them, nor the HTML theme (only `make html` loads it), nor
# what only they pull in.
NOT_IMPORTED = frozenset({"pytest", "nbclient", "ipykernel", "playwright", "jupyter-cache",
                          "sphinx-book-theme"})
# A version other than the pin changes what a page prints (and the records are compared
# against the pinned JAX): these must match. Other versions are not compared.
EXACT = ("jax", "jaxlib")


def _normal(name: str) -> str:
    """A distribution's normal name: Sphinx and sphinx, ruamel.yaml and ruamel-yaml are one."""
    return re.sub(r"[-_.]+", "-", name).lower()


def pins(text: str) -> dict[str, str]:
    """``{name: version}`` of each ``name==version`` line of a requirements file."""
    found = {}
    for line in text.splitlines():
        match = _PIN.match(line.strip())
        if match:
            found[_normal(match.group(1))] = match.group(2)
    return found


def _installed(name: str) -> str | None:
    try:
        return metadata.version(name)
    except metadata.PackageNotFoundError:
        return None


def _applies(marker: str) -> bool:
    """Whether a dependency's environment marker holds here; an extra's dependency never
    does (no extra is asked for). Without ``packaging`` to read a marker, it is not asked for."""
    if not marker:
        return True
    if "extra" in marker:
        return False
    try:
        from packaging.markers import InvalidMarker, Marker
    except ImportError:
        return False
    try:
        return Marker(marker).evaluate()
    except InvalidMarker:
        return False


def imported(top: list[str]) -> list[str]:
    """The distributions a build that imports ``top`` needs: those, and what each installed
    one requires, transitively (NOT_IMPORTED cut out), in the order first reached."""
    order, seen = [], set()
    waiting = list(top)
    while waiting:
        name = _normal(waiting.pop(0))
        if name in seen or name in NOT_IMPORTED:
            continue
        seen.add(name)
        order.append(name)
        try:
            requires = metadata.requires(name) or []
        except metadata.PackageNotFoundError:
            continue  # missing: said so; what it would pull in is not known
        for requirement in requires:
            spec, _, marker = requirement.partition(";")
            match = _NAME.match(spec)
            if match and _applies(marker.strip()):
                waiting.append(match.group(1))
    return order


def problems(requirements: Path) -> tuple[list[str], list[str]]:
    """(what is missing, which of EXACT differs from its pin), each as text; the top-level
    requirements (``requirements.in`` beside it: jax, sphinx, ...) first."""
    pinned = pins(requirements.read_text(encoding="utf-8"))
    top_file = requirements.with_suffix(".in")
    top = list(pins(top_file.read_text(encoding="utf-8"))) if top_file.exists() else \
        list(pinned)
    missing, differing = [], []
    for name in imported(top):
        version = _installed(name)
        if version is None:
            missing.append(f"{name}=={pinned[name]}" if name in pinned else name)
        elif name in EXACT and name in pinned and version != pinned[name]:
            differing.append(f"{name} {version} (pinned {pinned[name]})")
    return missing, differing


def message(python: str, requirements: Path, missing: list[str]) -> str:
    shown = ", ".join(missing[:6]) + (f" and {len(missing) - 6} more" if len(missing) > 6
                                      else "")
    return (f"make platform SYSTEM=1: {python} lacks {len(missing)} of the packages a platform "
            f"build imports ({shown}); install them with `{python} -m pip install` and the "
            f"pins of {requirements}, then the jaxlib that drives this machine's accelerator "
            f"(the authoring guide, \"Adding a platform\"), or run without SYSTEM=1 where "
            f".venv's CPU jaxlib will do")


def mismatch(python: str, differing: list[str]) -> str:
    return (f"make platform SYSTEM=1: {python} has {', '.join(differing)}; the records are "
            f"compared against the pinned JAX, and another version prints otherwise: install "
            f"the pinned jax and jaxlib")


def main(argv: list[str]) -> int:
    requirements = Path(argv[1] if len(argv) > 1 else "requirements.txt")
    missing, differing = problems(requirements)
    if missing:
        print(message(sys.executable, requirements, missing), file=sys.stderr)
    if differing:
        print(mismatch(sys.executable, differing), file=sys.stderr)
    return 1 if missing or differing else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
