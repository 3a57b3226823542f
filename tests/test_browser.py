"""The built site in a real browser: Playwright driving Debian's headless Chromium.

Builds the site as `make html` does: `make test` runs this after `make portability` has
verified the record, so every page is shown from the record and nothing runs again. Then it
checks progress, reveal-on-predict, copy buttons and the no-JavaScript reading,
from file:// and from a local server. Saves a screenshot of the landing page under _build/.
"""

from __future__ import annotations

import functools
import http.server
import json
import os
import subprocess
import sys
import threading
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
HTML = ROOT / "_build" / "html"
SCREENSHOTS = ROOT / "_build" / "screenshots"
CHROMIUM = os.environ.get("CHROMIUM", "/usr/bin/chromium")
CHROMIUM_ARGS = ["--no-sandbox", "--disable-gpu", "--disable-background-networking",
                 "--disable-component-update", "--disable-sync", "--no-first-run"]

if not Path(CHROMIUM).exists():
    if os.environ.get("CI"):
        raise RuntimeError(f"{CHROMIUM} is missing: .ci/run installs Debian's chromium")
    pytest.skip("Debian's chromium is not installed (.ci/run installs it)",
                allow_module_level=True)

from playwright.sync_api import expect, sync_playwright  # noqa: E402

pytestmark = pytest.mark.jax


@pytest.fixture(scope="module")
def site() -> Path:
    """The real site, built exactly as `make html` builds it."""
    command = [sys.executable, "-m", "sphinx", "-c", ".", "-W", "--keep-going", "-j", "auto",
               "-q", "-b", "html", "source", str(HTML), "-d", str(ROOT / "_build" / "doctrees")]
    completed = subprocess.run(command, cwd=ROOT, capture_output=True, text=True)
    assert completed.returncode == 0, completed.stdout + completed.stderr
    return HTML


@pytest.fixture(scope="module")
def browser():
    with sync_playwright() as playwright:
        chromium = playwright.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS)
        yield chromium
        chromium.close()


@pytest.fixture
def page(browser):
    """A fresh profile (empty localStorage) that records console errors."""
    context = browser.new_context(viewport={"width": 1280, "height": 900})
    tab = context.new_page()
    tab.console_errors = []
    tab.on("console", lambda m: tab.console_errors.append(m.text) if m.type == "error" else None)
    tab.on("pageerror", lambda e: tab.console_errors.append(str(e)))
    yield tab
    context.close()


@pytest.fixture(scope="module")
def server(site):
    class QuietHandler(http.server.SimpleHTTPRequestHandler):
        def log_message(self, *args):
            pass

    handler = functools.partial(QuietHandler, directory=str(site))
    httpd = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    thread = threading.Thread(target=httpd.serve_forever, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{httpd.server_address[1]}"
    httpd.shutdown()


def test_the_site_is_shown_from_the_verified_record(site):
    """The committed record is of exactly what the pages run: the site build ran no block."""
    report = json.loads((ROOT / "_build" / "execution-report.json").read_text())
    assert report["out_of_date_with_record"] == {}, "run `make record`"
    ran = sorted({row["docname"] for row in report["blocks"]
                  if row["status"] in ("ran", "expected-error")})
    assert ran == []


def test_the_chapter_line_says_how_many_blocks_lack_devices_on_the_chip(site):
    """10 asks for eight devices and the chip has one: the line at the top of the page counts
    the blocks that fail there for that reason, as many as their own captions say so."""
    import html
    import re

    page = html.unescape(re.sub(r"<[^>]+>", "", (site / "part2" / "10-sharding.html").read_text()))
    lacking = page.count("needs 8 devices (TPU v5e here has 1)")
    assert lacking > 0, "no block of 10 says it needs more devices than the chip has"
    note = re.search(r"On TPU v5e, \d+ blocks? of this page did not run, [^\n]*", page)
    assert note and note.group(0).endswith(
        f" {lacking} block{'s' if lacking > 1 else ''} fail{'' if lacking > 1 else 's'} there "
        "for want of devices: the page asks for 8, and TPU v5e here has 1."), note


def chapter_count(site: Path) -> int:
    return len(list((site / "_downloads" / "chapters").rglob("*.ipynb")))


def test_progress_is_kept_across_reloads_and_can_be_reset(site, page):
    total = chapter_count(site)
    assert total == 12
    landing = (site / "index.html").as_uri()
    page.goto(landing)
    expect(page.locator(".course-progress-summary .course-progress-text")).to_have_text(
        f"your progress 0/{total} chapters")
    expect(page.locator(".course-progress-sidebar")).to_have_text(f"your progress 0/{total} chapters")

    page.goto((site / "part1" / "01-arrays.html").as_uri())
    toggle = page.locator(".course-progress-control button")
    expect(toggle).to_have_text("Mark this chapter complete")
    toggle.click()
    expect(toggle).to_have_text("Chapter complete \u2713 (undo)")
    page.reload()
    expect(page.locator(".course-progress-control button")).to_have_text(
        "Chapter complete \u2713 (undo)")

    page.goto(landing)
    expect(page.locator(".course-progress-summary .course-progress-text")).to_have_text(
        f"your progress 1/{total} chapters")
    expect(page.locator('.course-chapter-card[data-chapter="part1/01-arrays"]')).to_have_class(
        "sd-card sd-sphinx-override sd-w-100 sd-shadow-sm sd-card-hover course-chapter-card course-done")
    expect(page.locator('.course-chapter-card[data-chapter="part1/02-tracing"]')).not_to_have_class(
        "course-done")
    assert page.locator("nav.bd-docs-nav a.reference.course-done").count() == 1

    SCREENSHOTS.mkdir(parents=True, exist_ok=True)
    page.screenshot(path=str(SCREENSHOTS / "landing.png"), full_page=True)
    assert (SCREENSHOTS / "landing.png").stat().st_size > 10_000

    page.locator(".course-progress-reset").click()
    expect(page.locator(".course-progress-summary .course-progress-text")).to_have_text(
        f"your progress 0/{total} chapters")
    assert page.locator(".course-done").count() == 0
    assert page.console_errors == []


def test_undo_on_the_chapter_page(site, page):
    page.goto((site / "part2" / "10-sharding.html").as_uri())
    toggle = page.locator(".course-progress-control button")
    toggle.click()
    toggle.click()
    expect(toggle).to_have_text("Mark this chapter complete")
    page.goto((site / "index.html").as_uri())
    expect(page.locator(".course-progress-summary .course-progress-text")).to_contain_text("0/")
    assert page.console_errors == []


def test_progress_works_from_a_server(server, page):
    page.goto(f"{server}/part1/03-jit.html")
    page.locator(".course-progress-control button").click()
    page.goto(f"{server}/index.html")
    expect(page.locator(".course-progress-summary .course-progress-text")).to_contain_text(
        "your progress 1/")
    assert page.console_errors == [], page.console_errors


def test_predict_output_is_hidden_until_revealed(site, page):
    page.goto((site / "authoring.html").as_uri())
    reveal = page.locator("details.cell-reveal.predict").first
    output = reveal.locator(".cell-output-area pre").first
    expect(output).to_be_hidden()
    reveal.locator("summary").click()
    expect(output).to_be_visible()
    assert page.console_errors == []


def test_copy_button_copies_code_without_outputs(server, browser):
    context = browser.new_context(permissions=["clipboard-read", "clipboard-write"])
    tab = context.new_page()
    tab.goto(f"{server}/index.html")
    cell = tab.locator(".cell").first
    assert cell.locator(".cell-output-area button.copybtn").count() == 0
    cell.locator(".cell-input").hover()
    cell.locator(".cell-input button.copybtn").click()
    copied = tab.evaluate("navigator.clipboard.readText()")
    code = cell.locator(".cell-input pre").inner_text()
    assert copied.strip() == code.strip()
    assert copied.startswith("import jax") and "lambda" not in copied and "Array(" not in copied
    context.close()


def test_pages_read_well_without_javascript(site, browser):
    context = browser.new_context(java_script_enabled=False)
    tab = context.new_page()
    tab.goto((site / "index.html").as_uri())
    expect(tab.locator(".course-progress-summary")).to_be_hidden()
    assert "your progress" not in tab.locator("body").inner_text()
    expect(tab.locator(".course-chapter-card").first).to_be_visible()
    tab.goto((site / "part1" / "01-arrays.html").as_uri())
    expect(tab.locator(".course-progress-control")).to_be_hidden()
    assert "Mark this chapter complete" not in tab.locator("body").inner_text()
    context.close()
