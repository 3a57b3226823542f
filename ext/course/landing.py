"""Generated statements and asides: the verification statement (from the verified record)
and the "Down the stack" aside that points to the kernel path."""

from __future__ import annotations

from pathlib import Path

from docutils import nodes
from sphinx.util.docutils import SphinxDirective

from verified.targets import TARGET_DIRS
from verified.record import record_path
from verified.state import state

from .chapters import aggregate_pages

NUMBER_WORDS = {2: "two", 3: "three", 4: "four", 5: "five", 6: "six", 7: "seven", 8: "eight",
                9: "nine", 10: "ten", 12: "twelve", 16: "sixteen"}


def verification_statement(records: list, sharding_devices: int | None,
                           matrix_versions: tuple[str, ...] = (),
                           platforms: tuple[str, ...] = ()) -> str:
    """The sentence under the course's promise, made from what the record says (and the
    other verified versions, ``verified_matrix``)."""
    if not records:
        return ("Every snippet runs when the site is built, and printed outputs are real "
                "outputs; no page has been verified yet.")
    environments = [record.environment for record in records]
    versions = sorted({env.jax for env in environments if env.jax})
    backends = sorted({(env.backend or "").upper() for env in environments if env.backend})
    dates = sorted({env.date for env in environments})
    machines = sorted({env.machine() for env in environments if env.machine()})
    cores = sorted({env.cpu_count for env in environments if env.cpu_count})
    what = " and ".join(f"jax {v}" for v in versions) or f"Python {environments[0].python}"
    where = f" on {' and '.join(backends)}" if backends else ""
    if len(machines) == 1:
        machine = machines[0]
    elif machines:
        machine = "several machines"
    else:
        machine = f"{cores[0]} cores" if len(cores) == 1 else "several machines"
    when = dates[0] if len(dates) == 1 else f"{dates[0]} to {dates[-1]}"
    details = [f"{what}{where}, {machine}, {when}"]
    if sharding_devices and sharding_devices > 1:
        count = NUMBER_WORDS.get(sharding_devices, str(sharding_devices))
        details.append(f"{count} host devices for the sharding chapter")
    if matrix_versions or platforms:
        others = " and ".join([*(f"jax {v}" for v in matrix_versions),
                               *(f"a {label}" for label in platforms)])
        pages = " and ".join(name for name, present in (("Versions", matrix_versions),
                                                        ("Platforms", platforms)) if present)
        return (f"Every snippet ran before it was printed ({'; '.join(details)}), and printed "
                f"outputs are real outputs. Every snippet is also run on {others}: its caption "
                f"says whether the output there is the same or differs, or what is raised "
                f"there, and the {pages} page{'s' if ' and ' in pages else ''} count them.")
    return (f"Every snippet ran before it was printed ({'; '.join(details)}), and printed "
            f"outputs are real outputs. Where the current API differs from the verified one, "
            f"the caption says so.")


def record_listing(record_dir: Path) -> list[str]:
    """The pages of the main record (the targets' records, under matrix/ and platform/, are not)."""
    return sorted(path.relative_to(record_dir).with_suffix("").as_posix()
                  for path in record_dir.rglob("*.json")
                  if path.relative_to(record_dir).parts[0] not in TARGET_DIRS) \
        if record_dir.exists() else []


def on_env_get_outdated(app, env, added, changed, removed) -> list[str]:
    """A record added or removed re-renders the statement (a changed one is a dependency)."""
    listing = getattr(env, "course_record_listing", None)
    record_dir = state(app).config.record_dir
    if listing is not None and listing != record_listing(record_dir):
        return sorted(aggregate_pages(env))
    return []


class VerificationStatementDirective(SphinxDirective):
    """Reads every record (and depends on it: a new record re-renders the statement)."""

    def run(self) -> list[nodes.Node]:
        build = state(self)
        record_dir = build.config.record_dir
        aggregate_pages(self.env)[self.env.docname] = True
        self.env.course_record_listing = record_listing(record_dir)
        for docname in self.env.course_record_listing:
            self.env.note_dependency(str(record_path(record_dir, docname)))
        # A damaged record is said once (``record_for``) and left out here.
        records = [record for record in map(build.record_for, self.env.course_record_listing)
                   if record is not None]
        sharding = None
        if self.config.course_sharding_chapter:
            sharding = build.record_for(self.config.course_sharding_chapter)
        devices = sharding.environment.device_count if sharding else None
        matrix_versions = tuple(v.name for v in state(self).config.matrix)
        platforms = tuple(p.label for p in state(self).config.platforms)
        text = verification_statement(records, devices, matrix_versions, platforms)
        return [nodes.paragraph(text, text, classes=["course-verification"])]


class DownTheStackDirective(SphinxDirective):
    """An aside for where a chapter names XLA, fusion or the interconnect. The kernel path's
    URL comes from ``course_kernel_path_url``; unset, the aside has no link (never a dead one)."""

    optional_arguments = 1
    has_content = True

    def run(self) -> list[nodes.Node]:
        box = nodes.admonition(classes=["course-down-the-stack"])
        box += nodes.title("Down the stack", "Down the stack")
        box += self.parse_content_to_nodes()
        base = self.config.course_kernel_path_url
        sentence = nodes.paragraph(classes=["course-kernel-path"])
        if base:
            target = base.rstrip("/") + "/" + (self.arguments[0].lstrip("/") if self.arguments
                                                else "")
            sentence += nodes.Text("The kernel path teaches this layer with its own hands: ")
            link = nodes.reference("", "", refuri=target)
            link += nodes.Text("read it there")
            sentence += link
            sentence += nodes.Text(".")
        else:
            sentence += nodes.Text("The kernel path, the sibling course, teaches this layer.")
        box += sentence
        self.set_source_info(box)
        return [box]
