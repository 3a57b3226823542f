"""The ``{code-cell}`` directive: parses and validates, then leaves a placeholder node.

Nothing runs here. The scheduler has already executed the document (before Sphinx read
it); the renderer later swaps each placeholder for the block's result.

The syntax is MyST-NB's text-notebook ``code-cell``, so a page written for MyST-NB (and
jupytext) reads unchanged. Options beyond MyST-NB's are documented in the authoring guide.
"""

from __future__ import annotations

import keyword
import re

import yaml
from docutils import nodes
from docutils.parsers.rst import directives
from sphinx.util import logging
from sphinx.util.docutils import SphinxDirective

from .record import normalizer_names
from .tolerance import Tolerance, parse_tolerance

DEFAULT_PREDICT_PROMPT = "Predict the output, then reveal it."

LANGUAGES = ("python", "python3", "ipython", "ipython3")

# MyST-NB's cell tags that this extension honours.
EXECUTION_TAGS = frozenset({"raises-exception", "skip-execution"})
DISPLAY_TAGS = frozenset({
    "remove-input", "remove-output", "remove-cell", "hide-input", "hide-output", "remove-stderr",
})
# An exercise: the starter is shown and never run, the solution runs folded, the check runs
# after it; the notebook download keeps the starter and the check and drops the solution.
EXERCISE_TAGS = frozenset({"exercise-starter", "exercise-solution", "exercise-check"})
KNOWN_TAGS = EXECUTION_TAGS | DISPLAY_TAGS | EXERCISE_TAGS
OUTPUT_MODES = ("exact", "varies")
STDERR_MODES = ("failure",)  # ``:stderr: failure``: the block means the failure its stderr shows
logger = logging.getLogger(__name__)
_DOTTED_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*(\.[A-Za-z_][A-Za-z0-9_]*)*$")


class code_cell(nodes.General, nodes.Element):
    """Placeholder for one executable block; carries ``docname``, ``index`` and ``source``."""


def tags_option(argument: str | None) -> tuple[str, ...]:
    """``[a, b]`` (MyST-NB's YAML list) or ``a b``/``a, b``; every tag must be known."""
    text = (argument or "").strip()
    if text.startswith("["):
        try:
            parsed = yaml.safe_load(text)
        except yaml.YAMLError as err:
            problem = getattr(err, "problem", None) or "not YAML"
            raise ValueError(f"tags must be a YAML list of names, such as [hide-input, "
                             f"raises-exception]; {text!r} does not read as one "
                             f"({problem})") from None
        if not isinstance(parsed, list) or not all(isinstance(t, str) for t in parsed):
            raise ValueError(f"tags must be a list of names, not {text!r}")
        tags = [t.strip() for t in parsed]
    else:
        tags = [t for t in re.split(r"[\s,]+", text) if t]
    unknown = sorted(set(tags) - KNOWN_TAGS)
    if unknown:
        raise ValueError(
            f"unknown tag(s) {', '.join(unknown)}; known tags: {', '.join(sorted(KNOWN_TAGS))}")
    return tuple(tags)


def raises_option(argument: str | None) -> str:
    """An exception type name, e.g. ``TracerBoolConversionError`` or ``jax.errors.X``."""
    name = (argument or "").strip()
    if not _DOTTED_NAME.match(name) or any(keyword.iskeyword(p) for p in name.split(".")):
        raise ValueError(f"expected an exception type name, got {name!r}")
    return name


def output_option(argument: str | None) -> str:
    return directives.choice((argument or "").strip(), OUTPUT_MODES)


def stderr_option(argument: str | None) -> str:
    return directives.choice((argument or "").strip(), STDERR_MODES)


def timeout_option(argument: str | None) -> float:
    try:
        value = float(argument or "")
    except ValueError:
        raise ValueError(f"timeout must be a number of seconds, got {argument!r}") from None
    if not value > 0:
        raise ValueError(f"timeout must be positive, got {argument!r}")
    return value


def predict_option(argument: str | None) -> str:
    """The prompt shown above the hidden output; empty means the default prompt."""
    return (argument or "").strip()


def normalize_option(argument: str | None) -> tuple[str, ...]:
    # Names are checked against the configured normalisers when the block is collected.
    names = tuple(n for n in re.split(r"[\s,]+", (argument or "").strip()) if n)
    if not names:
        raise ValueError("give at least one normaliser name")
    return names


def platform_option(argument: str | None) -> str:
    """A verified platform's name (``verified_platforms``); checked when the block is
    collected."""
    name = (argument or "").strip()
    if not re.fullmatch(r"[a-z0-9][a-z0-9.-]*", name):
        raise ValueError(f"expected a verified platform's name, such as tpu-v5e, got {name!r}")
    return name


def flag_option(argument: str | None) -> None:
    """An option that is on where it is written and takes no value: ``:exclusive:``. A value
    (``:exclusive: false``) would be read as on; it is refused instead."""
    if argument and argument.strip():
        raise ValueError(f"takes no value, got {argument.strip()!r}; write the option alone "
                         f"to turn it on, leave it out to turn it off")
    return None


def tolerance_option(argument: str | None) -> Tolerance | str:
    """``rtol=1e-5``, ``atol=1e-8 rtol=1e-4``, ``rtol=0.01 integers``, or ``exact``
    (which turns off the page's default tolerance)."""
    return parse_tolerance(argument) or "exact"


# Cell metadata that notebooks carry and MyST-NB keeps (Colab, Jupyter, RISE, editors):
# never taken for a misspelt option, however close its name.
NOTEBOOK_METADATA_KEYS = frozenset({
    "id", "outputId", "colab", "executionInfo", "jupyter", "slideshow", "scrolled",
    "collapsed", "editable", "deletable", "name", "vscode", "pycharm", "papermill",
    "execution", "cellView", "trusted",
})


def edit_distance(a: str, b: str) -> int:
    """Levenshtein distance (insertions, deletions, substitutions)."""
    previous = list(range(len(b) + 1))
    for i, char_a in enumerate(a, 1):
        current = [i]
        for j, char_b in enumerate(b, 1):
            current.append(min(previous[j] + 1, current[j - 1] + 1,
                               previous[j - 1] + (char_a != char_b)))
        previous = current
    return previous[-1]


def _metadata(argument: str | None) -> str | None:
    """A key the engine does not own is cell metadata: kept, ignored (as MyST-NB does)."""
    return argument


class CellOptionSpec(dict):
    """The code-cell's own options; any other key is metadata, as in MyST-NB, unless it is
    one or two edits away from an own option (``raise``, ``timout``): then it is an error
    that names the option meant."""

    def __missing__(self, key: str):
        if key in KNOWN_TAGS:  # ``:skip-execution:``: a tag written as an option
            def tag(argument: str | None) -> None:
                raise ValueError(f"{key!r} is a tag, not an option of code-cell; write "
                                 f":tags: [{key}]")
            return tag
        meant = sorted(self, key=lambda option: edit_distance(key, option))
        if key not in NOTEBOOK_METADATA_KEYS and meant and edit_distance(key, meant[0]) <= 2:
            def misspelt(argument: str | None) -> None:
                raise ValueError(f"{key!r} is not an option of code-cell; "
                                 f"did you mean {meant[0]!r}?")
            return misspelt
        return _metadata


class CodeCellDirective(SphinxDirective):
    """An executable Python block whose real output is rendered beneath it."""

    required_arguments = 0
    optional_arguments = 1
    final_argument_whitespace = False
    has_content = True
    option_spec = CellOptionSpec({
        "tags": tags_option,
        "raises": raises_option,
        "output": output_option,
        "stderr": stderr_option,
        "predict": predict_option,
        "timeout": timeout_option,
        "normalize": normalize_option,
        "tolerance": tolerance_option,
        "exclusive": flag_option,
        "platform": platform_option,
    })

    def run(self) -> list[nodes.Node]:
        language = self.arguments[0] if self.arguments else "python"
        if language not in LANGUAGES:
            return self._invalid(
                f"code-cell language must be one of {', '.join(LANGUAGES)}, not {language!r}")
        unknown = set(self.options.get("normalize", ())) - normalizer_names(
            self.config.verified_normalizers)
        if unknown:
            known = ", ".join(sorted(normalizer_names(self.config.verified_normalizers)))
            return self._invalid(f"unknown normaliser(s) {', '.join(sorted(unknown))}; "
                                 f"known: {known}")
        node = code_cell()
        node["docname"] = self.env.docname
        node["source"] = "\n".join(self.content)
        node["fence_line"] = self.lineno
        self.set_source_info(node)
        if "predict" in self.options:
            text = self.options["predict"] or DEFAULT_PREDICT_PROMPT
            inline, messages = self.parse_inline(text, lineno=self.lineno)
            node += nodes.paragraph(text, "", *inline)
            node += messages
        return [node]

    def _invalid(self, message: str) -> list[nodes.Node]:
        logger.error(message, location=(self.env.docname, self.lineno), type="verified",
                     subtype="option")
        return []
