"""Tolerance-aware comparison of printed output, for numbers the machine rounds.

XLA:CPU's floating-point results depend on the instruction set and the thread count, so a
block whose printed floats differ in the last digits on another CPU can declare how they are
compared (``:tolerance: rtol=1e-5``). Text outside numbers must still match exactly;
integers stay exact unless the tolerance says ``integers``.

Numbers are compared as printed: a block that prints four decimals of values near 0.1 and
may flip the last one declares ``atol=1e-4`` (or prints a bound instead). Whitespace next to a number is padding (NumPy pads array columns to the widest number and
re-wraps lines when a width changes), so it is ignored.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass
from decimal import Decimal

# A decimal number on its own: not part of a name (``float32``), not one component of a
# dotted version (``0.10.2``). ``1.`` (NumPy's float spelling) counts; so do nan and inf.
NUMBER = re.compile(
    r"(?<![\w.])[-+]?"
    r"(?:(?:\d+\.\d*|\.\d+)(?:[eE][-+]?\d+)?|\d+[eE][-+]?\d+|\d+|nan|inf)"
    r"(?![\w]|\.\d)")
_WHITESPACE = re.compile(r"\s+")


@dataclass(frozen=True)
class Tolerance:
    """How printed numbers of one block are compared; declared, never a global default."""

    rtol: float = 0.0
    atol: float = 0.0
    integers: bool = False  # integers too are compared with rtol/atol (else exactly)

    def describe(self) -> str:
        parts = [f"rtol={self.rtol:g}"] if self.rtol else []
        parts += [f"atol={self.atol:g}"] if self.atol else []
        parts += ["integers"] if self.integers else []
        return ", ".join(parts)


def parse_tolerance(text: str | None) -> Tolerance | None:
    """``rtol=1e-5``, ``atol=1e-8, rtol=1e-4``, ``rtol=0.01 integers``; ``exact`` is None
    (turns off a page's default). ValueError says what is wrong."""
    words = [w for w in re.split(r"[\s,]+", (text or "").strip()) if w]
    if words == ["exact"]:
        return None
    if not words:
        raise ValueError("give rtol=, atol= (and optionally 'integers'), or 'exact'")
    values: dict[str, float] = {}
    integers = False
    for word in words:
        if word == "integers":
            integers = True
            continue
        name, sep, value = word.partition("=")
        if not sep or name not in ("rtol", "atol"):
            raise ValueError(f"unknown tolerance term {word!r}; use rtol=, atol=, integers, "
                             f"or exact")
        if name in values:
            raise ValueError(f"{name} given twice")
        try:
            number = float(value)
        except ValueError:
            raise ValueError(f"{name} must be a number, got {value!r}") from None
        if not (number >= 0 and math.isfinite(number)):
            raise ValueError(f"{name} must be a finite number >= 0, got {value!r}")
        values[name] = number
    tolerance = Tolerance(values.get("rtol", 0.0), values.get("atol", 0.0), integers)
    if not (tolerance.rtol or tolerance.atol):
        raise ValueError("a tolerance needs rtol > 0 or atol > 0 (or say 'exact')")
    return tolerance


@dataclass(frozen=True)
class Moved:
    """One number outside its tolerance: where, what it was, what it is."""

    line: int  # 1-based line in the expected text
    expected: str
    actual: str
    why: str

    def describe(self) -> str:
        return f"line {self.line}: {self.expected} -> {self.actual} ({self.why})"


@dataclass(frozen=True)
class NumericComparison:
    same_text: bool  # the text around the numbers matches (and the count of numbers)
    moved: tuple[Moved, ...] = ()

    @property
    def matches(self) -> bool:
        return self.same_text and not self.moved


def _split(text: str) -> tuple[list[str], list[re.Match]]:
    """The text between numbers (whitespace next to a number dropped) and the numbers."""
    numbers = list(NUMBER.finditer(text))
    texts, start = [], 0
    for match in numbers:
        texts.append(text[start:match.start()])
        start = match.end()
    texts.append(text[start:])
    last = len(texts) - 1
    cleaned = []
    for i, part in enumerate(texts):
        part = _WHITESPACE.sub(" ", part)
        if i > 0:
            part = part.lstrip()
        if i < last:
            part = part.rstrip()
        cleaned.append(part)
    return cleaned, numbers


def _is_integer(token: str) -> bool:
    return re.fullmatch(r"[-+]?\d+", token) is not None


def _number_moved(expected: str, actual: str, tolerance: Tolerance) -> str | None:
    """Why ``actual`` is not ``expected`` within the tolerance; None when it is."""
    if _is_integer(expected) and _is_integer(actual) and not tolerance.integers:
        return None if int(expected) == int(actual) else "integers compare exactly"
    a, b = float(expected), float(actual)
    if math.isnan(a) or math.isnan(b):
        return None if math.isnan(a) and math.isnan(b) else "nan on one side only"
    if math.isinf(a) or math.isinf(b):
        return None if a == b else "infinite on one side only"
    # In decimal, as printed: 1.5929 - 1.5928 is exactly 1e-4, not 1.0000000000021e-4.
    exact_a, exact_b = Decimal(expected), Decimal(actual)
    difference = abs(exact_a - exact_b)
    allowed = (Decimal(repr(tolerance.atol))
               + Decimal(repr(tolerance.rtol)) * max(abs(exact_a), abs(exact_b)))
    if difference <= allowed:
        return None
    difference = float(difference)
    relative = difference / max(abs(a), abs(b))
    return (f"|difference| {difference:.3g}, relative {relative:.3g}; "
            f"allowed {tolerance.describe()}")


def compare_numbers(expected: str, actual: str, tolerance: Tolerance) -> NumericComparison:
    expected_texts, expected_numbers = _split(expected)
    actual_texts, actual_numbers = _split(actual)
    if expected_texts != actual_texts:
        return NumericComparison(same_text=False)
    moved = []
    for want, got in zip(expected_numbers, actual_numbers):
        why = _number_moved(want.group(), got.group(), tolerance)
        if why is not None:
            line = expected.count("\n", 0, want.start()) + 1
            moved.append(Moved(line, want.group(), got.group(), why))
    return NumericComparison(same_text=True, moved=tuple(moved))
