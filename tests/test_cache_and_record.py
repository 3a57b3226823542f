"""The execution cache (atomic, checksummed, never stores failures) and the record's comparison."""

from __future__ import annotations

import dataclasses
import json

from verified.cache import ExecutionCache
from verified.model import Block, BlockResult, DocResult, Environment, Output, WarningRecord
from verified.record import compare, make_record, normalize, read_record, write_record

ENV = Environment(python="3.11.7", jax="0.10.2", jaxlib="0.10.2", backend="cpu",
                  device_count=1, cpu_count=2, platform="linux-x86_64", date="2026-12-02")


def result(key="k1", status="ran", text="42\n") -> DocResult:
    return DocResult("part/page", key, ENV, [
        BlockResult(0, status, 0.5, [Output("stdout", text)], [], None,
                    "boom" if status == "failed" else None)])


def test_store_then_load(tmp_path):
    cache = ExecutionCache(tmp_path)
    cache.store(result())
    loaded = cache.load("part/page", "k1")
    assert loaded == result()
    assert cache.load("part/page", "other-key") is None
    assert not list(tmp_path.glob(".tmp-*")), "temporary files are renamed into place"


def test_a_page_keeps_its_few_most_recently_used_entries(tmp_path):
    """Switching to another branch and back finds the page's result still there."""
    import os
    import time

    from verified.cache import KEEP

    cache = ExecutionCache(tmp_path)
    cache.store(result("k1"))
    cache.store(result("k2"))
    assert cache.load("part/page", "k1") is not None and cache.load("part/page", "k2") is not None
    for number, key in enumerate([f"k{n}" for n in range(1, KEEP + 1)]):
        cache.store(result(key))
        entry = next(tmp_path.glob(f"*.{key}.json"))
        os.utime(entry, (time.time() - 100 + number, time.time() - 100 + number))
    cache.load("part/page", "k1")  # the oldest, used again: it stays
    cache.store(result("k9"))
    kept = sorted(path.name.split(".")[1] for path in tmp_path.glob("*.json"))
    assert kept == ["k1", *[f"k{n}" for n in range(3, KEEP + 1)], "k9"]


def test_failed_runs_are_not_cached(tmp_path):
    cache = ExecutionCache(tmp_path)
    cache.store(result(status="failed"))
    assert cache.load("part/page", "k1") is None
    assert not list(tmp_path.glob("*.json"))


def test_corrupt_and_truncated_entries_are_detected(tmp_path):
    cache = ExecutionCache(tmp_path)
    cache.store(result())
    (entry,) = tmp_path.glob("*.json")
    data = json.loads(entry.read_text())
    data["payload"]["blocks"][0]["outputs"][0]["text"] = "tampered\n"
    entry.write_text(json.dumps(data))
    assert cache.load("part/page", "k1") is None
    assert not entry.exists(), "a corrupt entry is removed"

    cache.store(result())
    (entry,) = tmp_path.glob("*.json")
    entry.write_text(entry.read_text()[:40])
    assert cache.load("part/page", "k1") is None


def test_record_round_trip_and_match(tmp_path):
    block = Block(0, 3, "print(42)")
    record = make_record((block,), result())
    write_record(tmp_path, record)
    again = read_record(tmp_path, "part/page")
    assert again == record
    timed = dataclasses.replace(result(), duration=12.34)
    write_record(tmp_path / "timed", make_record((block,), timed))
    assert read_record(tmp_path / "timed", "part/page").duration == 12.3  # scheduling
    assert compare(block, result().blocks[0], again.block_for(block, (block,)), {}).verdict == "match"


def test_changed_source_is_unrecorded(tmp_path):
    record = make_record((Block(0, 3, "print(42)"),), result())
    edited = Block(0, 3, "print(43)")
    assert record.block_for(edited, (edited,)) is None


def test_mismatch_gives_a_unified_diff():
    block = Block(0, 3, "print(x)")
    recorded = make_record((block,), result(text="1.0000001\n")).blocks[0]
    live = result(text="1.0000002\n").blocks[0]
    comparison = compare(block, live, recorded, {}, "0.4.38")
    assert comparison.verdict == "differs"
    assert "--- verified (jax 0.4.38)" in comparison.diff
    assert "-1.0000001" in comparison.diff and "+1.0000002" in comparison.diff
    tolerant = Block(0, 3, "print(x)", normalize=("floats",))
    assert compare(tolerant, live, recorded, {}).verdict == "match"


def test_varies_is_not_compared_unless_normalised():
    recorded = make_record((Block(0, 3, "t()"),), result(text="0.31 s\n")).blocks[0]
    live = result(text="0.29 s\n").blocks[0]
    assert compare(Block(0, 3, "t()", varies=True), live, recorded, {}).verdict == "unchecked"
    custom = {"seconds": (("[0-9.]+ s", "N s"),)}
    assert compare(Block(0, 3, "t()", varies=True, normalize=("seconds",)), live, recorded,
                   custom).verdict == "match"
    failed = result(status="failed").blocks[0]
    assert compare(Block(0, 3, "t()", varies=True), failed, recorded, {}).verdict == "differs"


def test_warnings_and_status_are_compared():
    block = Block(0, 3, "w()")
    base = result().blocks[0]
    recorded = make_record((block,), result()).blocks[0]
    warned = BlockResult(0, "ran", 0.1, base.outputs, [WarningRecord("DeprecationWarning", "old")])
    assert compare(block, warned, recorded, {}).verdict == "differs"


def test_builtin_normalisers():
    assert normalize("<object at 0x7f3a2b1c>", ("addresses",), {}) == "<object at 0x…>"
    assert normalize("[0.12345678 2.0000001]", ("floats",), {}) == "[0.1235 2]"
    assert normalize("x", ("mine",), {"mine": (("x", "y"),)}) == "y"


def test_ids_and_xla_log_normalisers():
    assert normalize("<list 139750119013440> at 1.5", ("ids",), {}) == "<list <id>> at 1.5"
    line = "E1202 18:37:27.331861  123456 common_pjrt_client.cc:1622] Execution failed"
    assert normalize(line, ("xla-log",), {}) == "<log> common_pjrt_client.cc:1622] Execution failed"
