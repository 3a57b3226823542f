"""Pages that run as several cooperating processes (``execution: {processes: N}``):
outputs per process, a raise in one process, a hung collective stopped at its time limit,
a worker killed mid-block leaving no process behind, and the slots such a page holds."""

from __future__ import annotations

import json
import os
import re
import signal
import threading
import time

import pytest

from conftest import alive
from verified.model import Block, BlockResult, ErrorInfo, Output
from verified.gate import Slots
from verified.multiprocess import combine

PAGES = ("outputs", "raises", "hang", "orphans")


def build_only(site, *pages, builder="html", **overrides):
    """Builds the multiprocess root with only ``pages`` in it (the others excluded)."""
    excluded = [f"{page}.md" for page in PAGES if page not in pages]
    return site.build(builder, fresh=True,
                      confoverrides={"exclude_patterns": ["_build", *excluded], **overrides})


def error_heads(build):
    return [re.sub(r"^.*?/(\w+\.md)", r"\1", line.split(" [verified")[0])
            for line in build.warnings.splitlines() if ": ERROR: " in line]


def test_every_process_runs_in_step_and_each_output_is_kept(site):
    copy = site("multiprocess")
    build = build_only(copy, "outputs")
    assert build.app.statuscode == 0, build.warnings
    html = build.html("outputs")
    # Process 0's output is the page's; process 1's is one click away, labelled.
    assert "process 0 of 2\n" in html
    assert "Show process 1&#39;s output</summary>" in html or "Show process 1's output" in html
    assert "process 1 of 2\n" in html
    # Identical outputs are said to be identical, not repeated.
    assert "all 2 processes printed the same" in html
    # Lock-step: process 1 read, in block 4, what process 0 wrote in block 3 (shared cwd).
    # (once in the code, once as the output both printed).
    assert html.count("written by process 0") == 2
    # :raises: holds when the process that raised raised that type.
    assert html.count("KeyError") >= 1 and "cell-expected-error" in html
    # ... and the processes that raised nothing go on with the others.
    assert "the page goes on after a block only one process raised in\n" in html


def test_the_record_keeps_every_process_and_doctest_compares_them_all(site):
    copy = site("multiprocess")
    assert build_only(copy, "outputs", builder="record").app.statuscode == 0
    path = copy.path / "record" / "outputs.json"
    record = json.loads(path.read_text())
    first = record["blocks"][0]
    assert first["outputs"][0]["text"] == "process 0 of 2\n"
    assert [(p["process"], p["outputs"][0]["text"]) for p in first["others"]] == [
        (1, "process 1 of 2\n")]
    assert build_only(copy, "outputs", builder="doctest").app.statuscode == 0
    # A change in process 1's recorded output alone is caught, and located.
    path.write_text(path.read_text().replace('"process 1 of 2\\n"', '"process 1 of 3\\n"'))
    checked = build_only(copy, "outputs", builder="doctest")
    assert checked.app.statuscode == 1
    output = (checked.outdir / "output.txt").read_text()
    assert "outputs.md:8: output differs from the record" in output
    assert "[process 1]" in output and "+process 1 of 2" in output


def test_a_raise_in_one_process_fails_the_block_naming_it(site):
    build = build_only(site("multiprocess"), "raises")
    assert build.app.statuscode == 1
    assert error_heads(build) == [
        "raises.md:8: ERROR: code-cell failed: process 1: the block raised ValueError"]
    assert "--- process 1: error ---" in build.warnings
    assert "ValueError: only in process 1" in build.warnings
    html = build.html("raises")
    assert "process 0 is fine" in html
    assert "Not run: an earlier block of this page failed." in html


@pytest.mark.jax
def test_a_collective_one_process_never_joins_is_stopped_at_the_time_limit(site, monkeypatch):
    import verified.hang as hang

    monkeypatch.setattr(hang, "SLOW_NOTICE", 1.5)  # a minute, on the page's scale
    started = time.monotonic()
    build = build_only(site("multiprocess"), "hang")
    elapsed = time.monotonic() - started
    assert build.app.statuscode == 1
    assert "hang.md:24: a block still running after " in build.status
    assert error_heads(build) == [
        "hang.md:24: ERROR: code-cell failed: process 0: timed out after 4 s (the block's "
        "time limit, :timeout: 4); it had not finished the block (process 1 had finished it: a collective "
        "waiting for a peer that never joins it hangs like this); all 2 processes were stopped"]
    assert "process 0 waits in the sum" in build.warnings
    # Where the stopped process was: in the collective, called from the block's line 3.
    assert "process 0: where it was (most recent call first):\n" in build.warnings
    assert ("  Cell [2], line 3, in <module>\n    jax.jit(jnp.sum)(x).block_until_ready()"
            in build.warnings)
    assert elapsed < 60  # bounded by the block's limit, not by JAX's own (minutes) timeouts


def test_a_worker_killed_mid_block_leaves_no_process_of_the_page(site, tmp_path):
    folder = tmp_path / "pids"
    folder.mkdir()
    killed: list[int] = []

    def kill_process_1():
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            if all((folder / name).exists() for name in
                   ("worker-0", "worker-1", "child-0", "child-1")):
                pid = int((folder / "worker-1").read_text())
                os.kill(pid, signal.SIGKILL)
                killed.append(pid)
                return
            time.sleep(0.1)

    killer = threading.Thread(target=kill_process_1)
    killer.start()
    started = time.monotonic()
    build = build_only(site("multiprocess"), "orphans",
                       verified_env={"PID_DIR": str(folder)})
    killer.join()
    assert killed, "the page never started"
    assert time.monotonic() - started < 60  # not the block's 120 s sleep: its peer was stopped
    assert build.app.statuscode == 1
    assert error_heads(build) == [
        "orphans.md:8: ERROR: code-cell failed: process 0: stopped when process 1 died; "
        "process 1: died: the interpreter crashed (SIGKILL); all 2 processes were stopped"]
    pids = [int((folder / name).read_text()) for name in
            ("worker-0", "worker-1", "child-0", "child-1")]
    assert not [pid for pid in pids if alive(pid)]


def test_a_page_of_n_processes_holds_n_slots_first_come_first_served():
    slots = Slots(2)
    order: list[str] = []
    held = []  # kept, so that a holder keeps its slots until the test lets go

    def take(count, name):
        holder = slots.hold(count)
        holder.__enter__()
        held.append(holder)
        order.append(name)

    with slots.hold(1):
        waiting = threading.Thread(target=take, args=(2, "two"))
        waiting.start()
        time.sleep(0.2)
        later = threading.Thread(target=take, args=(1, "one"))
        later.start()
        time.sleep(0.2)
        assert order == []  # one slot is free, but the page of two asked first
    waiting.join(5)
    time.sleep(0.2)
    assert order == ["two"]  # it holds both slots; the page of one still waits
    held[0].__exit__(None, None, None)
    later.join(5)
    assert order == ["two", "one"]
    assert Slots(1).total == 1
    with Slots(1).hold(2):  # more processes than cores: it takes every slot, not more
        pass


def test_raises_is_met_by_the_processes_that_raised():
    block = Block(index=0, line=1, source="", raises="KeyError")
    raised = BlockResult(index=0, status="expected-error",
                         outputs=[Output(kind="error", text="KeyError")])
    nothing = BlockResult(index=0, status="failed",
                          failure="expected KeyError, but the block raised nothing")
    assert combine(block, [raised, nothing]).status == "expected-error"
    assert combine(block, [raised, nothing]).others[0].status == "ran"
    both_nothing = combine(block, [nothing, nothing])
    assert both_nothing.status == "failed"
    assert both_nothing.failure == "expected KeyError, but no process raised it"
    wrong = BlockResult(index=0, status="failed",
                        error=ErrorInfo("IndexError", "", "IndexError"),
                        failure="expected KeyError, but the block raised IndexError")
    assert combine(block, [raised, wrong]).failure == (
        "process 1: expected KeyError, but the block raised IndexError")


def test_the_setting_is_validated_and_leaves_single_process_keys_alone():
    from verified.config import parse_doc_settings

    assert parse_doc_settings({"execution": {"processes": 2}}).processes == 2
    for bad in (0, True, "2"):
        with pytest.raises(ValueError, match="processes must be a positive integer"):
            parse_doc_settings({"execution": {"processes": bad}})
    assert "processes" not in parse_doc_settings({"execution": {"host_devices": 8}}).as_dict()
    assert parse_doc_settings({"execution": {"processes": 2}}).as_dict()["processes"] == 2


def test_the_gloo_normaliser_removes_interleaved_connection_lines():
    from verified.record import BUILTIN_NORMALIZERS

    text = ("[Gloo] Rank 0 is connected to 7 peer ranks. [Gloo] Rank 1 is connected to 7 peer "
            "ranks. Expected number of connected peer ranks is : 7\nExpected number of "
            "connected peer ranks is : 7\nsum: 360.0\n[Gloo] Rank 4 is connected to 1 peer "
            "ranks. Expected number of connected peer ranks is : 1\nend\n")
    assert BUILTIN_NORMALIZERS["gloo"](text) == "sum: 360.0\nend\n"
