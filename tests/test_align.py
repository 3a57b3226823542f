"""A page's blocks are matched with their record by source in page order: inserting blocks
keeps every unchanged block compared with its own recorded output, tracebacks included."""

from __future__ import annotations

import re
from pathlib import Path

from verified.align import align, align_with_moves, cell_names
from verified.model import Block, Environment, Output
from verified.record import Record, RecordedBlock, source_digest

INSERTED = """
```{code-cell} python
extra = 1
```

```{code-cell} python
extra += 1
```

```{code-cell} python
print(extra)
```
"""


def test_align_pairs_unchanged_blocks_in_page_order():
    assert align(list("abcd"), list("abcd")) == {0: 0, 1: 1, 2: 2, 3: 3}
    assert align(list("aXYZbcd"), list("abcd")) == {0: 0, 4: 1, 5: 2, 6: 3}
    # An edited block has no entry; a repeated source pairs with its own occurrence.
    assert align(list("aBcd"), list("abcd")) == {0: 0, 2: 2, 3: 3}
    assert align(list("xyx"), list("xx")) == {0: 0, 2: 1}
    assert align(list("ab"), []) == {}


def test_cell_names_take_out_the_execution_count_and_input_name():
    traceback = ('Traceback (most recent call last):\n  Cell [20], line 4, in <module>\n'
                 '  File "<ipython-input-20-0123abcd>", line 4\n'
                 '  File "/tmp/ipykernel_4242/2863012.py", line 4, in f\n  In [7]')
    assert cell_names(traceback) == ('Traceback (most recent call last):\n  Cell [N], line 4, '
                                     'in <module>\n  File "<input>", line 4\n'
                                     '  File "<input>", line 4, in f\n  In [N]')


def test_record_block_for_follows_the_alignment():
    sources = ["a = 1", "a += 1", "print(a)"]
    record = Record("page", Environment(), [
        RecordedBlock(line=i, source_sha256=source_digest(s), status="ran")
        for i, s in enumerate(sources)])
    now = tuple(Block(i, i, s) for i, s in enumerate(["a = 1", "new = 0", "a += 1", "print(a)"]))
    assert [record.block_for(b, now) for b in now] == [record.blocks[0], None,
                                                       record.blocks[1], record.blocks[2]]



def test_a_platform_block_moved_past_others_keeps_its_last_run():
    """Blocks moved below a run of others (a section moved to the end of the page) cannot be
    paired by an order-keeping alignment; a platform-only block among them still shows what
    the platform last printed for its unchanged source, and says why it is not verified."""
    from verified.target_record import TargetBlock, TargetRecord
    from verified.targets import PLATFORM, Target
    from verified.verdict import last_run_entry, why_unverified

    before = ["a = 1", "chip()", "b = 2", "c = 3", "d = 4", "e = 5"]
    now = ["a = 1", "b = 2", "c = 3", "d = 4", "e = 5", "chip()", "f = 6", "b = 2"]
    assert align([source_digest(x) for x in now], [source_digest(x) for x in before]) == {
        0: 0, 1: 2, 2: 3, 3: 4, 4: 5}
    # chip() is unique on both sides: paired; the repeated "b = 2" is not paired again.
    assert align_with_moves([source_digest(x) for x in now],
                            [source_digest(x) for x in before]) == {
        0: 0, 1: 2, 2: 3, 3: 4, 4: 5, 5: 1}
    record = TargetRecord("page", "stand-in", Environment(date="2026-01-01"), [
        TargetBlock(line=i, source_sha256=source_digest(x), status="ran",
                    outputs=[Output("stdout", f"{x}\n")]) for i, x in enumerate(before)])
    blocks = tuple(Block(i, i, x) for i, x in enumerate(now))
    assert last_run_entry(record, blocks[5], blocks).outputs[0].text == "chip()\n"
    assert last_run_entry(record, blocks[6], blocks) is None
    target = Target(PLATFORM, "stand-in", "Stand-in", Path("python"))
    assert why_unverified(blocks[5], blocks, record, target) == (
        "an earlier block changed since the Stand-in run")
    assert why_unverified(blocks[6], blocks, record, target) == (
        "this block is new or edited since the Stand-in run")

def test_a_notebook_compares_a_moved_block_with_its_own_record():
    """The notebook's check pairs blocks as the page does: a block moved down by an inserted
    one keeps its record (by position, the record's block 1 would be no block's)."""
    from course.notebook_check import check_data

    sources = ["a = 1", "a += 1", "print(a)"]
    record = Record("page", Environment(date="2026-01-01"), [
        RecordedBlock(line=i, source_sha256=source_digest(s), status="ran",
                      outputs=[Output("stdout", f"{i}\n")]) for i, s in enumerate(sources)])
    now = tuple(Block(i, i, s) for i, s in enumerate(["a = 1", "new = 0", "a += 1", "print(a)"]))
    cpu = check_data(now, record, [], {})["records"][0]["blocks"]
    assert {index: block["outputs"][0]["text"] for index, block in cpu.items()} == {
        "0": "0\n", "2": "1\n", "3": "2\n"}


def _insert(copy):
    copy.edit("index.md", "Prose: the three new blocks go after this paragraph.\n",
              "Prose: the three new blocks go after this paragraph.\n" + INSERTED)


def test_three_inserted_blocks_are_the_only_new_ones(site):
    copy = site("align")
    assert copy.build("record", fresh=True).app.statuscode == 0
    _insert(copy)
    checked = copy.build("doctest", fresh=True)
    output = (checked.outdir / "output.txt").read_text()
    new = [line for line in output.splitlines() if "new block" in line]
    assert len(new) == 3, output
    assert [re.search(r"index\.md:(\d+):", line).group(1) for line in new] == ["10", "14", "18"]
    assert "run `make record PAGES=index`" in new[0]
    # The unchanged blocks, moved down, pass, their tracebacks (Cell [3] now Cell [6]) too.
    assert output.splitlines()[-1] == "6 passed, 3 failed"
    assert "differs" not in output
    assert checked.app.statuscode == 1


def test_html_names_the_blocks_outside_the_record(site):
    copy = site("align")
    copy.build("record", fresh=True)
    quiet = copy.build()
    assert "not in the record" not in quiet.status
    _insert(copy)
    build = copy.build()
    assert "3 blocks not in the record; run `make record PAGES=index`" in build.status
    page = build.html()
    assert page.count("not yet in the verified record") == 1  # the one new block with output
    assert len(re.findall(r"· verified \d{4}-\d\d-\d\d", page)) == 5  # the moved blocks
    assert "The total is" in page and "differs from the output" not in page
