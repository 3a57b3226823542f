"""`make bench-exclusivity`: are timings as stable with block-level exclusivity as with
page-level exclusivity?

On a throw-away copy of the tree, the timing pages below run RUNS times with each page
marked ``exclusive: true`` (the whole page alone, after the others) and RUNS times with
``exclusive: varies`` (only its timing blocks alone, the rest side by side with a
concurrent page), the two modes taking turns. Every value those pages glue from a timing block is collected per run;
the figure is each value's spread across runs, (max - min) / median, and the wall time of
a run.
"""

from __future__ import annotations

import json
import re
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from run import copy_tree  # bench/run.py (a script's own folder is first on sys.path)

TIMED = ("part1/01-arrays", "part1/03-jit")
CONCURRENT = ("part1/02-tracing", "part1/08-randomness")
RUNS = 5


def set_exclusive(tree: Path, mode: str) -> None:
    for docname in TIMED:
        page = tree / "source" / f"{docname}.md"
        text = re.sub(r"(?m)^  exclusive: .*$", f"  exclusive: {mode}",
                      page.read_text(encoding="utf-8"), count=1)
        page.write_text(text, encoding="utf-8")


def glued_timings(cache: Path) -> dict[str, float]:
    """Every number glued by a page of TIMED in this run, by page and name."""
    values = {}
    for entry in cache.glob("*.json"):
        payload = json.loads(entry.read_text(encoding="utf-8"))["payload"]
        if payload["docname"] not in TIMED:
            continue
        for block in payload["blocks"]:
            for output in block["outputs"]:
                if output["kind"] != "glue":
                    continue
                try:
                    values[f"{payload['docname']}:{output['name']}"] = float(output["text"])
                except ValueError:
                    pass
    return values


def run_once(tree: Path, cache: Path) -> float:
    pages = ",".join(TIMED + CONCURRENT)
    args = [sys.executable, "-m", "sphinx", "-c", ".", "-q", "-E", "-b", "doctest", "source",
            "_build/doctest", "-d", "_build/doctrees", "-D", f"verified_pages={pages}",
            "-D", f"verified_cache_dir={cache}"]
    started = time.perf_counter()
    subprocess.run(args, cwd=tree, capture_output=True, check=False)
    return time.perf_counter() - started


def main() -> None:
    with tempfile.TemporaryDirectory(prefix="bench-exclusive-") as scratch:
        tree = Path(scratch) / "tree"
        tree.mkdir()
        copy_tree(tree)
        modes = ("true", "varies")
        walls = {mode: [] for mode in modes}
        runs = {mode: [] for mode in modes}
        for run in range(RUNS):
            for mode in modes:  # interleaved, so that a drift of the machine hits both alike
                set_exclusive(tree, mode)
                cache = Path(scratch) / f"cache-{mode}-{run}"
                walls[mode].append(run_once(tree, cache))
                runs[mode].append(glued_timings(cache))
        summary = {}
        for mode in modes:
            names = sorted(set.intersection(*(set(r) for r in runs[mode])))
            spreads = {}
            for name in names:
                values = [r[name] for r in runs[mode]]
                middle = statistics.median(values)
                if middle:
                    spreads[name] = (max(values) - min(values)) / abs(middle)
            summary[mode] = (walls[mode], spreads)
    print(f"pages timed: {', '.join(TIMED)}; running beside them: {', '.join(CONCURRENT)}; "
          f"{RUNS} runs each")
    for mode, (mode_walls, spreads) in summary.items():
        print(f"exclusive: {mode:<6}  wall per run {statistics.median(mode_walls):6.1f} s "
              f"(min {min(mode_walls):.1f}, max {max(mode_walls):.1f}); glued timing values: "
              f"{len(spreads)}, median spread {statistics.median(spreads.values()):.2f}, "
              f"largest {max(spreads.values()):.2f}")
    names = sorted(set(summary["true"][1]) & set(summary["varies"][1]))
    print(f"\n{'value':<45} {'spread, page':>13} {'spread, block':>14}")
    for name in names:
        print(f"{name:<45} {summary['true'][1][name]:>13.2f} {summary['varies'][1][name]:>14.2f}")


if __name__ == "__main__":
    main()
