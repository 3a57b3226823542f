"""Collect: read a document's source (not its doctree) into a ``DocJob``.

This runs before Sphinx reads anything, so that execution can happen first and in
parallel. It uses MyST's own Markdown parser and the directive's own option parser, so
what is collected here is exactly what the directive will see later.
"""

from __future__ import annotations

import ast
import builtins
import functools
import hashlib
import importlib.util
import json
import os
import platform
import re
import sys
from dataclasses import dataclass, field
from importlib import metadata
from pathlib import Path

from docutils.parsers.rst import DirectiveError
from markdown_it.token import Token
from myst_parser.config.main import MdParserConfig, TopmatterReadError, read_topmatter
from myst_parser.parsers.directives import MarkupError, parse_directive_text
from myst_parser.parsers.mdit import create_md_parser
from markdown_it.renderer import RendererHTML
import yaml

from .config import parse_doc_settings, usable_cores
from .directive import LANGUAGES, CodeCellDirective
from .locate import body_line
from .model import Block, DocJob, DocSettings

# What runs a page: the worker, the rules it captures a block's output by, and its guard.
WORKER_SOURCES = tuple(Path(__file__).with_name(name) for name in ("worker.py",
                                                                    "capture_rules.py",
                                                                    "reap.py"))


@dataclass(frozen=True)
class Problem:
    """Something that stops a page from running. ``reported`` is True when MyST itself
    reports it (with its location) while reading the page; the others are reported by the
    renderer."""

    line: int
    message: str
    subtype: str
    reported: bool = False


@dataclass
class Collected:
    """A document's job, plus anything that stops it from running, and where each block is
    in the text (read here once, not again by each page that reports on blocks)."""

    job: DocJob
    problems: list[Problem] = field(default_factory=list)
    sections: tuple[str, ...] = ()  # each block's section title ("" above the first heading)
    code_lines: tuple[int, ...] = ()  # each block's first line of code in the file
    uses_generated: bool = False  # the page shows a generated page's directive (GENERATED)


_PARSER = None


def _parser():
    global _PARSER
    if _PARSER is None:
        _PARSER = create_md_parser(MdParserConfig(enable_extensions={"colon_fence"}), RendererHTML)
    return _PARSER


def _code_cell_fences(tokens: list[Token]):
    for token in tokens:
        if token.type != "fence" or token.map is None:
            continue
        info = token.info.strip()
        if info.startswith("{code-cell}"):
            yield token, info[len("{code-cell}"):].strip()


def _nested_cell_lines(tokens: list[Token], offset: int):
    """Lines of code-cells inside other directives' bodies (plain code fences are text)."""
    for token in tokens:
        info = token.info.strip()
        if (token.type in ("fence", "colon_fence") and token.map is not None
                and info.startswith("{") and not info.startswith("{code-cell}")):
            body_offset = offset + token.map[0] + 1
            inner = _parser().parse(token.content)
            for nested, _ in _code_cell_fences(inner):
                yield body_offset + nested.map[0] + 1
            yield from _nested_cell_lines(inner, body_offset)


def collect(docname: str, path: str | Path, known_normalizers: frozenset[str] = frozenset(),
            text: str | None = None, platforms: frozenset[str] = frozenset()) -> Collected:
    """Parses ``path`` into a DocJob (its key is filled in by ``with_key``). ``platforms``
    are the verified platforms a block may be marked to run on alone."""
    path = Path(path)
    if text is None:
        text = path.read_text(encoding="utf-8")
    problems: list[Problem] = []
    try:
        settings = parse_doc_settings(read_topmatter(text))
    except (TopmatterReadError, ValueError) as err:
        problems.append(Problem(1, f"front matter: {err}", "front-matter"))
        settings = DocSettings()

    blocks = []
    for token, first_line in _code_cell_fences(_parser().parse(text)):
        line = token.map[0] + 1
        try:
            parsed = parse_directive_text(CodeCellDirective, first_line, token.content, line=line)
        except (MarkupError, DirectiveError) as err:
            problems.append(Problem(line, f"invalid code-cell: {err}", "option", reported=True))
            continue
        if parsed.warnings:
            problems.extend(Problem(w.lineno or line, f"invalid code-cell: {w.msg}", "option",
                                    reported=True) for w in parsed.warnings)
            continue
        as_yaml = parse_directive_text(CodeCellDirective, first_line, token.content, line=line,
                                       validate_options=False)
        if as_yaml.warnings:
            problems.append(Problem(
                as_yaml.warnings[0].lineno or line,
                "code-cell options must also read as YAML, as jupytext and MyST-NB read them "
                f"(quote a value that contains ': ' or starts with a sign YAML reserves)"
                f"{_yaml_problem(token.content)}", "option"))
            continue
        if parsed.arguments and parsed.arguments[0] not in LANGUAGES:
            problems.append(Problem(line, "code-cell language is not Python", "option",
                                    reported=True))
            continue
        unknown = set(parsed.options.get("normalize", ())) - known_normalizers
        if unknown:
            problems.append(Problem(line, f"unknown normaliser(s) {', '.join(sorted(unknown))}",
                                    "option", reported=True))
            continue
        only_on = parsed.options.get("platform")
        if only_on is not None and only_on not in platforms:
            known = ", ".join(sorted(platforms)) or "none"
            problems.append(Problem(line, f"unknown platform {only_on!r} "
                                    f"(verified_platforms names: {known})", "option"))
            continue
        blocks.append(_block(len(blocks), line, "\n".join(parsed.body), parsed.options,
                             settings))
    problems.extend(exercise_problems(blocks))
    problems.extend(raises_problems(blocks))
    for line in _nested_cell_lines(_parser().parse(text), 0):
        problems.append(Problem(line, "code-cell must be at the top level of the page "
                                "(a cell nested in another directive cannot run)", "nested"))
    titles = section_titles(text)
    return Collected(DocJob(docname, str(path), settings, tuple(blocks)), problems,
                     tuple(titles.get(block.line, "") for block in blocks),
                     tuple(body_line(block, text) for block in blocks),
                     bool(_USES_GENERATED.search(text)))


# The directives whose pages are made from every page's records (pages.py, errors_page.py).
GENERATED = ("{versions-matrix}", "{platforms-matrix}", "{errors-index}")
# A page that uses one of them: its fence opens a line (prose that names one in backticks,
# as the authoring guide does, is not such a page).
_USES_GENERATED = re.compile(r"^ *(?:`{3,}|:{3,}) *(?:" + "|".join(map(re.escape, GENERATED))
                             + ")", re.MULTILINE)


_HEADING = re.compile(r"^(#{1,6})\s+(.*?)\s*$")
_FENCE = re.compile(r"^(`{3,}|~{3,})")


def section_titles(text: str) -> dict[int, str]:
    """For each line of a MyST page, the title of the section it is in (code fences skipped)."""
    titles, current, fence = {}, "", ""
    for number, line in enumerate(text.splitlines(), 1):
        opening = _FENCE.match(line)
        if fence:
            if line.strip() == fence:
                fence = ""
        elif opening:
            fence = opening.group(1)
        elif _HEADING.match(line):
            current = plain_title(_HEADING.match(line).group(2))
        titles[number] = current
    return titles


_CODE = re.compile(r"((?:\{[^{}`]+\})?(`+)(.*?)\2)")  # a code span, or a role: {func}`x`
_LINK = re.compile(r"\[([^\]]*)\]\([^)]*\)")
_STARS = re.compile(r"(\*{1,3})(?=\S)(.+?)(?<=\S)\1")
_UNDERSCORES = re.compile(r"(?<!\w)(_{1,3})(?=\S)(.+?)(?<=\S)\1(?!\w)")
_ESCAPE = re.compile(r"\\([!-/:-@\[-`{-~])")
_ESCAPED = 0xE000  # escaped characters stand in the private use area while markup is read


def plain_title(heading: str) -> str:
    """A MyST heading's text as the page shows it: roles and code spans as their text,
    links as theirs, emphasis markers and backslash escapes gone."""
    pieces = _CODE.split(heading)
    plain = []
    for at in range(0, len(pieces), 4):  # text, then a code span's (whole, ticks, content)
        text = _ESCAPE.sub(lambda m: chr(_ESCAPED + ord(m.group(1))), pieces[at])
        for markup in (_LINK, _STARS, _UNDERSCORES):
            text = markup.sub(lambda m: m.group(m.lastindex), text)
        plain.append(re.sub("[\ue000-\ue07f]", lambda m: chr(ord(m.group()) - _ESCAPED),
                            text))
        if at + 3 < len(pieces):
            plain.append(pieces[at + 3].strip() if pieces[at + 2] != "`" else pieces[at + 3])
    return "".join(plain)


EXERCISE_ROLES = ("exercise-starter", "exercise-solution", "exercise-check")
_EXPECTED_NEXT = {"exercise-starter": "exercise-solution", "exercise-solution": "exercise-check"}


def _yaml_problem(content: str) -> str:
    """What YAML says of a block's ``:key: value`` option lines (MyST says only "bad YAML")."""
    lines = []
    for text in content.splitlines():
        if not text.startswith(":"):
            break
        lines.append(text[1:].replace(":", ": ", 1) if ":" in text[1:] else text[1:])
    try:
        yaml.safe_load("\n".join(lines))
    except yaml.YAMLError as err:
        problem = getattr(err, "problem", None)
        return f": {problem}" if problem else ""
    return ""


def exercise_problems(blocks: list[Block]) -> list[Problem]:
    """An exercise is ``[starter] solution check``, adjacent: the check must test the
    solution that the notebook download removes, and a starter is the solution's stand-in."""
    problems = []
    roles = []
    for block in blocks:
        tagged = [tag for tag in block.tags if tag in EXERCISE_ROLES]
        if len(tagged) > 1:
            problems.append(Problem(block.line, f"a block has one exercise role, not "
                                    f"{', '.join(tagged)}", "exercise"))
        roles.append(tagged[0] if len(tagged) == 1 else None)
    for position, (block, role) in enumerate(zip(blocks, roles)):
        following = roles[position + 1] if position + 1 < len(roles) else None
        previous = roles[position - 1] if position else None
        if role in _EXPECTED_NEXT and following != _EXPECTED_NEXT[role]:
            problems.append(Problem(block.line, f"{role} must be followed directly by an "
                                    f"{_EXPECTED_NEXT[role]} block", "exercise"))
        if role == "exercise-check" and previous != "exercise-solution":
            problems.append(Problem(block.line, "exercise-check must follow directly an "
                                    "exercise-solution block (the check tests the solution)",
                                    "exercise"))
        if role == "exercise-solution" and (block.skip or block.raises is not None):
            problems.append(Problem(block.line, "an exercise-solution must run and must not "
                                    "raise (its check decides whether it is right)", "exercise"))
    return sorted(problems, key=lambda problem: problem.line)


BUILTIN_EXCEPTIONS = frozenset(name for name, value in vars(builtins).items()
                               if isinstance(value, type) and issubclass(value, BaseException))


def raises_problems(blocks: list[Block]) -> list[Problem]:
    """A misspelt ``:raises:`` name, found before the page runs, without running or
    importing anything. A plain name: a built-in exception or a class one of the page's
    blocks defines is known, and a name close to one of those that is neither is a slip; any
    other plain name (a library's error, such as ``TracerBoolConversionError``, which only
    the run can tell) is left to the run. A dotted name (``jax.errors.JaxRuntimeError``):
    the module's source is read, and a name it does not define is a slip; where the source
    cannot tell (no such module here, compiled, a star import, a module ``__getattr__``),
    the run decides."""
    known = set(BUILTIN_EXCEPTIONS)
    for block in blocks:
        try:
            tree = ast.parse(block.source)
        except SyntaxError:  # IPython syntax (%timeit), or the block's own error to show
            continue
        known.update(node.name for node in ast.walk(tree) if isinstance(node, ast.ClassDef))
    problems = []
    for block in blocks:
        name = block.raises
        if not name or name in known:
            continue
        module, _, attribute = name.rpartition(".")
        if module:
            defined = module_names(module)
            if defined is None or attribute in defined:
                continue
            close = _within_two_edits(attribute, defined)
            problems.append(Problem(block.line, f":raises: {name}: {module} defines no "
                                    f"{attribute}" + (f"; did you mean {module}.{close}?"
                                                      if close else ""), "option"))
            continue
        close = _within_two_edits(name, known)
        if close:
            problems.append(Problem(block.line, f":raises: {name} is no exception this page "
                                    f"or Python defines; did you mean {close}?", "option"))
    return problems


def _within_two_edits(name: str, known) -> str | None:
    """The known name a typo of at most two letters away would be (``TypeEror``), if any:
    a library's own error is usually further from any built-in (``JaxRuntimeError``)."""
    def edits(a: str, b: str) -> int:
        row = list(range(len(b) + 1))
        for i, letter in enumerate(a, 1):
            previous, row[0] = row[0], i
            for j, other in enumerate(b, 1):
                previous, row[j] = row[j], min(row[j] + 1, row[j - 1] + 1,
                                               previous + (letter != other))
        return row[-1]

    near = sorted((edits(name, candidate), candidate) for candidate in known
                  if abs(len(candidate) - len(name)) <= 2)
    return near[0][1] if near and near[0][0] <= 2 else None


@functools.lru_cache(maxsize=None)
def module_names(dotted: str) -> frozenset[str] | None:
    """The names a module binds at its top level, read from its source without importing
    it (nor its package); None where its source cannot tell."""
    parts = dotted.split(".")
    try:
        spec = importlib.util.find_spec(parts[0])  # finds; imports nothing
    except (ImportError, ValueError):
        return None
    if spec is None:
        return None
    if len(parts) == 1:
        path = Path(spec.origin or "")
    elif spec.submodule_search_locations:
        base = Path(list(spec.submodule_search_locations)[0], *parts[1:])
        path = base / "__init__.py" if base.is_dir() else base.with_suffix(".py")
    else:
        return None
    if path.suffix != ".py" or not path.is_file():
        return None
    try:
        tree = ast.parse(path.read_text(encoding="utf-8"))
    except (OSError, SyntaxError, UnicodeDecodeError):
        return None
    names: set[str] = set()
    pending = list(tree.body)
    while pending:  # the top level, and what an if or a try there binds
        node = pending.pop()
        if isinstance(node, (ast.If, ast.Try, ast.With)):
            pending.extend(ast.iter_child_nodes(node))
        elif isinstance(node, (ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)):
            if node.name == "__getattr__":
                return None  # names made on demand
            names.add(node.name)
        elif isinstance(node, (ast.Import, ast.ImportFrom)):
            for alias in node.names:
                if alias.name == "*":
                    return None
                names.add(alias.asname or alias.name.split(".")[0])
        elif isinstance(node, (ast.Assign, ast.AnnAssign, ast.AugAssign)):
            targets = node.targets if isinstance(node, ast.Assign) else [node.target]
            names.update(leaf.id for target in targets for leaf in ast.walk(target)
                         if isinstance(leaf, ast.Name))
        elif isinstance(node, ast.ExceptHandler):
            pending.extend(node.body)
    return frozenset(names)


def _block(index: int, line: int, source: str, options: dict,
           settings: DocSettings = DocSettings()) -> Block:
    tags = tuple(options.get("tags", ()))
    tolerance = options.get("tolerance", settings.tolerance)
    varies = options.get("output") == "varies"
    raises = options.get("raises")
    if raises is None and "raises-exception" in tags:
        raises = ""  # MyST-NB's untyped tag: any exception is expected
    return Block(
        index=index,
        line=line,
        source=source,
        raises=raises,
        timeout=options.get("timeout"),
        skip="skip-execution" in tags or "exercise-starter" in tags,
        tags=tags,
        varies=varies,
        predict=options.get("predict"),
        normalize=tuple(options.get("normalize", ())),
        tolerance=None if tolerance == "exact" else tolerance,
        exclusive="exclusive" in options or (settings.exclusive_varies and varies),
        stderr_failure=options.get("stderr") == "failure",
        platform=options.get("platform"),
    )


def _version(package: str) -> str | None:
    try:
        return metadata.version(package)
    except metadata.PackageNotFoundError:
        return None


def record_identity(extra_env: dict[str, str]) -> dict:
    """The part of the environment a verified record must share with this build to stand in
    for running the page here (``replay.py``): the Python minor version, the jax and jaxlib
    versions, the platform and the configured variables. Not the machine: the record's
    caption names the machine it ran on."""
    return {
        "python": f"{sys.version_info.major}.{sys.version_info.minor}",
        "jax": _version("jax"),
        "jaxlib": _version("jaxlib"),
        "platform": f"{sys.platform}-{platform.machine()}",
        "env": sorted(extra_env.items()),
    }


def environment_identity(extra_env: dict[str, str], worker_cores: int = 0) -> dict:
    """The parts of the executing environment that can change an output."""
    return {
        **record_identity(extra_env),
        "worker": hashlib.sha256(b"".join(path.read_bytes()
                                          for path in WORKER_SOURCES)).hexdigest(),
        "python": sys.version,
        # XLA:CPU rounds by instruction set and thread count: an ISA cap or fewer cores
        # (taskset, verified_worker_cores) is another output.
        "xla_flags": os.environ.get("XLA_FLAGS", ""),
        "cores": worker_cores or usable_cores(),
    }


def job_key(job: DocJob, identity: dict) -> str:
    """Hashes only what changes the output: code, execution options, document settings and
    the environment ``identity``; never prose or display options. The execution cache keys
    by the whole environment, the verified record by ``record_identity``."""
    payload = {
        "environment": identity,
        "settings": job.settings.as_dict(),
        "blocks": [block.execution_identity() for block in job.blocks],
    }
    return hashlib.sha256(json.dumps(payload, sort_keys=True).encode()).hexdigest()


def with_key(job: DocJob, identity: dict) -> DocJob:
    """The job with its execution-cache key."""
    return DocJob(job.docname, job.path, job.settings, job.blocks, key=job_key(job, identity))
