"""Whether a machine's own Python can run ``make platform SYSTEM=1``: it must hold the pinned
requirements (requirements.txt), with the jaxlib that drives its accelerator.

Run as a script, before Sphinx (which it must not import: it may be what is missing), with
the standard library alone: ``python3 ext/verified/system_python.py requirements.txt``.
Missing packages are one message and exit status 1, instead of ``No module named sphinx``.
"""

from __future__ import annotations

import re
import sys
from importlib import metadata
from pathlib import Path

_PIN = re.compile(r"^([A-Za-z0-9][A-Za-z0-9._-]*)\s*==\s*([^\s;#]+)")


def pins(text: str) -> dict[str, str]:
    """``{name: version}`` of each ``name==version`` line of a requirements file."""
    found = {}
    for line in text.splitlines():
        match = _PIN.match(line.strip())
        if match:  # by the name's normal form: Sphinx and sphinx are one
            found[re.sub(r"[-_.]+", "-", match.group(1)).lower()] = match.group(2)
    return found


def _installed(name: str) -> str | None:
    try:
        return metadata.version(name)
    except metadata.PackageNotFoundError:
        return None


def problems(requirements: Path) -> tuple[list[str], list[str]]:
    """(what is missing, what differs from its pin), each as ``name==pin`` text; the
    top-level requirements (``requirements.in`` beside it: sphinx, jax, ...) first."""
    missing, differing = [], []
    pinned_all = pins(requirements.read_text(encoding="utf-8"))
    top = requirements.with_suffix(".in")
    first = pins(top.read_text(encoding="utf-8")) if top.exists() else {}
    ordered = [name for name in first if name in pinned_all] + \
        [name for name in pinned_all if name not in first]
    for name in ordered:
        pinned = pinned_all[name]
        version = _installed(name)
        if version is None:
            missing.append(f"{name}=={pinned}")
        elif version != pinned:
            differing.append(f"{name} {version} (pinned {pinned})")
    return missing, differing


def message(python: str, requirements: Path, missing: list[str]) -> str:
    shown = ", ".join(missing[:6]) + (f" and {len(missing) - 6} more" if len(missing) > 6
                                      else "")
    return (f"make platform SYSTEM=1: {python} lacks {len(missing)} of the pinned requirements "
            f"({shown}); install them with `{python} -m pip install -r {requirements}`, then "
            f"the jaxlib that drives this machine's accelerator (the authoring guide, "
            f"\"Adding a platform\"), or run without SYSTEM=1 where .venv's CPU jaxlib will do")


def main(argv: list[str]) -> int:
    requirements = Path(argv[1] if len(argv) > 1 else "requirements.txt")
    missing, differing = problems(requirements)
    for line in differing:
        print(f"note: {sys.executable} has {line}", file=sys.stderr)
    if missing:
        print(message(sys.executable, requirements, missing), file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
