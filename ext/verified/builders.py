"""The builders that execute instead of publishing.

None writes HTML. ``doctest`` and ``record`` read every page, which executes every page
fresh (without the cache): ``doctest`` compares each block with the verified record and
reports; ``record`` rewrites the record from what just ran. The target builders read every
page without executing it and run the pages on each verified target themselves, with the
scheduler and that target's interpreter (``run_target``): ``matrix`` and ``platform`` write
the versions' and the platforms' records, ``matrix-doctest`` and ``platform-doctest``
compare with them.
"""

from __future__ import annotations

import dataclasses
import json
import os
import time
from pathlib import Path
from typing import Any

from sphinx.application import Sphinx
from sphinx.builders import Builder
from sphinx.errors import SphinxError
from sphinx.util import logging

from .collect import job_key
from .driver import fallback_environment
from .execute import run_document
from .locate import failure_line
from .mistakes import page_mistakes, target_absent
from .model import FAILED, FAILED_BECAUSE, NOT_RUN, NOT_RUN_THERE, SKIPPED, DocResult
from .record import RecordedBlock, compare, make_record, record_path, write_record
from .replay import IMAGES, prune_images, write_images
from .schedule import run_pages
from .state import relative, state
from .target_record import (dependent_failures, make_target_record, not_run_record,
                            target_record_dir, write_target_record)
from .targets import PLATFORM, TARGET_DIRS, VERSION, Target, job_for, probe
from .verdict import as_on_target

logger = logging.getLogger(__name__)


SKIPPED_APART = "skipped (skip-execution)"  # counted apart from passed and failed


class ComparisonReport:
    """What a comparing builder writes to ``output.txt`` and logs: a line per page with its
    failures under it, then the total (``N passed, M failed``, then the blocks counted
    apart: the one closing line that the portability run and CI read)."""

    def __init__(self) -> None:
        self.lines: list[str] = []
        self.passed = self.failed = 0
        self.apart: dict[str, int] = {}  # blocks counted apart, by why: "on TPU v5e only"

    def page(self, title: str, passed: int, failures: list[str],
             apart: dict[str, int] | None = None) -> None:
        self.passed += passed
        self.failed += len(failures)
        line = f"{title}: {passed} passed, {len(failures)} failed"
        for why, count in sorted((apart or {}).items()):
            self.apart[why] = self.apart.get(why, 0) + count
            line += f", {count} {why}"
        self.lines.append(line)
        self.lines.extend("  " + failure.replace("\n", "\n  ") for failure in failures)

    def write(self, outdir: Path, total: str) -> None:
        summary = f"{total}{self.passed} passed, {self.failed} failed"
        summary += "".join(f", {count} {why}" for why, count in sorted(self.apart.items()))
        lines = [*self.lines, summary]
        outdir.mkdir(parents=True, exist_ok=True)
        (outdir / "output.txt").write_text("\n".join(lines) + "\n", encoding="utf-8")
        for line in lines:
            logger.info(line)


class _PagelessBuilder(Builder):
    """Reads every page and writes nothing per page: these builders report on execution."""

    def init(self) -> None:
        pass

    def get_outdated_docs(self):
        return self.env.found_docs

    def get_target_uri(self, docname: str, typ: str | None = None) -> str:
        return ""

    def prepare_writing(self, docnames) -> None:
        pass

    def write_doc(self, docname, doctree) -> None:
        pass


class _ExecutingBuilder(_PagelessBuilder):
    """Reads every page (so every page executes)."""

    def executed_pages(self, with_problems: bool = False):
        """(docname, job, result) for every page with blocks, in name order (``with_problems``:
        and every page with a block that cannot run, blocks or not)."""
        build = state(self)
        for docname in sorted(build.collected):
            found = build.collected[docname]
            if (found.job.blocks or with_problems and found.problems) and build.selected(docname):
                yield docname, found, build.results.get(docname)


class VerifiedDoctestBuilder(_ExecutingBuilder):
    """``make doctest``: fresh execution compared with the record, block by block."""

    name = "doctest"
    epilog = "Doctest report written to %(outdir)s/output.txt"

    def finish(self) -> None:
        build = state(self)
        report = ComparisonReport()
        labels = {target.name: target.label for target in build.config.platforms}
        for docname, found, result in self.executed_pages(with_problems=True):
            record = build.record_for(docname)
            passed = 0
            path = os.path.relpath(found.job.path)
            # A block that cannot run (a bad option, say) stops the page from running at all.
            failures: list[str] = [f"FAILED {path}:{problem.line}: {problem.message}"
                                   for problem in found.problems]
            apart: dict[str, int] = {}
            stopped_at: int | None = None  # the line of the block that stopped the page
            for block in found.job.blocks:
                location = f"{path}:{block.line}"
                if block.platform:  # `make platform-doctest` verifies it, on that platform
                    why = f"on {labels.get(block.platform, block.platform)} only"
                    apart[why] = apart.get(why, 0) + 1
                    continue
                live = result.blocks[block.index] if result else None
                if live is None and found.problems:
                    failures.append(f"FAILED {location}: not run: the page cannot run (line "
                                    f"{found.problems[0].line})")
                    continue
                if live is None or live.failed:
                    why = live.failure if live else "the page did not run (see the errors above)"
                    line = (failure_line(block, live, found.code_lines[block.index]) if live
                            else block.line)
                    failures.append(f"FAILED {path}:{line}: did not run cleanly: {why}")
                    stopped_at = stopped_at or block.line
                    continue
                if live.status == SKIPPED:  # nothing was compared: not a pass
                    apart[SKIPPED_APART] = apart.get(SKIPPED_APART, 0) + 1
                    continue
                if live.status == NOT_RUN:
                    first = (f"the block at line {stopped_at} failed first" if stopped_at
                             else "the page stopped before it")
                    failures.append(f"FAILED {location}: not run: {first}")
                    continue
                recorded = record.block_for(block, found.job.blocks) if record else None
                comparison = compare(block, live, recorded, build.config.normalizers,
                                     record.environment.jax if record else None)
                if comparison.verdict in ("match", "unchecked"):
                    passed += 1
                elif comparison.verdict == "unrecorded":
                    failures.append(f"FAILED {location}: new block, not in the verified record "
                                    f"(inserted or edited since it was recorded; run "
                                    f"`make record PAGES={docname}`)")
                else:
                    failures.append(f"FAILED {location}: output differs from the record\n"
                                    + comparison.diff)
            report.page(docname, passed, failures, apart)
        report.write(Path(self.outdir), total="")
        build.comparison_failed = report.failed > 0


class RecordBuilder(_ExecutingBuilder):
    """``make record``: writes ``record/<page>.json`` from a fresh, clean run of every page,
    with its key and its images (``record/images/``), so that it can stand in for a run."""

    name = "record"
    epilog = "Verified record written to the record directory"

    def finish(self) -> None:
        build = state(self)
        written = set()
        for docname, found, result in self.executed_pages():
            if result is None or result.failed:
                logger.warning(f"record for {docname} not written: the page did not run cleanly",
                               location=(docname, 1), type="verified", subtype="record")
                written.add(record_path(build.config.record_dir, docname))
                continue
            record = make_record(found.job.blocks, result)
            record.key = job_key(found.job, build.record_identity)  # it may stand in for a run
            write_images(build.config.record_dir, result)
            path = write_record(build.config.record_dir, record)
            written.add(path)
            logger.info(f"wrote {_shown(path)} ({len(found.job.blocks)} blocks; its captions "
                        f"now name this machine)")
        if build.config.pages:
            return  # a partial run keeps the other pages' records
        record_dir = Path(build.config.record_dir)
        for stale in record_dir.rglob("*.json"):
            if stale.relative_to(record_dir).parts[0] in (*TARGET_DIRS, IMAGES):
                continue  # the targets' records: `make matrix` and `make platform` keep them
            if stale not in written:
                stale.unlink()
                logger.info(f"removed stale record {stale}")
        for image in prune_images(record_dir):
            logger.info(f"removed an image no record names: {image}")


def _shown(path: Path) -> str:
    """A written file as the console names it: relative to where the build was started."""
    return os.path.relpath(path)


# -- the verified targets (targets.py): other versions and platforms --------------------------

class TargetUnavailable(SphinxError):
    category = "Target unavailable"


def run_target(builder: Builder, target: Target) -> list[tuple[str, Any, DocResult | None, str]]:
    """Runs every selected page on ``target`` (past failed blocks), with the scheduler and the
    target's interpreter: ``(docname, collected, result, why)`` per page, in name order; a
    page that does not run there has no result and says why."""
    build = state(builder)
    config = build.config
    found = {}
    for docname in sorted(builder.env.found_docs):
        if config.pages and docname not in config.pages:
            continue
        collected = build.collect(builder.env, docname)
        if collected is not None and collected.job.blocks and not collected.problems:
            found[docname] = collected
    skipped = {docname: target.no_multiprocess for docname, collected in found.items()
               if target.no_multiprocess and collected.job.settings.processes > 1}
    jobs = [job_for(collected.job, target)
            for docname, collected in found.items() if docname not in skipped]
    at_once = 1 if target.serial else config.jobs
    logger.info(f"executing {len(jobs)} page(s) on {target.label} ({at_once} at a time)"
                + (f"; {len(skipped)} not run there" if skipped else ""))
    extra_env = {**config.env, **dict(target.env)}

    def run(job, gate, pinned):
        for attempt in (1, 2):
            result = run_document(job, default_timeout=config.timeout, extra_env=extra_env,
                                  gate=gate, cores=pinned, python=str(target.python),
                                  keep_going=True, collective_flags=target.kind == PLATFORM)
            if not (target.serial and attempt == 1 and _chip_refused(result)):
                break
            logger.info(f"  {target.label}: {job.docname}: the chip was still held; again")
            time.sleep(CHIP_RELEASE_WAIT)
        failed = sum(1 for block in result.blocks if block.failed)
        logger.info(f"  {target.label}: {job.docname}: {len(job.blocks)} blocks, "
                    f"{result.duration:.1f} s, {failed} failed")
        return result

    results = {result.docname: result
               for result in run_pages(config, jobs, run, serial=target.serial)}
    return [(docname, collected, results.get(docname), skipped.get(docname, ""))
            for docname, collected in found.items()]


# An accelerator that a program has just let go of can refuse the next one for a moment.
CHIP_RELEASE_WAIT = 5.0


def _chip_refused(result: DocResult) -> bool:
    """Whether the page's interpreter could not open the chip (another program held it)."""
    return any(block.error is not None and "lockfile" in block.error.evalue
               for block in result.blocks)


class _TargetBuilder(_PagelessBuilder):
    """Reads every page without executing it (the scheduler leaves pages to this builder),
    then runs them on each target of its kind."""

    runs_pages_itself = True
    kind = VERSION

    def targets(self) -> tuple[Target, ...]:
        """This builder's targets, each checked to be runnable here (else it stops at once)."""
        checked = getattr(self, "_checked", None)
        if checked is not None:
            return checked
        build = state(self)
        if self.kind == VERSION:
            targets, option = build.config.matrix, "verified_matrix"
        else:
            targets, option = build.config.platforms, "verified_platforms"
            if build.config.platform_run:  # `make platform PLATFORM=name`: that one here
                targets = tuple(t for t in targets if t.name in build.config.platform_run)
        if not targets:
            logger.warning(f"{option} names nothing to run", type="verified", subtype="target")
        for target in targets:
            if not os.access(target.python, os.X_OK):
                raise TargetUnavailable(f"{target.label}: no interpreter at {target.python} "
                                        f"(`make matrix` creates a version's virtualenv)")
            if target.kind == PLATFORM:
                why = probe(target, build.config.env)
                if why:
                    raise target_absent(target.label, why)
        self._checked = targets
        return targets

    def run_all(self) -> list[tuple[Target, str, Any, DocResult | None, str]]:
        config = state(self).config
        mistake = page_mistakes(config.pages, self.env.found_docs, Path(self.srcdir).name)
        if mistake:  # once, before any target runs
            raise mistake
        rows = []
        for target in self.targets():
            for docname, collected, result, why in run_target(self, target):
                found = result.environment.jax if result else None
                if target.kind == VERSION and found and found != target.name:
                    logger.warning(f"{target.label}: the interpreter {target.python} runs "
                                   f"jax {found}", type="verified", subtype="target")
                rows.append((target, docname, collected, result, why))
        self.write_report(rows)
        return rows

    @staticmethod
    def record_of(target: Target, collected, result: DocResult | None, why: str, rows):
        """The target record a run makes: from its result, or, for a page that does not run
        there, each block marked so with the reason (in the environment of the others)."""
        if result is not None:
            return make_target_record(collected.job.blocks, result, target)
        seen = next((row[3].environment for row in rows
                     if row[0] == target and row[3] is not None), None)
        return not_run_record(collected.job.blocks, collected.job.docname, target, why,
                              seen or fallback_environment())

    def write_report(self, rows) -> None:
        """The execution report of a target build: each block's result and its target."""
        blocks = []
        for target, docname, collected, result, why in rows:
            because = dependent_failures(collected.job.blocks, result.blocks) if result else {}
            for block in collected.job.blocks:
                block_result = result.blocks[block.index] if result else None
                status = (NOT_RUN_THERE if block_result is None else
                          FAILED_BECAUSE if block.index in because else block_result.status)
                blocks.append({
                    "document": relative(collected.job.path, self.srcdir),
                    "docname": docname,
                    "line": block.line,
                    "target": target.name,
                    "status": status,
                    "duration": round(block_result.duration, 4) if block_result else 0.0,
                    "environment": dataclasses.asdict(result.environment) if result else None,
                })
        pages = [{"docname": docname, "target": target.name,
                  "duration": round(result.duration, 4) if result else 0.0}
                 for target, docname, _, result, _ in rows]
        path = Path(self.outdir, "execution-report.json")
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(json.dumps({"builder": self.name, "pages": pages, "blocks": blocks},
                                   indent=1) + "\n", encoding="utf-8")


class _TargetRecordBuilder(_TargetBuilder):
    """Writes ``record/<target folder>/<page>.json`` for each target."""

    epilog = "Target records written under the record directory"

    def finish(self) -> None:
        build = state(self)
        written: dict[str, set[Path]] = {}
        counts: dict[str, dict[str, int]] = {}
        rows = self.run_all()
        targets = []
        for target, docname, collected, result, why in rows:
            if target not in targets:
                targets.append(target)
            record = self.record_of(target, collected, result, why, rows)
            path = write_target_record(build.config.record_dir, target, record)
            written.setdefault(target.dirname, set()).add(path)
            logger.info(f"wrote {_shown(path)} ({len(record.blocks)} blocks)")
            tally = counts.setdefault(target.dirname, {})
            for block in record.blocks:
                tally[block.status] = tally.get(block.status, 0) + 1
        for target in targets:
            tally = counts.get(target.dirname, {})
            logger.info(f"{target.label}: " + ", ".join(
                f"{tally[status]} {status}" for status in sorted(tally)))
            if build.config.pages:
                continue  # a partial run keeps the other pages' records
            for stale in target_record_dir(build.config.record_dir, target).rglob("*.json"):
                if stale not in written.get(target.dirname, set()):
                    stale.unlink()
                    logger.info(f"removed stale record {stale}")


class _TargetDoctestBuilder(_TargetBuilder):
    """Every page re-run on each target, every block compared with its record there (status,
    exception and outputs, within the block's tolerance)."""

    epilog = "Target doctest report written to %(outdir)s/output.txt"

    def finish(self) -> None:
        build = state(self)
        report = ComparisonReport()
        rows = self.run_all()
        for target, docname, collected, result, why in rows:
            record = build.targets.get(target, docname)
            live = self.record_of(target, collected, result, why, rows)
            passed = 0
            failures: list[str] = []
            apart: dict[str, int] = {}
            for block in collected.job.blocks:
                location = f"{os.path.relpath(collected.job.path)}:{block.line}"
                recorded = record.block_for(block) if record else None
                now = live.blocks[block.index]
                if recorded is None:
                    failures.append(f"FAILED {location}: not in the {target.label} record "
                                    f"(run `make {self.name.removesuffix('-doctest')}`)")
                    continue
                if (recorded.status, recorded.because) != (now.status, now.because):
                    failures.append(f"FAILED {location}: {recorded.status} in the record, "
                                    f"{now.status} now" + (f" ({now.error})" if now.error else ""))
                    continue
                if now.status == NOT_RUN_THERE:
                    apart["not run there"] = apart.get("not run there", 0) + 1
                    continue
                if now.status == SKIPPED:  # nothing was compared: not a pass
                    apart[SKIPPED_APART] = apart.get(SKIPPED_APART, 0) + 1
                    continue
                if now.status == FAILED_BECAUSE or (now.status == FAILED
                                                    and recorded.error == now.error):
                    passed += 1
                    continue
                main_like = RecordedBlock(line=recorded.line,
                                          source_sha256=recorded.source_sha256,
                                          status=recorded.status, outputs=recorded.outputs,
                                          warnings=recorded.warnings)
                comparison = compare(as_on_target(build.config, docname, block, target),
                                     now.as_result(block.index), main_like,
                                     build.config.normalizers, record.environment.jax)
                if comparison.verdict in ("match", "unchecked"):
                    passed += 1
                else:
                    failures.append(f"FAILED {location}: output on {target.label} differs "
                                    f"from its record\n" + comparison.diff)
            report.page(f"{target.label}: {docname}", passed, failures, apart)
        report.write(Path(self.outdir), total=f"{self.name.removesuffix('-doctest')}: ")
        if report.failed:
            build.comparison_failed = True
            self._app.statuscode = 1


class MatrixRecordBuilder(_TargetRecordBuilder):
    """``make matrix``: writes ``record/matrix/jax-<version>/<page>.json`` for each version."""

    name = "matrix"


class MatrixDoctestBuilder(_TargetDoctestBuilder):
    """``make matrix-doctest``: compares every page under each version with its record."""

    name = "matrix-doctest"


class PlatformRecordBuilder(_TargetRecordBuilder):
    """``make platform``: writes ``record/platform/<name>/<page>.json`` on that platform."""

    name = "platform"
    kind = PLATFORM


class PlatformDoctestBuilder(_TargetDoctestBuilder):
    """``make platform-doctest``: compares every page on the platform with its record."""

    name = "platform-doctest"
    kind = PLATFORM


def check_targets(app: Sphinx) -> None:
    """A target builder stops before reading any page when a target cannot run here."""
    if isinstance(app.builder, _TargetBuilder):
        app.builder.targets()
