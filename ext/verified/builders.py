"""The ``doctest`` and ``record`` builders.

Both read every page (which executes every page fresh, without the cache); neither
writes HTML. ``doctest`` compares each block with the verified record and reports;
``record`` rewrites the record from what just ran.
"""

from __future__ import annotations

import os
from pathlib import Path

from sphinx.builders import Builder
from sphinx.util import logging

from .matrix import MATRIX_DIR
from .record import compare, make_record, record_path, write_record
from .schedule import state

logger = logging.getLogger(__name__)


class _ExecutingBuilder(Builder):
    """Reads every page (so every page executes); writes nothing per page."""

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
        lines: list[str] = []
        passed = failed = 0
        for docname, found, result in self.executed_pages():
            record = build.record_for(docname)
            doc_passed = doc_failed = 0
            details: list[str] = []
            for block in found.job.blocks:
                location = f"{os.path.relpath(found.job.path)}:{block.line}"
                live = result.blocks[block.index] if result else None
                if live is None or live.failed:
                    why = live.failure if live else "the page did not run (see the errors above)"
                    details.append(f"FAILED {location}: did not run cleanly: {why}")
                    doc_failed += 1
                    continue
                recorded = record.block_for(block) if record else None
                comparison = compare(block, live, recorded, build.config.normalizers,
                                     record.environment.jax if record else None)
                if comparison.verdict in ("match", "unchecked"):
                    doc_passed += 1
                elif comparison.verdict == "unrecorded":
                    details.append(f"FAILED {location}: not in the verified record "
                                   f"(source changed or new block; run `make record`)")
                    doc_failed += 1
                else:
                    details.append(f"FAILED {location}: output differs from the record\n"
                                   + comparison.diff)
                    doc_failed += 1
            passed += doc_passed
            failed += doc_failed
            lines.append(f"{docname}: {doc_passed} passed, {doc_failed} failed")
            lines.extend("  " + d.replace("\n", "\n  ") for d in details)
        lines.append(f"{passed} passed, {failed} failed")
        report = "\n".join(lines) + "\n"
        Path(self.outdir).mkdir(parents=True, exist_ok=True)
        Path(self.outdir, "output.txt").write_text(report, encoding="utf-8")
        for line in lines:
            logger.info(line)
        build.comparison_failed = failed > 0


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
