"""Blocks of concurrent pages run side by side, except exclusive ones (timings), which run
with no other block running; pages run longest first."""

from __future__ import annotations

import os
import json
import threading
import time
from pathlib import Path
from types import SimpleNamespace

from verified.gate import BlockGate
from verified.model import Block, DocJob, DocSettings
from verified.schedule import known_durations, run_order, scheduled


def test_an_exclusive_block_waits_for_running_blocks_and_holds_new_ones_back():
    gate = BlockGate()
    assert gate.acquire(exclusive=False)
    assert not gate.acquire(exclusive=True, timeout=0.05)  # a shared block is running
    assert gate.acquire(exclusive=False, timeout=0.05)  # nobody waits exclusively now
    gate.release(False)

    granted = []
    waiter = threading.Thread(target=lambda: granted.append(gate.acquire(exclusive=True)))
    waiter.start()
    time.sleep(0.1)
    assert not gate.acquire(exclusive=False, timeout=0.05)  # held back for the waiting one
    gate.release(False)
    waiter.join(timeout=5)
    assert granted == [True]
    assert not gate.acquire(exclusive=False, timeout=0.05)  # it runs alone
    gate.release(True)
    assert gate.acquire(exclusive=False, timeout=0.05)


def test_after_an_exclusive_block_its_page_holds_the_gate_shared():
    """The block has ended, its interpreter has not: the next timing block still waits."""
    gate = BlockGate()
    assert gate.acquire(exclusive=True)
    gate.downgrade()
    assert not gate.acquire(exclusive=True, timeout=0.05)
    assert gate.acquire(exclusive=False, timeout=0.05)
    gate.release(False)
    gate.release(False)
    assert gate.acquire(exclusive=True, timeout=0.05)


def test_pages_run_longest_first_and_untimed_pages_before_all():
    jobs = [DocJob(name, f"{name}.md", DocSettings(), ()) for name in ("a", "b", "c", "new")]
    order = run_order(jobs, {"a": 3.0, "b": 40.0, "c": 12.5})
    assert [job.docname for job in order] == ["new", "b", "c", "a"]


def test_untimed_pages_that_time_statements_run_first():
    """A page never timed is long when it holds many %timeit: each runs its statement seven
    times over at least 0.2 s."""
    def page(name, *sources):
        return DocJob(name, f"{name}.md", DocSettings(),
                      tuple(Block(index, index + 1, source) for index, source in enumerate(sources)))

    jobs = [page("a", "x = 1"), page("b", "%timeit f()"),
            page("c", "%timeit f()", "g()\n  %timeit g()\n"), page("d", "%%timeit\nf()")]
    assert [job.docname for job in run_order(jobs, {})] == ["c", "b", "d", "a"]


def test_pages_of_several_processes_run_first():
    """Such a page holds several cores: started first, it waits for no page and holds none up."""
    jobs = [DocJob("long", "long.md", DocSettings(), ()),
            DocJob("pair", "pair.md", DocSettings(processes=2), ())]
    assert [job.docname for job in run_order(jobs, {"long": 80.0, "pair": 5.0})] == [
        "pair", "long"]


def test_a_fresh_clone_schedules_by_the_recorded_times(tmp_path):
    """No report yet: each page's time comes from its record; the report wins when present."""
    records = tmp_path / "record"
    for name, seconds in (("short", 2.0), ("long", 30.0)):
        (records / name).parent.mkdir(parents=True, exist_ok=True)
        (records / f"{name}.json").write_text(json.dumps({"docname": name, "duration": seconds}))
    config = SimpleNamespace(report_path=tmp_path / "report.json", record_dir=records)
    jobs = [DocJob(name, f"{name}.md", DocSettings(), ()) for name in ("short", "long", "new")]
    assert known_durations(config, ["short", "long", "new"]) == {"short": 2.0, "long": 30.0}
    shared, exclusive = scheduled(config, jobs)
    assert [job.docname for job in shared] == ["new", "long", "short"] and exclusive == []

    config.report_path.write_text(json.dumps({"pages": [{"docname": "short", "duration": 90.0}]}))
    assert known_durations(config, ["short", "long"]) == {"short": 90.0, "long": 30.0}


def _overlap(first: dict, second: dict) -> bool:
    return first["started"] < second["ended"] and second["started"] < first["ended"]


def test_exclusive_blocks_never_overlap_another_block(site):
    build = site("exclusive").build()
    assert build.app.statuscode == 0
    rows = json.loads((build.outdir.parent / "execution-report.json").read_text())["blocks"]
    assert [row["exclusive"] for row in rows if row["docname"] == "index"] == [False, True, False]
    assert all(row["started"] > 0 and row["ended"] >= row["started"] for row in rows)
    exclusive = [row for row in rows if row["exclusive"]]
    assert len(exclusive) == 2  # the varies block of a `varies` page, and the :exclusive: one
    for timed in exclusive:
        assert not [row for row in rows if row is not timed and _overlap(timed, row)]
    # The other blocks of the two pages did run side by side.
    index = [row for row in rows if row["docname"] == "index" and not row["exclusive"]]
    other = [row for row in rows if row["docname"] == "other" and not row["exclusive"]]
    assert any(_overlap(a, b) for a in index for b in other)


def test_core_pool_gives_each_running_page_cores_no_other_has():
    from verified.schedule import CorePool

    usable = sorted(os.sched_getaffinity(0))
    pool = CorePool(1)
    with pool.take() as first:
        if len(usable) > 1:
            with pool.take() as second:
                assert len(first) == len(second) == 1 and first != second
        assert set(first) <= set(usable)
    with CorePool(0).take() as unpinned:
        assert unpinned == ()


def test_no_interpreter_starts_or_shuts_down_during_a_timing_block(site):
    """An interpreter starting up (IPython, imports) or shutting down (exit handlers, freeing
    memory) uses the machine as much as a block does, so a timing block waits for both."""
    build = site("quiet-machine").build()
    assert build.app.statuscode == 0, build.warnings
    rows = json.loads((build.outdir.parent / "execution-report.json").read_text())["blocks"]
    first = {row["docname"]: row for row in reversed(rows)}
    timed = next(row for row in rows if row["exclusive"])
    life = {}
    for line in (Path(build.app.srcdir) / "life.log").read_text().splitlines():
        page, event, at = line.split()
        life[page, event] = float(at)
    busy = {"b-brief starting": (life["b-brief", "started"], first["b-brief"]["started"]),
            "b-brief shutting down": (first["b-brief"]["ended"], life["b-brief", "exited"]),
            "c-late starting": (life["c-late", "started"], first["c-late"]["started"])}
    # Process start times are read in clock ticks (10 ms): allow two either side.
    slack = 0.02
    overlapping = [name for name, (start, end) in busy.items()
                   if start < timed["ended"] - slack and timed["started"] + slack < end]
    assert overlapping == []
