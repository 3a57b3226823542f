"""What one build knows about execution: the validated configuration, each page's collected
job, results, the records read, and the stamp a page's rendered doctree depends on.

Every phase that runs during a build (scheduler, injection, builders, generated pages)
reads this; it imports none of them.
"""

from __future__ import annotations

import hashlib
import weakref
from dataclasses import dataclass, field
from pathlib import Path

from sphinx.application import Sphinx
from sphinx.errors import ConfigError

from . import config as config_module
from .cache import ExecutionCache
from .collect import Collected, collect, environment_identity, record_identity, with_key
from .mistakes import UserMistake
from .model import DocResult
from .record import Record, UnreadableRecord, normalizer_names, read_record, record_path
from .replay import Replay, replay, warn_unreadable
from .verdict import TargetRecords

FRESH_BUILDERS = ("doctest", "record")


@dataclass
class BuildState:
    """What one build knows about execution; lives on the app for the build's duration."""

    config: config_module.ExecutionConfig
    cache: ExecutionCache
    identity: dict
    fresh: bool  # execute everything, read nothing from the record or the cache
    record_identity: dict = field(default_factory=dict)  # what a record must share (replay.py)
    collected: dict[str, Collected] = field(default_factory=dict)
    results: dict[str, DocResult] = field(default_factory=dict)
    executed: set[str] = field(default_factory=set)
    records: dict[str, Record | None] = field(default_factory=dict)
    cache_reads: dict[str, DocResult | None] = field(default_factory=dict)
    replays: dict[str, Replay] = field(default_factory=dict)
    comparison_failed: bool = False  # set by the comparing builders
    targets: TargetRecords | None = None  # the other targets' records (captions)
    outcomes: dict = field(default_factory=dict)  # docname -> its PageOutcome (outcome.py)

    def cached(self, found: Collected) -> DocResult | None:
        """The cache entry for a page's current key, read (and checksummed) once per build."""
        docname = found.job.docname
        if docname not in self.cache_reads:
            self.cache_reads[docname] = self.cache.load(docname, found.job.key)
        return self.cache_reads[docname]

    def replayed(self, found: Collected) -> Replay:
        """The page's result rebuilt from its verified record, or why the record cannot stand
        in for running it (replay.py); worked out once per build."""
        docname = found.job.docname
        if docname not in self.replays:
            self.replays[docname] = replay(found.job, self.record_for(docname),
                                           self.record_identity, self.config.record_dir)
        return self.replays[docname]

    def stored(self, found: Collected) -> DocResult | None:
        """A result this build need not execute the page for: its verified record's, when
        the record is of exactly what would run here, else the cache's. None in a fresh
        build, which executes every page."""
        if self.fresh:
            return None
        return self.replayed(found).result or self.cached(found)

    def from_record(self, docname: str) -> bool:
        """Whether this build shows the page's blocks from its verified record."""
        replayed = self.replays.get(docname)
        return not self.fresh and replayed is not None and replayed.result is not None

    def selected(self, docname: str) -> bool:
        """Whether a fresh build (doctest, record) executes this page."""
        return not (self.fresh and self.config.pages) or docname in self.config.pages

    def record_for(self, docname: str) -> Record | None:
        """The page's verified record, read once; None for a damaged one (said once)."""
        if docname not in self.records:
            try:
                self.records[docname] = read_record(self.config.record_dir, docname)
            except UnreadableRecord as err:
                warn_unreadable(err, docname, f"`make record PAGES={docname}`")
                self.records[docname] = None
        return self.records[docname]

    def collect(self, env, docname: str) -> Collected | None:
        """A page's blocks and settings, read from its source once per build."""
        if docname not in self.collected:
            path = Path(env.doc2path(docname))
            if path.suffix != ".md":
                return None
            known = frozenset(normalizer_names(self.config.normalizers))
            platforms = frozenset(target.name for target in self.config.platforms)
            found = collect(docname, path, known, platforms=platforms)
            found.job = with_key(found.job, self.identity)
            self.collected[docname] = found
        return self.collected[docname]

    def read_stamp(self, found: Collected) -> tuple:
        """What a page's rendered doctree depends on besides its text: its execution key,
        its verified record and its targets' records (captions compare with them)."""
        path = record_path(self.config.record_dir, found.job.docname)
        digest = hashlib.sha256(path.read_bytes()).hexdigest() if path.exists() else None
        return found.job.key, digest, self.targets.stamp(found.job.docname)


# One BuildState per Sphinx application, keyed by its Config object: the app, the
# environment and the builder all share that one object.
_STATES: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()


def state(owner) -> BuildState:
    """The build state of ``owner``: the app, or a builder (anything with ``.config``)."""
    return _STATES[owner.config]


def has_state(app: Sphinx) -> bool:
    return app.config in _STATES


def on_builder_inited(app: Sphinx) -> None:
    try:
        validated = config_module.validate(app)
    except ConfigError as err:  # the user's to mend, in one line: no crash report
        conf = Path(app.confdir, "conf.py")
        raise UserMistake(f"{relative(str(conf), app.srcdir)}: {err}") from None
    _STATES[app.config] = BuildState(
        config=validated,
        cache=ExecutionCache(validated.cache_dir),
        identity=environment_identity(validated.env, validated.worker_cores),
        fresh=app.builder.name in FRESH_BUILDERS or validated.fresh,
        record_identity=record_identity(validated.env),
        targets=TargetRecords(validated),
    )


def relative(path: str, srcdir) -> str:
    """A page's path as reports show it: relative to the project root."""
    try:
        return str(Path(path).relative_to(Path(srcdir).parent))
    except ValueError:
        return path
