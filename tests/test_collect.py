"""Collecting blocks from a page's source, and what its cache key depends on (no execution)."""

from __future__ import annotations

from textwrap import dedent

from verified.collect import collect, environment_identity, with_key

PAGE = dedent("""\
    ---
    execution:
      host_devices: 4
    ---

    # Title

    Some prose.

    ```{code-cell} ipython3
    x = 1
    ```

    ```{code-cell} python
    :tags: [hide-input, raises-exception]

    1 / 0
    ```

    ```{code-cell} python
    ---
    raises: jax.errors.TracerBoolConversionError
    predict: Will it raise?
    output: varies
    timeout: 5
    ---
    print(x)
    ```

    ```python
    not_a_cell = True
    ```
    """)


def key_of(text: str, identity: dict | None = None) -> str:
    found = collect("page", "page.md", frozenset({"floats"}), text=text)
    assert not found.problems, found.problems
    return with_key(found.job, identity or environment_identity({})).key


def test_blocks_lines_and_options():
    found = collect("page", "page.md", text=PAGE)
    assert found.problems == []
    job = found.job
    assert job.settings.host_devices == 4
    assert [b.line for b in job.blocks] == [10, 14, 20]
    assert [b.source for b in job.blocks] == ["x = 1", "1 / 0", "print(x)"]
    first, second, third = job.blocks
    assert first.raises is None and not first.tags
    assert second.tags == ("hide-input", "raises-exception") and second.raises == ""
    assert third.raises == "jax.errors.TracerBoolConversionError"
    assert third.predict == "Will it raise?" and third.varies and third.timeout == 5.0


def test_prose_edit_keeps_the_key():
    assert key_of(PAGE) == key_of(PAGE.replace("Some prose.", "Entirely different prose."))


def test_display_only_options_keep_the_key():
    edited = PAGE.replace("predict: Will it raise?", "predict: Something else?")
    edited = edited.replace(":tags: [hide-input, raises-exception]",
                            ":tags: [raises-exception, remove-output]")
    edited = edited.replace("output: varies\n", "")
    assert key_of(PAGE) == key_of(edited)


def test_code_edit_changes_the_key():
    assert key_of(PAGE) != key_of(PAGE.replace("x = 1", "x = 2"))


def test_execution_options_change_the_key():
    assert key_of(PAGE) != key_of(PAGE.replace("timeout: 5", "timeout: 6"))
    assert key_of(PAGE) != key_of(PAGE.replace(":tags: [hide-input, raises-exception]", ""))
    skipped = PAGE.replace("```{code-cell} ipython3\n", "```{code-cell} ipython3\n:tags: [skip-execution]\n")
    assert key_of(PAGE) != key_of(skipped)


def test_settings_change_the_key():
    assert key_of(PAGE) != key_of(PAGE.replace("host_devices: 4", "host_devices: 8"))


def test_environment_changes_the_key():
    identity = environment_identity({})
    for field, value in (("jax", "0.4.38"), ("jaxlib", "0.4.38"), ("python", "3.12.0"),
                         ("platform", "darwin-arm64"), ("worker", "other")):
        assert key_of(PAGE) != key_of(PAGE, {**identity, field: value}), field
    assert key_of(PAGE) != key_of(PAGE, environment_identity({"JAX_PLATFORMS": "cpu"}))


def test_the_capture_rules_are_part_of_the_worker(monkeypatch, tmp_path):
    """What a block's output is depends on capture_rules.py as much as on worker.py: an edit
    to either one runs the pages again instead of showing outputs captured by the old rules."""
    from verified import collect as collect_module

    before = environment_identity({})["worker"]
    edited = []
    for path in collect_module.WORKER_SOURCES:
        copy = tmp_path / path.name
        copy.write_bytes(path.read_bytes() + (b"# edited\n" if path.name ==
                                              "capture_rules.py" else b""))
        edited.append(copy)
    monkeypatch.setattr(collect_module, "WORKER_SOURCES", tuple(edited))
    assert environment_identity({})["worker"] != before


def test_invalid_cells_are_problems_not_blocks():
    text = dedent("""\
        ```{code-cell} python
        :tags: [raises-exeption]

        1 / 0
        ```

        ```{code-cell} python
        :normalize: floats nosuch

        1
        ```

        :::{note}
        ```{code-cell} python
        print("nested")
        ```
        :::

        ```{code-cell} python
        ok = True
        ```
        """)
    found = collect("page", "page.md", frozenset({"floats"}), text=text)
    assert [b.source for b in found.job.blocks] == ["ok = True"]
    assert [(p.line, p.subtype, p.reported) for p in found.problems] == [
        (2, "option", True), (7, "option", True), (14, "nested", False)]


def test_front_matter_problem():
    found = collect("page", "page.md", text="---\nexecution:\n  colour: blue\n---\n# T\n")
    assert [(p.line, p.subtype) for p in found.problems] == [(1, "front-matter")]
    assert "unknown execution setting(s) colour" in found.problems[0].message


def test_cells_shown_as_text_in_code_fences_are_not_cells():
    text = "````md\n```{code-cell} python\nprint('an example')\n```\n````\n"
    found = collect("page", "page.md", text=text)
    assert found.problems == [] and found.job.blocks == ()


def test_options_must_read_as_yaml_for_jupytext():
    text = "```{code-cell} python\n:predict: Does f(x: int) trace?\n\nf(1)\n```\n"
    found = collect("page", "page.md", text=text)
    assert found.job.blocks == ()
    assert [(p.line, p.subtype, p.reported) for p in found.problems] == [(2, "option", False)]
    assert found.problems[0].message.endswith("reserves): mapping values are not allowed here")
    backtick = collect("page", "page.md", text=text.replace("Does f(x: int)", "`f`"))
    assert backtick.problems[0].message.endswith(
        ": found character '`' that cannot start any token")
    quoted = text.replace("Does f(x: int) trace?", "'Does f(x: int) trace?'")
    found = collect("page", "page.md", text=quoted)
    assert found.problems == [] and found.job.blocks[0].predict == "Does f(x: int) trace?"


def test_notebook_metadata_is_not_part_of_the_key(tmp_path):
    """MyST-NB keeps any cell metadata key; a Colab id changes nothing that runs."""
    page = tmp_path / "page.md"
    page.write_text("# P\n\n```{code-cell} ipython3\n:id: abc\n:outputId: 12\n\nprint(1)\n```\n")
    found = collect("page", page)
    assert found.problems == []
    page.write_text("# P\n\n```{code-cell} ipython3\nprint(1)\n```\n")
    assert with_key(collect("page", page).job, {}).key == with_key(found.job, {}).key


def test_a_misspelt_raises_name_is_found_before_the_page_runs():
    """A plain name close to a built-in exception or to a class the page defines, and equal
    to neither, stops the page with "did you mean"; a plain library error's name is left to
    the run (only importing the library could judge it). A dotted name is judged from its
    module's source, unless no such module is here."""
    text = dedent("""\
        ```{code-cell} python
        class WeirdError(Exception):
            pass
        ```

        ```{code-cell} python
        :raises: TypeEror

        len(1)
        ```

        ```{code-cell} python
        :raises: WierdError

        raise WeirdError()
        ```

        ```{code-cell} python
        :raises: TracerBoolConversionError

        pass
        ```

        ```{code-cell} python
        :raises: JaxRuntimeError

        pass
        ```

        ```{code-cell} python
        :raises: json.JSONDecodeEror

        pass
        ```

        ```{code-cell} python
        :raises: jax.errors.JaxRuntimeError

        pass
        ```

        ```{code-cell} python
        :raises: nosuchpackage.SomeError

        pass
        ```
        """)
    found = collect("page", "page.md", frozenset(), text=text)
    assert [(p.line, p.message, p.subtype) for p in found.problems] == [
        (6, ":raises: TypeEror is no exception this page or Python defines; did you mean "
            "TypeError?", "option"),
        (12, ":raises: WierdError is no exception this page or Python defines; did you mean "
             "WeirdError?", "option"),
        (30, ":raises: json.JSONDecodeEror: json defines no JSONDecodeEror; did you mean "
             "json.JSONDecodeError?", "option"),
    ]


def test_collect_notes_each_block_s_section_and_first_code_line(tmp_path):
    """Where each block is in the text comes from the one reading of the page: the Errors
    page names its section and a syntax error is located from its first line of code."""
    page = tmp_path / "page.md"
    page.write_text(dedent("""\
        Above any heading.

        ```{code-cell} python
        a = 1
        ```

        ## Shapes of `x`

        ```{code-cell} python
        :tags: [raises-exception]


        b = (
        ```

        ```text
        # not a heading: inside a fence
        ```

        ```{code-cell} python
        c = 3
        ```
        """))
    found = collect("page", page)
    assert [block.line for block in found.job.blocks] == [3, 9, 20]
    assert found.sections == ("", "Shapes of x", "Shapes of x")
    assert found.code_lines == (4, 13, 21)


def test_a_section_title_is_its_text_without_markup():
    """How a chapter note names a section: as the heading reads, once, from the page's text."""
    from verified.collect import plain_title

    assert plain_title("The {func}`jax.jit` cache, `x` and ``a`b``") == (
        "The jax.jit cache, x and a`b")
    assert plain_title("*Why* **this** ***matters***") == "Why this matters"
    assert plain_title("snake_case_name, _it_ and __bold__") == "snake_case_name, it and bold"
    assert plain_title("See [the docs](https://example.org) now") == "See the docs now"
    assert plain_title(r"A \*literal\* star, \\ and \_x\_") == r"A *literal* star, \ and _x_"
    assert plain_title("On {py:func}`jax.numpy.__init__` and *x*") == "On jax.numpy.__init__ and x"
