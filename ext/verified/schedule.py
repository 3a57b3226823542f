"""Schedule: before Sphinx reads, key each page's blocks and run the pages that need it.

Pages run concurrently (one subprocess each, at most ``verified_jobs`` at once, longest
first by their last known time), and so do their blocks, except a block marked exclusive (it times something): it
runs with no other block running (``gate.py``). Pages marked ``exclusive`` run alone
afterwards. Results
are held in memory for the read phase (forked parallel readers inherit them) and stored
in the cache; the renderer then replaces each placeholder with its block's result.
"""

from __future__ import annotations

import hashlib
import json
import os
import queue
import weakref
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from dataclasses import asdict, dataclass, field
from pathlib import Path

from docutils import nodes
from sphinx.application import Sphinx
from sphinx.environment import BuildEnvironment
from sphinx.errors import ConfigError
from sphinx.util import logging

from . import config as config_module
from . import glue
from .cache import ExecutionCache
from .collect import Collected, collect, environment_identity, with_key
from .directive import code_cell
from .execute import run_document
from .gate import BlockGate
from .matrix import MatrixRecords, label_block, verdict_nodes
from .model import CACHED, FAILED, NOT_RUN, SKIPPED, BlockResult, DocResult
from .multiprocess import Slots
from .record import (Record, compare, normalizer_names, read_record, record_path,
                     recorded_duration)
from .render import Verification, failure_report, render_block

logger = logging.getLogger(__name__)

FRESH_BUILDERS = ("doctest", "record")


@dataclass
class BuildState:
    """What one build knows about execution; lives on the app for the build's duration."""

    config: config_module.ExecutionConfig
    cache: ExecutionCache
    identity: dict
    fresh: bool  # execute everything, read nothing from the cache
    collected: dict[str, Collected] = field(default_factory=dict)
    results: dict[str, DocResult] = field(default_factory=dict)
    executed: set[str] = field(default_factory=set)
    records: dict[str, Record | None] = field(default_factory=dict)
    cache_reads: dict[str, DocResult | None] = field(default_factory=dict)
    comparison_failed: bool = False  # set by the doctest builder
    matrix: MatrixRecords | None = None  # the other versions' records (captions)

    def cached(self, found: Collected) -> DocResult | None:
        """The cache entry for a page's current key, read (and checksummed) once per build."""
        docname = found.job.docname
        if docname not in self.cache_reads:
            self.cache_reads[docname] = self.cache.load(docname, found.job.key)
        return self.cache_reads[docname]

    def selected(self, docname: str) -> bool:
        """Whether a fresh build (doctest, record) executes this page."""
        return not (self.fresh and self.config.pages) or docname in self.config.pages

    def record_for(self, docname: str) -> Record | None:
        if docname not in self.records:
            self.records[docname] = read_record(self.config.record_dir, docname)
        return self.records[docname]


# One BuildState per Sphinx application, keyed by its Config object: the app, the
# environment and the builder all share that one object.
_STATES: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()


def state(owner) -> BuildState:
    """The build state of ``owner``: the app, or a builder (anything with ``.config``)."""
    return _STATES[owner.config]


def on_builder_inited(app: Sphinx) -> None:
    validated = config_module.validate(app)
    _STATES[app.config] = BuildState(
        config=validated,
        cache=ExecutionCache(validated.cache_dir),
        identity=environment_identity(validated.env, validated.worker_cores),
        fresh=app.builder.name in FRESH_BUILDERS,
        matrix=MatrixRecords(validated),
    )


def _collect(app: Sphinx, env: BuildEnvironment, docname: str) -> Collected | None:
    build = state(app)
    if docname not in build.collected:
        path = Path(env.doc2path(docname))
        if path.suffix != ".md":
            return None
        known = frozenset(normalizer_names(build.config.normalizers))
        found = collect(docname, path, known)
        found.job = with_key(found.job, build.identity)
        build.collected[docname] = found
    return build.collected[docname]


def _read_stamp(build: BuildState, found: Collected) -> tuple:
    """What a page's rendered doctree depends on besides its text: its execution key,
    its verified record and its matrix records (captions compare with them)."""
    path = record_path(build.config.record_dir, found.job.docname)
    digest = hashlib.sha256(path.read_bytes()).hexdigest() if path.exists() else None
    return found.job.key, digest, build.matrix.stamp(found.job.docname)


def on_env_get_outdated(app, env, added, changed, removed) -> list[str]:
    """Pages whose key or record changed (new JAX, edited code, re-recorded) or whose
    cached result is gone."""
    build = state(app)
    stamps = getattr(env, "verified_stamps", {})
    outdated = []
    for docname in sorted(env.found_docs - added - changed):
        found = _collect(app, env, docname)
        if found is None or not (found.job.blocks or found.problems):
            continue
        if (found.problems or stamps.get(docname) != _read_stamp(build, found)
                or build.cached(found) is None):
            outdated.append(docname)
    return outdated


def on_env_before_read_docs(app: Sphinx, env: BuildEnvironment, docnames: list[str]) -> None:
    build = state(app)
    if not hasattr(env, "verified_stamps"):
        env.verified_stamps = {}
    if getattr(app.builder, "runs_pages_itself", False):
        return  # the matrix builders run pages under other versions themselves (matrix.py)
    unknown = sorted(build.config.pages - env.found_docs)
    if unknown:
        raise ConfigError(f"verified_pages: no such page(s): {', '.join(unknown)}")
    to_run = []
    for docname in docnames:
        if not build.selected(docname):
            continue
        found = _collect(app, env, docname)
        if found is None or not found.job.blocks:
            continue
        env.verified_stamps[docname] = _read_stamp(build, found)
        if found.problems:
            continue  # reported, located, when the page is read
        cached = None if build.fresh else build.cached(found)
        if cached is not None:
            build.results[docname] = cached
        else:
            to_run.append(found.job)
    if to_run:
        _run_all(app, to_run)


def known_durations(config: config_module.ExecutionConfig, docnames) -> dict[str, float]:
    """Each page's last known execution time (wall, start-up included): from the last
    build's report, else from the page's verified record, so that a fresh clone, which has
    no report, is scheduled by time too."""
    durations: dict[str, float] = {}
    try:
        rows = json.loads(config.report_path.read_text(encoding="utf-8"))["pages"]
        durations.update((row["docname"], float(row["duration"])) for row in rows)
    except (OSError, ValueError, KeyError, TypeError):
        pass
    for docname in set(docnames) - set(durations):
        recorded = recorded_duration(config.record_dir, docname)
        if recorded is not None:
            durations[docname] = recorded
    return durations


def run_order(jobs: list, durations: dict[str, float]) -> list:
    """Pages of several processes first: each holds several cores, so at the start it waits
    for no running page and keeps none waiting. Then pages never timed (they may be long),
    then by last known time, longest first, so that the cores finish together."""
    return sorted(jobs, key=lambda job: (job.settings.processes <= 1,
                                         job.docname in durations,
                                         -durations.get(job.docname, 0.0), job.docname))


def scheduled(config: config_module.ExecutionConfig, jobs: list) -> tuple[list, list]:
    """The pages that share the cores, in run order, and the exclusive ones (run alone after)."""
    durations = known_durations(config, [job.docname for job in jobs])
    return (run_order([job for job in jobs if not job.settings.exclusive], durations),
            run_order([job for job in jobs if job.settings.exclusive], durations))


class CorePool:
    """Hands each running page ``per_worker`` cores that no other running page has
    (``verified_worker_cores``); with 0, every page may use every usable core."""

    def __init__(self, per_worker: int):
        self.per_worker = per_worker
        self.free: queue.Queue[tuple[int, ...]] = queue.Queue()
        if per_worker:
            usable = sorted(os.sched_getaffinity(0))
            for start in range(0, len(usable) - per_worker + 1, per_worker):
                self.free.put(tuple(usable[start:start + per_worker]))

    @contextmanager
    def take(self):
        if not self.per_worker:
            yield ()
            return
        pinned = self.free.get()
        try:
            yield pinned
        finally:
            self.free.put(pinned)


def run_pages(config: config_module.ExecutionConfig, jobs: list, run_one) -> list[DocResult]:
    """Runs ``run_one(job, gate, cores)`` for every page: the shared pages ``config.jobs``
    at a time in run order, their blocks through one gate, then the exclusive pages alone.
    A page of N cooperating processes holds N slots (cores) while it runs."""
    shared, exclusive = scheduled(config, jobs)
    gate = BlockGate()
    cores = CorePool(config.worker_cores)
    slots = Slots(config.jobs)

    def run(job):
        with slots.hold(job.settings.processes), cores.take() as pinned:
            return run_one(job, gate, pinned)

    with ThreadPoolExecutor(max_workers=config.jobs) as pool:
        results = list(pool.map(run, shared))
    return results + [run(job) for job in exclusive]


def _run_all(app: Sphinx, jobs: list) -> None:
    build = state(app)
    config = build.config
    logger.info(f"executing {len(jobs)} page(s) ({config.jobs} at a time)")

    def run(job, gate, pinned):
        result = run_document(job, default_timeout=config.timeout, extra_env=config.env,
                              gate=gate, cores=pinned)
        status = "failed" if result.failed else "ok"
        logger.info(f"  executed {job.docname}: {len(job.blocks)} blocks, "
                    f"{result.duration:.1f} s, {status}")
        return result

    results = run_pages(config, jobs, run)
    for result in results:
        build.results[result.docname] = result
        build.executed.add(result.docname)
        build.cache.store(result)


def on_doctree_read(app: Sphinx, doctree: nodes.document) -> None:
    """Swaps every ``code_cell`` placeholder for the rendered block (before Sphinx's own
    collectors see the page, so figures are found like any other image)."""
    build = state(app)
    docname = app.env.docname
    found = _collect(app, app.env, docname)
    for problem in (found.problems if found else ()):
        if not problem.reported:
            logger.error(problem.message, location=(docname, problem.line),
                         type="verified", subtype=problem.subtype)
    cells = list(doctree.findall(code_cell))
    by_line = {block.line: block for block in found.job.blocks} if found else {}
    result = build.results.get(docname)
    if result is not None:
        _warn_duplicate_glue(docname, found.job.blocks, result)
    glue.resolve(doctree, result if found and found.job.blocks else None)
    for node in cells:
        block = by_line.get(node["fence_line"])
        if result is None or block is None or block.source != node["source"]:
            # Not run: a problem with this page was reported above.
            node.replace_self([])
            continue
        block_result = result.blocks[block.index]
        if block_result.failed:
            logger.error(failure_report(block, block_result), location=node,
                         type="verified", subtype="block-failed")
        verification = _verify(build, docname, block, block_result)
        prompt = next(iter(node.findall(nodes.paragraph)), None)
        verdicts = build.matrix.verdicts(docname, block, found.job.blocks,
                                         verification.recorded)
        cell = render_block(block, block_result, result.environment, verification, prompt,
                            verdict_nodes(verdicts, set(block.tags)))
        label_block(app.env, docname, block, cell)
        node.replace_self(cell)


def _warn_duplicate_glue(docname: str, blocks, result: DocResult) -> None:
    seen: set[str] = set()
    for block in blocks:
        for output in result.blocks[block.index].outputs:
            if output.kind == "glue":
                if output.name in seen:
                    logger.warning(f"glue {output.name!r} glued again: prose shows the last value",
                                   location=(docname, block.line), type="verified",
                                   subtype="glue")
                seen.add(output.name)


def _verify(build: BuildState, docname: str, block, block_result: BlockResult) -> Verification:
    record = build.record_for(docname)
    recorded = record.block_for(block) if record else None
    comparison = compare(block, block_result, recorded, build.config.normalizers,
                         record.environment.jax if record else None)
    return Verification(comparison, recorded, record.environment if record else None)


def result_for(app: Sphinx, docname: str) -> DocResult | None:
    """This build's result for a page (executed now, or from the cache), if it has one."""
    build = state(app)
    if docname in build.results:
        return build.results[docname]
    found = build.collected.get(docname)
    return build.cached(found) if found and found.job.blocks else None


def block_statuses(app: Sphinx) -> list[dict]:
    """Every block of every page, with its status this build (for the report)."""
    build = state(app)
    rows = []
    for docname in sorted(build.collected):
        found = build.collected[docname]
        if (not found.job.blocks and not found.problems) or not build.selected(docname):
            continue
        result = build.results.get(docname)
        executed = docname in build.executed
        if result is None and not found.problems:
            result = build.cached(found)
        for problem in found.problems:
            rows.append({"document": _relative(found.job.path, app.srcdir), "docname": docname,
                         "line": problem.line, "status": FAILED, "duration": 0.0,
                         "environment": None})
        for block in found.job.blocks:
            block_result = result.blocks[block.index] if result else None
            if block_result is None:
                status, duration = NOT_RUN, 0.0
            elif executed or block_result.status in (FAILED, SKIPPED, NOT_RUN):
                status, duration = block_result.status, block_result.duration
            else:
                status, duration = CACHED, block_result.duration
            rows.append({
                "document": _relative(found.job.path, app.srcdir),
                "docname": docname,
                "line": block.line,
                "status": status,
                "duration": round(duration, 4),
                "exclusive": block.exclusive,
                "started": block_result.started if block_result else 0.0,
                "ended": block_result.ended if block_result else 0.0,
                # Compared with the record within this tolerance (None: exactly).
                "tolerance": block.tolerance.describe() if block.tolerance else None,
                "version": result.environment.jax if result else None,
                "environment": asdict(result.environment) if result else None,
            })
    return rows


def _relative(path: str, srcdir) -> str:
    try:
        return str(Path(path).relative_to(Path(srcdir).parent))
    except ValueError:
        return path


def on_build_finished(app: Sphinx, exception) -> None:
    if exception is not None or app.config not in _STATES:
        return
    if getattr(app.builder, "runs_pages_itself", False):
        return  # a matrix build writes its own report (matrix.py)
    build = state(app)
    rows = block_statuses(app)
    # Each page executed by this build: its wall time, start-up included (for `make bench`).
    pages = [{"docname": docname, "duration": round(build.results[docname].duration, 4),
              "exclusive": build.collected[docname].job.settings.exclusive}
             for docname in sorted(build.executed)]
    path = build.config.report_path
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps({"builder": app.builder.name, "pages": pages, "blocks": rows},
                               indent=1) + "\n", encoding="utf-8")
    counts = {status: sum(1 for r in rows if r["status"] == status)
              for status in ("ran", "expected-error", "cached", "failed", "skipped", "not-run")}
    summary = (f"{len(rows)} blocks: {counts['ran'] + counts['expected-error']} ran, "
               f"{counts['cached']} cached, {counts['failed']} failed")
    extra = [f"{counts[s]} {s}" for s in ("skipped", "not-run") if counts[s]]
    logger.info(summary + (f" ({', '.join(extra)})" if extra else ""))
    if counts["failed"] or build.comparison_failed:
        # Each failure was reported at its file:line; the build fails with or without -W.
        app.statuscode = 1
