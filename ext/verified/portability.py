"""``make portability``: ``make doctest`` under three machine profiles.

XLA:CPU rounds differently by instruction set and thread count, so a record made on one
machine must also verify where those differ. Each profile runs the doctest builder in its
own output folder; one ``PROFILE: N passed, M failed`` line is printed per profile, and the
exit status is non-zero if any profile failed.

    python -m verified.portability SPHINX_BUILD_ARGS...
"""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

# name: (extra environment, extra sphinx-build arguments). SSE4_2 is no profile: it breaks
# float16 inside XLA itself on jaxlib 0.10.2. One core: each page's interpreter is pinned to
# a core of its own, so XLA runs single-threaded as under `taskset -c 0`, while the pages
# still run side by side on the machine's cores.
PROFILES: dict[str, tuple[dict[str, str], list[str]]] = {
    "native": ({}, []),
    "avx": ({"XLA_FLAGS": "--xla_cpu_max_isa=AVX"}, []),
    "one-core": ({}, ["-D", "verified_worker_cores=1"]),
}


def run_profile(name: str, sphinx: list[str], build: Path) -> tuple[str, int, float]:
    """Runs the doctest builder under one profile; returns its summary line and status."""
    extra_env, extra_args = PROFILES[name]
    env = dict(os.environ)
    if "XLA_FLAGS" in extra_env:
        env["XLA_FLAGS"] = " ".join(filter(None, [env.get("XLA_FLAGS", ""),
                                                  extra_env["XLA_FLAGS"]]))
    outdir = build / "portability" / name
    # The native run is this machine's own execution: it fills the cache `make html` reads
    # (same key), so a site built after it runs nothing. The others keep their own.
    cache = build / ".execution-cache" if name == "native" else build / "portability" / f"{name}-cache"
    command = [*sphinx, *extra_args, "-E", "-b", "doctest", "source", str(outdir),
               "-d", str(build / "portability" / f"{name}-doctrees"),
               "-D", f"verified_report={outdir / 'execution-report.json'}",
               "-D", f"verified_cache_dir={cache}"]
    print(f"== {name}: {' '.join(command)}", flush=True)
    started = time.perf_counter()
    status = subprocess.run(command, env=env).returncode
    seconds = time.perf_counter() - started
    report = outdir / "output.txt"
    lines = report.read_text(encoding="utf-8").splitlines() if report.exists() else []
    summary = lines[-1] if lines else "did not finish (no report)"
    return summary, status, seconds


def main(argv: list[str]) -> int:
    sphinx = argv or ["sphinx-build", "-c", "."]
    build = Path("_build")
    results = {name: run_profile(name, sphinx, build) for name in PROFILES}
    print("\nportability:")
    for name, (summary, status, seconds) in results.items():
        print(f"({name} took {seconds:.0f} s)")
        print(f"{name}: {summary}")
    return 0 if all(status == 0 for _, status, _ in results.values()) else 1


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
