"""A picture of the Platforms page's table: each chapter's verdicts on a platform as one
stacked bar, drawn at build time from the counts the table shows (matplotlib, no pyplot)."""

from __future__ import annotations

import base64
import io

# One colour per verdict, in the table's column order: agreement green, difference amber,
# failure red, the rest greys and blues.
COLOURS = {"same": "#3a9e5c", "differs": "#e0a526", "runs": "#8fb8de", "fails": "#c8453c",
           "needs-devices": "#9b6ab8", "failed-because": "#e58a80", "not-run-there": "#9a9a9a",
           "only-there": "#4a7dbf", "not-verified": "#d4d4d4"}


def stacked_bars(rows: list[tuple[str, dict[str, int]]], columns: tuple[tuple[str, str], ...],
                 title: str) -> bytes:
    """A PNG: one horizontal bar per row (label, counts by verdict), segments in the order
    of ``columns`` (verdict, legend text); verdicts no row has are left out of the legend."""
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure

    shown = [(kind, text) for kind, text in columns if any(c[kind] for _, c in rows)]
    figure = Figure(figsize=(7.5, 0.32 * len(rows) + 1.4), dpi=110)
    FigureCanvasAgg(figure)
    axes = figure.add_subplot()
    labels = [label for label, _ in rows][::-1]
    left = [0] * len(rows)
    for kind, text in shown:
        widths = [counts[kind] for _, counts in rows][::-1]
        axes.barh(labels, widths, left=left, color=COLOURS.get(kind, "#777777"), label=text,
                  height=0.7)
        left = [a + b for a, b in zip(left, widths)]
    axes.set_xlabel("blocks")
    axes.set_title(title, fontsize=10)
    axes.tick_params(labelsize=8)
    for side in ("top", "right"):
        axes.spines[side].set_visible(False)
    axes.legend(fontsize=8, frameon=False, loc="upper center", bbox_to_anchor=(0.5, -0.12),
                ncol=min(len(shown), 5))
    buffer = io.BytesIO()
    figure.savefig(buffer, format="png", bbox_inches="tight", metadata={"Software": None})
    return buffer.getvalue()


def data_uri(png: bytes) -> str:
    return "data:image/png;base64," + base64.b64encode(png).decode("ascii")


def describe(rows: list[tuple[str, dict[str, int]]], columns: tuple[tuple[str, str], ...],
             title: str) -> str:
    """The picture in words (its alt text): every non-zero count, by chapter."""
    parts = []
    for label, counts in rows:
        found = ", ".join(f"{counts[kind]} {text}" for kind, text in columns if counts[kind])
        parts.append(f"{label}: {found or 'no blocks'}")
    return f"{title}. " + "; ".join(parts)
