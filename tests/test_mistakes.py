"""A user's mistake is one line and a non-zero exit, never Sphinx's crash report."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys

import pytest

from conftest import ROOT, ROOTS
from verified.mistakes import UserMistake, page_mistakes, target_absent

PAGES = {"index", "part1/02-tracing", "part1/03-jit"}


@pytest.mark.parametrize(("given", "message"), [
    ("source/part1/02-tracing.md", "no page 'source/part1/02-tracing.md'; did you mean "
                                   "part1/02-tracing?"),
    ("./part1/03-jit.md", "no page './part1/03-jit.md'; did you mean part1/03-jit?"),
    ("part1/02-tracin", "no page 'part1/02-tracin'; did you mean part1/02-tracing?"),
    ("nothing/like/it", "no page 'nothing/like/it' (PAGES names pages as part1/02-tracing)"),
])
def test_a_wrong_page_name_says_which_page_is_meant(given, message):
    assert str(page_mistakes({given}, PAGES)) == message
    assert page_mistakes({"index"}, PAGES) is None


def test_a_missing_platform_is_one_line_without_jax_advice():
    why = ("JAX here sees no TPU (RuntimeError: Unable to initialize backend 'tpu': INTERNAL: "
           "no libtpu (set JAX_PLATFORMS='' to automatically choose an available backend))")
    assert str(target_absent("TPU v5e", why)) == (
        "no TPU v5e here: JAX here sees no TPU (RuntimeError: Unable to initialize backend "
        "'tpu': INTERNAL: no libtpu); run it on a TPU v5e machine with SYSTEM=1")


@pytest.mark.parametrize("builder", ["doctest", "record", "matrix"])
def test_every_builder_checks_the_pages_named(site, builder):
    copy = site("matrix", into="source")
    with pytest.raises(UserMistake, match=r"^no page 'source/index\.md'; did you mean index\?$"):
        copy.build(builder, fresh=True, confoverrides={"verified_pages": ["source/index.md"]})


@pytest.mark.parametrize("pages", [["index"], ["inde"]])
def test_pages_for_html_is_one_line_not_ignored(site, pages):
    """`make html PAGES=…` (a misspelt page too): said at once, nothing built."""
    copy = site("basic")
    with pytest.raises(UserMistake) as caught:
        copy.build("html", confoverrides={"verified_pages": pages})
    assert str(caught.value) == (
        "PAGES= limits `make doctest`, `make record`, `make portability` and the target runs; "
        "`make html` builds every page and runs only those whose code changed since their "
        "record: run it without PAGES")
    assert not (copy.path / "_build" / "html" / "index.html").exists()


def test_a_bad_configuration_value_is_one_line_naming_conf_py(tmp_path):
    """A wrong ``verified_*`` value is the user's to mend: one line, no crash report."""
    shutil.copytree(ROOTS / "test-basic", tmp_path / "site")
    with open(tmp_path / "site" / "conf.py", "a", encoding="utf-8") as conf:
        conf.write("verified_timeout = 0\n")
    done = subprocess.run(
        [sys.executable, "-m", "sphinx", "-b", "html", str(tmp_path / "site"),
         str(tmp_path / "out")], capture_output=True, text=True, cwd=tmp_path / "site",
        env={**os.environ, "PYTHONPATH": str(ROOT / "ext")})
    assert done.returncode == 1
    assert done.stderr.strip().splitlines() == [
        "site/conf.py: verified_timeout must be a positive number of seconds, got 0"]
    assert "sphinx-doc/sphinx" not in done.stdout + done.stderr


def test_the_command_line_shows_one_line_and_fails(tmp_path):
    """End to end: what `make doctest PAGES=source/part1/02-tracing.md` prints."""
    done = subprocess.run(
        [sys.executable, "-m", "sphinx", "-c", str(ROOT), "-b", "doctest", str(ROOT / "source"),
         str(tmp_path / "out"), "-d", str(tmp_path / "doctrees"),
         "-D", "verified_pages=source/part1/02-tracing.md",
         "-D", f"verified_cache_dir={tmp_path / 'cache'}",
         "-D", f"verified_report={tmp_path / 'report.json'}"],
        capture_output=True, text=True, cwd=ROOT, env={**os.environ, "PYTHONPATH": ""})
    assert done.returncode == 1
    assert done.stderr.strip().splitlines() == [
        "no page 'source/part1/02-tracing.md'; did you mean part1/02-tracing?"]
    assert "sphinx-doc/sphinx" not in done.stdout + done.stderr


def test_make_platform_system_names_what_its_python_lacks(tmp_path):
    """`make platform SYSTEM=1` with a Python that lacks the pinned requirements says which
    (the top-level ones first) and how to install them, instead of `No module named sphinx`;
    with one that has them it goes on."""
    from verified.system_python import NOT_IMPORTED, pins

    bare = tmp_path / "bare"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(bare)], check=True)
    done = subprocess.run(["make", "-s", "platform", "SYSTEM=1",
                           f"SYSTEM_PYTHON={bare}/bin/python"], cwd=ROOT, capture_output=True,
                          text=True, timeout=60)
    assert done.returncode != 0
    assert "No module named" not in done.stderr
    first = done.stderr.splitlines()[0]
    top = pins((ROOT / "requirements.in").read_text())
    built = [name for name in top if name not in NOT_IMPORTED]
    assert first.startswith(f"make platform SYSTEM=1: {bare}/bin/python lacks "
                            f"{len(built)} of the packages a platform build imports "
                            f"(jax=={top['jax']}, jaxlib=={top['jaxlib']}, "
                            f"sphinx=={top['sphinx']}, ")
    assert f"install them with `{bare}/bin/python -m pip install` and the pins of " \
           f"requirements.txt" in first
    ready = subprocess.run(["make", "-s", "system-python", f"SYSTEM_PYTHON={sys.executable}"],
                           cwd=ROOT, capture_output=True, text=True, timeout=60)
    assert ready.returncode == 0, ready.stderr


def test_make_platform_system_asks_only_for_what_a_platform_build_imports(tmp_path):
    """A TPU VM's Python without the test suite's packages (pytest, playwright, nbclient,
    ipykernel) may build; a Sphinx of another version too; a JAX of another version may not.
    The machine's packages are stood for by their metadata alone (no JAX is imported)."""
    from importlib import metadata

    from verified.system_python import imported, pins

    def python_with(versions: dict[str, str]) -> subprocess.CompletedProcess:
        site = tmp_path / "site"
        shutil.rmtree(site, ignore_errors=True)
        for name in imported(list(pins((ROOT / "requirements.in").read_text()))):
            if name in test_only:
                continue
            info = site / f"{name.replace('-', '_')}-0.dist-info"
            info.mkdir(parents=True)
            text = metadata.distribution(name).read_text("METADATA")
            if name in versions:
                text = re.sub(r"(?m)^Version: .*$", f"Version: {versions[name]}", text)
            (info / "METADATA").write_text(text)
        return subprocess.run([f"{bare}/bin/python", "ext/verified/system_python.py",
                               "requirements.txt"], cwd=ROOT, capture_output=True, text=True,
                              env={**os.environ, "PYTHONPATH": str(site)}, timeout=60)

    test_only = {"pytest", "playwright", "greenlet", "nbclient", "ipykernel", "debugpy"}
    bare = tmp_path / "bare"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(bare)], check=True)
    ready = python_with({"sphinx": "8.2.3"})
    assert (ready.returncode, ready.stderr) == (0, "")
    older = python_with({"jax": "0.4.38"})
    pinned = pins((ROOT / "requirements.in").read_text())["jax"]
    assert older.returncode == 1
    assert older.stderr.splitlines() == [
        f"make platform SYSTEM=1: {bare}/bin/python has jax 0.4.38 (pinned {pinned}); the "
        f"records are compared against the pinned JAX, and another version prints otherwise: "
        f"install the pinned jax and jaxlib"]
