"""Schedule: before Sphinx reads, key each page's blocks and run the pages that need it.

Pages run concurrently (one subprocess each, at most ``verified_jobs`` at once, longest
first by their last known time), and so do their blocks, except a block marked exclusive
(it times something): it runs with no other block running (``gate.py``). Pages marked
``exclusive`` run alone afterwards. Results are held in memory for the read phase (forked
parallel readers inherit them) and stored in the cache; ``inject.py`` then puts them into
the doctrees. The target builders run pages through ``run_pages`` too, with their own
interpreter; nothing here knows of targets beyond leaving out blocks that run elsewhere.
"""

from __future__ import annotations

import json
import os
import queue
import sys
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from pathlib import Path

from sphinx.application import Sphinx
from sphinx.environment import BuildEnvironment
from sphinx.util import logging

from . import config as config_module
from . import stop
from .execute import run_document
from .gate import BlockGate, Slots
from .mistakes import page_mistakes, pages_not_for
from .record import recorded_duration
from .replay import log_replays
from .state import FRESH_BUILDERS, state

logger = logging.getLogger(__name__)


def on_env_get_outdated(app, env, added, changed, removed) -> list[str]:
    """Pages whose key or record changed (new JAX, edited code, re-recorded) or whose
    stored result (record or cache) is gone; in a fresh build, every page that runs."""
    build = state(app)
    stamps = getattr(env, "verified_stamps", {})
    outdated = []
    for docname in sorted(env.found_docs - added - changed):
        found = build.collect(env, docname)
        if found is None or not (found.job.blocks or found.problems):
            continue
        if (found.problems or stamps.get(docname) != build.read_stamp(found)
                or build.stored(found) is None):
            outdated.append(docname)
    return outdated


def on_env_before_read_docs(app: Sphinx, env: BuildEnvironment, docnames: list[str]) -> None:
    build = state(app)
    if not hasattr(env, "verified_stamps"):
        env.verified_stamps = {}
    if getattr(app.builder, "runs_pages_itself", False):
        return  # the target builders run pages under their targets themselves (builders.py)
    if build.config.pages and app.builder.name not in FRESH_BUILDERS:
        raise pages_not_for(app.builder.name)
    mistake = page_mistakes(build.config.pages, env.found_docs, Path(app.srcdir).name)
    if mistake:
        raise mistake
    to_run = []
    for docname in docnames:
        if not build.selected(docname):
            continue
        found = build.collect(env, docname)
        if found is None or not found.job.blocks:
            continue
        env.verified_stamps[docname] = build.read_stamp(found)
        if found.problems:
            continue  # reported, located, when the page is read
        stored = build.stored(found)
        if stored is not None:
            build.results[docname] = stored
        else:
            to_run.append(found.job)
    log_replays({docname: build.replays[docname] for docname in docnames
                 if docname in build.replays}, {job.docname for job in to_run})
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
    those that time statements with IPython first, then by last known time, longest first,
    so that the cores finish together."""
    return sorted(jobs, key=lambda job: (job.settings.processes <= 1,
                                         job.docname in durations,
                                         -durations.get(job.docname, timed_statements(job)),
                                         job.docname))


def timed_statements(job) -> int:
    """How many ``%timeit`` and ``%%timeit`` a page's blocks hold: each runs its statement
    seven times over at least 0.2 s, so a page never timed that holds many is a long one."""
    return sum(line.lstrip().startswith(("%timeit", "%%timeit"))
               for block in job.blocks for line in block.source.splitlines())


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


def running_dir(config: config_module.ExecutionConfig) -> Path:
    """Where the builds of one clone say which page each is running: beside no file of the
    clone (a folder of the system's temporary directory named by the clone's record)."""
    import hashlib
    import tempfile

    clone = hashlib.sha256(str(Path(config.record_dir).resolve()).encode()).hexdigest()[:16]
    return Path(tempfile.gettempdir()) / f"verified-running-{clone}"


def claim(folder: Path, docname: str) -> tuple[bool, str]:
    """Marks ``docname`` as being run by this process: (whether the mark is ours to remove,
    a notice where another live build of the clone runs the same page now, else "")."""
    folder.mkdir(parents=True, exist_ok=True)
    mark = folder / docname.replace("/", "--")
    mine = f"{os.getpid()} {' '.join(sys.argv)}"
    for _ in range(2):
        try:
            with open(mark, "x", encoding="utf-8") as file:
                file.write(mine)
            return True, ""
        except FileExistsError:
            other = mark.read_text(encoding="utf-8") if mark.exists() else ""
            pid, _, command = other.partition(" ")
            if pid.isdigit() and int(pid) != os.getpid() and _alive(int(pid)):
                return False, (f"{docname} is being run by another build of this clone too "
                               f"(process {pid}: {command or 'a build'}): both run it, each "
                               f"for its own output, and it takes the machine twice as long")
            mark.unlink(missing_ok=True)  # a build that ended without removing it
    return False, ""


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


@contextmanager
def page_mark(config: config_module.ExecutionConfig, docname: str):
    """While a page runs: its mark, and a notice if another build of the clone runs it."""
    folder = running_dir(config)
    try:
        owned, notice = claim(folder, docname)
    except OSError:  # the notice is a courtesy: a build goes on without it
        owned, notice = False, ""
    if notice:
        logger.info(f"notice: {notice}")
    try:
        yield
    finally:
        if owned:
            (folder / docname.replace("/", "--")).unlink(missing_ok=True)


def run_pages(config: config_module.ExecutionConfig, jobs: list, run_one,
              serial: bool = False) -> list:
    """Runs ``run_one(job, gate, cores)`` for every page: the shared pages ``config.jobs``
    at a time in run order, their blocks through one gate, then the exclusive pages alone.
    A page of N cooperating processes holds N slots (cores) while it runs. ``serial``: one
    page at a time (an accelerator that one program holds)."""
    shared, exclusive = scheduled(config, jobs)
    gate = BlockGate()
    cores = CorePool(config.worker_cores)
    jobs_at_once = 1 if serial else config.jobs
    slots = Slots(jobs_at_once)

    def run(job):
        with slots.hold(job.settings.processes), cores.take() as pinned, \
                page_mark(config, job.docname):
            return run_one(job, gate, pinned)

    # Interrupted (Ctrl-C, a closed terminal) or failed: every worker is ended before the
    # pool waits for its threads, so they return at once (stop.py).
    with ThreadPoolExecutor(max_workers=jobs_at_once) as pool, stop.stoppable():
        results = list(pool.map(run, shared))
    with stop.stoppable():
        return results + [run(job) for job in exclusive]


def stopped_at(job, result) -> str:
    """How a page the interrupted build ended is said: where it was, not "failed"."""
    failed = next((block for block in result.blocks if block.failed), None)
    if failed is None:
        return "stopped by the interrupt before its first block"
    line = job.blocks[failed.index].line
    return (f"stopped by the interrupt in block {failed.index + 1} "
            f"({os.path.relpath(job.path)}:{line})")


def stderr_note(job, result) -> str:
    """How a page whose blocks passed is said: "ok", or where a block's stderr (one that
    does not declare ``:stderr: failure``) says something failed, as its warning says."""
    said = [block for block in job.blocks if not block.stderr_failure
            and result.blocks[block.index].failure_in_stderr()]
    if not said:
        return "ok"
    where = ", ".join(f"{os.path.relpath(job.path)}:{block.line}" for block in said)
    return f"ok, but stderr says something failed ({where})"


def cache_unwritable(err: OSError) -> str:
    """What an execution cache that cannot be written means, and what to do about it."""
    return (f"the execution cache cannot be written ({err.strerror or err}: {err.filename}), so "
            f"the next build runs the pages this one ran again; make the folder writable, remove "
            f"it (`make clean`) or set verified_cache_dir to a writable folder")


def _run_all(app: Sphinx, jobs: list) -> None:
    build = state(app)
    config = build.config
    logger.info(f"executing {len(jobs)} page(s) ({config.jobs} at a time)")

    unstored: list[str] = []  # the pages the cache could not keep (said once, at the first)

    def run(job, gate, pinned):
        result = run_document(job.for_platform(None), default_timeout=config.timeout,
                              extra_env=config.env, gate=gate, cores=pinned)
        try:
            build.cache.store(result)  # now: a build stopped later keeps what this page did
        except OSError as err:  # the cache saves time only: the build goes on without it
            unstored.append(job.docname)
            if len(unstored) == 1:
                logger.warning(cache_unwritable(err), location=(job.docname, 1),
                               type="verified", subtype="cache")
        status = ("failed" if result.failed and not stop.stopping() else
                  stopped_at(job, result) if result.failed else stderr_note(job, result))
        logger.info(f"  executed {job.docname}: {len(job.blocks)} blocks, "
                    f"{result.duration:.1f} s, {status}")
        return result

    for result in run_pages(config, jobs, run):
        build.results[result.docname] = result
        build.executed.add(result.docname)


