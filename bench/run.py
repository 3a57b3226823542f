"""`make bench`: build-time figures, measured on a throw-away copy of the tree.

Scenarios: a cold build (empty cache), a warm rebuild with no change, a rebuild after a
prose-only edit and after a one-block code edit in one chapter, and `make doctest`. For each:
the wall time, how many blocks executed, and the sum of their execution times (the floor that
the build cannot beat, since every executed block must run).
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "ext"))

from verified.collect import collect  # noqa: E402
from verified.record import BUILTIN_NORMALIZERS  # noqa: E402

SPHINX = [sys.executable, "-m", "sphinx", "-c", ".", "-W", "--keep-going", "-j", "auto", "-q"]
COPIED = ("conf.py", "ext", "source", "record")


def build(tree: Path, builder: str, outdir: str, doctreedir: str, fresh: bool = False):
    args = SPHINX + ["-b", builder, "source", f"_build/{outdir}", "-d", f"_build/{doctreedir}"]
    if fresh:
        args.append("-E")
    started = time.perf_counter()
    completed = subprocess.run(args, cwd=tree, capture_output=True, text=True)
    wall = time.perf_counter() - started
    if completed.returncode != 0:
        sys.exit(f"{builder} build failed:\n{completed.stdout[-3000:]}\n{completed.stderr[-3000:]}")
    rows = json.loads((tree / "_build" / "execution-report.json").read_text())["blocks"]
    executed = [r for r in rows if r["status"] in ("ran", "expected-error")]
    return wall, len(executed), sum(r["duration"] for r in executed), len(rows)


def blocks_of(page: Path):
    return collect(page.stem, page, frozenset(BUILTIN_NORMALIZERS)).job.blocks


def busiest_page(tree: Path) -> Path:
    """The page with the most executable blocks: the edits happen there."""
    return max(sorted(tree.glob("source/**/*.md")), key=lambda p: len(blocks_of(p)))


def prose_edit(page: Path) -> None:
    text = page.read_text(encoding="utf-8")
    page.write_text(text + "\nOne more sentence of prose, added by the benchmark.\n",
                    encoding="utf-8")


def code_edit(page: Path) -> None:
    """Adds a statement at the end of the page's first executable block."""
    block = blocks_of(page)[0]
    lines = page.read_text(encoding="utf-8").splitlines(keepends=True)
    fence = lines[block.line - 1].lstrip()[:3]
    closing = next(n for n in range(block.line, len(lines)) if lines[n].strip() == fence)
    lines.insert(closing, "_bench_edit = 1\n")
    page.write_text("".join(lines), encoding="utf-8")


def main() -> None:
    with tempfile.TemporaryDirectory(prefix="bench-") as scratch:
        tree = Path(scratch)
        for name in COPIED:
            source = ROOT / name
            if source.is_dir():
                shutil.copytree(source, tree / name, ignore=shutil.ignore_patterns("__pycache__"))
            else:
                shutil.copy2(source, tree / name)
        page = busiest_page(tree)
        original = page.read_text(encoding="utf-8")
        print(f"machine: {os.cpu_count()} cores; edits go to {page.relative_to(tree)}")
        results = [("cold build", *build(tree, "html", "html", "doctrees"))]
        results.append(("warm rebuild, no change", *build(tree, "html", "html", "doctrees")))
        prose_edit(page)
        results.append(("after a prose-only edit", *build(tree, "html", "html", "doctrees")))
        code_edit(page)
        results.append(("after a one-block code edit", *build(tree, "html", "html", "doctrees")))
        page.write_text(original, encoding="utf-8")  # the record matches the original
        results.append(("make doctest (fresh)",
                        *build(tree, "doctest", "doctest", "doctrees-doctest", fresh=True)))

    print(f"{'scenario':<30} {'wall s':>8} {'blocks run':>11} {'sum of block s':>15}")
    for name, wall, executed, block_seconds, total in results:
        print(f"{name:<30} {wall:>8.1f} {executed:>5}/{total:<5} {block_seconds:>15.1f}")


if __name__ == "__main__":
    main()
