"""Stopping a build: Ctrl-C, a closed terminal or a killed build leaves no worker behind; a
long block is announced on the console, and a block its limit stops shows where it was."""

from __future__ import annotations

import os
import re
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from conftest import ROOT, ROOTS, alive

from verified.execute import run_document
from verified.model import Block, DocJob, DocSettings


def _as_a_foreground_job() -> None:
    """SIGINT at its default in the build, as in a terminal's foreground job: a shell starts a
    background job (``make test &``, a CI runner's) with SIGINT ignored, which the build would
    inherit, and an interpreter that starts with SIGINT ignored keeps ignoring it."""
    signal.signal(signal.SIGINT, signal.SIG_DFL)


def _hung_build(tmp_path: Path) -> tuple[subprocess.Popen, list[int]]:
    """``sphinx-build`` of a page whose block loops forever (and started a child that does):
    the build, in a session of its own as a terminal's job is, and the page's two pids."""
    shutil.copytree(ROOTS / "test-hang", tmp_path / "site")
    marker = tmp_path / "pids"
    env = {**os.environ, "PYTHONPATH": str(ROOT / "ext"), "HANG_MARKER": str(marker)}
    build = subprocess.Popen(
        # faulthandler: a build that does not end can be asked for its threads' stacks (SIGABRT)
        [sys.executable, "-X", "faulthandler", "-m", "sphinx", "-b", "html", str(tmp_path / "site"),
         str(tmp_path / "out"), "-d", str(tmp_path / "doctrees"),
         "-D", f"verified_cache_dir={tmp_path / 'cache'}",
         "-D", f"verified_report={tmp_path / 'report.json'}"],
        env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, start_new_session=True,
        preexec_fn=_as_a_foreground_job)
    deadline = time.monotonic() + 60
    while not (marker.exists() and len(marker.read_text().split()) == 2):
        assert time.monotonic() < deadline and build.poll() is None, build.stdout.read()
        time.sleep(0.1)
    time.sleep(0.3)  # in the loop now
    return build, [int(pid) for pid in marker.read_text().split()]


def _gone_within(pids: list[int], seconds: float) -> bool:
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        if not any(alive(pid) for pid in pids):
            return True
        time.sleep(0.05)
    return False


def _wait_or_show_stacks(build: subprocess.Popen, signum: int, seconds: float) -> None:
    """Waits for the build to end; if it does not, fails with its output and where each of
    its threads was (faulthandler's dump on SIGABRT), which a rare hang needs to be found."""
    try:
        build.wait(timeout=seconds)
    except subprocess.TimeoutExpired:
        os.kill(build.pid, signal.SIGABRT)
        output = build.communicate(timeout=10)[0].decode(errors="replace")
        pytest.fail(f"the build did not end within {seconds} s of {signal.Signals(signum).name}; "
                    f"its output and threads:\n{output[-6000:]}")


@pytest.mark.parametrize("signum", [signal.SIGINT, signal.SIGHUP, signal.SIGTERM])
def test_an_interrupted_build_ends_at_once_and_leaves_no_worker(tmp_path, signum):
    build, pids = _hung_build(tmp_path)
    try:
        assert all(alive(pid) for pid in pids)
        # The page that finished beside the hung one is stored as it finishes: stopping the
        # build does not throw it away.
        deadline = time.monotonic() + 30
        while not list((tmp_path / "cache").glob("slow.*.json")):
            assert time.monotonic() < deadline, "the finished page was not stored"
            time.sleep(0.1)
        started = time.monotonic()
        os.killpg(build.pid, signum)  # as the terminal does: to the build's process group
        _wait_or_show_stacks(build, signum, 5)
        assert time.monotonic() - started < 2.0
        assert _gone_within(pids, 5.0), "a worker (or what it started) outlived the build"
        assert build.returncode != 0
        # The page it ended is said as stopped where it was, not as failed.
        output = build.stdout.read().decode(errors="replace")
        assert re.search(r"^  executed index: 2 blocks, [\d.]+ s, stopped by the interrupt in "
                         r"block 2 \(\S+/index\.md:7\)$", output, re.M), output[-2000:]
    finally:
        for pid in [build.pid, *pids]:
            if alive(pid):
                os.kill(pid, signal.SIGKILL)


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="the parent-death signal")
def test_a_worker_ends_when_its_build_is_killed(tmp_path):
    """SIGKILL leaves the build no chance to clean up: the worker ends itself."""
    build, pids = _hung_build(tmp_path)
    worker = pids[0]
    try:
        build.kill()
        build.wait(timeout=5)
        assert _gone_within([worker], 5.0), "the worker outlived its killed build"
    finally:
        for pid in pids:
            if alive(pid):
                os.kill(pid, signal.SIGKILL)


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="subreaper and /proc")
def test_a_killed_build_leaves_nothing_its_pages_started(tmp_path):
    """SIGKILL of the build, while a page and a two-process page run: each worker, and the
    sleeps each started in its group, in a session of its own and orphaned, all end."""
    shutil.copytree(ROOTS / "test-killed", tmp_path / "site")
    markers = tmp_path / "markers"
    markers.mkdir()
    build = subprocess.Popen(
        [sys.executable, "-m", "sphinx", "-b", "html", str(tmp_path / "site"),
         str(tmp_path / "out"), "-d", str(tmp_path / "doctrees"),
         "-D", f"verified_cache_dir={tmp_path / 'cache'}",
         "-D", f"verified_report={tmp_path / 'report.json'}"],
        env={**os.environ, "PYTHONPATH": str(ROOT / "ext"), "KILLED_MARKERS": str(markers)},
        stdout=subprocess.PIPE, stderr=subprocess.STDOUT, start_new_session=True)
    pids: list[int] = []
    try:
        deadline = time.monotonic() + 120
        while len(pids) != 12:  # three workers (one page, two processes), three sleeps each
            if time.monotonic() > deadline or build.poll() is not None:
                build.kill()
                pytest.fail(build.communicate()[0].decode(errors="replace")[-4000:])
            time.sleep(0.1)
            pids = [int(pid) for marker in markers.iterdir()
                    for pid in marker.read_text().split()]
        assert all(alive(pid) for pid in pids)
        build.kill()
        build.wait(timeout=5)
        assert _gone_within(pids, 5.0), [pid for pid in pids if alive(pid)]
    finally:
        for pid in [build.pid, *pids]:
            if alive(pid):
                os.kill(pid, signal.SIGKILL)


def test_a_long_block_is_announced(site, monkeypatch):
    import verified.hang as hang

    monkeypatch.setattr(hang, "SLOW_NOTICE", 0.5)
    build = site("hang").build("doctest", fresh=True, confoverrides={"verified_pages": ["slow"]})
    notices = [line for line in build.status.splitlines() if "still running" in line]
    where = Path(os.path.relpath(build.app.srcdir)) / "slow.md:3"
    assert notices and all(line.startswith(f"{where}: a block still running after")
                           for line in notices), build.status
    assert notices[0].endswith("(its limit: 120 s)")


def test_a_block_stopped_by_its_limit_shows_where_it_was():
    blocks = (Block(0, 1, "def spin():\n    while True:\n        pass"),
              Block(1, 5, "print('spinning')\nspin()", timeout=1.0))
    result = run_document(DocJob("page", "page.md", DocSettings(), blocks, key="k"),
                          default_timeout=30, extra_env={})
    failure = result.blocks[1].failure
    head, where = failure.split("\n", 1)
    assert head == "timed out after 1 s (the block's time limit, :timeout: 1)"
    lines = where.splitlines()
    assert lines[0] == "where it was (most recent call first):"
    assert lines[1].startswith("  Cell [1], line ") and lines[1].endswith(", in spin")
    assert lines[-2:] == ["  Cell [2], line 2, in <module>", "    spin()"]


def test_the_default_limit_names_its_setting():
    blocks = (Block(0, 1, "import time\ntime.sleep(30)"),)
    result = run_document(DocJob("page", "page.md", DocSettings(), blocks, key="k"),
                          default_timeout=1, extra_env={})
    assert result.blocks[0].failure.split("\n")[0] == (
        "timed out after 1 s (the block's time limit, verified_timeout = 1 in conf.py; a block "
        "may set :timeout:, a page execution: {timeout: ...})")
    assert "  Cell [1], line 2, in <module>\n    time.sleep(30)" in result.blocks[0].failure


# A stand-in for a worker, with the parent-death signal left out (as where there is none):
# the watch on its parent's pid alone must end it and what it started.
_WATCHED = """
import importlib.util, subprocess, sys, time
spec = importlib.util.spec_from_file_location("worker", sys.argv[1])
worker = importlib.util.module_from_spec(spec)
spec.loader.exec_module(worker)
sys.platform = "elsewhere"
worker.end_with_parent(int(sys.argv[2]))
child = subprocess.Popen(["sleep", "600"])
print(child.pid, flush=True)
time.sleep(600)
"""
_PARENT = """
import os, subprocess, sys, time
watched = subprocess.Popen([sys.executable, "-c", sys.argv[1], sys.argv[2], str(os.getpid())],
                           start_new_session=True, stdout=subprocess.PIPE, text=True)
print(watched.pid, watched.stdout.readline().strip(), flush=True)
time.sleep(600)
"""


def test_without_the_parent_death_signal_the_watch_ends_the_page():
    from verified.driver import WORKER

    parent = subprocess.Popen([sys.executable, "-c", _PARENT, _WATCHED, str(WORKER)],
                              stdout=subprocess.PIPE, text=True)
    pids = [int(pid) for pid in parent.stdout.readline().split()]
    try:
        assert len(pids) == 2 and all(alive(pid) for pid in pids)
        parent.kill()
        parent.wait()
        assert _gone_within(pids, 5.0), "the page outlived its parent without the signal"
    finally:
        for pid in pids:
            if alive(pid):
                os.kill(pid, signal.SIGKILL)
