"""Render: turn a block and its typed result into docutils nodes.

No execution and no I/O happens here: the scheduler hands over a ``DocResult`` and the
record (if any), and this module only builds nodes. Text goes into literal blocks and
text nodes, so the writer escapes it (a snippet that prints ``<script>`` shows it).
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from docutils import nodes

from .model import (
    FAILED,
    NOT_RUN,
    SKIPPED,
    Block,
    BlockResult,
    Environment,
    Output,
)
from .glue_lines import without_glue
from .record import Comparison, RecordedBlock, comparable_text

API_NOTE_CATEGORIES = ("DeprecationWarning", "FutureWarning", "PendingDeprecationWarning")


class reveal(nodes.General, nodes.Element):
    """Content hidden until the reader asks: ``<details>`` in HTML, plain elsewhere."""


def visit_reveal_html(self, node: reveal) -> None:
    classes = " ".join(["cell-reveal", *node["classes"]])
    self.body.append(f'<details class="{classes}">'
                     f'<summary>{self.encode(node["summary"])}</summary>')


def depart_reveal_html(self, node: reveal) -> None:
    self.body.append("</details>")


def visit_reveal_plain(self, node: reveal) -> None:
    pass


def depart_reveal_plain(self, node: reveal) -> None:
    pass


@dataclass
class Verification:
    """How a live block stands against the verified record (for the caption)."""

    comparison: Comparison
    recorded: RecordedBlock | None
    recorded_environment: Environment | None
    # A block that runs on a verified platform alone: where and when it ran (the caption).
    caption: str = ""


def describe_environment(env: Environment) -> str:
    parts = []
    if env.jax:
        parts.append(f"jax {env.jax}")
        if env.jaxlib and env.jaxlib != env.jax:
            parts.append(f"jaxlib {env.jaxlib}")
        elif env.jaxlib:
            parts[-1] = f"jax {env.jax} (jaxlib {env.jaxlib})"
    else:
        parts.append(f"Python {env.python}")
    if env.backend:
        parts.append(env.backend)
    if env.device_count is not None:
        parts.append(f"{env.device_count} device{'s' if env.device_count != 1 else ''}")
    return " · ".join(parts)


def caption_text(live: Environment, verification: Verification) -> str:
    """The provenance line under an output."""
    if verification.caption:
        return verification.caption
    verdict = verification.comparison.verdict
    recorded_env = verification.recorded_environment
    if verdict == "match" and recorded_env:
        machine = recorded_env.machine()
        return (f"{describe_environment(recorded_env)} · verified {recorded_env.date}"
                + (f" on {machine}" if machine else ""))
    if verdict == "unchecked" and recorded_env:
        return (f"{describe_environment(live)} · ran {live.date} · varies from run to run "
                f"(verified to run on jax {recorded_env.jax or '?'}, {recorded_env.date})")
    if verdict == "differs" and recorded_env:
        return (f"{describe_environment(live)} · ran {live.date} · differs from the output "
                f"verified on jax {recorded_env.jax or '?'} ({recorded_env.date})")
    return f"{describe_environment(live)} · ran {live.date} · not yet in the verified record"


_RAISED_NOTHING = re.compile(r"^expected (?P<name>.+), but the block raised nothing$")
_RAISED_OTHER = re.compile(r"^expected (?P<name>.+), but the block raised (?P<other>\S+)$")


def in_readers_words(failure: str) -> str:
    """Why a block failed on another target, as a reader reads it under the block's output:
    the worker's wording ("expected KeyError, but the block raised nothing") stays in the
    build's messages and the records."""
    match = _RAISED_NOTHING.match(failure)
    if match:
        return f"it runs without the error shown here ({_short(match['name'])})"
    match = _RAISED_OTHER.match(failure)
    if match:
        return f"it raises {match['other']}, not the {_short(match['name'])} shown here"
    return failure


def _short(name: str) -> str:
    """An exception's name without its module (``jax.errors.JaxRuntimeError``)."""
    return name.rsplit(".", 1)[-1] or name


def glue_mark(count: int) -> str:
    """Under code shown without its glue lines: what the reader does not see, and where."""
    lines = f"{count} lines" if count != 1 else "1 line"
    verb = "copy" if count != 1 else "copies"
    return f"+ {lines} in the notebook that {verb} values from this block into the text"


def _literal(text: str, classes: list[str], language: str = "none") -> nodes.literal_block:
    block = nodes.literal_block(text, text, classes=classes)
    block["language"] = language
    return block


def output_nodes(outputs: list[Output], hide_stderr: bool) -> list[nodes.Node]:
    rendered: list[nodes.Node] = []
    for output in outputs:
        if output.kind == "glue" or (output.kind == "stderr" and hide_stderr):
            continue  # a glued value shows where prose inserts it
        image = output.data.get("image/png")
        if image and not image.startswith("sha256:"):
            rendered.append(nodes.image(uri=f"data:image/png;base64,{image}",
                                        alt=output.text or "figure", classes=["cell-figure"]))
        elif output.text:
            rendered.append(_literal(output.text.rstrip("\n"), ["cell-output", output.kind]))
    return rendered


def _warning_nodes(result: BlockResult) -> list[nodes.Node]:
    rendered = []
    for warning in result.warnings:
        box = nodes.container(classes=["cell-warning"])
        text = f"{warning.category}: {warning.message}"
        box += nodes.paragraph(text, text)
        rendered.append(box)
    return rendered


def _api_notes(result: BlockResult) -> list[str]:
    return [f"API note: {w.category}: {w.message.splitlines()[0] if w.message else ''}"
            for w in result.warnings if w.category in API_NOTE_CATEGORIES]


def render_block(block: Block, result: BlockResult, live_env: Environment,
                 verification: Verification,
                 prompt: nodes.paragraph | None = None,
                 target_notes: list[nodes.Node] | None = None) -> nodes.container:
    """The whole cell: input, outputs, warnings, caption; tags decide what shows.
    ``prompt`` is the predict prompt as parsed by the directive (inline markup kept);
    ``target_notes`` are the verdicts on the other targets (verdict.py), under the caption.
    An exercise's solution, code and output, is folded whole."""
    cell = _render_cell(block, result, live_env, verification, prompt, target_notes)
    if "exercise-solution" not in block.tags or not cell.children:
        return cell
    solution = nodes.container(classes=["cell", f"cell-{result.status}", "exercise-solution"])
    solution += folded("Show solution", "exercise-solution", *cell.children)
    return solution


def _render_cell(block: Block, result: BlockResult, live_env: Environment,
                 verification: Verification,
                 prompt: nodes.paragraph | None,
                 target_notes: list[nodes.Node] | None = None) -> nodes.container:
    tags = set(block.tags)
    cell = nodes.container(classes=["cell", f"cell-{result.status}"])
    if "remove-cell" in tags:
        return cell

    if "remove-input" not in tags:
        shown, glued = without_glue(block.source)
        code_box = nodes.container(classes=["cell-input"])
        if shown.strip():
            code_box += _literal(shown, ["cell-code"], language="python")
        if glued:
            note = glue_mark(glued)
            code_box += nodes.paragraph(note, note, classes=["cell-glue-mark"])
        cell += folded("Show code", "hide-input", code_box) if "hide-input" in tags else code_box

    if result.status == SKIPPED and "exercise-starter" in tags:
        note = "Starter: write your code here; the check after the solution tests it."
        cell += nodes.paragraph(note, note, classes=["cell-caption", "exercise-starter"])
        return cell
    if result.status == SKIPPED and block.platform:
        note = verification.caption or f"Runs on {block.platform} only."
        cell += nodes.paragraph(note, note, classes=["cell-caption", "cell-elsewhere"])
        cell.extend(target_notes or [])
        return cell
    if result.status == SKIPPED:
        note = "Not executed (skip-execution)."
        cell += nodes.paragraph(note, note, classes=["cell-caption"])
        return cell
    if result.status == NOT_RUN:
        note = "Not run: an earlier block of this page failed."
        cell += nodes.paragraph(note, note, classes=["cell-caption", "cell-not-run"])
        return cell
    if "remove-output" in tags:
        cell.extend(target_notes or [])
        return cell

    body = nodes.container(classes=["cell-output-area"])
    for child in output_nodes(result.outputs, "remove-stderr" in tags):
        body += child
    for child in _warning_nodes(result):
        body += child
    if result.status == FAILED:
        text = f"This block failed: {result.failure}"
        body += nodes.paragraph(text, text, classes=["cell-failure"])
    differing = _differing_processes(result)
    if not body.children and not differing:
        cell.extend(target_notes or [])
        return cell

    caption = nodes.paragraph(classes=["cell-caption"])
    text = caption_text(live_env, verification)
    if result.others:
        count = len(result.others) + 1
        text += (f" · process 0 of {count} shown" if differing
                 else f" · all {count} processes printed the same")
    caption += nodes.Text(text)
    for note in _api_notes(result):
        caption += nodes.inline(note, note, classes=["cell-api-note"])
    body += caption
    for other in differing:
        shown = output_nodes(other.outputs, "remove-stderr" in tags)
        if other.failure:
            note = f"Process {other.process} failed: {other.failure}"
            shown.append(nodes.paragraph(note, note, classes=["cell-failure"]))
        if not shown:
            note = f"Process {other.process} printed nothing."
            shown.append(nodes.paragraph(note, note, classes=["cell-caption"]))
        body += folded(f"Show process {other.process}'s output", "cell-process", *shown)
    if verification.comparison.verdict == "differs" and verification.recorded:
        body += folded("Show the verified output", "cell-verified",
                        *output_nodes(verification.recorded.outputs, "remove-stderr" in tags))
    body.extend(target_notes or [])

    if block.predict is not None:
        if prompt is None:
            prompt = nodes.paragraph(block.predict, block.predict)
        prompt["classes"].append("cell-predict-prompt")
        cell += prompt
        cell += folded("Reveal the output", "predict", body)
    elif "hide-output" in tags:
        cell += folded("Show output", "hide-output", body)
    else:
        cell += body
    return cell


def _differing_processes(result: BlockResult) -> list:
    """The further processes of a multi-process page whose output differs from process 0's."""
    mine = comparable_text("", result.outputs, result.warnings)
    return [other for other in result.others
            if comparable_text("", other.outputs, other.warnings) != mine or other.failure]


def folded(summary: str, kind: str, *content: nodes.Node) -> reveal:
    folded = reveal(summary=summary, classes=[kind])
    folded.extend(content)
    return folded


REPORT_LINES = 40  # of a failed block's captured stream, in the build's error


def _last_lines(text: str) -> str:
    lines = text.split("\n")
    if len(lines) <= REPORT_LINES:
        return text
    return "\n".join([f"[{len(lines) - REPORT_LINES} earlier lines are on the page]",
                      *lines[-REPORT_LINES:]])


def failure_report(block: Block, result: BlockResult, where: str = "") -> str:
    """The text of the located build error for a failed block (``where``: " on tpu-v5e"
    for a block that runs on a platform alone, from that platform's record)."""
    lines = [f"code-cell failed{where}: {result.failure or 'it raised'}"]
    for output in result.outputs:
        if output.kind == "error":
            lines.append(output.text)
    captured = [o for o in result.outputs if o.kind in ("stdout", "stderr") and o.text]
    for output in captured:
        lines.append(f"--- captured {output.kind} ---\n{_last_lines(output.text.rstrip())}")
    for other in result.others:  # a multi-process page: what each further process did
        shown = [o for o in other.outputs if o.kind in ("error", "stdout", "stderr") and o.text]
        for output in shown:
            lines.append(f"--- process {other.process}: {output.kind} ---\n"
                         f"{_last_lines(output.text.rstrip())}")
    return "\n".join(lines)
