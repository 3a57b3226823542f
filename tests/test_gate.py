"""Blocks of concurrent pages run side by side, except exclusive ones (timings), which run
with no other block running; pages run longest first."""

from __future__ import annotations

import os
import json
import threading
import time

from verified.gate import BlockGate
from verified.model import DocJob, DocSettings
from verified.schedule import longest_first


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


def test_pages_run_longest_first_and_untimed_pages_before_all():
    jobs = [DocJob(name, f"{name}.md", DocSettings(), ()) for name in ("a", "b", "c", "new")]
    order = longest_first(jobs, {"a": 3.0, "b": 40.0, "c": 12.5})
    assert [job.docname for job in order] == ["new", "b", "c", "a"]


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
