"""A chapter notebook checks itself where it runs: the set-up cell finds the platform and the
record, one line after every cell compares its output with that record, the totals come last.

The kernel tests run tests/roots/test-platform's page in a real Jupyter kernel, against the
records of a build of that root (the CPU's and the stand-in platform's); the rest needs no
kernel."""

from __future__ import annotations

import ast
import copy
import runpy
import sys
from pathlib import Path

import nbformat
import pytest

from conftest import ROOTS, reader_kernel_env
from test_execute import HOST_ADVISORY_WARNING, SLOW_COMPILE_ALARM
from course.downloads import NotebookCheck, make_notebook
from course.notebook_check import MODULES, check_data, module_sources
from course.notebook_text import Reading, TextContext, render_markdown
from verified.collect import collect
from verified.driver import page_environment
from verified.record import BUILTIN_NORMALIZERS, read_record
from verified.selfcheck import (Reference, choose, exception_only, first_difference,
                                too_few_devices)
from verified.target_record import read_target_record
from verified.targets import parse_platforms


# -- without a kernel ---------------------------------------------------------------------

def test_the_notebook_carries_only_what_a_bare_kernel_has():
    """The embedded modules import the standard library, IPython and each other: a fresh
    Colab kernel has nothing else of the course's."""
    for name, source in module_sources():
        for node in ast.walk(ast.parse(source)):
            if isinstance(node, ast.ImportFrom) and node.level:
                assert node.module in MODULES, (name, node.module)
            elif isinstance(node, (ast.Import, ast.ImportFrom)):
                modules = [alias.name for alias in node.names] if isinstance(node, ast.Import) \
                    else [node.module]
                for module in modules:
                    top = module.split(".")[0]
                    assert top in sys.stdlib_module_names or top in ("IPython", "jax"), \
                        (name, module)


def _reference(name, backend, kind="", jax="0.10.2", settings=None):
    return Reference(name, name.upper(), backend, kind, jax, "2026-01-01", {}, settings or {})


def test_the_record_compared_with_is_this_platform_s_else_the_nearest(monkeypatch):
    monkeypatch.delenv("ON_STAND_IN", raising=False)
    cpu = _reference("cpu", "cpu")
    old = _reference("0.4.38", "cpu", jax="0.4.38")
    tpu = _reference("tpu-v5e", "tpu", "TPU v5")
    stand_in = _reference("stand-in", "cpu", settings={"ON_STAND_IN": "1"})
    records = [cpu, old, tpu, stand_in]
    assert choose(records, "cpu", "cpu", "0.10.2") == (
        cpu, "compares with the CPU record (jax 0.10.2, 2026-01-01): this platform, this JAX")
    assert choose(records, "cpu", "cpu", "0.4.38")[0] is old
    assert choose(records, "tpu", "TPU v5 lite", "0.10.2")[0] is tpu
    reference, statement = choose(records, "tpu", "TPU v6 lite", "0.10.2")
    assert reference is tpu and statement == (
        "no record was made on tpu (TPU v6 lite): compares with the nearest, the TPU-V5E "
        "record (jax 0.10.2, 2026-01-01); differences are expected")
    assert choose(records, "gpu", "NVIDIA H100", "0.10.2")[0] is cpu
    assert "but jax 0.5.0 here, so differences are expected" in choose(
        records, "tpu", "TPU v5 lite", "0.5.0")[1]
    monkeypatch.setenv("ON_STAND_IN", "1")  # a platform's settings in force: it is here
    assert choose(records, "cpu", "cpu", "0.10.2")[0] is stand_in


def test_too_few_devices_says_how_to_run_anyway():
    assert too_few_devices(8, 1, "tpu", "TPU v5 lite") == (
        "This page needs 8 devices and JAX here sees 1 (TPU v5 lite). To run it anyway on 8 "
        "host CPU devices beside the accelerator, set PLATFORM = \"cpu\" at the top of this "
        "cell, restart the kernel and run it again.")


class _Captured:
    """What a cell printed, as ``selfcheck.Capture`` hands it to the check."""

    rich = False
    warnings: list = []

    def __init__(self, text):
        self.text = text

    def outputs(self):
        from verified.model import Output

        return [Output("stdout", self.text)]


def test_after_an_edited_cell_a_difference_is_the_reader_s():
    """No kernel: the verdicts of one cell before and after the reader's edit, and the
    totals that keep the two apart."""
    from verified.model import Block, Output
    from verified.record import RecordedBlock
    from verified.selfcheck import AFTER_EDIT, DIFFERS, Check, Expected

    block = Block(0, 10, "print(scale * 2)")
    reference = _reference("cpu", "cpu")
    reference.blocks[0] = RecordedBlock(10, "", "ran", [Output("stdout", "1.0\n")])
    check = Check([Expected(block, "d")], reference, "", {}, {}, shell=None)
    item = check.expected[0]
    assert check.judge(item, _Captured("0.5\n"), None) == (
        DIFFERS, "the output differs from CPU's: here '0.5', recorded '1.0'")
    check.edited = True
    assert check.judge(item, _Captured("0.5\n"), None) == (
        AFTER_EDIT, "the output differs from CPU's, after an earlier cell was edited (not "
                    "counted as differing): here '0.5', recorded '1.0'")
    check.tally[DIFFERS] += 1
    check.tally[AFTER_EDIT] += 1
    assert check.totals().endswith(": 0 same, 1 differ, 1 differ after an earlier cell was "
                                   "edited (not counted as differing)")


def test_a_difference_is_named_by_its_first_line():
    assert exception_only("Traceback (most recent call last):\n  Cell [3], line 2, in f\n"
                          "    x[0] = 1\nTypeError: no\n  more") == "TypeError: no\n  more"
    diff = "--- verified\n+++ live\n@@ -1,2 +1,2 @@\n [stdout]\n-main output\n+other\n"
    assert first_difference(diff) == "here 'other', recorded 'main output'"


def test_a_failed_promotion_s_dtypes_compare_in_any_order():
    """A reader's kernel hashes strings with its own seed, so JAX may list the two dtypes of
    01's strict-promotion error the other way round: not a difference. Other tuples keep
    their order."""
    from verified.model import Output
    from verified.selfcheck import _comparable

    def shown(text):
        return _comparable([Output("error", text)])[0].text

    message = ("TypePromotionError: Input dtypes ({}) have no available implicit dtype "
               "promotion path when jax_numpy_dtype_promotion=strict.")
    assert shown(message.format("'float16', 'float32'")) == \
        shown(message.format("'float32', 'float16'"))
    assert shown(message.format("'float16', 'float32'")) != \
        shown(message.format("'float16', 'int8'"))
    assert shown("ValueError: shape ('b', 'a')") != shown("ValueError: shape ('a', 'b')")


def test_prose_shows_what_the_page_shows():
    context = TextContext(
        "part1/02-tracing", glued={"eps": "np.float64(1.23456)", "n": "3"},
        readings={"201/jit": Reading("Just-in-time compilation", "201", "https://x/jit.html")},
        titles={"part1/03-jit": "03 · jit"}, labels={"cause-x": "A cause"})
    text = ("It was {glue:text}`eps:.2f` eps, {glue}`n` times; see {api}`jax.jit`, "
            "{doc}`03-jit`, {doc}`the next <03-jit>` and {ref}`cause-x`.\n\n"
            "```{reading} 201/jit\nRead it for tracing.\n```\n")
    assert render_markdown(text, context) == (
        "It was 1.23 eps, 3 times; see [`jax.jit`](https://docs.jax.dev/en/latest/"
        "_autosummary/jax.jit.html), 03 · jit, the next and A cause.\n\n"
        "> **Assigned reading** · [**Just-in-time compilation**](https://x/jit.html) · JAX 201"
        "\n>\n> Read it for tracing.\n")


# -- in a real kernel ---------------------------------------------------------------------

CONF = runpy.run_path(str(ROOTS / "test-platform" / "conf.py"))


@pytest.fixture(scope="module")
def recorded_root(tmp_path_factory):
    """test-platform with its CPU record and its stand-in platform's record made."""
    from conftest import target_site

    copy_, _, _ = target_site(tmp_path_factory.mktemp("check") / "site", "platform", "platform")
    return copy_.path


def _check(site: Path, page: str = "index"):
    platforms = parse_platforms(CONF["verified_platforms"], site)
    found = collect(page, site / f"{page}.md", frozenset(BUILTIN_NORMALIZERS),
                    platforms=frozenset(t.name for t in platforms))
    targets = [(t, read_target_record(site / "record", t, page)) for t in platforms]
    data = check_data(found.job.blocks, read_record(site / "record", page), targets, {})
    return found, data


def _notebook(site: Path, data: dict, page: str = "index") -> nbformat.NotebookNode:
    found, _ = _check(site, page)
    settings = found.job.settings
    return make_notebook(site / f"{page}.md", None,
                         NotebookCheck(page_environment(settings, {}), settings, data))


def _execute(notebook: nbformat.NotebookNode, workdir: Path, allow_errors: bool = False):
    from nbclient import NotebookClient

    workdir.mkdir(exist_ok=True)
    client = NotebookClient(notebook, timeout=300, kernel_name="python3",
                            allow_errors=allow_errors,
                            resources={"metadata": {"path": str(workdir)}})
    client.execute(env=reader_kernel_env())
    return notebook


def _lines(notebook: nbformat.NotebookNode, prefix: str) -> list[str]:
    return [line.removeprefix(prefix).strip() for cell in notebook.cells
            if cell.cell_type == "code" for output in cell.get("outputs", [])
            if output.output_type == "stream"
            for line in output.text.splitlines() if line.startswith(prefix)]


def _setup_lines(notebook: nbformat.NotebookNode) -> list[str]:
    setup = next(c for c in notebook.cells if "generated-setup" in c.metadata.get("tags", []))
    return [line for output in setup.outputs if output.output_type == "stream"
            for line in output.text.splitlines()]


@pytest.mark.jax
def test_a_notebook_checks_every_cell_against_the_cpu_record(recorded_root, tmp_path,
                                                             monkeypatch):
    monkeypatch.delenv("VERIFIED_TEST_PLATFORM", raising=False)
    _, data = _check(recorded_root)
    notebook = _notebook(recorded_root, data)
    setup_at = next(i for i, c in enumerate(notebook.cells)
                    if "generated-setup" in c.metadata.get("tags", []))
    # The helper and the set-up cell run again: the settings hold, one check remains.
    notebook.cells[setup_at + 1:setup_at + 1] = [copy.deepcopy(notebook.cells[setup_at - 1]),
                                                 copy.deepcopy(notebook.cells[setup_at])]
    _execute(notebook, tmp_path / "run")
    setup = _setup_lines(notebook)
    assert setup[0].startswith("JAX ") and setup[0].endswith("× cpu (cpu)")
    assert setup[1].startswith("This notebook compares with the CPU record (jax ")
    assert _lines(notebook, "check:") == [
        "same output as recorded on CPU",
        "same output as recorded on CPU",
        "same output as recorded on CPU",
        "same output as recorded on CPU",
        "same output as recorded on CPU",
        "runs on Stand-in only: not run here; the output shown is Stand-in's record",
        "varies from run to run (not compared)",
    ]
    platform_only = [c for c in notebook.cells if c.cell_type == "code"
                     and c.metadata.get("platform")][0]
    assert platform_only.outputs[0].text == "ran where the platform is\n"
    totals = notebook.cells[-1].outputs[0].text
    assert totals.startswith("7 cells, checked against the CPU record (jax ")
    assert totals.rstrip().endswith(": 5 same, 0 differ, 1 vary (not compared), "
                                    "1 run on another platform only")


@pytest.mark.jax
def test_an_edited_cell_and_a_differing_output_are_named(recorded_root, tmp_path, monkeypatch):
    monkeypatch.delenv("VERIFIED_TEST_PLATFORM", raising=False)
    _, data = _check(recorded_root)
    cpu = data["records"][0]
    cpu["blocks"]["1"]["outputs"][0]["text"] = "main output, as recorded\n"
    data["blocks"][1]["cause"] = "The stand-in prints its own name (the Platforms page)"
    notebook = _notebook(recorded_root, data)
    # The reader changes a value (as `scale = 0.5` to 0.25): the untouched cell after it
    # prints otherwise, which is their doing, not a difference of the platform.
    edited = [c for c in notebook.cells if c.cell_type == "code" and "lacking = 1" in c.source]
    edited[0].source = edited[0].source.replace("lacking = 1", "lacking = 2")
    _execute(notebook, tmp_path / "run")
    lines = _lines(notebook, "check:")
    assert lines[1] == ("the output differs from CPU's: here 'main output', recorded "
                        "'main output, as recorded'; a known difference: The stand-in prints "
                        "its own name (the Platforms page)")
    assert lines[3] == ("not in the record: this cell's code is not the page's (edited or "
                        "added); the cells after it run from its state")
    assert lines[4] == ("the output differs from CPU's, after an earlier cell was edited (not "
                        "counted as differing): here '3', recorded '2'")
    assert notebook.cells[-1].outputs[0].text.rstrip().endswith(
        ": 2 same, 1 differ, 1 differ after an earlier cell was edited (not counted as "
        "differing), 1 vary (not compared), 1 not in the record (edited or added), 1 run on "
        "another platform only")


@pytest.mark.jax
def test_on_the_stand_in_platform_it_compares_with_that_record(recorded_root, tmp_path,
                                                               monkeypatch):
    monkeypatch.setenv("VERIFIED_TEST_PLATFORM", "1")  # the kernel starts with it: "there"
    _, data = _check(recorded_root)
    notebook = _notebook(recorded_root, data)
    # A kernel without MyST-NB (a fresh Colab): the block that glues still runs, and its
    # glued value is compared with the record like any output.
    notebook.cells.insert(1, nbformat.v4.new_code_cell(
        "import sys\nsys.modules['myst_nb'] = None  # no MyST-NB here"))
    # The block that fails on the stand-in alone is not tagged raises-exception (the main
    # record, where the reader is expected to run, has it run): run-all stops there unless
    # told otherwise, and its check line says what the record holds.
    raising = [c for c in notebook.cells if "lacking = 1" in c.source][0]
    assert "raises-exception" not in raising.metadata.get("tags", [])
    _execute(notebook, tmp_path / "run", allow_errors=True)
    assert _setup_lines(notebook)[1].startswith(
        "This notebook compares with the Stand-in record (jax ")
    assert _lines(notebook, "check:") == [
        "same output as recorded on Stand-in",
        "same output as recorded on Stand-in",  # its own output, which differs from the CPU's
        "same output as recorded on Stand-in",  # within the block's tolerance
        "raised RuntimeError, as recorded on Stand-in",
        "raised NameError, as on Stand-in, where an earlier block fails",
        "same output as recorded on Stand-in",  # the platform-only block runs there
        "varies from run to run (not compared)",
    ]


@pytest.mark.jax
def test_too_few_devices_is_what_the_set_up_cell_says(tmp_path):
    """JAX already started with fewer devices than the page builds meshes of (the reader ran
    a cell of their own first): the set-up cell says so, and how to get them."""
    page = tmp_path / "eight.md"
    page.write_text((ROOTS / "test-devices" / "eight.md").read_text())
    found = collect("eight", page)
    data = check_data(found.job.blocks, None, [], {})
    settings = found.job.settings
    notebook = make_notebook(page, None, NotebookCheck(page_environment(settings, {}),
                                                       settings, data))
    notebook.cells.insert(1, nbformat.v4.new_code_cell("import jax\njax.devices();"))
    from nbclient.exceptions import CellExecutionError

    with pytest.raises(CellExecutionError):
        _execute(notebook, tmp_path / "run")
    setup = next(c for c in notebook.cells if "generated-setup" in c.metadata.get("tags", []))
    error = [o for o in setup.outputs if o.output_type == "error"][0]
    assert error.ename == "RuntimeError"
    assert error.evalue == (
        "This page needs 8 devices and JAX here started with 1 CPU device: the host device "
        "count is set only before JAX starts. Restart the kernel and run the notebook from "
        "the top.")


LOADED_MACHINE = (
    "import sys, warnings\n"
    f"sys.stderr.write({SLOW_COMPILE_ALARM!r})\n"
    f"warnings.warn({HOST_ADVISORY_WARNING!r}, UserWarning)\n"
    "print('computed')")

PLAIN_IPYTHON = """
import json, sys
from IPython.core.interactiveshell import InteractiveShell
shell = InteractiveShell.instance()
for cell in json.load(open(sys.argv[1]))["cells"]:
    if cell["cell_type"] == "code":
        shell.run_cell("".join(cell["source"]), store_history=True)
"""


@pytest.mark.jax
def test_in_plain_ipython_too(recorded_root, tmp_path, monkeypatch):
    """A terminal's IPython, no Jupyter: it prints the trailing value and tracebacks on
    stdout, which the check tells from what the block printed."""
    import subprocess

    monkeypatch.delenv("VERIFIED_TEST_PLATFORM", raising=False)
    from verified.record import source_digest

    _, data = _check(recorded_root)
    # A block whose trailing value is its output, as the page's worker records it, and one
    # that raises: a terminal prints both on stdout. And one that, on the reader's machine,
    # also gets what the worker does not record: XLA's slow-compile alarm on stderr and the
    # TPU runtime's advice about the host.
    for index, (source, status, outputs) in enumerate((
            ("2 + 2", "ran", [{"kind": "result", "text": "4"}]),
            ("{}['x']", "expected-error", [{"kind": "error", "text": "KeyError: 'x'"}]),
            (LOADED_MACHINE, "ran", [{"kind": "stdout", "text": "computed\n"}])), 7):
        data["blocks"].append({**data["blocks"][0], "index": index, "line": 90 + index,
                               "digest": source_digest(source), "raises": "KeyError"
                               if index == 8 else None})
        data["records"][0]["blocks"][str(index)] = {"status": status, "outputs": outputs,
                                                    "warnings": []}
    notebook = _notebook(recorded_root, data)
    notebook.cells[-1:-1] = [nbformat.v4.new_code_cell("2 + 2"),
                             nbformat.v4.new_code_cell("{}['x']"),
                             nbformat.v4.new_code_cell(LOADED_MACHINE)]
    notebook.cells.append(nbformat.v4.new_code_cell("2 + 3"))  # not the page's
    path = tmp_path / "index.ipynb"
    nbformat.write(notebook, path)
    done = subprocess.run([sys.executable, "-c", PLAIN_IPYTHON, str(path)], cwd=tmp_path,
                          capture_output=True, text=True, timeout=300)
    lines = [line.removeprefix("check: ") for line in done.stdout.splitlines()
             if line.startswith("check: ")]
    assert lines == [*["same output as recorded on CPU"] * 5,
                     "runs on Stand-in only: not run here; the output shown is Stand-in's record",
                     "varies from run to run (not compared)",
                     "same output as recorded on CPU",
                     "raised KeyError, as recorded on CPU",
                     "same output as recorded on CPU",
                     "not in the record: this cell's code is not the page's (edited or "
                     "added); the cells after it run from its state"]
    assert "Very slow compile?" in done.stderr  # the reader still sees both
    assert "Transparent hugepages" in done.stderr
    assert "Out[" in done.stdout  # the terminal showed the value; the check did not count it


def test_a_difference_names_the_cause_the_platforms_page_gives_it():
    from pathlib import Path as P

    from course.notebook_check import explained_blocks
    from verified.model import Block
    from verified.pages import parse_causes
    from verified.targets import PLATFORM, Target
    from verified.verdict import DIFFERS, FAILS, SAME, Verdict

    causes = parse_causes((ROOTS / "test-platform" / "platforms.md").read_text()
                          .split("```{platforms-matrix}\n")[1].split("```")[0])
    target = Target(PLATFORM, "stand-in", "Stand-in", P("python"))
    blocks = [Block(i, 10 * i, source) for i, source in enumerate(
        ['print("platform output" if THERE else "main output")', "raise", "x = 1"])]
    verdicts = [(blocks[0], Verdict(DIFFERS, target)),
                (blocks[1], Verdict(FAILS, target, detail="RuntimeError: UNIMPLEMENTED: no")),
                (blocks[2], Verdict(SAME, target))]
    assert explained_blocks("index", verdicts, causes, "") == {
        0: "The stand-in prints its own name (the Platforms page)",
        1: "An operation the stand-in lacks (the Platforms page)"}
    assert explained_blocks("index", verdicts[:1], causes, "https://x/platforms.html") == {
        0: "The stand-in prints its own name (https://x/platforms.html#cause-own-output)"}


def test_a_platform_s_figure_is_named_not_carried(capsys, monkeypatch):
    """A block that runs on a platform alone, elsewhere: its text is shown from the record;
    its figure, whose pixels the notebook does not carry, is named with where to see it."""
    from verified import selfcheck

    block = {"index": 3, "platform": "tpu-v5e"}
    outputs = [{"kind": "stdout", "text": "steps: 10\n"},
               {"kind": "display", "text": "<Figure size 640x480 with 1 Axes>",
                "data": {"image/png": "image"}}]
    monkeypatch.setitem(selfcheck._ACTIVE, "data", {
        "blocks": [block], "elsewhere": {"3": outputs}, "platforms": {"tpu-v5e": "TPU v5e"}})
    selfcheck.show_recorded(3)
    assert capsys.readouterr().out == (
        "steps: 10\n[<Figure size 640x480 with 1 Axes>, drawn on TPU v5e: the chapter's page "
        "shows it]\n")
