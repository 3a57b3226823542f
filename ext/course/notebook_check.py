"""What a chapter notebook carries to check itself (``verified/selfcheck.py`` runs it).

Generated cells: a visible note that says what the next two are; a hidden helper that holds
the engine's own comparison modules, read from their files at build time (one comparison to
maintain), and the page's blocks and records, compressed; the set-up cell; and a last cell
with the totals. Nothing here runs in the kernel.
"""

from __future__ import annotations

import base64
import json
import zlib
from pathlib import Path
from typing import Any

import nbformat

import verified
from verified.model import FAILED, FAILED_BECAUSE, NOT_RUN_THERE, Block, DocSettings, Output
from verified.pages import Cause, PlatformsMatrix
from verified.record import Record, source_digest
from verified.selfcheck import MARK
from verified.target_record import TargetRecord
from verified.targets import PLATFORM, Target
from verified.verdict import Verdict

# The modules the kernel needs, in import order: the engine's comparison and the check.
# They import only the standard library, IPython and each other (a test holds them to it).
MODULES = ("tolerance", "capture_rules", "model", "align", "record", "selfcheck")
CPU_LABEL = "CPU"


def module_sources() -> list[tuple[str, str]]:
    folder = Path(verified.__file__).parent
    return [(name, (folder / f"{name}.py").read_text(encoding="utf-8")) for name in MODULES]


def _outputs(outputs: list[Output]) -> list[dict]:
    """Outputs as the check compares them: images by a marker (they compare as being one;
    a figure's pixels would make the notebook's payload several times larger)."""
    return [{"kind": o.kind, "text": o.text, "name": o.name,
             "data": {mime: "image" for mime in o.data if mime.startswith("image/")}}
            for o in outputs]


def _recorded(block) -> dict:
    return {"status": block.status, "outputs": _outputs(block.outputs),
            "warnings": [{"category": w.category, "message": w.message}
                         for w in block.warnings]}


def check_data(blocks: tuple[Block, ...], main: Record | None,
               targets: list[tuple[Target, TargetRecord | None]],
               normalizers: dict[str, tuple[tuple[str, str], ...]],
               causes: dict[int, str] | None = None) -> dict[str, Any]:
    """The page's blocks (what the comparison needs of each) and every record it has: the
    main (CPU) record, each older version's and each platform's, each block as that run
    verified it now (a block edited since, or after an edit, is left out: not yet verified)."""
    causes = causes or {}
    records = []
    if main is not None:
        records.append({"name": "cpu", "label": CPU_LABEL, "backend": "cpu", "device_kind": "",
                        "jax": main.environment.jax or "", "date": main.environment.date,
                        "blocks": {str(b.index): _recorded(recorded) for b in blocks
                                   if (recorded := main.block_for(b, blocks)) is not None}})
    elsewhere: dict[str, list[dict]] = {}
    for target, record in targets:
        if record is None:
            continue
        verified_blocks = {}
        for block in blocks:
            there = record.verified_for(block, blocks)
            if there is None or there.status == NOT_RUN_THERE:
                continue
            if block.platform == target.name:
                elsewhere[str(block.index)] = _outputs(there.outputs)
            verified_blocks[str(block.index)] = _recorded(there)
        platform = target.kind == PLATFORM
        records.append({"name": target.name, "label": target.label if platform else CPU_LABEL,
                        "backend": target.backend if platform else "cpu",
                        "device_kind": target.device_kind if platform else "",
                        "jax": record.environment.jax or "", "date": record.environment.date,
                        "blocks": verified_blocks,
                        "settings": {name: value for name, value in target.env
                                     if platform and name != "JAX_PLATFORMS"}})
    return {
        "blocks": [{"index": b.index, "line": b.line, "digest": source_digest(b.source),
                    "raises": b.raises, "skip": b.skip, "tags": list(b.tags),
                    "varies": b.varies, "normalize": list(b.normalize),
                    "tolerance": (None if b.tolerance is None else
                                  {"rtol": b.tolerance.rtol, "atol": b.tolerance.atol,
                                   "integers": b.tolerance.integers}),
                    "platform": b.platform,
                    "exercise": any(t.startswith("exercise-") for t in b.tags),
                    "cause": causes.get(b.index, "")} for b in blocks],
        "records": records,
        "elsewhere": elsewhere,
        "normalizers": {name: [list(rule) for rule in rules]
                        for name, rules in normalizers.items()},
        "platforms": {t.name: t.label for t, _ in targets if t.kind == PLATFORM},
    }


def raising_blocks(blocks: tuple[Block, ...], main: Record | None) -> frozenset[int]:
    """The blocks that raise, unasked, where the reader is expected to run the notebook: the
    course's own run (the pinned JAX on the CPU, the main record). A block that raises only on
    another platform or version is not tagged: its check line says so where it happens."""
    if main is None:
        return frozenset()
    return frozenset(b.index for b in blocks if (recorded := main.block_for(b, blocks))
                     is not None and recorded.status in (FAILED, FAILED_BECAUSE))


def explained_blocks(docname: str, verdicts: list[tuple[Block, Verdict]], causes: list[Cause],
                     where: str) -> dict[int, str]:
    """The cause (title, and where it is on the site) of each block that differs or fails on
    a platform, as the Platforms page groups it (``where``: that page's address, or "")."""
    explained: dict[int, str] = {}
    for block, item in verdicts:
        if item.kind not in PlatformsMatrix.EXPLAINED or block.index in explained:
            continue
        cause = next((c for c in causes if c.explains(docname, block, item)), None)
        if cause is not None:
            explained[block.index] = (f"{cause.title} ({where}#cause-{cause.key})" if where
                                      else f"{cause.title} (the Platforms page)")
    return explained


HELPER = '''\
{mark}: the notebook's own check (generated; run it first, it changes nothing else).
# It holds the course engine's comparison ({names}) and this page's records, so that every
# cell's output is compared with the record of the platform it runs on: as JSON, compressed
# (zlib, then base85), to keep the notebook one small file.


def _course_check_load(payload):
    import base64, json, linecache, sys, types, zlib

    sources, data = json.loads(zlib.decompress(base64.b85decode(payload)))
    if "course_check.selfcheck" in sys.modules:  # run again: the old check goes first
        sys.modules["course_check.selfcheck"].uninstall()
    package = types.ModuleType("course_check")
    package.__path__ = []
    sys.modules["course_check"] = package
    for name, source in sources:
        module = types.ModuleType(f"course_check.{{name}}")
        module.__package__ = "course_check"
        filename = module.__file__ = f"<course_check/{{name}}.py>"
        linecache.cache[filename] = (len(source), None, source.splitlines(True), filename)
        sys.modules[module.__name__] = module
        exec(compile(source, filename, "exec"), module.__dict__)
        setattr(package, name, module)
    package.selfcheck.install(data)


_course_check_load("{payload}")
del _course_check_load'''


def payload(data: dict[str, Any]) -> str:
    """The modules and the page's data as the helper cell carries them: one line of base85
    (no quote, no backslash: it sits in a string literal as it is)."""
    text = json.dumps([module_sources(), data], ensure_ascii=False, sort_keys=True)
    return base64.b85encode(zlib.compress(text.encode("utf-8"), 9)).decode("ascii")


def helper_cell(data: dict[str, Any]) -> nbformat.NotebookNode:
    cell = nbformat.v4.new_code_cell(HELPER.format(
        mark=MARK, names=", ".join(f"{name}.py" for name in MODULES), payload=payload(data)))
    cell.metadata["tags"] = ["generated-check", "hide-input"]
    cell.metadata["jupyter"] = {"source_hidden": True}
    return cell


NOTE = """\
**Before you run a cell.** The next two code cells are this notebook's own check, generated
with the course: the first holds the course's comparison code and this chapter's verified
outputs (compressed); the second sets what the chapter needs before JAX starts and says
which record your cells are compared with. Run both first, in a fresh kernel (Run All does).
After each cell a line `check: …` says whether its output is the recorded one; the last
cell counts them."""


def note_cell() -> nbformat.NotebookNode:
    """The visible note before the generated cells: what they are, and that they run first
    (a viewer that ignores ``source_hidden`` shows the helper's code after it)."""
    cell = nbformat.v4.new_markdown_cell(NOTE)
    cell.metadata["tags"] = ["generated-note"]
    return cell


SETUP = '''\
{mark}: set-up (generated). Run it first, in a fresh kernel.
# The page ran with these settings; they take effect only if set before JAX starts.{why}
# It then says which platform JAX found here and which record the cells are compared with.
PLATFORM = None  # None: the platform JAX picks here; "cpu": the host CPU{cpu_note}
import course_check.selfcheck

course_check.selfcheck.setup({variables}, host_devices={devices}, platform=PLATFORM)'''


def setup_cell(environment: dict[str, str], settings: DocSettings) -> nbformat.NotebookNode:
    """The set-up cell: the variables the engine sets for the page before JAX starts
    (``verified.driver.page_environment``), the reader's choice of platform, the check."""
    lines = "".join(f"\n    {name!r}: {value!r}," for name, value in sorted(environment.items()))
    why = ""
    if settings.host_devices:
        why = (f"\n# The page builds meshes of {settings.host_devices} devices: on a CPU, XLA "
               f"then makes {settings.host_devices} host devices\n# (XLA_FLAGS), as the course's "
               f"own run did.")
    cell = nbformat.v4.new_code_cell(SETUP.format(
        mark=MARK, why=why, variables="{" + lines + "\n}" if lines else "{}",
        devices=settings.host_devices,
        cpu_note=", as the course's CPU record was made"))
    cell.metadata["tags"] = ["generated-setup"]
    return cell


TOTALS = f'''\
{MARK}: totals (generated): every cell's verdict, counted.
import course_check.selfcheck

course_check.selfcheck.totals()'''


def totals_cell() -> nbformat.NotebookNode:
    cell = nbformat.v4.new_code_cell(TOTALS)
    cell.metadata["tags"] = ["generated-totals"]
    return cell

