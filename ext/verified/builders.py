"""The builders that execute instead of publishing: ``doctest``, ``record``, ``matrix`` and
``matrix-doctest``.

None writes HTML. ``doctest`` and ``record`` read every page, which executes every page
fresh (without the cache): ``doctest`` compares each block with the verified record and
reports; ``record`` rewrites the record from what just ran. The matrix builders read every
page without executing it and run the pages under each other verified version themselves
(``matrix.run_matrix``): ``matrix`` writes their records, ``matrix-doctest`` compares.
"""

from __future__ import annotations

import dataclasses
import json
import os
from pathlib import Path
from typing import Any

from sphinx.builders import Builder
from sphinx.util import logging

from .matrix import (
    FAILED_BECAUSE,
    MATRIX_DIR,
    MatrixVersion,
    as_on_matrix,
    dependent_failures,
    make_matrix_record,
    matrix_record_dir,
    read_matrix_record,
    run_matrix,
    write_matrix_record,
)
from .model import FAILED, DocResult
from .record import RecordedBlock, compare, make_record, record_path, write_record
from .schedule import _relative, state

logger = logging.getLogger(__name__)


class ComparisonReport:
    """What a comparing builder writes to ``output.txt`` and logs: a line per page with its
    failures under it, then the total."""

    def __init__(self) -> None:
        self.lines: list[str] = []
        self.passed = self.failed = 0

    def page(self, title: str, passed: int, failures: list[str]) -> None:
        self.passed += passed
        self.failed += len(failures)
        self.lines.append(f"{title}: {passed} passed, {len(failures)} failed")
        self.lines.extend("  " + failure.replace("\n", "\n  ") for failure in failures)

    def write(self, outdir: Path, total: str) -> None:
        lines = [*self.lines, f"{total}{self.passed} passed, {self.failed} failed"]
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

    def executed_pages(self):
        """(docname, job, result) for every page with blocks, in name order."""
        build = state(self)
        for docname in sorted(build.collected):
            found = build.collected[docname]
            if found.job.blocks and build.selected(docname):
                yield docname, found, build.results.get(docname)


class VerifiedDoctestBuilder(_ExecutingBuilder):
    """``make doctest``: fresh execution compared with the record, block by block."""

    name = "doctest"
    epilog = "Doctest report written to %(outdir)s/output.txt"

    def finish(self) -> None:
        build = state(self)
        report = ComparisonReport()
        for docname, found, result in self.executed_pages():
            record = build.record_for(docname)
            passed = 0
            failures: list[str] = []
            for block in found.job.blocks:
                location = f"{os.path.relpath(found.job.path)}:{block.line}"
                live = result.blocks[block.index] if result else None
                if live is None or live.failed:
                    why = live.failure if live else "the page did not run (see the errors above)"
                    failures.append(f"FAILED {location}: did not run cleanly: {why}")
                    continue
                recorded = record.block_for(block) if record else None
                comparison = compare(block, live, recorded, build.config.normalizers,
                                     record.environment.jax if record else None)
                if comparison.verdict in ("match", "unchecked"):
                    passed += 1
                elif comparison.verdict == "unrecorded":
                    failures.append(f"FAILED {location}: not in the verified record "
                                    f"(source changed or new block; run `make record`)")
                else:
                    failures.append(f"FAILED {location}: output differs from the record\n"
                                    + comparison.diff)
            report.page(docname, passed, failures)
        report.write(Path(self.outdir), total="")
        build.comparison_failed = report.failed > 0


class RecordBuilder(_ExecutingBuilder):
    """``make record``: writes ``record/<page>.json`` from a fresh, clean run of every page."""

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
            path = write_record(build.config.record_dir, make_record(found.job.blocks, result))
            written.add(path)
            logger.info(f"recorded {docname} ({len(found.job.blocks)} blocks)")
        if build.config.pages:
            return  # a partial run keeps the other pages' records
        record_dir = Path(build.config.record_dir)
        for stale in record_dir.rglob("*.json"):
            if stale.relative_to(record_dir).parts[0] == MATRIX_DIR:
                continue  # the version matrix's records: `make matrix` keeps them
            if stale not in written:
                stale.unlink()
                logger.info(f"removed stale record {stale}")


# -- the version matrix (matrix.py): the other verified versions ------------------------------

class _MatrixBuilder(_PagelessBuilder):
    """Reads every page without executing it (schedule.py leaves pages to this builder),
    then runs them under each matrix version."""

    runs_pages_itself = True

    def versions(self) -> tuple[MatrixVersion, ...]:
        build = state(self)
        versions = build.config.matrix
        if not versions:
            logger.warning("verified_matrix names no version: nothing to run",
                           type="verified", subtype="matrix")
        for version in versions:
            if not os.access(version.python, os.X_OK):
                raise RuntimeError(f"{version.label}: no interpreter at {version.python} "
                                   f"(`make matrix` creates its virtualenv)")
        return versions

    def run_all(self) -> list[tuple[MatrixVersion, str, Any, DocResult]]:
        rows = []
        for version in self.versions():
            for docname, (collected, result) in sorted(run_matrix(self, version).items()):
                found = result.environment.jax
                if found and found != version.version:
                    logger.warning(f"{version.label}: the interpreter {version.python} runs "
                                   f"jax {found}", type="verified", subtype="matrix")
                rows.append((version, docname, collected, result))
        self.write_report(rows)
        return rows

    def write_report(self, rows) -> None:
        """The execution report of a matrix build: each block's result and its version."""
        blocks = []
        for version, docname, collected, result in rows:
            because = dependent_failures(collected.job.blocks, result.blocks)
            for block in collected.job.blocks:
                block_result = result.blocks[block.index]
                blocks.append({
                    "document": _relative(collected.job.path, self.srcdir),
                    "docname": docname,
                    "line": block.line,
                    "version": version.version,
                    "status": FAILED_BECAUSE if block.index in because else block_result.status,
                    "duration": round(block_result.duration, 4),
                    "environment": dataclasses.asdict(result.environment),
                })
        pages = [{"docname": docname, "version": version.version,
                  "duration": round(result.duration, 4)}
                 for version, docname, _, result in rows]
        path = Path(self.outdir, "execution-report.json")
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(json.dumps({"builder": self.name, "pages": pages, "blocks": blocks},
                                   indent=1) + "\n", encoding="utf-8")


class MatrixRecordBuilder(_MatrixBuilder):
    """``make matrix``: writes ``record/matrix/jax-<version>/<page>.json`` for each version."""

    name = "matrix"
    epilog = "Matrix records written under the record directory"

    def finish(self) -> None:
        build = state(self)
        written: dict[str, set[Path]] = {}
        counts: dict[str, dict[str, int]] = {}
        for version, docname, collected, result in self.run_all():
            record = make_matrix_record(collected.job.blocks, result, version)
            path = write_matrix_record(build.config.record_dir, version, record)
            written.setdefault(version.version, set()).add(path)
            tally = counts.setdefault(version.version, {})
            for block in record.blocks:
                tally[block.status] = tally.get(block.status, 0) + 1
        for version in build.config.matrix:
            tally = counts.get(version.version, {})
            logger.info(f"{version.label}: " + ", ".join(
                f"{tally[status]} {status}" for status in sorted(tally)))
            if build.config.pages:
                continue  # a partial run keeps the other pages' records
            for stale in matrix_record_dir(build.config.record_dir, version).rglob("*.json"):
                if stale not in written.get(version.version, set()):
                    stale.unlink()
                    logger.info(f"removed stale matrix record {stale}")


class MatrixDoctestBuilder(_MatrixBuilder):
    """``make matrix-doctest``: every page re-run under each version, every block compared
    with its matrix record (status, exception and outputs, within the block's tolerance)."""

    name = "matrix-doctest"
    epilog = "Matrix doctest report written to %(outdir)s/output.txt"

    def finish(self) -> None:
        build = state(self)
        report = ComparisonReport()
        for version, docname, collected, result in self.run_all():
            record = read_matrix_record(build.config.record_dir, version, docname)
            live = make_matrix_record(collected.job.blocks, result, version)
            passed = 0
            failures: list[str] = []
            for block in collected.job.blocks:
                location = f"{os.path.relpath(collected.job.path)}:{block.line}"
                recorded = record.block_for(block) if record else None
                now = live.blocks[block.index]
                if recorded is None:
                    failures.append(f"FAILED {location}: not in the {version.label} matrix "
                                    f"record (run `make matrix`)")
                    continue
                if (recorded.status, recorded.because) != (now.status, now.because):
                    failures.append(f"FAILED {location}: {recorded.status} in the record, "
                                    f"{now.status} now" + (f" ({now.error})" if now.error else ""))
                    continue
                if now.status == FAILED_BECAUSE or (now.status == FAILED
                                                    and recorded.error == now.error):
                    passed += 1
                    continue
                main_like = RecordedBlock(line=recorded.line,
                                          source_sha256=recorded.source_sha256,
                                          status=recorded.status, outputs=recorded.outputs,
                                          warnings=recorded.warnings)
                comparison = compare(as_on_matrix(build.config, docname, block),
                                     now.as_result(block.index), main_like,
                                     build.config.normalizers, version.version)
                if comparison.verdict in ("match", "unchecked"):
                    passed += 1
                else:
                    failures.append(f"FAILED {location}: output on {version.label} differs from "
                                    f"its matrix record\n" + comparison.diff)
            report.page(f"{version.label}: {docname}", passed, failures)
        report.write(Path(self.outdir), total="matrix: ")
        if report.failed:
            build.comparison_failed = True
            self._app.statuscode = 1
