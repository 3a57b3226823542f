"""Building pages through Sphinx: rendering, located failures, the cache, the report, -j,
the record, doctest and drift captions. The test roots use plain Python, not JAX."""

from __future__ import annotations

import json
import re

import pytest

BASIC_BLOCKS = 12  # 10 in index.md, 2 in other.md


def error_heads(build) -> list[str]:
    """The first line of every located warning or error."""
    return build.warning_lines()


def report(build) -> list[dict]:
    return json.loads((build.outdir.parent / "execution-report.json").read_text())["blocks"]


def test_outputs_are_rendered_with_captions(site):
    build = site("basic").build()
    assert build.app.statuscode == 0 and error_heads(build) == []
    page = build.html()
    assert "hello from stdout" in page
    assert re.search(r'class="cell-output stderr[^"]*".*?to stderr', page, re.S)
    assert re.search(r'class="cell-output result[^"]*".*?<pre><span></span>42\n', page, re.S)
    assert '<p class="cell-caption">Python 3.11' in page
    assert "not yet in the verified record" in page
    assert build.html("other").count("cell-caption") == 2


def test_output_is_escaped(site):
    page = site("basic").build().html()
    assert "&lt;script&gt;alert(1)&lt;/script&gt; &amp; done" in page
    assert "<script>alert(1)" not in page


def test_warnings_are_separate_and_deprecations_become_api_notes(site):
    page = site("basic").build().html()
    assert '<div class="cell-warning docutils container">\n<p>DeprecationWarning: old spelling' in page
    assert "<p>UserWarning: a user warning</p>" in page
    assert '<span class="cell-api-note">API note: DeprecationWarning: old spelling</span>' in page
    assert "API note: UserWarning" not in page


def test_expected_errors_are_shown(site):
    build = site("basic").build()
    page = build.html()
    assert "ZeroDivisionError: division by zero" in page
    assert "ValueError: invalid literal for int() with base 10: 'not a number'" in page
    assert "NameError: name 'counter' is not defined" in build.html("other")


def test_predict_hides_the_output_behind_a_reveal(site):
    page = site("basic").build().html()
    match = re.search(r'<p class="cell-predict-prompt">What does <code class="docutils literal '
                      r'notranslate"><span class="pre">print\(counter</span> <span class="pre">\*'
                      r'</span> <span class="pre">2\)</span></code> print\?</p>\s*'
                      r'<details class="cell-reveal predict"><summary>Reveal the output</summary>'
                      r'(.*?)</details>', page, re.S)
    assert match and "84" in match.group(1)


def test_skipped_and_figure_blocks(site):
    page = site("basic").build().html()
    assert "Not executed (skip-execution)." in page
    assert "never runs" in page  # the code is shown
    assert re.search(r'<img alt="&lt;Figure size \d+x\d+&gt;" class="cell-figure" '
                     r'src="data:image/png;base64,iVBOR', page)


def test_failures_are_located_and_the_others_still_run(site):
    build = site("failures").build()
    assert build.app.statuscode == 1
    heads = [line for line in error_heads(build)]
    assert heads == [
        "budget.md:13: ERROR: code-cell failed: timed out after 1.5 s (the document's time budget)",
        "crash.md:3: ERROR: code-cell failed: the interpreter exited with status 3",
        # IPython's tokenizer finds it, at the line it names.
        "dedent.md:7: ERROR: code-cell failed: the block raised IndentationError",
        # A follow-on error comes after its cause, and says so.
        "glued.md:3: ERROR: code-cell failed: expected KeyError, but the block raised IndexError",
        "glued.md:14: ERROR: glue 'n_items': no value: the page stopped at its failed block (line 3, reported above) before any block glued it [verified.glue]",
        "noraise.md:3: ERROR: code-cell failed: expected ValueError, but the block raised nothing [verified.block-failed]",
        "segfault.md:3: ERROR: code-cell failed: the interpreter crashed (SIGSEGV)",
        # At the offending line, not at the fence (line 3).
        "syntax.md:7: ERROR: code-cell failed: the block raised SyntaxError",
        # IPython numbers a block's lines from its first that is not blank.
        "syntaxblank.md:8: ERROR: code-cell failed: the block raised SyntaxError",
        "timeout.md:7: ERROR: code-cell failed: timed out after 1 s (the block's time limit, :timeout: 1)",
        "undeclared.md:7: ERROR: code-cell failed: the block raised KeyError",
        "wrongtype.md:3: ERROR: code-cell failed: expected KeyError, but the block raised IndexError",
    ]
    assert "KeyError: &#39;missing&#39;" in build.warnings.replace("'", "&#39;")
    assert "--- captured stdout ---\npartial output" in build.warnings
    assert "--- captured stdout ---\nsleeping" in build.warnings
    # Where the limit found it: its stack, the page's frames with their code.
    assert ("where it was (most recent call first):\n  Cell [2], line 3, in <module>\n"
            "    time.sleep(30)") in build.warnings
    assert "this page still runs" in build.html("fine")
    undeclared = build.html("undeclared")
    assert "partial output" in undeclared and "This block failed: the block raised KeyError" in undeclared
    assert "Not run: an earlier block of this page failed." in undeclared
    assert "after the failure" in undeclared  # the code is shown, its output is not
    assert undeclared.count('class="cell-output stdout') == 2


def test_invalid_cells_are_located_and_fail_the_build(site):
    options = site("options")
    build = options.build()
    assert build.app.statuscode == 1
    assert error_heads(build) == [
        "badglue.md:3: WARNING: glue 'known' glued again: prose shows the last value [verified.glue]",
        # Each at its role's own line, not its paragraph's first.
        "badglue.md:10: ERROR: glue 'unknown': no block of this page glued that name (did you mean 'known'? glued: known) [verified.glue]",
        "badglue.md:11: ERROR: glue 'known': cannot format '2' as '.2q': Unknown format code 'q' for object of type 'int' [verified.glue]",
        "badlanguage.md:3: ERROR: code-cell language must be one of python, python3, ipython, ipython3, not 'rust' [verified.option]",
        "badnormalizer.md:3: ERROR: unknown normaliser(s) nosuch; known: addresses, floats, gloo, hex, ids, paths, xla-log [verified.option]",
        "badoutput.md:4: WARNING: 'code-cell': Invalid option value for 'output': sometimes: \"sometimes\" unknown; choose from \"exact\", or \"varies\" [myst.directive_option]",
        "badraises.md:4: WARNING: 'code-cell': Invalid option value for 'raises': not a name: expected an exception type name, got 'not a name' [myst.directive_option]",
        "badtag.md:4: WARNING: 'code-cell': Invalid option value for 'tags': [raises-exeption]: unknown tag(s) raises-exeption; known tags: exercise-check, exercise-solution, exercise-starter, hide-input, hide-output, raises-exception, remove-cell, remove-input, remove-output, remove-stderr, skip-execution [myst.directive_option]",
        "badtimeout.md:4: WARNING: 'code-cell': Invalid option value for 'timeout': -1: timeout must be positive, got '-1' [myst.directive_option]",
        "badtolerance.md:4: WARNING: 'code-cell': Invalid option value for 'tolerance': rtol=lots: rtol must be a number, got 'lots' [myst.directive_option]",
        "bigglue.md:9: ERROR: glue 'fact': cannot format '78865786736479050355236321393218506229513597768717…' as '.3e': int too large to convert to float [verified.glue]",
        "exclusivevalue.md:4: WARNING: 'code-cell': Invalid option value for 'exclusive': false: takes no value, got 'false'; write the option alone to turn it on, leave it out to turn it off [myst.directive_option]",
        "frontmatter.md:1: ERROR: front matter: host_devices must be a positive integer, got 0 [verified.front-matter]",
        # Its block cannot run, which is the error; the glue it would have made is no other.
        "invalidglue.md:4: WARNING: 'code-cell': Invalid option value for 'exclusive': false: takes no value, got 'false'; write the option alone to turn it on, leave it out to turn it off [myst.directive_option]",
        "misspelt.md:4: WARNING: 'code-cell': Invalid option value for 'raise': ValueError: 'raise' is not an option of code-cell; did you mean 'raises'? [myst.directive_option]",
        "misspelt.md:10: WARNING: 'code-cell': Invalid option value for 'timout': 3: 'timout' is not an option of code-cell; did you mean 'timeout'? [myst.directive_option]",
        "nested.md:4: ERROR: code-cell must be at the top level of the page (a cell nested in another directive cannot run) [verified.nested]",
        "noblocksglue.md:3: ERROR: glue 'answer': this page has no code-cell to glue it [verified.glue]",
        "tagoption.md:4: WARNING: 'code-cell': Invalid option value for 'skip-execution': None: 'skip-execution' is a tag, not an option of code-cell; write :tags: [skip-execution] [myst.directive_option]",
        "unclosedtag.md:4: WARNING: 'code-cell': Invalid option value for 'tags': [hide-input: tags must be a YAML list of names, such as [hide-input, raises-exception]; '[hide-input' does not read as one (expected ',' or ']', but got '<stream end>') [myst.directive_option]",
    ]
    metadata = build.html("metadata")  # notebook metadata keys (Colab, RISE) are kept, ignored
    assert "colon form" in metadata and "yaml form" in metadata
    assert 'details class="cell-reveal hide-input"' in metadata
    good = build.html("good")
    assert "0xff" in good and 'details class="cell-reveal hide-input"' in good
    assert "frontmatter" not in build.status or "executed frontmatter" not in build.status
    # Built again unchanged, the pages whose glue is wrong are read again and say so again.
    again = options.build()
    assert [line for line in error_heads(again) if "[verified.glue]" in line] == [
        line for line in error_heads(build) if "[verified.glue]" in line]
    assert again.app.statuscode == 1


def test_warm_rebuild_executes_nothing(site):
    copy = site("basic")
    first = copy.build()
    assert "MdParserConfig" not in first.status  # myst-parser's configuration, on every build
    assert f"{BASIC_BLOCKS} blocks: 11 ran, 0 cached, 0 from the record, 0 did not run cleanly (1 skipped)" in first.status
    again = copy.build()
    assert "executing" not in again.status
    assert f"{BASIC_BLOCKS} blocks: 0 ran, 11 cached, 0 from the record, 0 did not run cleanly (1 skipped)" in again.status


def test_prose_and_display_edits_execute_nothing(site):
    copy = site("basic")
    copy.build()
    copy.edit("index.md", "Prose between blocks.", "Other prose between blocks.")
    copy.edit("other.md", "```{code-cell} ipython3\n", "```{code-cell} ipython3\n:tags: [hide-output]\n")
    build = copy.build()
    assert "reading sources... [ 50%] index" in build.status  # both pages were re-read …
    assert "executing" not in build.status  # … and nothing ran
    assert "Other prose between blocks." in build.html()
    assert 'details class="cell-reveal hide-output"' in build.html("other")


def test_code_edit_reexecutes_only_that_page(site):
    copy = site("basic")
    copy.build()
    copy.edit("other.md", "value = 7", "value = 8")
    build = copy.build()
    assert "executed other: 2 blocks" in build.status
    assert "executed index" not in build.status
    assert "<pre><span></span>48\n" in build.html("other")
    statuses = {(row["docname"], row["status"]) for row in report(build)}
    assert statuses == {("index", "cached"), ("index", "skipped"), ("other", "ran"),
                        ("other", "expected-error")}


def test_a_page_edited_during_the_build_is_reported_and_read_again(site, monkeypatch):
    """An edit that lands between the run of a page and Sphinx's reading of it must not leave a
    page with its blocks silently missing: the build says so, and the next one renders it."""
    from verified.state import BuildState

    copy = site("basic")
    copy.build()
    copy.edit("index.md", "Prose between blocks.", "Prose between blocks.\n\n(second thoughts)")
    collect = BuildState.collect

    def collect_then_edit(self, env, docname):
        found = collect(self, env, docname)
        if docname == "index" and "(second thoughts)" in (copy.path / "index.md").read_text():
            copy.edit("index.md", "Prose between blocks.\n\n(second thoughts)",
                      "Prose between blocks.\n\nA second\nparagraph, edited while the build ran.")
        return found

    monkeypatch.setattr(BuildState, "collect", collect_then_edit)
    during = copy.build()
    heads = error_heads(during)
    assert heads and {line.split(": ERROR: ")[1] for line in heads} == {
        "the page changed while the build ran; build again [verified.source-changed]"}
    assert all(line.startswith("index.md:") for line in heads)
    monkeypatch.setattr(BuildState, "collect", collect)
    after = copy.build()
    assert after.app.statuscode == 0 and error_heads(after) == []
    assert "edited while the build ran" in after.html() and "hello from stdout" in after.html()


def test_switching_back_to_earlier_code_executes_nothing(site):
    """The cache keeps a few results per page: another branch's code, then back."""
    copy = site("basic")
    copy.build()
    copy.edit("other.md", "value = 7", "value = 8")
    assert "executed other" in copy.build().status
    copy.edit("other.md", "value = 8", "value = 7")
    back = copy.build()
    assert "executing" not in back.status and "<pre><span></span>42\n" in back.html("other")


def test_a_changed_stylesheet_replaces_the_built_one(site):
    """After an update of the engine's stylesheet, a warm build copies it over the old one
    instead of warning (which -W turns into a failed build)."""
    from verified import STATIC

    copy = site("basic")
    first = copy.build()
    built = first.outdir / "_static" / "verified.css"
    built.write_text("/* the stylesheet of an older engine */", encoding="utf-8")
    again = copy.build()
    assert error_heads(again) == [] and "copy_overwrite" not in again.warnings
    assert built.read_text(encoding="utf-8") == (STATIC / "verified.css").read_text(encoding="utf-8")


def test_corrupt_cache_entry_is_rerun(site):
    copy = site("basic")
    copy.build()
    (entry,) = (copy.path / "_build" / ".execution-cache").glob("index.*.json")
    entry.write_text(entry.read_text()[:100])
    build = copy.build()
    assert "executed index: 10 blocks" in build.status
    assert "hello from stdout" in build.html()


def test_a_cache_that_cannot_be_written_is_a_warning_not_a_stop(site, tmp_path):
    blocked = tmp_path / "a-file"
    blocked.write_text("not a folder")
    build = site("basic").build(confoverrides={"verified_cache_dir": str(blocked / "cache")})
    assert "hello from stdout" in build.html()
    # Said once, with what to do, however many pages it could not keep.
    lines = [line for line in error_heads(build) if "[verified.cache]" in line]
    assert len(lines) == 1 and lines[0].split(":", 1)[0] in ("index.md", "other.md")
    assert lines[0].split(": ", 1)[1] == (
        f"WARNING: the execution cache cannot be written (Not a "
        f"directory: {blocked / 'cache'}), so the next build runs the pages this one ran again; "
        f"make the folder writable, remove it (`make clean`) or set verified_cache_dir to a "
        f"writable folder [verified.cache]")


def test_failed_pages_are_not_cached(site):
    copy = site("failures")
    copy.build()
    again = copy.build()
    assert "executed undeclared" in again.status and "executed crash" in again.status
    assert "executed fine" not in again.status
    assert again.app.statuscode == 1


def test_execution_report(site):
    build = site("basic").build()
    rows = report(build)
    assert len(rows) == BASIC_BLOCKS
    first = rows[0]
    assert (first["document"].endswith("index.md"), first["line"], first["status"]) == (True, 7, "ran")
    assert first["environment"]["python"].startswith("3.") and first["duration"] >= 0
    assert [r["status"] for r in rows if r["docname"] == "index"] == [
        "ran", "ran", "ran", "expected-error", "expected-error", "ran", "ran", "skipped",
        "ran", "ran"]


def _stable(html: str) -> str:
    """Page HTML without what legitimately changes between two runs (the varies block)."""
    return re.sub(r"\d+\.\d+", "N", html)


def test_parallel_read_gives_the_same_pages(site):
    serial = site("basic", into="serial").build(parallel=0)
    parallel = site("basic", into="parallel").build(parallel=2)
    for page in ("index", "other"):
        assert _stable(serial.html(page)) == _stable(parallel.html(page))
    assert parallel.app.statuscode == 0


def test_record_then_doctest_passes(site):
    copy = site("basic")
    recorded = copy.build("record", fresh=True)
    assert recorded.app.statuscode == 0
    assert (copy.path / "record" / "index.json").exists() and (copy.path / "record" / "other.json").exists()
    written = re.findall(r"^wrote (\S+) \((\d+) blocks; its captions now name this machine\)$",
                         recorded.status, re.M)
    assert sorted((path.rsplit("/", 2)[-2:], count) for path, count in written) == [
        (["record", "index.json"], "10"), (["record", "other.json"], "2")]
    checked = copy.build("doctest", fresh=True)
    assert checked.app.statuscode == 0
    output = (checked.outdir / "output.txt").read_text()
    # The skip-execution block is counted apart: nothing of it was compared.
    assert output.splitlines()[-1] == \
        f"{BASIC_BLOCKS - 1} passed, 0 failed, 1 skipped (skip-execution)"
    assert "index: 9 passed, 0 failed, 1 skipped (skip-execution)" in output


@pytest.mark.skipif(len(__import__("os").sched_getaffinity(0)) < 2, reason="needs two cores")
def test_one_core_per_worker_is_what_the_record_says(site):
    """The one-core portability profile: every page's interpreter ran on one core."""
    copy = site("basic")
    assert copy.build("record", fresh=True,
                      confoverrides={"verified_worker_cores": 1}).app.statuscode == 0
    for page in ("index", "other"):
        environment = json.loads((copy.path / "record" / f"{page}.json").read_text())["environment"]
        assert environment["cores"] == 1


def test_doctest_locates_failures_as_the_html_build_does(site):
    """A syntax error at its line; a block the failure left unrun says which block stopped
    the page, not that its output differs."""
    report = site("failures").build("doctest").status
    lines = [line.strip() for line in report.splitlines() if line.strip().startswith("FAILED")]
    where = {line.split(": ", 1)[0].rsplit("/", 1)[-1]: line.split(": ", 1)[1] for line in lines}
    assert where["syntaxblank.md:8"] == "did not run cleanly: the block raised SyntaxError"
    assert where["dedent.md:7"] == "did not run cleanly: the block raised IndentationError"
    assert where["undeclared.md:12"] == "not run: the block at line 7 failed first"


def test_doctest_counts_a_block_that_cannot_run(site):
    """A bad option stops its page: the doctest report names it, at its line, and the
    page's other blocks as not run, so the totals count them."""
    report = site("options").build("doctest").status
    lines = [line.strip() for line in report.splitlines() if line.strip().startswith("FAILED")]
    where = {line.split(": ", 1)[0].rsplit("/", 1)[-1]: line.split(": ", 1)[1] for line in lines}
    assert where["exclusivevalue.md:4"].startswith(
        "invalid code-cell: Invalid option value for 'exclusive': false: takes no value")
    assert where["frontmatter.md:1"] == (
        "front matter: host_devices must be a positive integer, got 0")
    assert where["frontmatter.md:8"] == "not run: the page cannot run (line 1)"
    assert "exclusivevalue: 0 passed, 1 failed" in report


def test_doctest_reports_a_mismatch_with_a_diff(site):
    copy = site("basic")
    copy.build("record", fresh=True)
    record = copy.path / "record" / "other.json"
    record.write_text(record.read_text().replace('"text": "42"', '"text": "41"'))
    checked = copy.build("doctest", fresh=True)
    assert checked.app.statuscode == 1
    output = (checked.outdir / "output.txt").read_text()
    assert output.splitlines()[-1] == \
        f"{BASIC_BLOCKS - 2} passed, 1 failed, 1 skipped (skip-execution)"
    assert "other.md:9: output differs from the record" in output
    assert "-41\n" in output and "+42\n" in output


def test_doctest_flags_unrecorded_blocks(site):
    copy = site("basic")
    copy.build("record", fresh=True)
    copy.edit("other.md", "value = 7", "value = 8")
    output = (copy.build("doctest", fresh=True).outdir / "output.txt").read_text()
    assert "other.md:9: new block, not in the verified record" in output


def test_after_a_failed_block_the_advice_is_what_works(site):
    """`make record` refuses a page that did not run cleanly: after a failed block the html
    build says to mend it first, where it is; a page that ran is still told to record."""
    copy = site("basic")
    copy.build("record", fresh=True)
    copy.edit("other.md", "value = 7", "value = 1 / 0")
    copy.edit("index.md", "hello from stdout", "hello again")
    status = copy.build().status
    assert ("blocks not in the record (index: 1, other: 1); run `make record PAGES=index`; "
            "mend the block that fails at ") in status
    assert re.search(r"at \S*other\.md:9 first \(its error is above\): `make record` writes a "
                     r"page only when it runs cleanly", status)
    assert "PAGES=index,other" not in status and "PAGES=other" not in status


def test_a_page_another_build_of_the_clone_runs_gets_a_notice(site, tmp_path):
    """Two builds in one clone (make html beside make doctest) that run the same page: the
    second says so; a mark left by a build that ended is taken over silently."""
    import os
    import subprocess
    import sys
    from types import SimpleNamespace

    from verified.schedule import claim, running_dir

    folder = tmp_path / "running"
    assert claim(folder, "part1/02-tracing") == (True, "")
    assert (folder / "part1--02-tracing").read_text().startswith(f"{os.getpid()} ")
    ended = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"],
                           capture_output=True, text=True).stdout.strip()
    (folder / "part1--02-tracing").write_text(f"{ended} sphinx-build -b doctest")
    assert claim(folder, "part1/02-tracing") == (True, "")
    (folder / "part1--02-tracing").write_text(f"{os.getppid()} sphinx-build -b doctest")
    assert claim(folder, "part1/02-tracing") == (False, (
        f"part1/02-tracing is being run by another build of this clone too (process "
        f"{os.getppid()}: sphinx-build -b doctest): both run it, each for its own output, and "
        f"it takes the machine twice as long"))

    copy = site("basic")
    mark = running_dir(SimpleNamespace(record_dir=copy.path / "record")) / "other"
    mark.parent.mkdir(parents=True, exist_ok=True)
    mark.write_text(f"{os.getppid()} sphinx-build -b doctest")
    try:
        status = copy.build().status
    finally:
        mark.unlink()
    assert "notice: other is being run by another build of this clone too" in status
    assert "notice: index" not in status
    assert not list(mark.parent.iterdir())  # this build's own marks are gone


def test_drift_caption_shows_the_verified_output(site):
    copy = site("basic")
    copy.build("record", fresh=True)
    record = copy.path / "record" / "other.json"
    data = json.loads(record.read_text())
    data["environment"].update(jax="0.4.38", date="2026-07-27")
    data["blocks"][1]["outputs"][0]["text"] = "41"
    record.write_text(json.dumps(data))
    page = copy.build().html("other")
    assert "differs from the output verified on jax 0.4.38 (2026-07-27)" in page
    verified = re.search(r'<details class="cell-reveal cell-verified"><summary>Show the verified '
                         r'output</summary>(.*?)</details>', page, re.S)
    assert verified and "<pre><span></span>41\n" in verified.group(1)
    assert "· verified 2026-07-27" in page  # the first block still matches its record


@pytest.mark.parametrize("page", ["index", "other"])
def test_verified_caption_after_recording(site, page):
    copy = site("basic")
    copy.build("record", fresh=True)
    html = copy.build().html(page)
    assert "not yet in the verified record" not in html
    assert re.search(r"· verified \d{4}-\d\d-\d\d", html)
