"""Tolerance-aware comparison: text exact, numbers within the declared tolerance, and a
number that moved too far named with where it is and by how much. No JAX."""

from __future__ import annotations

import pytest

from verified.model import Block, BlockResult, Output
from verified.record import RecordedBlock, compare
from verified.tolerance import Tolerance, compare_numbers, parse_tolerance

RTOL = Tolerance(rtol=1e-5)


@pytest.mark.parametrize(("expected", "actual"), [
    ("loss 0.123456 after 100 steps", "loss 0.1234561 after 100 steps"),  # inside text
    # A NumPy repr: column padding and line wrapping change with the digits.
    ("Array([1.       , 2.0000002], dtype=float32)", "Array([1., 2.], dtype=float32)"),
    ("[[0.1        0.20000002]\n [0.3        0.4       ]]", "[[0.1 0.2]\n [0.3 0.4]]"),
    ("Array(3.1415927, dtype=float32, weak_type=True)",
     "Array(3.141593, dtype=float32, weak_type=True)"),
    ("nan inf -inf", "nan inf -inf"),
    ("-0.", "0."),  # the sign of zero is rounding noise too
    ("1e-05 and 1.00000001e-05", "1.000001e-05 and 1e-05"),
])
def test_numbers_within_the_tolerance_match(expected, actual):
    assert compare_numbers(expected, actual, RTOL).matches


@pytest.mark.parametrize(("expected", "actual", "why"), [
    ("max |difference| 1.2e-07", "max |difference| 8.9e-08", "relative 0.258"),
    ("100 of 300 steps", "89 of 300 steps", "integers compare exactly"),
    ("value nan", "value 1.0", "nan on one side only"),
    ("value inf", "value -inf", "infinite on one side only"),
    ("x = 0.5", "x = 0.6", "relative 0.167"),
])
def test_a_number_outside_the_tolerance_is_named(expected, actual, why):
    result = compare_numbers(expected, actual, RTOL)
    assert result.same_text and not result.matches
    (moved,) = result.moved
    assert why in moved.why


def test_text_outside_numbers_stays_exact():
    assert not compare_numbers("dtype=float32", "dtype=float64", RTOL).same_text
    assert not compare_numbers("jax 0.10.2", "jax 0.10.3", RTOL).same_text  # a version is text
    assert not compare_numbers("1.0 2.0", "1.0 2.0 3.0", RTOL).same_text  # count of numbers
    assert not compare_numbers("ok 1.0", "OK 1.0", RTOL).same_text


def test_integers_follow_the_tolerance_only_when_declared():
    assert not compare_numbers("5806", "5805", Tolerance(rtol=1e-3)).matches
    assert compare_numbers("5806", "5805", Tolerance(rtol=1e-3, integers=True)).matches


def test_atol_covers_values_near_zero():
    assert not compare_numbers("1e-12", "-3e-12", RTOL).matches
    assert compare_numbers("1e-12", "-3e-12", Tolerance(atol=1e-9)).matches


@pytest.mark.parametrize(("text", "parsed"), [
    ("rtol=1e-5", Tolerance(rtol=1e-5)),
    ("atol=1e-8, rtol=1e-4", Tolerance(rtol=1e-4, atol=1e-8)),
    ("rtol=0.01 integers", Tolerance(rtol=0.01, integers=True)),
    ("exact", None),
])
def test_parse(text, parsed):
    assert parse_tolerance(text) == parsed


@pytest.mark.parametrize(("text", "message"), [
    ("", "give rtol="),
    ("rtol", "unknown tolerance term 'rtol'"),
    ("rtol=lots", "rtol must be a number"),
    ("rtol=-1", "finite number >= 0"),
    ("rtol=1 rtol=2", "rtol given twice"),
    ("integers", "needs rtol > 0 or atol > 0"),
    ("tol=1e-5", "unknown tolerance term"),
])
def test_parse_rejects(text, message):
    with pytest.raises(ValueError, match=message):
        parse_tolerance(text)


def _compare(tolerance, expected, actual, kind="stdout", name=""):
    block = Block(0, 3, "print(x)", tolerance=tolerance)
    recorded = RecordedBlock(3, "", "ran", [Output(kind, expected, name=name)], [])
    return compare(block, BlockResult(0, "ran", outputs=[Output(kind, actual, name=name)]),
                   recorded, {}, "0.10.2")


def test_record_comparison_locates_the_number_that_moved():
    comparison = _compare(RTOL, "header\nloss 0.25 and 0.5\n", "header\nloss 0.25 and 0.6\n")
    assert comparison.verdict == "differs"
    assert comparison.diff.startswith(
        "number moved beyond the tolerance: [stdout] line 2: 0.5 -> 0.6 (|difference| 0.1, "
        "relative 0.167; allowed rtol=1e-05)\n")
    assert "-loss 0.25 and 0.5\n+loss 0.25 and 0.6\n" in comparison.diff


def test_record_comparison_of_glued_values_uses_the_same_rules():
    assert _compare(RTOL, "0.30000001", "0.3", "glue", "loss").verdict == "match"
    comparison = _compare(RTOL, "0.3", "0.31", "glue", "loss")
    assert "[glue loss] line 1: 0.3 -> 0.31" in comparison.diff
    assert _compare(None, "0.30000001", "0.3", "glue", "loss").verdict == "differs"


def test_without_a_tolerance_comparison_is_exact():
    comparison = _compare(None, "0.30000001\n", "0.3\n")
    assert comparison.verdict == "differs" and "number moved" not in comparison.diff


def test_text_change_under_a_tolerance_says_so():
    comparison = _compare(RTOL, "float32 0.5", "float64 0.5")
    assert comparison.diff.startswith("text differs (tolerance rtol=1e-05 applies to numbers only)")


def test_a_varying_block_stays_unchecked_under_a_page_tolerance():
    block = Block(0, 3, "print(t)", varies=True, tolerance=RTOL)
    recorded = RecordedBlock(3, "", "ran", [Output("stdout", "12.5 ms")], [])
    live = BlockResult(0, "ran", outputs=[Output("stdout", "19.0 ms")])
    assert compare(block, live, recorded, {}).verdict == "unchecked"


def test_a_last_digit_flip_is_exactly_one_unit_in_the_last_place():
    assert compare_numbers("loss 1.5928", "loss 1.5929", Tolerance(atol=1e-4)).matches
    assert not compare_numbers("loss 1.5928", "loss 1.5930", Tolerance(atol=1e-4)).matches
