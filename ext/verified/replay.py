"""Replay: a page's verified record stands in for running it, when the record is of exactly
what would run here, so that a fresh clone builds its site without executing a block.

The record holds its page's key (``collect.job_key`` over ``collect.record_identity``): the
blocks' code in order with their execution options, the page's settings, the configured
variables, and the Python minor version, jax and jaxlib versions and platform of the
interpreter that made it. Where this build's key differs, the page runs as it would without
a record (a page is one interpreter, so running it from its first differing block on is
running it whole), and ``Replay.reason`` says why for the build's log. The record keeps
images by digest; ``make record`` writes each one beside it, in ``images/``, named by that
digest, and a record whose images are not all there does not stand in either.

Nothing that exists to re-execute reads this: ``make doctest``, ``make record``, the target
builders and ``make html FRESH=1`` (``verified_fresh``) run every page.
"""

from __future__ import annotations

import base64
import binascii
import dataclasses
import hashlib
import os
from dataclasses import dataclass
from pathlib import Path

from sphinx.util import logging

from .collect import job_key
from .model import BlockResult, DocJob, DocResult, Environment, Output, ProcessResult
from .record import Record, UnreadableRecord, read_record, source_digest
from .render import describe_environment
from .targets import TARGET_DIRS

IMAGES = "images"  # under the record directory: each recorded image, named by its digest
_EXTENSIONS = {"image/png": ".png"}  # what the worker captures (worker.py)
_DIGEST = "sha256:"

logger = logging.getLogger(__name__)


@dataclass(frozen=True)
class Replay:
    """A page's result rebuilt from its record, or why the record cannot stand in for a run
    (``reason``; empty when the page has no record at all)."""

    result: DocResult | None
    reason: str = ""
    # Where the record itself is whole and a file beside it is not: the command that puts
    # that file back (``git checkout``), so that no run is needed to mend it.
    restore: str = ""


def replay(job: DocJob, record: Record | None, identity: dict, record_dir: Path) -> Replay:
    """``job``'s result from ``record`` if the record holds ``job_key(job, identity)``."""
    if record is None:
        return Replay(None)
    reason = _why_not(job, record, identity)
    if reason:
        return Replay(None, reason)
    blocks = []
    for block, recorded in zip(job.blocks, record.blocks):
        missing: list[Path] = []
        outputs = _restored(recorded.outputs, record_dir, missing)
        others = [ProcessResult(process=other.process, status=other.status,
                                outputs=_restored(other.outputs, record_dir, missing),
                                warnings=list(other.warnings))
                  for other in recorded.others]
        if missing:
            return Replay(None, f"an image of block {block.index + 1} (line {block.line}) is "
                                f"not in {IMAGES}/ beside the record",
                          restore=f"git checkout -- {os.path.relpath(missing[0])}")
        blocks.append(BlockResult(index=block.index, status=recorded.status, outputs=outputs,
                                  warnings=list(recorded.warnings), others=others))
    return Replay(DocResult(docname=job.docname, key=job.key,
                            environment=record.environment, blocks=blocks))


def _why_not(job: DocJob, record: Record, identity: dict) -> str:
    """Why ``record`` is not of what ``job`` runs here: its environment first, then the
    first block that differs, then the options and settings the key alone holds."""
    if not record.key:
        return "its record was made before records held their page's key"
    recorded = recorded_identity(record.environment)
    for name, label in (("python", "Python"), ("jax", "jax"), ("jaxlib", "jaxlib"),
                        ("platform", "platform")):
        if recorded[name] is not None and recorded[name] != identity.get(name):
            return f"recorded with {label} {recorded[name]}, this build has {identity.get(name)}"
    for block in job.blocks:
        if (block.index >= len(record.blocks)
                or record.blocks[block.index].source_sha256 != source_digest(block.source)):
            return f"block {block.index + 1} (line {block.line}) is not the recorded one"
    if len(record.blocks) != len(job.blocks):
        return f"the record has {len(record.blocks)} blocks, the page {len(job.blocks)}"
    if record.key != job_key(job, identity):
        return "a block's execution options, the page's settings or verified_env changed"
    return ""


def recorded_identity(environment: Environment) -> dict:
    """What the record's environment says of the ``record_identity`` fields (None: it does
    not say; jax is named only where the page imported it)."""
    return {"python": ".".join(environment.python.split(".")[:2]) or None,
            "jax": environment.jax, "jaxlib": environment.jaxlib,
            "platform": environment.platform or None}


def _restored(outputs: list[Output], record_dir: Path, missing: list[Path]) -> list[Output]:
    """The outputs with each image read back from ``images/``, each read and checked once;
    where one is not there as named (missing, or not hashing to its digest), its path is
    added to ``missing``."""
    restored = []
    for output in outputs:
        data = {}
        for mime, value in output.data.items():
            if mime.startswith("image/") and value.startswith(_DIGEST):
                digest = value.removeprefix(_DIGEST)
                value = _read_image(record_dir, mime, digest)
                if value is None:
                    missing.append(image_path(record_dir, mime, digest))
            data[mime] = value
        restored.append(dataclasses.replace(output, data=data))
    return restored


def image_path(record_dir: Path, mime: str, digest: str) -> Path:
    return Path(record_dir) / IMAGES / f"{digest}{_EXTENSIONS.get(mime, '.bin')}"


def _read_image(record_dir: Path, mime: str, digest: str) -> str | None:
    try:
        encoded = base64.b64encode(image_path(record_dir, mime, digest).read_bytes()).decode()
    except OSError:
        return None
    return encoded if hashlib.sha256(encoded.encode()).hexdigest() == digest else None


def _every_output(block) -> list[Output]:
    """A block's outputs, every process's (a ``BlockResult`` or a ``RecordedBlock``)."""
    return [*block.outputs, *(output for other in block.others for output in other.outputs)]


def write_images(record_dir: Path, result: DocResult) -> None:
    """Writes every image of ``result`` (base64, as the worker captured it) into ``images/``
    under the digest the record names it by."""
    for block in result.blocks:
        for output in _every_output(block):
            for mime, value in output.data.items():
                if not mime.startswith("image/") or value.startswith(_DIGEST):
                    continue
                try:
                    content = base64.b64decode(value, validate=True)
                except (binascii.Error, ValueError):
                    continue  # not base64: the record's digest finds no image, the page runs
                path = image_path(record_dir, mime, hashlib.sha256(value.encode()).hexdigest())
                if not path.exists():
                    path.parent.mkdir(parents=True, exist_ok=True)
                    path.write_bytes(content)


def prune_images(record_dir: Path) -> list[Path]:
    """Removes the images no page's record names any more (after a full ``make record``)."""
    record_dir = Path(record_dir)
    folder = record_dir / IMAGES
    if not folder.is_dir():
        return []
    named = set()
    for path in record_dir.rglob("*.json"):
        if path.relative_to(record_dir).parts[0] in (*TARGET_DIRS, IMAGES):
            continue
        docname = path.relative_to(record_dir).with_suffix("").as_posix()
        try:
            record = read_record(record_dir, docname)
        except UnreadableRecord as err:  # the images it names are unknown: keep them all
            warn_unreadable(err, docname, f"`make record PAGES={docname}`")
            return []
        for block in record.blocks:
            for output in _every_output(block):
                named.update(image_path(record_dir, mime, value.removeprefix(_DIGEST))
                             for mime, value in output.data.items()
                             if mime.startswith("image/") and value.startswith(_DIGEST))
    removed = [path for path in sorted(folder.iterdir()) if path not in named]
    for path in removed:
        path.unlink()
    return removed


def caption(environment: Environment) -> str:
    """The caption of an ``:output: varies`` block shown from the record: where and when
    that output was made (the others keep the record's "verified" caption)."""
    machine = environment.machine()
    return (f"{describe_environment(environment)} · recorded {environment.date}"
            + (f" on {machine}" if machine else "") + " · varies from run to run")


def warn_unreadable(err: UnreadableRecord, docname: str, rewrite: str) -> None:
    """One located line for a damaged record (its page then runs as in a fresh clone)."""
    logger.warning(err.advice(docname, rewrite), type="verified", subtype="record",
                   location=f"{os.path.relpath(err.path)}:{err.line}")


def log_replays(replays: dict[str, Replay], executed: set[str]) -> None:
    """Says how many pages their record shows, and names each page out of date with its
    record, with why, and whether this build executed it or showed an earlier run of it
    from the execution cache."""
    shown = sorted(docname for docname, item in replays.items() if item.result is not None)
    if shown:
        logger.info(f"{len(shown)} page(s) shown from the verified record")
    for run, how in ((True, "so executed"), (False, "shown from the execution cache")):
        stale = sorted((docname, item.reason) for docname, item in replays.items()
                       if item.reason and not item.restore and (docname in executed) == run)
        restorable = sorted((docname, item.reason, item.restore)
                            for docname, item in replays.items()
                            if item.restore and (docname in executed) == run)
        if restorable:
            logger.info(f"{len(restorable)} page(s) miss a file beside their record, {how} "
                        f"(restoring the file from git mends it; no `make record` needed):")
            for docname, reason, restore in restorable:
                logger.info(f"  {docname}: {reason}; `{restore}` restores it")
        unrecorded = sorted(docname for docname, item in replays.items()
                            if item.result is None and not item.reason
                            and (docname in executed) == run)
        if stale:
            logger.info(f"{len(stale)} page(s) out of date with their record, {how} "
                        f"(`make record` brings the record up to date):")
            for docname, reason in stale:
                logger.info(f"  {docname}: {reason}")
        if unrecorded:
            logger.info(f"{len(unrecorded)} page(s) not in the verified record, {how}: "
                        f"{', '.join(unrecorded)}")
