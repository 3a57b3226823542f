"""No failure hides: an exception raised while a value is shown (its repr, its HTML or PNG
repr, a figure's drawing), one raised at the interpreter's exit, one whose message cannot be
formatted, and a failure that a passing block's stderr reports. Plain Python, no JAX."""

from __future__ import annotations

import os

from verified.capture_rules import failure_sign


HIDDEN = [
    # At the interpreter's exit: the page's last block.
    "atexit.md:9: ERROR: code-cell failed: the page's interpreter raised ZeroDivisionError at its exit (in an exit handler), after its last block",
    # An exit handler's stderr that says something failed: the page's last block.
    "exitlog.md:3: WARNING: code-cell passed, but its stderr says something failed: 'jax.shutdown failed'; where the page means it, declare :stderr: failure [verified.stderr-failure]",
    # Drawing the figure called the page's own formatter, which raised.
    "figure.md:3: ERROR: code-cell failed: the block raised ZeroDivisionError",
    "png.md:3: ERROR: code-cell failed: the block raised ValueError",
    "repr.md:3: ERROR: code-cell failed: the block raised RuntimeError",
    "stderr.md:5: WARNING: code-cell passed, but its stderr says something failed: 'Traceback (most recent call last):'; where the page means it, declare :stderr: failure [verified.stderr-failure]",
    "stderr.md:16: WARNING: code-cell passed, but its stderr says something failed: 'E1205 21:24:11.635361   18843 common_pjrt_client.cc:1622] Execute failed: INVALID_ARGUMENT: donated twice'; where the page means it, declare :stderr: failure [verified.stderr-failure]",
]


def test_every_hidden_failure_is_located(site):
    display = site("display")
    build = display.build()
    assert build.app.statuscode == 1
    assert build.warning_lines() == HIDDEN
    # The build's log says it of the page too, where its blocks passed.
    log = build.status.replace(os.path.relpath(build.app.srcdir) + "/", "")
    said = {line.split(": ")[0].strip(): line.rsplit("s, ", 1)[-1]
            for line in log.splitlines() if line.strip().startswith("executed ")}
    assert said["executed stderr"] == "ok, but stderr says something failed (stderr.md:5, " \
                                      "stderr.md:16)"
    assert said["executed exitlog"] == "ok, but stderr says something failed (exitlog.md:3)"
    assert said["executed html"] == "ok"
    # Said again by the next build, from the cache, until the page is mended.
    assert display.build().warning_lines() == HIDDEN
    # Each error with its traceback, down to the page's own frame that raised.
    assert ("  Cell [1], line 5, in <module>\n    Bad()\n  Cell [1], line 3, in __repr__\n"
            "    raise RuntimeError(\"repr exploded\")\nRuntimeError: repr exploded"
            ) in build.warnings
    assert "in _repr_png_" in build.warnings
    assert "cell-output stdout" not in build.html("png")  # the block stopped there
    assert "ZeroDivisionError: division by zero" in build.html("figure")
    # Expected, the HTML repr's error is the block's: shown, and the build is clean of it.
    html = build.html("html")
    assert "in _repr_html_" in html and "KeyError: 'no such column'" in html
    assert "cell-output result" not in html  # the value, unformatted, shows nothing
    atexit = build.html("atexit")
    assert "the last block" in atexit and "in &lt;lambda&gt;" in atexit
    # Its own type, so that :raises: WeirdError matches, and a note for the message.
    weird = build.html("weird")
    assert "WeirdError: &lt;its message could not be formatted: its __str__ raised&gt;" in weird
    assert "ValueError" not in weird.split("cell-output")[-1]


def test_what_in_stderr_says_a_failure():
    assert failure_sign("fine\nTraceback (most recent call last):\n  x\n") == (
        "Traceback (most recent call last):")
    assert failure_sign("jax.pure_callback failed\n") == "jax.pure_callback failed"
    assert failure_sign("E1205 21:24:11.635361   18843 common_pjrt_client.cc:1622] "
                        "ExecutePrepareWithOomRetries failed: INVALID_ARGUMENT: x\n")
    # Words about failure in ordinary output, and a log line that is not an error, are not.
    assert failure_sign("the test failed as predicted\n") is None
    assert failure_sign("I1205 21:24:11.635361   18843 x.cc:1] retry failed once\n") is None
    assert failure_sign("  Traceback (most recent call last): quoted\n") is None


def test_the_notebook_check_takes_a_display_error_as_the_cell_s_error():
    """The chapter notebook's check shares the rule: what the page recorded as the block's
    error is the cell's error there too, and an unformattable message reads the same."""
    from IPython.core.interactiveshell import InteractiveShell

    from verified.model import Block
    from verified.selfcheck import Capture, live_result

    shell = InteractiveShell.instance()
    try:
        results = []
        for source in ("class Bad:\n    def _repr_html_(self):\n"
                       "        raise RuntimeError('html exploded')\nBad()",
                       "class WeirdError(Exception):\n    def __str__(self):\n"
                       "        raise ValueError\nraise WeirdError()"):
            capture = Capture(shell)
            capture.start()
            try:
                error = shell.run_cell(source).error_in_exec
            finally:
                capture.stop()
            block = Block(0, 1, source, raises=type(error).__name__ if error else None)
            live = live_result(block, capture, error)
            results.append((live.status, [(o.kind, o.text) for o in live.outputs]))
    finally:
        InteractiveShell.clear_instance()
    assert results == [
        ("expected-error", [("error", "RuntimeError: html exploded")]),
        ("expected-error", [("error", "WeirdError: <its message could not be formatted: its "
                                      "__str__ raised>")]),
    ]


def test_the_interpreter_s_end_is_reported_at_the_page_s_last_block():
    """An exit handler that ends the interpreter, or that logs a failure, is not lost; nor
    is what the handlers wrote to stderr before one ended it."""
    from verified.execute import run_document
    from verified.model import Block, DocJob, DocSettings

    def last_block(source: str):
        blocks = (Block(0, 1, source), Block(1, 11, "print('last')"))
        job = DocJob("page", "page.md", DocSettings(), blocks, key="k")
        return run_document(job, default_timeout=30.0, extra_env={}).blocks[-1]

    crashed = last_block("import atexit, os\natexit.register(os._exit, 3)")
    assert (crashed.status, crashed.failure) == (
        "failed", "the interpreter exited with status 3 while its exit handlers ran")
    crashed = last_block("import atexit, os, sys\n"
                         "atexit.register(os._exit, 3)\n"
                         "atexit.register(lambda: print('jax.bar failed', file=sys.stderr))")
    assert (crashed.status, crashed.outputs[-1].text) == (
        "failed", "At the interpreter's exit:\njax.bar failed\n")
    logged = last_block("import atexit, sys\n"
                        "atexit.register(lambda: print('jax.foo failed', file=sys.stderr))")
    assert logged.status == "ran"
    assert [(o.kind, o.text) for o in logged.outputs] == [
        ("stdout", "last\n"), ("stderr", "At the interpreter's exit:\njax.foo failed\n")]


def test_an_event_callback_s_error_is_the_block_s():
    """IPython prints what an event callback raised and goes on; here the block that
    registered it fails with it, and the cell's own error, where there is one, comes first."""
    from verified.execute import run_document
    from verified.model import Block, DocJob, DocSettings

    callback = ("def check(result):\n"
                "    raise ValueError('post_run_cell check failed')\n"
                "get_ipython().events.register('post_run_cell', check)\n")
    blocks = (Block(0, 1, callback), Block(1, 11, "print('next')"),
              Block(2, 21, "1 / 0", raises="ZeroDivisionError"))
    job = DocJob("page", "page.md", DocSettings(), blocks, key="k")
    results = run_document(job, default_timeout=30.0, extra_env={}, keep_going=True).blocks
    assert [(r.status, r.failure) for r in results] == [
        ("failed", "the block raised ValueError"), ("failed", "the block raised ValueError"),
        ("expected-error", None)]
    assert results[1].outputs[0].text == "next\n"
    assert results[1].outputs[-1].text.endswith(
        "in check\n    raise ValueError('post_run_cell check failed')\n"
        "ValueError: post_run_cell check failed")


def test_what_exit_handlers_printed_before_they_hung_is_shown(monkeypatch):
    """Handlers run last registered first: the one that logs, then the one that hangs."""
    from verified import execute
    from verified.model import Block, DocJob, DocSettings

    monkeypatch.setattr(execute, "EXIT_LIMIT", 1.0)
    blocks = (Block(0, 1, "import atexit, sys, time\n"
                          "atexit.register(time.sleep, 60)\n"
                          "atexit.register(lambda: print('jax.baz failed', file=sys.stderr));"),)
    job = DocJob("page", "page.md", DocSettings(), blocks, key="k")
    last = execute.run_document(job, default_timeout=30.0, extra_env={}).blocks[-1]
    assert last.status == "failed"
    assert last.failure.startswith("the page's exit handlers (atexit) did not end within 1 s")
    assert [(o.kind, o.text) for o in last.outputs] == [
        ("stderr", "At the interpreter's exit:\njax.baz failed\n")]
