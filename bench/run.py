"""`make bench`: build-time figures, measured on a throw-away copy of the tree.

Scenarios: a cold build executing every block (`FRESH=1`, empty cache), a cold build as a
fresh clone makes it (no _build: the verified record stands in for the pages it matches), a
warm rebuild with no change, a rebuild after a prose-only edit and after a one-block code edit
in one chapter, and `make doctest`. For each:
the wall time, how many blocks executed, the sum of their execution times, and the floor on
this machine's cores: every page's time (start-up included) scheduled on the cores, with the
exclusive parts (exclusive blocks, exclusive pages) serial; the ratio wall ÷ floor says how
far the build is from it. A cold build of a test root gets the same figures. Last, a fresh
clone to a readable site: `make html` in a copy without a virtualenv, creating it from the
pinned requirements, then building from the record (skipped with `BENCH_CLONE=0`).

With `BENCH_OFFICIAL=DIR` (a folder of MyST-NB text notebooks, e.g. pages of the JAX docs),
those pages are also built cold, unchanged, by this engine and by MyST-NB itself.
"""

from __future__ import annotations

import json
import os
import resource
import runpy
import shutil
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "ext"))

from verified.collect import collect  # noqa: E402
from verified.record import BUILTIN_NORMALIZERS  # noqa: E402

SPHINX = [sys.executable, "-m", "sphinx", "-c", ".", "-W", "--keep-going", "-j", "auto", "-q"]
COPIED = ("conf.py", "ext", "source", "record")
CLONED = (*COPIED, "Makefile", "requirements.txt")  # what `make html` reads in a clone


CORES = len(os.sched_getaffinity(0))


def floor(report: dict, cores: int = CORES) -> float:
    """The least wall time the executed pages could take on ``cores``: exclusive blocks and
    exclusive pages one after another, the rest spread over the cores (no page can be split,
    so the longest page's shared part bounds it too)."""
    exclusive_blocks = {}
    for row in report["blocks"]:
        if row.get("exclusive") and row["status"] in ("ran", "expected-error"):
            exclusive_blocks[row["docname"]] = exclusive_blocks.get(row["docname"], 0.0) + row["duration"]
    serial, shared = 0.0, []
    for page in report.get("pages", []):
        if page["exclusive"]:
            serial += page["duration"]
        else:
            alone = exclusive_blocks.get(page["docname"], 0.0)
            serial += alone
            shared.append(page["duration"] - alone)
    return serial + max(sum(shared) / cores, max(shared, default=0.0))


def build(tree: Path, builder: str, outdir: str, doctreedir: str, fresh: bool = False,
          source: str = "source", confdir: str = ".", execute_all: bool = False,
          strict: bool = True):
    args = SPHINX + ["-b", builder, source, f"_build/{outdir}", "-d", f"_build/{doctreedir}"]
    args[args.index("-c") + 1] = confdir
    if not strict:
        args.remove("-W")
    if fresh:
        args.append("-E")
    if execute_all:  # `make html FRESH=1`
        args += ["-D", "verified_fresh=1"]
    env = {**os.environ, "PYTHONPATH": str(ROOT / "ext")}  # a test root's conf.py names no path
    started = time.perf_counter()
    completed = subprocess.run(args, cwd=tree, capture_output=True, text=True, env=env)
    wall = time.perf_counter() - started
    if completed.returncode != 0:
        sys.exit(f"{builder} build failed:\n{completed.stdout[-3000:]}\n{completed.stderr[-3000:]}")
    report = json.loads((tree / "_build" / "execution-report.json").read_text())
    rows = report["blocks"]
    executed = [r for r in rows if r["status"] in ("ran", "expected-error")]
    return wall, len(executed), sum(r["duration"] for r in executed), len(rows), floor(report)


PLATFORMS = frozenset(entry if isinstance(entry, str) else entry["name"] for entry in
                      runpy.run_path(str(ROOT / "conf.py")).get("verified_platforms", ()))


def blocks_of(page: Path):
    return collect(page.stem, page, frozenset(BUILTIN_NORMALIZERS), platforms=PLATFORMS).job.blocks


def busiest_page(tree: Path) -> Path:
    """The page with the most executable blocks and none that runs on a platform alone: the
    edits happen there. (An edit above such a block leaves it unverified until the platform
    runs the page again, and the prose that inserts its glued values has none.)"""
    return max((page for page in sorted(tree.glob("source/**/*.md"))
                if not any(block.platform for block in blocks_of(page))),
               key=lambda page: len(blocks_of(page)))


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


def copy_tree(tree: Path, names: tuple[str, ...] = COPIED) -> None:
    """What a build reads, copied into ``tree`` (an existing folder)."""
    for name in names:
        source = ROOT / name
        if source.is_dir():
            shutil.copytree(source, tree / name, ignore=shutil.ignore_patterns("__pycache__"))
        else:
            shutil.copy2(source, tree / name)


def row(name, wall, executed, block_seconds, total, least) -> None:
    ratio = f"{wall / least:10.2f}" if least else f"{'-':>10}"
    print(f"{name:<30} {wall:>8.1f} {executed:>5}/{total:<5} {block_seconds:>15.1f} "
          f"{least:>8.1f} {ratio}", flush=True)


def main() -> None:
    with tempfile.TemporaryDirectory(prefix="bench-") as scratch:
        tree = Path(scratch)
        copy_tree(tree)
        page = busiest_page(tree)
        original = page.read_text(encoding="utf-8")
        print(f"machine: {CORES} cores; edits go to {page.relative_to(tree)}")
        print(f"{'scenario':<30} {'wall s':>8} {'blocks run':>11} {'sum of block s':>15} "
              f"{'floor s':>8} {'wall/floor':>10}", flush=True)
        row("cold build, FRESH=1", *build(tree, "html", "html", "doctrees", execute_all=True))
        shutil.rmtree(tree / "_build")
        row("cold build (from the record)", *build(tree, "html", "html", "doctrees"))
        row("warm rebuild, no change", *build(tree, "html", "html", "doctrees"))
        prose_edit(page)
        row("after a prose-only edit", *build(tree, "html", "html", "doctrees"))
        code_edit(page)
        # Not under -W: the generated Versions and Platforms pages rightly warn that the edited
        # block's differences there are not yet verified (until `make matrix`, `make platform`).
        row("after a one-block code edit",
            *build(tree, "html", "html", "doctrees", strict=False))
        page.write_text(original, encoding="utf-8")  # the record matches the original
        row("make doctest (fresh)",
            *build(tree, "doctest", "doctest", "doctrees-doctest", fresh=True))
    with tempfile.TemporaryDirectory(prefix="bench-root-") as scratch:
        root = Path(scratch) / "root"
        shutil.copytree(ROOT / "tests" / "roots" / "test-exclusive", root)
        row("test root (exclusive), cold",
            *build(root, "html", "html", "doctrees", source=".", confdir="."))
    if os.environ.get("BENCH_CLONE", "1") != "0":
        fresh_clone()
    official = os.environ.get("BENCH_OFFICIAL")
    if official:
        compare_with_myst_nb(Path(official))


def fresh_clone() -> None:
    """A clone to a readable site: `make html` with no virtualenv and no _build."""
    with tempfile.TemporaryDirectory(prefix="bench-clone-") as scratch:
        tree = Path(scratch)
        copy_tree(tree, CLONED)
        env = {name: value for name, value in os.environ.items()
               if name not in ("VIRTUAL_ENV", "MAKEFLAGS", "MAKELEVEL", "PAGES", "FRESH")}
        started = time.perf_counter()
        for target in ("venv", "html"):
            completed = subprocess.run(["make", target], cwd=tree, capture_output=True,
                                       text=True, env=env)
            if completed.returncode != 0:
                sys.exit(f"make {target} in a fresh clone failed:\n{completed.stdout[-3000:]}"
                         f"\n{completed.stderr[-3000:]}")
            if target == "venv":
                venv = time.perf_counter() - started
        wall = time.perf_counter() - started
        report = json.loads((tree / "_build" / "execution-report.json").read_text())
        executed = [r for r in report["blocks"] if r["status"] in ("ran", "expected-error")]
        print(f"fresh clone to a readable site: {wall:.1f} s ({venv:.1f} s creating the "
              f"virtualenv, {wall - venv:.1f} s `make html`), {len(executed)}/"
              f"{len(report['blocks'])} blocks run", flush=True)


OFFICIAL_CONF = """\
import sys
sys.path.insert(0, {ext!r})
extensions = [{extension!r}]
exclude_patterns = ["_build"]
myst_enable_extensions = ["colon_fence", "dollarmath"]
nb_execution_mode = "force"
nb_execution_timeout = 600
nb_execution_raise_on_error = True
verified_timeout = 600
suppress_warnings = ["myst", "misc.highlighting_failure", "toc.not_included", "ref"]
"""


def myst_nb_page_times(tree: Path) -> dict[str, float]:
    """MyST-NB's own execution time of each page (kernel start included), from the
    environment it pickled: what it spent on each page, however it scheduled them."""
    import pickle

    with open(tree / "_build" / "doctrees" / "environment.pickle", "rb") as handle:
        env = pickle.load(handle)
    return {name: data["exec_data"]["runtime"] for name, data in env.nb_metadata.items()
            if data.get("exec_data")}


@dataclass
class OfficialBuild:
    """One engine's cold build of the official pages."""

    extension: str
    pages: int
    wall: float
    cpu: float
    page_times: dict[str, float]
    blocks: str = ""  # this engine's block figures (MyST-NB reports none)
    floor: float = 0.0

    @property
    def longest(self) -> str:
        return max(self.page_times, key=self.page_times.get)


def compare_with_myst_nb(pages: Path) -> None:
    """The same unchanged MyST-NB pages built cold by this engine and by MyST-NB, and each
    engine's longest page: a page's blocks run in order in one interpreter, so no build of
    these pages that executes them can end before its longest page has run."""
    rows = []
    for extension in ("verified", "myst_nb"):
        with tempfile.TemporaryDirectory(prefix=f"bench-{extension}-") as scratch:
            tree = Path(scratch)
            shutil.copytree(pages, tree / "source")
            names = sorted(p.stem for p in (tree / "source").glob("*.md") if p.stem != "index")
            (tree / "source" / "index.md").write_text(
                "# Official pages\n\n```{toctree}\n" + "\n".join(names) + "\n```\n")
            conf = OFFICIAL_CONF.format(ext=str(ROOT / "ext"), extension=extension)
            if extension == "verified":
                conf = conf.replace('[\'verified\']', '["myst_parser", "verified"]')
            (tree / "conf.py").write_text(conf)
            args = [sys.executable, "-m", "sphinx", "-c", ".", "-j", "auto", "-q", "-b", "html",
                    "source", "_build/html", "-d", "_build/doctrees"]
            started, before = time.perf_counter(), resource.getrusage(resource.RUSAGE_CHILDREN)
            completed = subprocess.run(args, cwd=tree, capture_output=True, text=True)
            wall = time.perf_counter() - started
            after = resource.getrusage(resource.RUSAGE_CHILDREN)
            # CPU seconds of the build and every process it waited for: unlike the wall
            # time, it hardly moves when other work shares the machine.
            cpu = (after.ru_utime + after.ru_stime) - (before.ru_utime + before.ru_stime)
            if completed.returncode != 0:
                sys.exit(f"{extension} build of the official pages failed:\n"
                         f"{completed.stderr[-3000:]}")
            if extension == "verified":
                report = json.loads((tree / "_build" / "execution-report.json").read_text())
                ran = [r for r in report["blocks"] if r["status"] in ("ran", "expected-error")]
                least = floor(report)
                rows.append(OfficialBuild(
                    extension, len(names), wall, cpu,
                    {page["docname"]: page["duration"] for page in report["pages"]},
                    f"{len(ran)}/{len(report['blocks'])} blocks ran, "
                    f"{sum(r['duration'] for r in ran):.1f} s of blocks, floor {least:.1f} s",
                    least))
            else:
                rows.append(OfficialBuild(extension, len(names), wall, cpu,
                                          myst_nb_page_times(tree)))
    print(f"\nofficial MyST-NB pages, unchanged, cold build ({pages}):")
    for row in rows:
        print(f"  {row.extension:<9} {row.pages} pages {row.wall:7.1f} s  {row.cpu:7.1f} CPU s  "
              f"pages {sum(row.page_times.values()):5.1f} s, longest {row.longest} "
              f"{row.page_times[row.longest]:.1f} s  {row.blocks}")
    ours, theirs = rows
    print(f"  ratio verified / myst_nb: {ours.wall / theirs.wall:.2f} (CPU time: "
          f"{ours.cpu / theirs.cpu:.2f}); execution floor / myst_nb: {ours.floor / theirs.wall:.2f}; "
          f"MyST-NB's own longest page / its build: "
          f"{theirs.page_times[theirs.longest] / theirs.wall:.2f} (no build that "
          f"runs that page as fast as MyST-NB does ends sooner)")


if __name__ == "__main__":
    main()
