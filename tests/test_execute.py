"""Running one page in a subprocess: state, capture, expected errors, every way to fail.

Plain Python only (no JAX), so these stay fast.
"""

from __future__ import annotations

import os
import tempfile
import time

import pytest

from verified.execute import run_document
from verified.model import Block, DocJob, DocSettings


def run(*sources, settings=DocSettings(), timeout=30.0, **block_options):
    blocks = []
    for index, source in enumerate(sources):
        options = block_options.get(f"b{index}", {})
        blocks.append(Block(index=index, line=10 * index + 1, source=source, **options))
    job = DocJob("page", "page.md", settings, tuple(blocks), key="k")
    return run_document(job, default_timeout=timeout, extra_env={})


def kinds(block):
    return [(o.kind, o.text) for o in block.outputs]


def test_state_carries_from_block_to_block():
    result = run("x = 20", "x += 1", "x * 2")
    assert [b.status for b in result.blocks] == ["ran", "ran", "ran"]
    assert kinds(result.blocks[2]) == [("result", "42")]


def test_pages_are_isolated():
    run("leaked = 1")
    result = run("leaked", b0={"raises": "NameError"})
    assert result.blocks[0].status == "expected-error"


def test_each_capture_kind_separately():
    result = run(
        "import sys, os, warnings\n"
        "print('out')\n"
        "print('err', file=sys.stderr)\n"
        "os.write(1, b'fd-level\\n')\n"
        "warnings.warn('careful', UserWarning)\n"
        "'value'")
    block = result.blocks[0]
    assert kinds(block) == [("stdout", "out\nfd-level\n"), ("stderr", "err\n"),
                            ("result", "'value'")]
    assert [(w.category, w.message, w.line) for w in block.warnings] == [
        ("UserWarning", "careful", 5)]


SLOW_COMPILE_ALARM = (
    "E1203 20:38:15.178956   22025 slow_operation_alarm.cc:73] \n"
    "********************************\n"
    "[Compiling module jit_f for CPU] Very slow compile? If you want to file a bug, run with"
    " envvar XLA_FLAGS=--xla_dump_to=/tmp/foo and attach the results.\n"
    "********************************\n"
    "E1203 20:38:17.036061   22020 slow_operation_alarm.cc:140] The operation took 2m40.4s\n"
    "\n"
    "********************************\n"
    "[Compiling module jit_f for CPU] Very slow compile? If you want to file a bug, run with"
    " envvar XLA_FLAGS=--xla_dump_to=/tmp/foo and attach the results.\n"
    "********************************\n")


def test_xla_slow_compile_alarm_is_not_block_output():
    """XLA's alarm says the machine was loaded: a record made on a calm machine must still match."""
    result = run(
        "import os\n"
        "os.write(2, b'before\\n')\n"
        f"os.write(2, {SLOW_COMPILE_ALARM.encode()!r})\n"
        "os.write(2, b'W1203 20:38:18.000000   22020 other.cc:1] kept\\n')\n"
        "print('stdout stays')")
    assert kinds(result.blocks[0]) == [
        ("stdout", "stdout stays\n"),
        ("stderr", "before\nW1203 20:38:18.000000   22020 other.cc:1] kept\n")]
    assert kinds(run(f"import os; os.write(2, {SLOW_COMPILE_ALARM.encode()!r});").blocks[0]) == []


def test_streams_read_as_text_files_are():
    """A carriage return (a progress line) reads as a new line, as it always has."""
    (block,) = run("import os\nos.write(1, b'10%\\r20%\\r\\n');").blocks
    assert kinds(block) == [("stdout", "10%\n20%\n")]


def test_a_block_s_stream_is_kept_up_to_its_limit():
    """A runaway print loop: the page and the build keep the first MiB and say how much
    more there was, whether the block ends or its time limit stops it."""
    from verified.capture_rules import STREAM_LIMIT
    from verified.render import failure_report

    three = "import sys\nfor _ in range(3 * 1024):\n    sys.stdout.write('y' * 1023 + '\\n')"
    (block,) = run(three).blocks
    assert block.status == "ran"
    text = block.outputs[0].text
    assert text.endswith("\n[output cut at 1 MiB: the block wrote 2.0 MiB more]\n")
    assert len(text.encode()) < STREAM_LIMIT + 100
    endless = run("import sys\nwhile True:\n    sys.stdout.write('y' * 1023 + '\\n')",
                  timeout=1.0)
    (stopped,) = endless.blocks
    assert stopped.status == "failed" and stopped.failure.startswith("timed out after 1 s")
    assert len(stopped.outputs[0].text.encode()) < STREAM_LIMIT + 100
    assert "[output cut at 1 MiB: the block wrote " in stopped.outputs[0].text
    # A character the cut splits is left out, not replaced; the count is of what is left out.
    (split,) = run("import os\nos.write(1, b'a' * (1024 * 1024 - 1) + 'é!'.encode())").blocks
    assert split.outputs[0].text.endswith("a\n[output cut at 1 MiB: the block wrote 2 bytes more]\n")
    report = failure_report(Block(0, 1, "..."), stopped)
    assert len(report) < 60_000 and "earlier lines are on the page]" in report


def _gone(pid: int, seconds: float = 2.0) -> bool:
    from conftest import alive

    deadline = time.monotonic() + seconds
    while alive(pid) and time.monotonic() < deadline:  # SIGKILL is sent; it lands at once
        time.sleep(0.01)
    return not alive(pid)


@pytest.mark.parametrize("start", [
    # a forked child, and its own forked child (each closes what it inherited, once)
    "if os.fork() == 0:\n    if os.fork() == 0:\n"
    "        open(os.environ['PID_FILE'], 'w').write(str(os.getpid()))\n        time.sleep(30)\n"
    "    time.sleep(30)\n    os._exit(0)\ntime.sleep(0.5)",
    # a program run in the background by a shell: it inherits no pipe of the worker's
    "os.system('sleep 30 & echo $! > ' + os.environ['PID_FILE'])",
    # a program in a session of its own: no group or subreaper of the crashed worker holds it
    "import subprocess\nsleeper = subprocess.Popen(['sleep', '300'], start_new_session=True)\n"
    "open(os.environ['PID_FILE'], 'w').write(str(sleeper.pid))",
], ids=["forked", "os.system", "session"])
def test_a_crash_is_seen_at_once_though_a_child_lives_on(start, tmp_path, monkeypatch):
    """A process the page started holds nothing of the worker's: the worker's exit is
    reported as what it is, at once, and the page's processes end with it."""
    pid_file = tmp_path / "pid"
    monkeypatch.setenv("PID_FILE", str(pid_file))
    started = time.monotonic()
    result = run("import os, time\n" + start, "os._exit(3)", timeout=20.0)
    assert result.blocks[1].failure.startswith("the interpreter exited with status 3")
    assert time.monotonic() - started < 10
    assert "Bad file descriptor" not in "".join(o.text for o in result.blocks[0].outputs)
    assert _gone(int(pid_file.read_text()))


def test_a_page_that_deletes_its_scratch_folder_fails_at_that_block():
    """The block that removed the folder the engine captures output in fails, saying so;
    the build goes on (it used to stop with the page's stderr file missing)."""
    result = run("import os, shutil\nos.chdir('..')\nshutil.rmtree(os.getcwd())", "print(1)")
    assert [b.status for b in result.blocks] == ["failed", "not-run"]
    assert result.blocks[0].failure.startswith(
        "the interpreter exited with status 1 after the page deleted the engine's scratch "
        "folder (the parent of its working directory)")


def test_exit_is_the_block_s_error():
    result = run("exit()", "print('next')")
    assert [b.status for b in result.blocks] == ["failed", "not-run"]
    assert "exit() and quit() would end the interpreter" in result.blocks[0].outputs[-1].text
    assert result.blocks[0].warnings == []  # not IPython's advice to type exit
    (ended,) = run("import sys\nsys.exit(2)").blocks
    assert ended.status == "failed" and ended.warnings == []


def test_a_page_of_processes_that_deletes_its_scratch_folder_fails_at_that_block():
    result = run("import os, shutil\nshutil.rmtree(os.path.dirname(os.getcwd()))", "print(1)",
                 settings=DocSettings(processes=2))
    assert [b.status for b in result.blocks] == ["failed", "not-run"]
    assert "after the page deleted the engine's scratch folder" in result.blocks[0].failure


def test_a_finished_worker_is_waited_for_but_not_reaped():
    """Its pid (its group's id) stays its own until the group is ended; one already reaped
    is no error."""
    import subprocess

    from verified.driver import wait_unreaped

    process = subprocess.Popen(["sh", "-c", "exit 3"])
    started = time.monotonic()
    wait_unreaped(process, limit=10)
    assert time.monotonic() - started < 5
    with open(f"/proc/{process.pid}/stat", encoding="utf-8") as stat:
        assert stat.read().rsplit(")", 1)[1].split()[0] == "Z"  # exited, not reaped
    assert process.wait() == 3
    wait_unreaped(process, limit=1)  # reaped now: returns at once


def test_what_a_page_leaves_running_ends_with_it(tmp_path):
    """A finished page's background process does not outlive it."""
    pid_file = tmp_path / "pid"
    result = run(f"import subprocess\np = subprocess.Popen(['sleep', '123'])\n"
                 f"open({str(pid_file)!r}, 'w').write(str(p.pid))")
    assert result.blocks[0].status == "ran"
    assert _gone(int(pid_file.read_text()))


def test_an_indentation_error_in_other_text_is_at_the_block(tmp_path):
    """An IndentationError a block raises on text it tokenizes names a line of that text:
    the error is located at the block's fence, not at a line of the page below it."""
    from verified.locate import body_line, failure_line

    source = ("import io, tokenize\n"
              "list(tokenize.generate_tokens(io.StringIO('if x:\\n        a\\n    b\\n').readline))")
    (block,) = run(source).blocks
    assert block.error.ename == "IndentationError" and "(<tokenize>, line 3)" in block.error.evalue
    page = tmp_path / "page.md"
    page.write_text("\n" * 9 + "```{code-cell} python\n" + source + "\n```\n\nprose\n")
    cell = Block(0, 10, source)
    assert failure_line(cell, block, body_line(cell, page.read_text())) == 10


HOST_ADVISORY_WARNING = (
    "Transparent hugepages are not enabled. TPU runtime startup and shutdown time should be "
    "significantly improved on TPU v5e and newer.")


def test_the_tpu_runtime_s_advice_about_the_host_is_not_a_block_warning():
    """Whichever block first opens the chip gets it: it describes the VM, not the block."""
    result = run("import warnings\n"
                 f"warnings.warn({HOST_ADVISORY_WARNING!r}, UserWarning)\n"
                 "warnings.warn('its own', UserWarning)")
    assert result.blocks[0].status == "ran"
    assert [w.message for w in result.blocks[0].warnings] == ["its own"]


def test_the_worker_s_own_modules_are_not_the_snippets():
    """The worker runs as a script beside the engine's modules: a snippet's imports find only
    what the reader's interpreter has."""
    result = run("import capture_rules", b0={"raises": "ModuleNotFoundError"})
    assert result.blocks[0].status == "expected-error"


# A thread that computes outside the GIL for a while, as XLA does after a cell has returned.
BUSY_THREAD = ("import hashlib, threading, time\n"
               "def compute(seconds):\n"
               "    end = time.perf_counter() + seconds\n"
               "    chunk = bytes(1 << 22)\n"
               "    while time.perf_counter() < end:\n"
               "        hashlib.sha256(chunk).digest()\n"
               "    print('computed')\n")


def test_a_block_ends_when_the_work_it_left_running_has():
    """A thread stands in for XLA finishing an asynchronous dispatch after the cell returns:
    the block's result waits for it, so its output is the block's and the next block (or a
    timing block of another page) starts on an idle interpreter."""
    result = run(BUSY_THREAD + "threading.Thread(target=compute, args=(0.5,)).start()",
                 "print('next')")
    assert [kinds(block) for block in result.blocks] == [
        [("stdout", "computed\n")], [("stdout", "next\n")]]
    assert result.blocks[0].duration >= 0.5


def test_a_thread_that_never_rests_holds_each_block_a_bounded_time():
    result = run(BUSY_THREAD + "threading.Thread(target=compute, args=(1e9,), daemon=True).start()",
                 "print('next')")
    assert [block.status for block in result.blocks] == ["ran", "ran"]
    assert kinds(result.blocks[1]) == [("stdout", "next\n")]
    assert all(2.0 <= block.duration < 10 for block in result.blocks)


def test_temporary_files_a_page_leaves_are_removed():
    result = run("import tempfile, pathlib\n"
                 "folder = pathlib.Path(tempfile.mkdtemp())\n"
                 "(folder / 'left.txt').write_text('x')\n"
                 "print(folder)")
    folder = result.blocks[0].outputs[0].text.strip()
    assert folder.startswith(tempfile.gettempdir()) and "verified-" in folder
    assert not os.path.exists(folder)


def test_trailing_semicolon_suppresses_the_value():
    assert kinds(run("1 + 1;").blocks[0]) == []


def test_figures_become_images():
    result = run("import matplotlib.pyplot as plt\nplt.plot([1, 2])\nplt.figure()\nplt.plot([3]);")
    images = [o for o in result.blocks[0].outputs if "image/png" in o.data]
    assert len(images) == 2
    assert images[0].data["image/png"].startswith("iVBORw0KGgo")  # base64 of a PNG header
    assert run("import matplotlib.pyplot as plt\nplt.get_fignums()").blocks[0].outputs[0].text == "[]"


def test_magics_work():
    result = run("%timeit -n 1 -r 1 sum(range(10))")
    assert "per loop" in result.blocks[0].outputs[0].text


def test_expected_error_right_type_and_subclass():
    result = run("1 / 0", "{}['k']", "int('x')",
                 b0={"raises": "ZeroDivisionError"}, b1={"raises": "LookupError"},
                 b2={"raises": ""})
    assert [b.status for b in result.blocks] == ["expected-error"] * 3
    traceback = result.blocks[0].outputs[-1].text
    assert traceback.endswith("ZeroDivisionError: division by zero")
    assert "Cell [1], line 1" in traceback and "site-packages" not in traceback


def test_expected_error_wrong_type_fails():
    result = run("[][0]", "print('not reached')", b0={"raises": "KeyError"})
    assert result.blocks[0].status == "failed"
    assert result.blocks[0].failure == "expected KeyError, but the block raised IndexError"
    assert result.blocks[1].status == "not-run"


def test_expected_error_that_does_not_happen_fails():
    result = run("x = 1", b0={"raises": "ValueError"})
    assert result.blocks[0].failure == "expected ValueError, but the block raised nothing"


def test_undeclared_error_fails_and_keeps_partial_output():
    result = run("print('before')\nraise RuntimeError('boom')")
    block = result.blocks[0]
    assert block.status == "failed" and block.failure == "the block raised RuntimeError"
    assert kinds(block)[0] == ("stdout", "before\n")
    assert block.error.ename == "RuntimeError" and block.error.evalue == "boom"


def test_syntax_error_fails():
    result = run("def f(:\n    pass")
    assert result.blocks[0].status == "failed"
    assert "SyntaxError" in result.blocks[0].error.traceback


def test_block_timeout_keeps_output_so_far():
    result = run("import time\nprint('started', flush=True)\ntime.sleep(60)", "print('next')",
                 b0={"timeout": 1.0})
    block = result.blocks[0]
    assert block.failure.split("\n")[0] == "timed out after 1 s (the block's time limit, :timeout: 1)"
    assert kinds(block) == [("stdout", "started\n")]
    assert result.blocks[1].status == "not-run"


def test_page_budget():
    result = run("import time\ntime.sleep(0.3)", "time.sleep(60)",
                 settings=DocSettings(budget=1.0))
    assert result.blocks[0].status == "ran"
    assert result.blocks[1].failure.split("\n")[0] == "timed out after 1 s (the document's time budget)"


@pytest.mark.parametrize(("source", "expected"), [
    ("import os\nos._exit(3)", "the interpreter exited with status 3"),
    ("import ctypes\nctypes.string_at(0)", "the interpreter crashed (SIGSEGV)"),
    ("import os, signal\nos.kill(os.getpid(), signal.SIGKILL)", "the interpreter crashed (SIGKILL)"),
])
def test_crashed_interpreter(source, expected):
    result = run("print('fine')", source)
    assert result.blocks[0].status == "ran"
    assert result.blocks[1].status == "failed"
    assert result.blocks[1].failure.startswith(expected)


def test_segfault_leaves_a_python_traceback():
    result = run("import ctypes\nctypes.string_at(0)")
    stderr = dict(kinds(result.blocks[0])).get("stderr", "")
    assert "Segmentation fault" in stderr


def test_skipped_blocks_do_not_run():
    result = run("raise SystemExit", "print('runs')", b0={"skip": True})
    assert [b.status for b in result.blocks] == ["skipped", "ran"]


def test_input_reads_end_of_file():
    result = run("input()", b0={"raises": "EOFError"})
    assert result.blocks[0].status == "expected-error"


def test_page_environment_variables_and_environment():
    result = run("import os\nprint(os.environ['PAGE_VAR'], os.environ.get('JAX_NUM_CPU_DEVICES'))",
                 settings=DocSettings(env=(("PAGE_VAR", "set"),), host_devices=3))
    assert kinds(result.blocks[0]) == [("stdout", "set 3\n")]
    assert result.environment.jax is None  # the page never imported JAX
    assert result.environment.cpu_count and result.environment.date


@pytest.mark.skipif(len(os.sched_getaffinity(0)) < 2, reason="needs two usable cores")
def test_pinned_interpreter_sees_only_its_cores():
    """``verified_worker_cores``: the page's interpreter (and what it starts) is narrowed to
    the cores it was given, and the engine's variable does not leak into the page."""
    core = max(os.sched_getaffinity(0))
    blocks = (Block(index=0, line=1, source=(
        "import os, subprocess, sys\n"
        "print(sorted(os.sched_getaffinity(0)), 'VERIFIED_CPU_AFFINITY' in os.environ)\n"
        "print(subprocess.run([sys.executable, '-c', 'import os; print(len(os.sched_getaffinity(0)))'],"
        " capture_output=True, text=True).stdout, end='')")),)
    job = DocJob("page", "page.md", DocSettings(), blocks, key="k")
    pinned = run_document(job, default_timeout=30, extra_env={}, cores=(core,))
    assert kinds(pinned.blocks[0]) == [("stdout", f"[{core}] False\n1\n")]
    assert pinned.environment.cores == 1
    free = run_document(job, default_timeout=30, extra_env={})
    assert free.environment.cores == len(os.sched_getaffinity(0))


def test_interpreter_that_never_starts(monkeypatch):
    import verified.execute as execute

    monkeypatch.setattr(execute, "STARTUP_LIMIT", 0.001)
    result = run("print('never')", "print('never either')")
    assert result.blocks[0].failure == "the interpreter did not start within 0.001 s"
    assert result.blocks[1].status == "not-run"


def test_matplotlib_uses_the_project_directory_not_the_users():
    from verified.driver import matplotlib_dir

    result = run("import matplotlib\nprint(matplotlib.get_configdir())\n"
                 "print(matplotlib.get_cachedir())")
    configured = str(matplotlib_dir())
    assert kinds(result.blocks[0]) == [("stdout", f"{configured}\n{configured}\n")]
    assert not configured.startswith(os.path.expanduser("~/.cache"))


@pytest.mark.parametrize(("flags", "cpu", "expected"), [
    ("", {"sse4_2", "avx", "avx2"}, "AVX2"),
    ("--xla_cpu_max_isa=AVX", {"sse4_2", "avx", "avx2", "avx512f"}, "AVX"),
    ("--xla_force_host_platform_device_count=8 --xla_cpu_max_isa=avx2", {"sse4_2", "avx", "avx2",
                                                                         "avx512f"}, "AVX2"),
    ("--xla_cpu_max_isa=AVX512", {"sse4_2", "avx"}, "AVX"),  # a cap above the CPU: the CPU's
])
def test_the_recorded_instruction_set_is_the_cpus_capped_by_xla_flags(monkeypatch, flags, cpu,
                                                                    expected):
    from verified.worker import _instruction_set

    monkeypatch.setenv("XLA_FLAGS", flags)
    assert _instruction_set(cpu) == expected
